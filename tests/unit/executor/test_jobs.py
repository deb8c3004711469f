from __future__ import annotations

import json
import shlex
import sys
import textwrap
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from executor.context import JobContext
from executor.jobs import (
    JobLoadError,
    describe_exit,
    load_dataflow,
    load_simple,
    run_dataflow,
    script_command,
    split_job_class,
)
from executor.taskdata import ShardingContext

CTX = JobContext("j", "t", 2, 1, "b", "p", {"k": "v"})

JOB_CODE = """
calls = []

def run(ctx):
    calls.append(ctx.sharding_item)
    return "ran"

class Job:
    def execute(self, ctx):
        calls.append(("execute", ctx.sharding_parameter))

class Outer:
    class Inner:
        def execute(self, ctx):
            calls.append("inner")

class NoExecute:
    pass

class NeedsArgs:
    def __init__(self, x):
        self.x = x

class Flow:
    def __init__(self):
        self.batches = [[1, 2], [3], []]
    def fetch_data(self, ctx):
        return self.batches.pop(0)
    def process_data(self, ctx, items):
        calls.append(items)

class HalfFlow:
    def fetch_data(self, ctx):
        return []

def fetch_data(ctx):
    return (n for n in range(3))

def process_data(ctx, items):
    calls.append(("module", items))

NUMBER = 7
"""


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh package (unique name) with job code, importable from the app directory."""
    name = f"app_{uuid.uuid4().hex[:10]}"
    root = tmp_path / name
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "jobs.py").write_text(textwrap.dedent(JOB_CODE))
    (root / "broken.py").write_text("raise RuntimeError('import-time failure')\n")
    (root / "needs_lib.py").write_text("import no_such_library_xyz\n")
    (root / "syntax.py").write_text("def (:\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[module]


def calls(package: str) -> list[Any]:
    module = sys.modules[f"{package}.jobs"]
    return module.calls  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("job_class", "module", "path"),
    [
        ("pkg.mod:run", "pkg.mod", ["run"]),
        ("pkg.mod:Outer.Inner", "pkg.mod", ["Outer", "Inner"]),
        ("pkg.mod.Job", "pkg.mod", ["Job"]),
        ("mod:run", "mod", ["run"]),
        (" pkg.mod:run ", "pkg.mod", ["run"]),
    ],
)
def test_job_class_forms(job_class: str, module: str, path: list[str]) -> None:
    assert split_job_class(job_class) == (module, path)


@pytest.mark.parametrize(
    "job_class", ["", "run", "pkg.mod:", ":run", "pkg..mod:run", "pkg.mod:run()", "1pkg.mod:f"]
)
def test_malformed_job_class_is_refused_by_name(job_class: str) -> None:
    with pytest.raises(JobLoadError, match=r"expected package\.module:callable"):
        split_job_class(job_class)


def test_a_function_is_called_with_the_context(package: str) -> None:
    load_simple(f"{package}.jobs:run")(CTX)
    load_simple(f"{package}.jobs.run")(CTX)
    assert calls(package) == [1, 1]


def test_a_class_is_instantiated_and_its_execute_called(package: str) -> None:
    load_simple(f"{package}.jobs.Job")(CTX)
    load_simple(f"{package}.jobs:Job")(CTX)
    load_simple(f"{package}.jobs:Outer.Inner")(CTX)
    assert calls(package) == [("execute", "b"), ("execute", "b"), "inner"]


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("missing_module:run", "no module named 'missing_module' in the app directory"),
        ("{p}.nope:run", r"no module named '{p}\.nope'"),
        ("{p}.jobs:nothing", r"'{p}\.jobs' has no attribute 'nothing'"),
        ("{p}.jobs:Outer.Missing", r"'{p}\.jobs\.Outer' has no attribute 'Missing'"),
        ("{p}.jobs:NUMBER", "a int is not callable"),
        ("{p}.jobs:NoExecute", "class NoExecute has no execute"),
        ("{p}.jobs:NeedsArgs", r"creating NeedsArgs\(\) failed: TypeError"),
        ("{p}.broken:run", "importing '{p}.broken' failed: RuntimeError: import-time failure"),
        ("{p}.needs_lib:run", "importing '{p}.needs_lib' failed: ModuleNotFoundError"),
        ("{p}.syntax:run", "importing '{p}.syntax' failed: SyntaxError"),
    ],
)
def test_a_simple_job_that_cannot_be_loaded_names_its_job_class(
    package: str, target: str, message: str
) -> None:
    job_class = target.format(p=package)
    with pytest.raises(JobLoadError, match=message.format(p=package)) as caught:
        load_simple(job_class)
    assert caught.value.message.startswith(f"jobClass {job_class!r}: ")


def test_a_dataflow_class_streams_until_no_data(package: str) -> None:
    job = load_dataflow(f"{package}.jobs:Flow")
    outcome = run_dataflow(job, CTX, streaming=True, stop=threading.Event())
    assert (outcome.batches, outcome.items) == (2, 3)
    assert calls(package) == [[1, 2], [3]]


def test_a_dataflow_without_streaming_processes_one_batch(package: str) -> None:
    job = load_dataflow(f"{package}.jobs:Flow")
    outcome = run_dataflow(job, CTX, streaming=False, stop=threading.Event())
    assert (outcome.batches, outcome.items) == (1, 2)


def test_a_stop_request_ends_streaming_after_the_current_batch(package: str) -> None:
    stop = threading.Event()
    stop.set()
    outcome = run_dataflow(load_dataflow(f"{package}.jobs:Flow"), CTX, streaming=True, stop=stop)
    assert outcome.batches == 1


def test_a_module_with_dataflow_functions_is_a_dataflow_job(package: str) -> None:
    job = load_dataflow(f"{package}.jobs")
    # The module's fetch_data returns a generator: it is read as one batch.
    run_dataflow(job, CTX, streaming=False, stop=threading.Event())
    assert calls(package) == [("module", [0, 1, 2])]


def test_a_dataflow_without_process_data_names_what_is_missing(package: str) -> None:
    with pytest.raises(JobLoadError, match="HalfFlow object has no process_data method"):
        load_dataflow(f"{package}.jobs:HalfFlow")
    with pytest.raises(JobLoadError, match="has no fetch_data or process_data"):
        load_dataflow(f"{package}.jobs:Job")


def test_a_script_gets_the_context_as_one_quoted_json_argument() -> None:
    sharding = ShardingContext("j", "t", 2, 1, 'it\'s "odd" $HOME `x`', "a b; rm -rf /")
    command = script_command("scripts/run.sh --flag", sharding)
    argv = shlex.split(command)
    assert argv[:2] == ["scripts/run.sh", "--flag"]
    assert len(argv) == 3
    assert json.loads(argv[2]) == sharding.to_json()


def test_exit_descriptions() -> None:
    assert describe_exit(3, "script") == "script exited with status 3"
    assert describe_exit(-9, "script") == "script was killed by SIGKILL"

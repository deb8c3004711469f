"""Finding and running job code (inside a worker process, never in the executor itself).

`jobClass` names the code, imported from the app directory (put first on `sys.path` by the
worker):

- `package.module:function` or `package.module.function`: SIMPLE, called as `function(ctx)`;
- `package.module:Class` or `package.module.Class`: instantiated with no arguments; SIMPLE
  calls `execute(ctx)`, DATAFLOW calls `fetch_data(ctx)` and `process_data(ctx, items)`;
- `package.module:object`, or the module itself as `package.module`: for DATAFLOW, any object
  (or module) with `fetch_data` and `process_data`.

After the `:` a dotted path is followed attribute by attribute (`pkg.mod:Outer.Inner`).
Every loading problem is a `JobLoadError` whose message names the `jobClass`.
"""

from __future__ import annotations

import importlib
import importlib.util
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol

from .context import JobContext
from .taskdata import ShardingContext

__all__ = [
    "DataflowJob",
    "DataflowOutcome",
    "JobLoadError",
    "describe_exit",
    "load_dataflow",
    "load_simple",
    "load_target",
    "run_dataflow",
    "run_script",
    "script_command",
    "split_job_class",
]


class JobLoadError(Exception):
    """The job named by `jobClass` cannot be found or used; `message` says which and why."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class DataflowJob(Protocol):
    def fetch_data(self, ctx: JobContext) -> Any: ...
    def process_data(self, ctx: JobContext, items: list[Any]) -> Any: ...


@dataclass(frozen=True)
class DataflowOutcome:
    batches: int
    items: int


def split_job_class(job_class: str) -> tuple[str, list[str]]:
    """`(module, attribute path)` of a `jobClass`; raises JobLoadError if malformed."""
    text = job_class.strip()
    if ":" in text:
        module, _, attrs = text.partition(":")
        path = attrs.split(".")
    else:
        module, _, attr = text.rpartition(".")
        path = [attr]
    parts = [*module.split("."), *path]
    if not module or not all(part.isidentifier() for part in parts):
        raise JobLoadError(
            f"jobClass {job_class!r}: expected package.module:callable or package.module.Class"
        )
    return module, path


def load_target(job_class: str) -> object:
    """Import the module and follow the attribute path. Raises JobLoadError.

    Without a `:`, the last name may also be a submodule (`package.module` for a DATAFLOW
    module with fetch_data and process_data functions).
    """
    module_name, path = split_job_class(job_class)
    target: object = _import(job_class, module_name)
    where = module_name
    for index, name in enumerate(path):
        try:
            target = getattr(target, name)
        except AttributeError as exc:
            if ":" not in job_class and index == 0 and _is_module_file(f"{where}.{name}"):
                target = _import(job_class, f"{where}.{name}")
            else:
                raise JobLoadError(
                    f"jobClass {job_class!r}: {where!r} has no attribute {name!r}"
                ) from exc
        where = f"{where}.{name}"
    return target


def _is_module_file(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _import(job_class: str, module_name: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (module_name == missing or module_name.startswith(missing + ".")):
            raise JobLoadError(
                f"jobClass {job_class!r}: no module named {missing!r} in the app directory "
                "or on the Python path"
            ) from exc
        raise JobLoadError(
            f"jobClass {job_class!r}: importing {module_name!r} failed: {_describe(exc)}"
        ) from exc
    except Exception as exc:  # any error in user code at import time is a load error
        raise JobLoadError(
            f"jobClass {job_class!r}: importing {module_name!r} failed: {_describe(exc)}"
        ) from exc


def load_simple(job_class: str) -> Callable[[JobContext], object]:
    """The callable a SIMPLE job runs for each shard. Raises JobLoadError."""
    target = load_target(job_class)
    if isinstance(target, type):
        instance = _instantiate(job_class, target)
        execute = getattr(instance, "execute", None)
        if not callable(execute):
            raise JobLoadError(
                f"jobClass {job_class!r}: class {target.__name__} has no execute(ctx) method"
            )
        return execute  # type: ignore[no-any-return]
    if not callable(target):
        raise JobLoadError(
            f"jobClass {job_class!r}: a {type(target).__name__} is not callable; "
            "name a function or a class with execute(ctx)"
        )
    return target


def load_dataflow(job_class: str) -> DataflowJob:
    """The object whose fetch_data/process_data a DATAFLOW job calls. Raises JobLoadError."""
    target = load_target(job_class)
    if isinstance(target, type):
        target = _instantiate(job_class, target)
    missing = [
        name for name in ("fetch_data", "process_data") if not callable(getattr(target, name, None))
    ]
    if missing:
        raise JobLoadError(
            f"jobClass {job_class!r}: {_kind(target)} has no {' or '.join(missing)} method; "
            "a DATAFLOW job needs fetch_data(ctx) and process_data(ctx, items)"
        )
    return target  # type: ignore[return-value]


def run_dataflow(
    job: DataflowJob, ctx: JobContext, *, streaming: bool, stop: threading.Event
) -> DataflowOutcome:
    """Fetch then process; with `streaming`, again while fetching returns data and `stop` is clear.

    `fetch_data` may return any iterable (a generator too); None or empty means no data.
    """
    batches = items_total = 0
    while True:
        fetched = job.fetch_data(ctx)
        items = [] if fetched is None else list(fetched)
        if not items:
            break
        job.process_data(ctx, items)
        batches += 1
        items_total += len(items)
        if not streaming or stop.is_set():
            break
    return DataflowOutcome(batches, items_total)


def script_command(command_line: str, sharding: ShardingContext) -> str:
    """The shell command of a SCRIPT job: its command line plus the context as one argument.

    One shell-quoted JSON argument, the same for TRANSIENT and DAEMON jobs (the original sent
    different shapes and did not quote it: ASE#1850).
    """
    return f"{command_line} {sharding.as_argument()}"


def run_script(
    command_line: str, sharding: ShardingContext, app_dir: str, env: Mapping[str, str]
) -> subprocess.Popen[bytes]:
    """Start `sh -c` for a SCRIPT job in `app_dir` with `EJC_*` variables; output is inherited."""
    full_env = {**env, **sharding.as_environment()}
    return subprocess.Popen(
        ["/bin/sh", "-c", script_command(command_line, sharding)],
        cwd=app_dir,
        env=full_env,
        stdin=subprocess.DEVNULL,
    )


def describe_exit(returncode: int, what: str) -> str:
    """`script exited with status 3` / `script was killed by SIGKILL`."""
    if returncode < 0:
        return f"{what} was killed by {_signal_name(-returncode)}"
    return f"{what} exited with status {returncode}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _instantiate(job_class: str, cls: type) -> object:
    try:
        return cls()
    except Exception as exc:  # user code: report it, don't crash the worker
        raise JobLoadError(
            f"jobClass {job_class!r}: creating {cls.__name__}() failed: {_describe(exc)}"
        ) from exc


def _kind(target: object) -> str:
    if isinstance(target, ModuleType):
        return f"module {target.__name__}"
    return f"{type(target).__name__} object"


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__

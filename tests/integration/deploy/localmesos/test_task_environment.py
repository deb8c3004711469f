"""What a task gets from the agent (issue 23): only the environment Mesos would give it, never
the stand-in's own; and archives unpacked only up to a bound, or the launch fails."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.mesosfw import (
    Framework,
    RecordingScheduler,
    StandIn,
    command_task,
    wait_for,
)

_SECRET = "digest-user:digest-password"


def _env_lines(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        name, sep, value = line.partition("=")
        if sep:
            out[name] = value
    return out


def test_a_task_gets_its_own_variables_the_agents_and_mesos_never_the_stand_ins(
    make_standin: Callable[..., StandIn],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    # Given a stand-in started with a secret in its environment and one operator variable
    monkeypatch.setenv("EJC_ZK_DIGEST", _SECRET)
    monkeypatch.setenv("PATH", "/opt/stand-in-only/bin:/usr/bin:/bin")
    standin = make_standin(
        "--executor-environment-variables", json.dumps({"EJC_PYTHON": "/opt/python3"})
    )
    scheduler = RecordingScheduler()
    framework = Framework(standin.address, scheduler).start()
    out = tmp_path / "env.txt"
    try:
        # When a command task with a variable of its own prints its environment
        task = command_task("printenv", f"env > {out}")
        task["command"]["environment"] = {"variables": [{"name": "JOB_SETTING", "value": "x"}]}
        scheduler.launch(task)
        scheduler.wait_state("printenv", "TASK_FINISHED")
    finally:
        framework.stop()

    # Then it has its own variable, the operator's, Mesos's, a default PATH, and nothing else
    env = _env_lines(out)
    assert env["JOB_SETTING"] == "x"
    assert env["EJC_PYTHON"] == "/opt/python3"
    assert env["MESOS_FRAMEWORK_ID"] == framework.id
    assert env["MESOS_SANDBOX"] == env["MESOS_DIRECTORY"]
    assert Path(env["MESOS_SANDBOX"]).is_dir()
    assert env["PATH"] == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    assert "EJC_ZK_DIGEST" not in env
    assert _SECRET not in out.read_text()
    assert not [name for name in env if name.startswith(("PYTEST", "VIRTUAL_ENV"))]
    allowed = {"JOB_SETTING", "EJC_PYTHON", "PATH", "LIBPROCESS_PORT", "PWD", "SHLVL", "_"}
    assert {n for n in env if not n.startswith("MESOS_")} <= allowed


def test_bad_executor_environment_variables_are_refused_at_start(tmp_path: Path) -> None:
    for bad in ("[1]", '{"A": 1}', "not json", '{"A=B": "c"}'):
        standin = StandIn(tmp_path / "bad", "--executor-environment-variables", bad)
        with pytest.raises(AssertionError, match="did not start"):
            standin.start(timeout_s=10)
        assert standin.process is not None and standin.process.returncode == 2


def _tar_gz(path: Path, files: dict[str, int]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, size in files.items():
            info = tarfile.TarInfo(name)
            info.size = size
            tar.addfile(info, io.BytesIO(b"\0" * size))
    return path


def _zip(path: Path, files: dict[str, int]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zipped:
        for name, size in files.items():
            zipped.writestr(name, b"\0" * size)
    return path


def _gz(path: Path, size: int) -> Path:
    with gzip.open(path, "wb") as out:
        out.write(b"\0" * size)
    return path


@pytest.mark.parametrize("kind", ["tar.gz", "zip", "gz"])
def test_an_archive_that_unpacks_beyond_the_bound_fails_the_launch(
    make_standin: Callable[..., StandIn], tmp_path: Path, kind: str
) -> None:
    # Given a stand-in that unpacks at most 1 MiB, and archives of a few KiB unpacking to 2 MiB
    standin = make_standin("--max-extracted-bytes", str(1 << 20))
    big, small = tmp_path / f"big.{kind}", tmp_path / f"small.{kind}"
    if kind == "tar.gz":
        _tar_gz(big, {"a.bin": 1 << 20, "b.bin": 1 << 20})
        _tar_gz(small, {"a.bin": 1000})
    elif kind == "zip":
        _zip(big, {"a.bin": 1 << 20, "b.bin": 1 << 20})
        _zip(small, {"a.bin": 1000})
    else:
        _gz(big, 2 << 20)
        _gz(small, 1000)
    assert big.stat().st_size < 64 * 1024
    scheduler = RecordingScheduler()
    framework = Framework(standin.address, scheduler).start()
    try:
        # When a task fetches each
        for name, archive in (("big", big), ("small", small)):
            task = command_task(name, "ls -la > listing.txt")
            task["command"]["uris"] = [{"value": str(archive)}]
            scheduler.launch(task)

        # Then the big one fails its launch with a reason naming the bound; the small one runs
        failed = scheduler.wait_state("big", "TASK_FAILED")
        assert failed.reason == "REASON_CONTAINER_LAUNCH_FAILED"
        assert "unpacks to more than 1048576 bytes" in failed.message
        assert big.name in failed.message
        scheduler.wait_state("small", "TASK_FINISHED")
        sandboxes = standin.sandboxes(framework.id)
        big_sandbox = sandboxes["big"]
        unpacked = sum(p.stat().st_size for p in big_sandbox.rglob("*.bin"))
        unpacked += sum(p.stat().st_size for p in big_sandbox.glob("big") if p.is_file())
        assert unpacked <= 1 << 20
        wait_for(lambda: (sandboxes["small"] / "listing.txt").exists(), 5, message="listing")
    finally:
        framework.stop()

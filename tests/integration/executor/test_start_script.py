"""The `bin/start.sh` the packaging command writes, run as an agent would run it."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from executor.package import build_app_archive

from .helpers import TEST_APP


def extract(archive: Path, into: Path) -> Path:
    into.mkdir()
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MESOS_", "EJC_"))}
    return {**env, **extra}


def run_start(app_dir: Path, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(app_dir / "bin" / "start.sh")],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def fake_python(tmp_path: Path) -> Path:
    """An "interpreter" that prints how it was started."""
    path = tmp_path / "fake-python"
    path.write_text('#!/bin/sh\necho "args=$*"\necho "cwd=$(pwd)"\necho "app=$EJC_APP_DIR"\n')
    path.chmod(0o755)
    return path


def test_start_script_runs_the_executor_in_the_app_dir_with_the_baked_python(
    tmp_path: Path, fake_python: Path
) -> None:
    archive = build_app_archive(TEST_APP, tmp_path / "a.tar.gz", python=str(fake_python))
    app = extract(archive.path, tmp_path / "sandbox")
    done = run_start(app, clean_env(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["args=-m executor", f"cwd={app}", f"app={app}"]


def test_ejc_python_overrides_the_baked_python(tmp_path: Path, fake_python: Path) -> None:
    archive = build_app_archive(TEST_APP, tmp_path / "a.tar.gz", python="/no/such/python")
    app = extract(archive.path, tmp_path / "sandbox")
    assert run_start(app, clean_env(), cwd=tmp_path).returncode == 127
    done = run_start(app, clean_env(EJC_PYTHON=str(fake_python)), cwd=tmp_path)
    assert done.returncode == 0 and "args=-m executor" in done.stdout


@pytest.mark.parametrize("bundle", [False, True])
def test_the_real_executor_starts_and_refuses_to_run_outside_mesos(
    tmp_path: Path, bundle: bool
) -> None:
    archive = build_app_archive(TEST_APP, tmp_path / "a.tar.gz", bundle_executor=bundle)
    app = extract(archive.path, tmp_path / "sandbox")
    done = run_start(app, clean_env(EJC_PYTHON=sys.executable), cwd=tmp_path)
    assert done.returncode == 2
    assert "this program is started by a Mesos agent" in done.stderr

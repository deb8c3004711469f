"""Run the `ejcloud` entry point in-process with click's CliRunner isolation (no server)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from ejcloud_cli.__main__ import main

_ISOLATED = (
    "EJCLOUD_SERVER",
    "EJCLOUD_USER",
    "EJCLOUD_PASSWORD",
    "EJCLOUD_TOKEN",
    "EJCLOUD_TIMEOUT",
    "EJCLOUD_CONFIG",
)


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str


Run = Callable[..., Ran]


@pytest.fixture
def run(tmp_path: Path) -> Run:
    """`run(*args, env={...}, stdin=...)`: main() with stdin, stdout, stderr and the environment
    isolated; the config directory is an empty folder of the test's unless `env` says else."""

    def _run(*args: str, env: Mapping[str, str] | None = None, stdin: str | None = None) -> Ran:
        full: dict[str, str | None] = {name: None for name in _ISOLATED}
        full["XDG_CONFIG_HOME"] = str(tmp_path / "config")
        full.update(env or {})
        runner = CliRunner()
        with runner.isolation(input=stdin, env=full) as (out, err, _):
            code = main(list(args))
            sys.stdout.flush()
            sys.stderr.flush()
            return Ran(code, out.getvalue().decode(), err.getvalue().decode())

    return _run

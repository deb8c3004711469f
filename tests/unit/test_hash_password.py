"""`python -m scheduler hash-password` (issue 30): a hash the settings accept, printed alone on
stdout, with no warning on stderr and no file written where it runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from werkzeug.security import check_password_hash

from scheduler.model.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]


def test_hash_password_prints_a_hash_the_settings_accept_and_nothing_else(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "scheduler", "hash-password"],
        input="correct horse battery\n",
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no runpy warning, no log line
    printed = done.stdout.strip()
    assert "\n" not in printed
    assert check_password_hash(printed, "correct horse battery")
    assert not check_password_hash(printed, "correct horse battery\n")
    assert list(tmp_path.iterdir()) == []
    # The settings' own check of `auth_admin_password_hash` accepts it (it refuses other text).
    settings = load_settings({"auth_admin_password_hash": printed}, {}, {})
    assert settings.auth_admin_password_hash == printed


def test_hash_password_refuses_extra_arguments(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "scheduler", "hash-password", "extra"],
        input="x\n",
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "usage: python -m scheduler hash-password" in done.stderr

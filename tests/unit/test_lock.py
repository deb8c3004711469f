"""The lock covers the environment: every installed distribution is pinned at its version.

`./dev.sh setup` installs requirements.lock with `--require-hashes --no-deps` and removes what it
does not name, so a distribution that is installed but not locked (or locked at another version)
means the set-up no longer installs exactly the lock.
"""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements.lock"
BUILD_LOCK = ROOT / "requirements-build.lock"
# Built by dev.sh from its sdist (checked against a sha256 there), because its published C
# file does not compile on Python 3.11; the project itself is installed editable.
NOT_IN_LOCK = {"http-parser": "0.9.0", "ejcloud": None}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins(path: Path) -> dict[str, str]:
    text = path.read_text()
    return {_norm(m[1]): m[2] for m in re.finditer(r"^([A-Za-z0-9][\w.-]*)==(\S+)", text, re.M)}


def test_every_installed_distribution_is_locked_at_its_version() -> None:
    pins = _pins(LOCK)
    installed = {_norm(d.metadata["Name"]): d.version for d in distributions()}
    wrong = {
        name: (version, pins.get(name))
        for name, version in installed.items()
        if name not in NOT_IN_LOCK and pins.get(name) != version
    }
    assert wrong == {}, "installed (version, locked version) that differ; run ./dev.sh setup"
    assert installed.get("http-parser") == NOT_IN_LOCK["http-parser"]
    assert "ejcloud" in installed


def test_every_locked_distribution_is_installed() -> None:
    installed = {_norm(d.metadata["Name"]): d.version for d in distributions()}
    missing = {name: v for name, v in _pins(LOCK).items() if installed.get(name) != v}
    assert missing == {}


def test_every_pin_carries_hashes() -> None:
    for path in (LOCK, BUILD_LOCK):
        blocks = re.split(r"\n(?=[A-Za-z0-9])", path.read_text())
        pinned = [b for b in blocks if re.match(r"[A-Za-z0-9][\w.-]*==", b)]
        assert pinned, path
        for block in pinned:
            assert "--hash=sha256:" in block, f"{path.name}: {block.splitlines()[0]} has no hash"


def test_lock_names_every_declared_dependency() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = list(project["dependencies"]) + list(project["optional-dependencies"]["dev"])
    pins = _pins(LOCK)
    for requirement in declared:
        name = _norm(re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0])
        assert name in pins, f"{requirement} is declared in pyproject.toml but not locked"


RUN_LOCK = ROOT / "requirements-run.lock"
# The tools only the tests, lint and benchmarks use: `./dev.sh run` must not install them.
DEV_ONLY = {"pytest", "pytest-xdist", "pytest-timeout", "mypy", "ruff", "playwright", "hypothesis"}


def _blocks(path: Path) -> dict[str, str]:
    """name -> its pin with every hash line (comments dropped), as one normalised text."""
    out = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", path.read_text()):
        match = re.match(r"([A-Za-z0-9][\w.-]*)==", block)
        if match:
            lines = [
                line.strip() for line in block.splitlines() if not line.strip().startswith("#")
            ]
            out[_norm(match[1])] = " ".join(lines)
    return out


def test_the_run_lock_is_the_runtime_part_of_the_lock_at_its_versions_and_hashes() -> None:
    full, run = _blocks(LOCK), _blocks(RUN_LOCK)
    differ = {name: pin for name, pin in run.items() if full.get(name) != pin}
    assert differ == {}, "requirements-run.lock pins these unlike requirements.lock: ./dev.sh lock"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for requirement in project["dependencies"]:
        name = _norm(re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0])
        assert name in run, f"{requirement} is a runtime dependency missing from the run lock"
    assert DEV_ONLY & set(run) == set(), "the run lock holds test tools"
    assert DEV_ONLY <= set(full)

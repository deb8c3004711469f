"""Build the `.tar.gz` the Marathon app fetches: this project's sources plus `bin/run-scheduler`.

The artifact carries `requirements.lock` (every dependency pinned with its hashes) and, when
`./dev.sh setup` built it, the http-parser wheel with a hash-pinned `wheels/requirements.txt`:
`bin/run-scheduler` installs only those, each checked against its hash (`pip --require-hashes
--no-deps`), and runs the project from the extracted sources (it never `pip install`s them).

Run alone to build one without deploying: `python -m marathon.artifact OUT.tar.gz`.
"""

from __future__ import annotations

import hashlib
import io
import sys
import tarfile
from collections.abc import Iterator, Sequence
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
TOP_DIR = "ejcloud"
# The product the replicas run; not this tool, nor deploy/ (the stand-in and test harness).
_SOURCE_DIRS = ("scheduler", "executor")
_SOURCE_FILES = ("pyproject.toml", "README.md", "requirements.lock")
# dev.sh builds this wheel once (pymesos 0.3.15 needs http-parser 0.9.0, which does not build on
# Python 3.11 from PyPI); shipping it lets a host with a compatible CPython 3.11 install the
# project without repeating that build.
_WHEEL_DIR = Path("build") / "http-parser" / "wheels"
_SKIPPED_PARTS = {"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache"}

RUN_SCHEDULER = """\
#!/bin/sh
# Start one scheduler replica from the extracted artifact (Marathon runs this from `cmd`).
# Python: $EJC_PYTHON if set (a Python 3.11 that already has the dependencies, e.g. the .venv of
# `./dev.sh setup`), else a virtual environment ($EJC_VENV, default ./venv next to this
# directory) created on first start with python3.11. Into it go only the distributions the
# shipped requirements.lock names and the http-parser wheel shipped in wheels/, every file
# checked against its hash (pip --require-hashes, no resolver); the project itself runs from
# this directory (PYTHONPATH), never installed.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
case "${hostname:-}" in
  ""|localhost|127.*|0.0.0.0)
    echo "run-scheduler: hostname is '${hostname:-}'; export the address other hosts reach" \\
      "this one at (Marathon: hostname=\\$HOST)" >&2
    exit 2 ;;
esac
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
if [ -n "${EJC_PYTHON:-}" ]; then
  exec "$EJC_PYTHON" -m scheduler "$@"
fi
venv=${EJC_VENV:-$here/../venv}
# Present while this script installs: a start killed half-way through starts over.
installing="$venv/.ejcloud-installing"
if [ ! -x "$venv/bin/python" ] || [ -f "$installing" ]; then
  if [ ! -f "$here/wheels/requirements.txt" ]; then
    echo "run-scheduler: the artifact has no http-parser wheel (wheels/); build it where" \\
      "./dev.sh setup has run, or set EJC_PYTHON" >&2
    exit 1
  fi
  base=$(command -v python3.11 || command -v python3)
  echo "run-scheduler: creating $venv with $base" >&2
  if [ -f "$installing" ]; then rm -rf "$venv"; fi
  "$base" -m venv "$venv"
  touch "$installing"
  if ! "$venv/bin/pip" install -q --require-hashes --no-deps -r "$here/requirements.lock" \\
    || ! "$venv/bin/pip" install -q --require-hashes --no-deps --no-index \\
      --find-links "$here/wheels" -r "$here/wheels/requirements.txt"; then
    rm -rf "$venv"
    exit 1
  fi
  rm -f "$installing"
fi
exec "$venv/bin/python" -m scheduler "$@"
"""


def _source_files(root: Path) -> Iterator[Path]:
    for name in _SOURCE_DIRS:
        for path in sorted((root / name).rglob("*")):
            rel = path.relative_to(root)
            if path.is_file() and not _SKIPPED_PARTS.intersection(rel.parts):
                if path.suffix not in (".pyc", ".pyo"):
                    yield rel
    for name in _SOURCE_FILES:
        yield Path(name)
    wheels = root / _WHEEL_DIR
    if wheels.is_dir():
        for wheel in sorted(wheels.glob("*.whl")):
            yield wheel.relative_to(root)


def _arcname(rel: Path) -> str:
    if rel.parts[: len(_WHEEL_DIR.parts)] == _WHEEL_DIR.parts:
        return f"{TOP_DIR}/wheels/{rel.name}"
    return f"{TOP_DIR}/{rel.as_posix()}"


def _wheel_pins(root: Path) -> str:
    """A requirements file pinning each shipped wheel to its sha256 ("" when none)."""
    lines = []
    wheels = root / _WHEEL_DIR
    for wheel in sorted(wheels.glob("*.whl")) if wheels.is_dir() else ():
        name, version = wheel.name.split("-")[:2]
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        lines.append(f"{name.replace('_', '-')}=={version} --hash=sha256:{digest}\n")
    return "".join(lines)


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    tar.addfile(info, io.BytesIO(data))


def build_artifact(out: Path, root: Path = PROJECT_ROOT) -> Path:
    """Write the artifact to `out` (parents created) and return its absolute path.

    Raises OSError when a source is missing or `out` cannot be written.
    """
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    with tarfile.open(tmp, "w:gz") as tar:
        for rel in _source_files(root):
            tar.add(root / rel, arcname=_arcname(rel), recursive=False)
        _add_bytes(tar, f"{TOP_DIR}/bin/run-scheduler", RUN_SCHEDULER.encode(), 0o755)
        pins = _wheel_pins(root)
        if pins:
            _add_bytes(tar, f"{TOP_DIR}/wheels/requirements.txt", pins.encode(), 0o644)
    tmp.replace(out)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python -m marathon.artifact OUT.tar.gz", file=sys.stderr)
        return 2
    print(build_artifact(Path(args[0])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Build the `.tar.gz` the Marathon app fetches: this project's sources plus `bin/run-scheduler`.

Run alone to build one without deploying: `python -m deploy.marathon.artifact OUT.tar.gz`.
"""

from __future__ import annotations

import io
import sys
import tarfile
from collections.abc import Iterator, Sequence
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
TOP_DIR = "ejcloud"
_SOURCE_DIRS = ("scheduler", "executor", "deploy")
_SOURCE_FILES = ("pyproject.toml", "README.md")
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
# directory) created on first start with python3.11 and `pip install`, using the http-parser
# wheel shipped in wheels/ when there is one.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
case "${hostname:-}" in
  ""|localhost|127.*|0.0.0.0)
    echo "run-scheduler: hostname is '${hostname:-}'; export the address other hosts reach" \\
      "this one at (Marathon: hostname=\\$HOST)" >&2
    exit 2 ;;
esac
if [ -n "${EJC_PYTHON:-}" ]; then
  PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" exec "$EJC_PYTHON" -m scheduler "$@"
fi
venv=${EJC_VENV:-$here/../venv}
if [ ! -x "$venv/bin/python" ]; then
  base=$(command -v python3.11 || command -v python3)
  echo "run-scheduler: creating $venv with $base" >&2
  "$base" -m venv "$venv"
  links=""
  if [ -d "$here/wheels" ]; then links="--find-links $here/wheels"; fi
  # shellcheck disable=SC2086
  "$venv/bin/pip" install -q $links "$here" || { rm -rf "$venv"; exit 1; }
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
        script = RUN_SCHEDULER.encode()
        info = tarfile.TarInfo(f"{TOP_DIR}/bin/run-scheduler")
        info.size = len(script)
        info.mode = 0o755
        tar.addfile(info, io.BytesIO(script))
    tmp.replace(out)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python -m deploy.marathon.artifact OUT.tar.gz", file=sys.stderr)
        return 2
    print(build_artifact(Path(args[0])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

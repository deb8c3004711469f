"""`python -m executor.package SRC_DIR OUT.tar.gz [--bundle-executor] [--python PATH]`.

Builds an app archive for `appURL`: the files of SRC_DIR at the archive's root, plus a generated
`bin/start.sh` (the app's `bootstrapScript`) that starts the executor:

- the interpreter is `$EJC_PYTHON` when the agent's environment sets it, else the `--python`
  path baked in here, else `python3`; it needs pymesos 0.3.15 (and apscheduler 3.x for DAEMON
  jobs);
- the `executor` package comes from the archive with `--bundle-executor` (copied from this
  installation), else from that interpreter's installation of ejcloud.

Mesos extracts the archive into the sandbox, so set `bootstrapScript` to `bin/start.sh`.
Python caches, `.git` and virtualenv folders are left out; a top-level `executor` folder or an
existing `bin/start.sh` in SRC_DIR is refused (the names belong to the packaging).
"""

from __future__ import annotations

import argparse
import io
import os
import shlex
import sys
import tarfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["START_SCRIPT", "AppArchive", "PackageError", "build_app_archive", "start_script"]

START_SCRIPT = "bin/start.sh"
_SKIPPED_DIRS = {
    "__pycache__",
    ".git",
    ".hg",
    ".svn",
    ".venv",
    "venv",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
}
_SKIPPED_SUFFIXES = (".pyc", ".pyo")
_EXECUTOR_DIR = Path(__file__).resolve().parent


class PackageError(Exception):
    """The app folder cannot be packaged; the message says why."""


@dataclass(frozen=True)
class AppArchive:
    path: Path
    files: tuple[str, ...]
    bundled_executor: bool

    @property
    def app_url(self) -> str:
        """A `file://` URL of the archive, for an agent on this machine."""
        return self.path.resolve().as_uri()


def start_script(python: str | None = None) -> str:
    """The text of `bin/start.sh`; `python` is the interpreter baked in (default python3)."""
    baked = shlex.quote(python) if python else "python3"
    return f"""#!/bin/sh
# Starts the ejcloud executor for this app. Written by `python -m executor.package`.
# Interpreter: $EJC_PYTHON if set, else {baked}. It needs pymesos 0.3.15 (and apscheduler 3.x
# for DAEMON jobs). The executor package is ./executor when bundled, else the interpreter's.
set -eu
app_dir=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
python={baked}
if [ -n "${{EJC_PYTHON:-}}" ]; then
    python=$EJC_PYTHON
fi
export EJC_APP_DIR="$app_dir"
cd "$app_dir"
exec "$python" -m executor "$@"
"""


def build_app_archive(
    src_dir: str | Path,
    out_path: str | Path,
    *,
    bundle_executor: bool = False,
    python: str | None = None,
) -> AppArchive:
    """Write the archive (gzip tar) atomically. Raises PackageError."""
    src = Path(src_dir).resolve()
    out = Path(out_path).resolve()
    if not src.is_dir():
        raise PackageError(f"{src} is not a directory")
    if (src / "executor").exists():
        raise PackageError(
            f"{src} has a top-level 'executor': that name is the executor package's; rename it"
        )
    if (src / START_SCRIPT).exists():
        raise PackageError(f"{src / START_SCRIPT} exists: the packaging writes its own")
    if not out.name.endswith((".tar.gz", ".tgz")):
        raise PackageError(f"{out.name}: the archive name must end in .tar.gz or .tgz")
    entries = [(path, path.relative_to(src).as_posix()) for path in _files(src, skip=out)]
    if bundle_executor:
        entries += [
            (path, "executor/" + path.relative_to(_EXECUTOR_DIR).as_posix())
            for path in _files(_EXECUTOR_DIR, skip=out)
            if path.suffix == ".py"
        ]
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    names: list[str] = []
    try:
        with tarfile.open(partial, "w:gz") as tar:
            for path, name in entries:
                info = tar.gettarinfo(str(path), arcname=name)
                _normalize(info)
                with open(path, "rb") as handle:
                    tar.addfile(info, handle)
                names.append(name)
            script = start_script(python).encode("utf-8")
            info = tarfile.TarInfo(START_SCRIPT)
            info.size = len(script)
            info.mode = 0o755
            info.mtime = int(src.stat().st_mtime)
            tar.addfile(info, io.BytesIO(script))
            names.append(START_SCRIPT)
        os.replace(partial, out)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise PackageError(f"cannot write {out}: {exc}") from exc
    return AppArchive(out, tuple(names), bundle_executor)


def _files(root: Path, skip: Path) -> Iterator[Path]:
    for directory, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIPPED_DIRS)
        for filename in sorted(filenames):
            path = Path(directory) / filename
            if filename.endswith(_SKIPPED_SUFFIXES) or path.resolve() == skip:
                continue
            if filename.endswith(".partial") and path.with_suffix("").resolve() == skip:
                continue
            if path.is_symlink() or not path.is_file():
                continue
            yield path


def _normalize(info: tarfile.TarInfo) -> None:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    # Keep the owner's permissions (executable scripts stay executable), readable by all.
    info.mode = (info.mode & 0o755) | 0o644


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m executor.package",
        description="Build an app archive (appURL) with bin/start.sh (bootstrapScript).",
    )
    parser.add_argument("src_dir", help="the folder with the app's job code")
    parser.add_argument("out", help="the archive to write (.tar.gz)")
    parser.add_argument(
        "--bundle-executor",
        action="store_true",
        help="copy the executor package into the archive (agents then need only pymesos)",
    )
    parser.add_argument(
        "--python",
        default=None,
        help="interpreter start.sh uses unless EJC_PYTHON is set (default: python3)",
    )
    args = parser.parse_args(argv)
    try:
        archive = build_app_archive(
            args.src_dir, args.out, bundle_executor=args.bundle_executor, python=args.python
        )
    except PackageError as exc:
        print(f"package: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {archive.path} ({len(archive.files)} files)")
    print(f"  appURL:          {archive.app_url}")
    print(f"  bootstrapScript: {START_SCRIPT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

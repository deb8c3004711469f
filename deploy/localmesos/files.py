"""An agent's file server: `/files/read` and `/files/browse` over the sandboxes it attached.

As a Mesos agent's (its `files` process): every executor's sandbox is attached when the
executor is made, under three names: its own directory path, `<that path's runs>/latest` and
the virtual `/frameworks/<fw>/executors/<ex>/runs/latest` (the latter two follow the newest run
of that executor id). A request path resolves through the longest attached prefix; anything
outside every attached sandbox is 404, and a path that leaves its sandbox through `..` or a
symbolic link is 400 (`'...' is inaccessible`).

`/files/read?path=&offset=&length=` answers `{"data": ..., "offset": N}`:
- no `path`: 400; `offset` or `length` not an integer, or below -1: 400;
- `offset=-1`: the size, `{"data": "", "offset": <size>}`;
- otherwise up to `length` bytes (all that is left when absent or -1) from `offset`, at most 16
  pages (64 KiB) per read, and `offset` as asked (past the end: `"data": ""`);
- a directory: 400; a missing file: 404.
`data` carries the file's bytes as they are (a real agent writes them into the JSON string
unchanged, so it may hold bytes that are not UTF-8).

`/files/browse?path=` lists a directory: `[{"path", "mode", "nlink", "uid", "gid", "size",
"mtime"}]` sorted by path, each path the requested one joined with the entry's name.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import stat
import threading
from pathlib import Path
from urllib.parse import parse_qs

from .httpserver import Request, Response

__all__ = ["MAX_READ_BYTES", "SandboxFiles"]

MAX_READ_BYTES = 16 * 4096  # Mesos caps a read at 16 pages


class _Refused(Exception):
    def __init__(self, status: int, message: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _query(request: Request) -> dict[str, str]:
    """Each parameter's first value (Mesos keeps one value per name)."""
    return {k: v[0] for k, v in parse_qs(request.query, keep_blank_values=True).items()}


def _integer(text: str, name: str) -> int:
    try:
        value = int(text.strip(), 10)
    except ValueError:
        raise _Refused(400, f"Failed to parse {name}: invalid integer '{text}'.\n") from None
    if value < -1:
        raise _Refused(400, f"Negative {name} provided: {value}.\n")
    return value


def _mode_string(mode: int) -> str:
    return stat.filemode(mode)


def _owner(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _group(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


class SandboxFiles:
    """The sandboxes an agent serves. `attach` under the state lock; requests on any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._paths: dict[str, str] = {}  # virtual path -> real directory
        # A framework's `executors` folder -> its real path: resolved once, not per sandbox
        # (a realpath of each new sandbox walks every component: a quarter of a 500-task
        # ACCEPT's time here).
        self._real_roots: dict[Path, str] = {}

    def attach(self, directory: Path, framework_id: str, executor_id: str) -> None:
        real = self._real(directory)
        virtual = f"/frameworks/{framework_id}/executors/{executor_id}/runs/latest"
        with self._lock:
            self._paths[str(directory)] = real
            self._paths[str(directory.parent / "latest")] = real
            self._paths[virtual] = real

    def _real(self, directory: Path) -> str:
        """The real path of `directory` (`.../executors/<executor>/runs/<container>`): the
        executors folder's resolved once, then the names below it, which the agent made
        (ids are single path components, never `.` or `..`)."""
        runs, executor = directory.parent, directory.parent.parent
        names = (executor.name, runs.name, directory.name)
        if any(name in ("", ".", "..") or "/" in name for name in names):
            return os.path.realpath(directory)
        root = executor.parent
        with self._lock:
            real_root = self._real_roots.get(root)
        if real_root is None:
            real_root = os.path.realpath(root)
            with self._lock:
                self._real_roots[root] = real_root
        return os.path.join(real_root, *names)

    def _resolve(self, path: str) -> str:
        """The real path of the virtual `path`; raises _Refused(404) or _Refused(400)."""
        tokens = path.rstrip("/").split("/")
        suffix: list[str] = []
        with self._lock:
            paths = dict(self._paths)
        while tokens:
            prefix = "/".join(tokens)
            if prefix not in paths:
                suffix.insert(0, tokens.pop())
                continue
            root = paths[prefix]
            if not os.path.isdir(root):
                if suffix:
                    raise _Refused(404)
                return root
            joined = os.path.join(root, *suffix)
            if not os.path.exists(joined):
                raise _Refused(404)
            real = os.path.realpath(joined)
            if real != root and not real.startswith(root.rstrip("/") + "/"):
                raise _Refused(400, f"'{joined}' is inaccessible.\n")
            return real
        raise _Refused(404)

    def read(self, request: Request) -> Response:
        try:
            query = _query(request)
            path = query.get("path", "")
            if not path:
                raise _Refused(400, "Expecting 'path=value' in query.\n")
            offset = _integer(query["offset"], "offset") if "offset" in query else -1
            length: int | None = None
            if "length" in query:
                asked = _integer(query["length"], "length")
                length = None if asked == -1 else asked
            if offset == -1:
                length = 0
            real = self._resolve(path)
            if os.path.isdir(real):
                raise _Refused(400, "Cannot read a directory.\n")
            data, size = _read_bytes(real, max(offset, 0), length)
        except _Refused as refused:
            return Response(refused.status, refused.message.encode("utf-8"))
        body = {"data": data.decode("utf-8", "surrogateescape"), "offset": size}
        if offset != -1:
            body["offset"] = offset
        # The bytes as they are, as a Mesos agent writes them (not UTF-8 checked).
        text = json.dumps(body, ensure_ascii=False)
        return Response(200, text.encode("utf-8", "surrogateescape"), "application/json")

    def browse(self, request: Request) -> Response:
        try:
            path = _query(request).get("path", "")
            if not path:
                raise _Refused(400, "Expecting 'path=value' in query.\n")
            real = self._resolve(path)
        except _Refused as refused:
            return Response(refused.status, refused.message.encode("utf-8"))
        listing = []
        try:
            names = sorted(os.listdir(real)) if os.path.isdir(real) else []
        except OSError:
            names = []
        for name in names:
            try:
                info = os.stat(os.path.join(real, name))
            except OSError:
                continue
            listing.append(
                {
                    "path": f"{path.rstrip('/')}/{name}",
                    "mode": _mode_string(info.st_mode),
                    "nlink": info.st_nlink,
                    "uid": _owner(info.st_uid),
                    "gid": _group(info.st_gid),
                    "size": info.st_size,
                    "mtime": int(info.st_mtime),
                }
            )
        return Response(200, json.dumps(listing).encode("utf-8"), "application/json")


def _read_bytes(real: str, offset: int, length: int | None) -> tuple[bytes, int]:
    """(bytes read, file size): up to `length` (None: to the end) from `offset`, capped."""
    try:
        with open(real, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if offset >= size or length == 0:
                return b"", size
            want = min(size - offset if length is None else length, MAX_READ_BYTES)
            handle.seek(offset)
            return handle.read(want), size
    except FileNotFoundError:
        raise _Refused(404) from None
    except OSError as exc:
        raise _Refused(500, f"Failed to open file at '{real}': {exc}.\n") from None

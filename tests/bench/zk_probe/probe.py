"""Counts every request a process's kazoo clients send, loaded into a replica by `sitecustomize`.

`run.py` writes a two-line `sitecustomize.py` into a temporary directory, puts that directory on
the replica's PYTHONPATH and sets `ZK_PROBE_DIR`; Python imports it at start-up and calls
`install()`, which wraps `kazoo.client.KazooClient._call` (the one queue every kazoo request
goes through: reads, writes, watches, transactions and the registry's multiRead). Nothing in the
product changes: the wrapper counts, then calls the original.

Each request is counted under (type, path pattern, component):
- type: the request's class name (`GetData`, `Create`, `MultiRead`, ...); a transaction is
  `Transaction(<op kinds>)`, its ops summed beside its count.
- path pattern: the request's path with the namespace as `NS`, a task id as `TASK`, a name that
  matches `ZK_PROBE_JOB_RE` (default `every\\d+`, the bench's jobs) as `JOB`, runs of 12 or
  more hex digits (uuids, election and result node names) as `ID` and other digit runs as `N`;
  a transaction's or a multiRead's distinct patterns joined with ` ; `.
- component: the innermost two frames of `scheduler/` outside the storage doors (registry,
  transactions, multi_read, acl, zk_handler), innermost first (`module.function < caller`),
  with the door's own function before a `|`; `(kazoo)` when no scheduler frame called (kazoo's
  own requests).

Snapshots: a thread `zk-probe` writes `latest.json` every `ZK_PROBE_EVERY_S` (2) seconds and,
for each `<name>.ask` file that appears in the folder, `<name>.json` at once (then removes the
ask): the bench asks at the edges of its window and diffs the two. Counting costs up to about
20 microseconds per request on the replica's threads (measured with a 30-frame stack and no
scheduler frame, the longest walk; about 0.4 ms per launched task at 22 requests each): CPU
measured with the probe is inflated by that much.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

__all__ = ["Key", "install", "pattern"]

Key = tuple[str, str, str]
"""(type, path pattern, component) of a counted request."""

_DOORS = (
    "storage/registry.py",
    "storage/transactions.py",
    "storage/multi_read.py",
    "storage/acl.py",
    "storage/zk_handler.py",
)
_DIGITS = re.compile(r"\d+")
_HEX_ID = re.compile(r"[0-9a-f][0-9a-f-]{10,}[0-9a-f]")  # uuids, election and result node names


def pattern(path: str, job_re: re.Pattern[str]) -> str:
    """`path` with its namespace, task ids, job names and numbers replaced by placeholders."""
    parts = path.split("/")
    out = []
    for i, part in enumerate(parts):
        if i == 1:
            out.append("NS")
        elif "@-@" in part:
            out.append("TASK")
        elif job_re.fullmatch(part):
            out.append("JOB")
        else:
            out.append(_DIGITS.sub("N", _HEX_ID.sub("ID", part)))
    return "/".join(out)


def _where(frame: FrameType) -> str:
    code = frame.f_code
    name = Path(code.co_filename).stem
    return f"{name}.{code.co_name}"


def _component(start: FrameType | None) -> str:
    door = ""
    callers: list[str] = []
    frame = start
    while frame is not None and len(callers) < 2:
        filename = frame.f_code.co_filename
        if "/scheduler/" in filename:
            if filename.endswith(_DOORS):
                door = _where(frame)
            else:
                callers.append(_where(frame))
        frame = frame.f_back
    if not callers:
        return f"{door} | (kazoo)" if door else "(kazoo)"
    chain = " < ".join(callers)
    return f"{door} | {chain}" if door else chain


class _Counts:
    def __init__(self, job_re: re.Pattern[str]) -> None:
        self.job_re = job_re
        self.lock = threading.Lock()
        self.requests: Counter[Key] = Counter()
        self.ops: Counter[Key] = Counter()

    def key(self, request: Any) -> tuple[Key, int]:
        kind = type(request).__name__
        operations = getattr(request, "operations", None)
        if operations is not None:
            kinds = sorted({type(op).__name__ for op in operations})
            paths = sorted({pattern(op.path, self.job_re) for op in operations})
            return (f"Transaction({','.join(kinds)})", " ; ".join(paths), ""), len(operations)
        many = getattr(request, "paths", None)
        if many is not None:
            paths = sorted({pattern(p, self.job_re) for p in many})
            return (kind, " ; ".join(paths), ""), len(many)
        path = getattr(request, "path", None)
        return (kind, "" if path is None else pattern(path, self.job_re), ""), 1

    def count(self, request: Any, frame: FrameType | None) -> None:
        (kind, path, _), ops = self.key(request)
        key = (kind, path, _component(frame))
        with self.lock:
            self.requests[key] += 1
            self.ops[key] += ops

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            rows = [
                {
                    "type": k[0],
                    "path": k[1],
                    "component": k[2],
                    "count": n,
                    "ops": self.ops[k],
                }
                for k, n in self.requests.items()
            ]
        return {"at": time.time(), "rows": rows}


def _write(folder: Path, name: str, counts: _Counts) -> None:
    tmp = folder / f".{name}.tmp"
    tmp.write_text(json.dumps(counts.snapshot()))
    tmp.replace(folder / name)


def _dumper(folder: Path, counts: _Counts, every_s: float) -> None:
    last = 0.0
    stop = threading.Event()  # never set: a daemon thread that ends with the process
    while True:
        for ask in folder.glob("*.ask"):
            _write(folder, f"{ask.stem}.json", counts)
            ask.unlink(missing_ok=True)
        if time.monotonic() - last >= every_s:
            _write(folder, "latest.json", counts)
            last = time.monotonic()
        stop.wait(0.1)


def install() -> None:
    """Wrap KazooClient._call when `ZK_PROBE_DIR` is set; otherwise do nothing."""
    folder_text = os.environ.get("ZK_PROBE_DIR")
    if not folder_text:
        return
    from kazoo.client import KazooClient  # here: a process without the probe never imports it

    folder = Path(folder_text)
    counts = _Counts(re.compile(os.environ.get("ZK_PROBE_JOB_RE", r"every\d+")))
    original = KazooClient._call

    def _call(self: Any, request: Any, async_object: Any) -> Any:
        counts.count(request, sys._getframe(1))
        return original(self, request, async_object)

    KazooClient._call = _call
    every_s = float(os.environ.get("ZK_PROBE_EVERY_S", "2"))
    threading.Thread(
        target=_dumper, args=(folder, counts, every_s), name="zk-probe", daemon=True
    ).start()

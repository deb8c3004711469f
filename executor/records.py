"""Execution records: what the executor tells the scheduler about each run, in `TaskStatus.data`.

The executor never writes to a database (agents hold no credentials, unlike the original,
which shipped the RDB password in the executor data). Each status update that starts or ends a
run carries base64 of UTF-8 JSON:

    {"version": 1,
     "record": {"id": "<uuid4 hex>",            one id per run: the start and end share it
                "jobName": str, "taskId": str, "shardingItem": int,
                "hostname": str, "ip": str,
                "executionSource": "CLOUD_EXECUTOR",
                "startTimeMs": int,              epoch milliseconds (UTC)
                "completeTimeMs": int | null,    null while the run is going on
                "isSuccess": bool | null,        null while the run is going on
                "failureCause": str}}            "" unless the run failed; at most 4000 chars

These map onto the original's `JOB_EXECUTION_LOG` row (id, job_name, task_id, hostname, ip,
sharding_item, execution_source, failure_cause, is_success, start_time, complete_time): insert
on the update whose record has no `completeTimeMs`, update the row with the same `id` when the
record comes back complete. Which updates carry one:

- TRANSIENT: TASK_RUNNING (started), then TASK_FINISHED / TASK_FAILED / TASK_KILLED (complete).
- DAEMON: TASK_RUNNING "BEGIN" (started) and TASK_RUNNING "COMPLETE" (complete) for each
  reported run; TASK_KILLED (complete) if a run was cut short by the kill.
- TASK_ERROR and plain TASK_RUNNING carry no data (the executor sends no TASK_STARTING).

The scheduler decodes with `decode_status_data(status.get("data"))`, which returns None for an
update without data and raises `RecordError` for data it cannot read.

Each task's output has files of its own in the executor's sandbox: `task_output_dir(task_id)`
(`tasks/<the task id, path-safe>`) holds its `stdout` and `stderr` (a daemon task's runs follow
each other in them). The executor says so in the task's first TASK_RUNNING message,
`output: stdout=<path> stderr=<path>` (paths relative to the sandbox; `output_message`), which
the scheduler's event trace keeps and `parse_output_message` reads back. This module imports
nothing outside the standard library.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
import re
import uuid
from dataclasses import dataclass, replace
from typing import Any

__all__ = [
    "EXECUTION_SOURCE",
    "MAX_FAILURE_CAUSE_CHARS",
    "OUTPUT_STREAMS",
    "VERSION",
    "ExecutionRecord",
    "RecordError",
    "decode_status_data",
    "encode_status_data",
    "output_message",
    "parse_output_message",
    "task_output_dir",
]

VERSION = 1
EXECUTION_SOURCE = "CLOUD_EXECUTOR"
MAX_FAILURE_CAUSE_CHARS = 4000  # the original's failure_cause VARCHAR(4000)
OUTPUT_STREAMS = ("stdout", "stderr")
_OUTPUT_ROOT = "tasks"
# A file name stays well below the 255 bytes most file systems allow.
_MAX_NAME_BYTES = 200
_NAME_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789@_.-")
_OUTPUT_PREFIX = "output: "
_OUTPUT_MESSAGE = re.compile(r"^output: stdout=(\S+) stderr=(\S+)$")


class RecordError(ValueError):
    """Status data that is not a record this module wrote; the message names the problem."""


@dataclass(frozen=True)
class ExecutionRecord:
    """One run of one shard. `complete_time_ms is None` while it runs."""

    id: str
    job_name: str
    task_id: str
    sharding_item: int
    hostname: str
    ip: str
    start_time_ms: int
    complete_time_ms: int | None = None
    is_success: bool | None = None
    failure_cause: str = ""
    execution_source: str = EXECUTION_SOURCE

    @classmethod
    def started(
        cls,
        *,
        job_name: str,
        task_id: str,
        sharding_item: int,
        hostname: str,
        ip: str,
        start_time_ms: int,
    ) -> ExecutionRecord:
        """A new record (fresh id) for a run that has just begun."""
        return cls(
            id=uuid.uuid4().hex,
            job_name=job_name,
            task_id=task_id,
            sharding_item=sharding_item,
            hostname=hostname,
            ip=ip,
            start_time_ms=start_time_ms,
        )

    @property
    def complete(self) -> bool:
        return self.complete_time_ms is not None

    def finished(self, complete_time_ms: int, failure_cause: str | None = None) -> ExecutionRecord:
        """The same run, ended: a success when `failure_cause` is None."""
        cause = "" if failure_cause is None else _clip(failure_cause)
        return replace(
            self,
            complete_time_ms=complete_time_ms,
            is_success=failure_cause is None,
            failure_cause=cause,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "jobName": self.job_name,
            "taskId": self.task_id,
            "shardingItem": self.sharding_item,
            "hostname": self.hostname,
            "ip": self.ip,
            "executionSource": self.execution_source,
            "startTimeMs": self.start_time_ms,
            "completeTimeMs": self.complete_time_ms,
            "isSuccess": self.is_success,
            "failureCause": self.failure_cause,
        }

    @classmethod
    def from_json(cls, doc: Any) -> ExecutionRecord:
        """Raises RecordError naming every bad field."""
        if not isinstance(doc, dict):
            raise RecordError("record: not a JSON object")
        problems: list[str] = []

        def text(key: str) -> str:
            value = doc.get(key)
            if not isinstance(value, str):
                problems.append(f"record.{key}: not a string")
                return ""
            return value

        def whole(key: str, optional: bool = False) -> int | None:
            value = doc.get(key)
            if value is None and optional:
                return None
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                problems.append(f"record.{key}: not a whole number >= 0")
                return 0
            return value

        success = doc.get("isSuccess")
        if success is not None and not isinstance(success, bool):
            problems.append("record.isSuccess: not true, false or null")
            success = None
        record = cls(
            id=text("id"),
            job_name=text("jobName"),
            task_id=text("taskId"),
            sharding_item=whole("shardingItem") or 0,
            hostname=text("hostname"),
            ip=text("ip"),
            start_time_ms=whole("startTimeMs") or 0,
            complete_time_ms=whole("completeTimeMs", optional=True),
            is_success=success,
            failure_cause=text("failureCause"),
            execution_source=text("executionSource"),
        )
        if record.complete != (record.is_success is not None):
            problems.append("record: completeTimeMs and isSuccess must be both set or both null")
        if problems:
            raise RecordError("invalid execution record: " + "; ".join(problems))
        return record


def encode_status_data(record: ExecutionRecord) -> str:
    """base64 text for `TaskStatus.data`."""
    doc = {"version": VERSION, "record": record.to_json()}
    raw = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return base64.b64encode(raw).decode("ascii")


def decode_status_data(data: str | bytes | None) -> ExecutionRecord | None:
    """The record in a `TaskStatus.data` (base64 text as pymesos delivers it), or None if empty.

    Raises RecordError for anything else. The scheduler's statistics and metrics both read the
    record of each update (and the status handler a daemon's): the last records decoded are
    kept (records are immutable), so an update's is decoded once, not three times (18 us each).
    """
    if not data:
        return None
    return _decoded(data)


@functools.lru_cache(maxsize=256)
def _decoded(data: str | bytes) -> ExecutionRecord:
    try:
        doc = json.loads(base64.b64decode(data, validate=True).decode("utf-8"))
    except (binascii.Error, ValueError) as exc:
        raise RecordError(f"status data is not base64 of UTF-8 JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise RecordError("status data is not a JSON object")
    if doc.get("version") != VERSION:
        raise RecordError(f"status data version: expected {VERSION}, got {doc.get('version')!r}")
    return ExecutionRecord.from_json(doc.get("record"))


def _clip(text: str) -> str:
    """Keep the end of a long cause: a traceback's last lines say what went wrong."""
    if len(text) <= MAX_FAILURE_CAUSE_CHARS:
        return text
    marker = "...\n"
    return marker + text[-(MAX_FAILURE_CAUSE_CHARS - len(marker)) :]


def task_output_dir(task_id: str) -> str:
    """`tasks/<name>`: where a task's `stdout` and `stderr` go, relative to the sandbox.

    The name is the task id with every byte of its UTF-8 outside `[A-Za-z0-9@_.-]` written as
    `%XX` (`%` itself too) and a leading `.` as `%2E`, so it is one plain file name whatever the
    id holds (no `/`, never `.` or `..`, never hidden). A name over 200 bytes keeps its first
    150 and adds `~` and 16 hex digits of the id's SHA-256, so distinct ids keep distinct names.
    """
    raw = task_id.encode("utf-8", "surrogatepass")
    name = "".join(chr(b) if chr(b) in _NAME_SAFE else f"%{b:02X}" for b in raw)
    if name.startswith("."):
        name = "%2E" + name[1:]
    if not name:
        name = "%"
    if len(name) > _MAX_NAME_BYTES:
        name = name[:150] + "~" + hashlib.sha256(raw).hexdigest()[:16]
    return f"{_OUTPUT_ROOT}/{name}"


def output_message(stdout: str, stderr: str) -> str:
    """The TASK_RUNNING message naming a task's output files (paths relative to the sandbox)."""
    return f"{_OUTPUT_PREFIX}stdout={stdout} stderr={stderr}"


def parse_output_message(message: str | None) -> dict[str, str] | None:
    """`{"stdout": path, "stderr": path}` from an `output_message`; None for any other message
    or for a path that is not a plain relative one (no `..`, no leading `/`)."""
    if not message or not message.startswith(_OUTPUT_PREFIX):
        return None
    found = _OUTPUT_MESSAGE.match(message)
    if found is None:
        return None
    paths = dict(zip(OUTPUT_STREAMS, found.groups(), strict=True))
    for path in paths.values():
        parts = path.split("/")
        if path.startswith("/") or any(part in ("", ".", "..") for part in parts):
            return None
    return paths

"""Wire helpers shared by the master and the agents: RecordIO chunks, ids, uuids, TaskStatus.

Mesos messages travel as JSON objects (`Json`): TaskInfo, ExecutorInfo and TaskStatus carry many
optional fields that must round-trip untouched to pymesos, so they stay dicts; the helpers here
read them defensively and build the few messages the stand-in originates.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
import uuid
from collections.abc import Mapping
from typing import Any

Json = dict[str, Any]

MESOS_VERSION = "1.11.0"  # numeric dotted: pymesos 0.3.15 parses /version parts with int()

TERMINAL_STATES = frozenset(
    {
        "TASK_FINISHED",
        "TASK_FAILED",
        "TASK_KILLED",
        "TASK_LOST",
        "TASK_ERROR",
        "TASK_DROPPED",
        "TASK_GONE",
        "TASK_GONE_BY_OPERATOR",
    }
)
KNOWN_STATES = TERMINAL_STATES | {
    "TASK_STAGING",
    "TASK_STARTING",
    "TASK_RUNNING",
    "TASK_KILLING",
    "TASK_UNREACHABLE",
    "TASK_UNKNOWN",
}


class CallError(Exception):
    """A call refused with an HTTP status, where the Mesos master or agent refuses it that way
    (a missing field, an unknown executor, an executor call before SUBSCRIBE, ...), with
    Mesos's message."""

    def __init__(self, http_status: int, message: str) -> None:
        super().__init__(message)
        self.http_status = http_status
        self.message = message


def encode_chunk(event: Mapping[str, Any]) -> bytes:
    """One event as one HTTP chunk holding one RecordIO record (`<len>\\n<json>`, no CR)."""
    payload = json.dumps(event, separators=(",", ":")).encode("utf-8")
    record = b"%d\n%s" % (len(payload), payload)
    return b"%x\r\n%s\r\n" % (len(record), record)


LAST_CHUNK = b"0\r\n\r\n"


def new_uuid() -> str:
    """A status-update uuid: 16 random bytes, standard padded base64 (as pymesos sends)."""
    return base64.b64encode(uuid.uuid4().bytes).decode("ascii")


def decode_uuid(value: Any, what: str = "uuid") -> bytes:
    """Decode a base64 uuid; raises CallError(400) unless it is exactly 16 bytes."""
    if not isinstance(value, str):
        raise CallError(400, f"Expecting '{what}' to be present")
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise CallError(400, f"Failed to base64-decode '{what}': {exc}") from exc
    if len(raw) != 16:
        raise CallError(400, f"'{what}' must be 16 bytes, got {len(raw)}")
    return raw


def id_value(message: Any, key: str) -> str | None:
    """`message[key]["value"]` if it is a non-empty string, else None."""
    if not isinstance(message, dict):
        return None
    wrapped = message.get(key)
    if isinstance(wrapped, dict) and isinstance(wrapped.get("value"), str) and wrapped["value"]:
        return str(wrapped["value"])
    return None


def wrap(value: str) -> Json:
    return {"value": value}


def task_status(
    task_id: str,
    state: str,
    *,
    source: str,
    reason: str | None = None,
    message: str | None = None,
    agent_id: str | None = None,
    executor_id: str | None = None,
    with_uuid: bool = False,
) -> Json:
    """A TaskStatus the stand-in originates. Master updates have no uuid; agent ones do."""
    status: Json = {
        "task_id": wrap(task_id),
        "state": state,
        "source": source,
        "timestamp": time.time(),
    }
    if reason is not None:
        status["reason"] = reason
    if message is not None:
        status["message"] = message
    if agent_id is not None:
        status["agent_id"] = wrap(agent_id)
    if executor_id is not None:
        status["executor_id"] = wrap(executor_id)
    if with_uuid:
        status["uuid"] = new_uuid()
    return status


def event(kind: str, payload: Json | None = None) -> Json:
    """`{"type": KIND, "kind": payload}`; HEARTBEAT and SHUTDOWN carry no payload."""
    out: Json = {"type": kind}
    if payload is not None:
        out[kind.lower()] = payload
    return out


def valid_id(value: str) -> str | None:
    """Why `value` is not a valid Mesos id (it becomes a directory name), or None."""
    if not value:
        return "ID must not be empty"
    if value in (".", ".."):
        return "'.' and '..' are disallowed as IDs"
    if "/" in value or "\\" in value:
        return "'/' is disallowed in IDs"
    if any(ch.isspace() or not ch.isprintable() for ch in value):
        return "ID must only contain printable, non-whitespace characters"
    return None


def duration_s(message: Any, default_s: float) -> float:
    """Seconds of a v1 DurationInfo `{"nanoseconds": n}`, or the default."""
    if isinstance(message, dict) and isinstance(message.get("nanoseconds"), int | float):
        return max(0.0, float(message["nanoseconds"]) / 1e9)
    return default_s


def format_duration(seconds: float) -> str:
    """A Mesos Duration string pymesos's parse_duration accepts, e.g. `5secs`."""
    return f"{seconds:g}secs"


def has_capability(framework_info: Mapping[str, Any], capability: str) -> bool:
    return any(
        isinstance(c, dict) and c.get("type") == capability
        for c in framework_info.get("capabilities") or []
    )


def framework_role(framework_info: Mapping[str, Any]) -> str:
    """The role offers are allocated to: `role`, else the first of `roles`, else `*`."""
    role = framework_info.get("role")
    if isinstance(role, str) and role:
        return role
    roles = framework_info.get("roles")
    if isinstance(roles, list) and roles and isinstance(roles[0], str):
        return roles[0]
    return "*"

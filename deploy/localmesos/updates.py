"""The agent's status update manager: one stream of updates per task, one in flight.

Only the head of a task's stream goes to the master; it is resent after 10 s, doubling up to
10 min, until the scheduler acknowledges its uuid, and at once when the framework re-subscribes,
as the Mesos agent's status update manager does. A terminal update that is acknowledged closes
the stream. Everything here runs under the state lock.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from .clock import Clock, Timer
from .protocol import TERMINAL_STATES, Json, id_value

log = logging.getLogger(__name__)

_RETRY_MIN_S = 10.0
_RETRY_MAX_S = 600.0

Forward = Callable[[str, Json], None]  # (framework_id, status) -> sends it to the master


@dataclass(slots=True)
class _TaskStream:
    pending: deque[Json] = field(default_factory=deque)
    terminal_received: bool = False
    retry_s: float = _RETRY_MIN_S
    timer: Timer | None = None


class StatusUpdateManager:
    """Per-task update streams for one agent."""

    def __init__(self, clock: Clock, forward: Forward, lock: AbstractContextManager[Any]) -> None:
        self._clock = clock
        self._forward = forward
        self._lock = lock  # the state lock, taken by retries on the clock thread
        self._streams: dict[tuple[str, str], _TaskStream] = {}

    def add(self, framework_id: str, status: Json) -> bool:
        """Queue an update (it must carry a uuid); False if dropped after a terminal one."""
        task_id = id_value(status, "task_id") or ""
        stream = self._streams.setdefault((framework_id, task_id), _TaskStream())
        if stream.terminal_received:
            log.warning(
                "task %s of framework %s: dropping %s after a terminal update",
                task_id,
                framework_id,
                status.get("state"),
            )
            return False
        stream.terminal_received = status.get("state") in TERMINAL_STATES
        stream.pending.append(status)
        if len(stream.pending) == 1:
            self._send_head(framework_id, task_id, stream)
        return True

    def acknowledge(self, framework_id: str, task_id: str, uuid_b64: str) -> Json | None:
        """Pop the head if `uuid_b64` is its uuid and return it; a mismatch is ignored."""
        key = (framework_id, task_id)
        stream = self._streams.get(key)
        if stream is None or not stream.pending:
            return None
        head = stream.pending[0]
        if head.get("uuid") != uuid_b64:
            log.info("task %s: ignoring acknowledgement of an unknown uuid", task_id)
            return None
        stream.pending.popleft()
        if stream.timer is not None:
            stream.timer.cancel()
            stream.timer = None
        stream.retry_s = _RETRY_MIN_S
        if head.get("state") in TERMINAL_STATES:
            del self._streams[key]
        elif stream.pending:
            self._send_head(framework_id, task_id, stream)
        return head

    def resend(self, framework_id: str) -> None:
        """Send every pending head of `framework_id` again now (it re-subscribed)."""
        for (fid, task_id), stream in list(self._streams.items()):
            if fid == framework_id and stream.pending:
                stream.retry_s = _RETRY_MIN_S
                self._send_head(fid, task_id, stream)

    def pending_count(self, framework_id: str, task_id: str) -> int:
        stream = self._streams.get((framework_id, task_id))
        return len(stream.pending) if stream else 0

    def drop_framework(self, framework_id: str) -> None:
        for key in [k for k in self._streams if k[0] == framework_id]:
            timer = self._streams.pop(key).timer
            if timer is not None:
                timer.cancel()

    def drop_all(self) -> None:
        for stream in self._streams.values():
            if stream.timer is not None:
                stream.timer.cancel()
        self._streams.clear()

    def _send_head(self, framework_id: str, task_id: str, stream: _TaskStream) -> None:
        if stream.timer is not None:
            stream.timer.cancel()
        head = stream.pending[0]
        self._forward(framework_id, head)
        stream.timer = self._clock.call_later(
            stream.retry_s, lambda: self._retry(framework_id, task_id, head)
        )

    def _retry(self, framework_id: str, task_id: str, head: Json) -> None:
        with self._lock:
            stream = self._streams.get((framework_id, task_id))
            if stream is None or not stream.pending or stream.pending[0] is not head:
                return
            stream.retry_s = min(stream.retry_s * 2, _RETRY_MAX_S)
            log.info("task %s: resending unacknowledged %s", task_id, head.get("state"))
            self._send_head(framework_id, task_id, stream)

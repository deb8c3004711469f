"""What the REST API asks of the scheduling pipeline, beyond writing configuration and state.

Scheduling itself (schedule, reschedule, unschedule, kill on disable or delete) follows the
configuration in ZooKeeper through the config listener, so a change takes effect exactly once
whether it came through this API or straight into ZooKeeper. What is left are requests that
need Mesos: reconciliation, stopping an app's executors, and finding sandboxes.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Protocol


class SchedulingActions(Protocol):
    def reconcile(self, explicit: bool) -> None:
        """Ask Mesos for task states (explicit: the tasks we track; implicit: all)."""

    def stop_app_executors(self, app_name: str) -> None:
        """Send `STOP` to every executor of the app (after the app was deleted)."""

    def sandboxes(self, app_name: str) -> list[dict[str, str]]:
        """`[{"hostname", "path"}]` of the app's executor sandboxes."""


@dataclass
class RecordedActions:
    """Records each request; stands in until a Mesos driver is attached to the term."""

    calls: list[tuple[str, str]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _record(self, name: str, arg: str) -> None:
        with self._lock:
            self.calls.append((name, arg))

    def reconcile(self, explicit: bool) -> None:
        self._record("reconcile", "explicit" if explicit else "implicit")

    def stop_app_executors(self, app_name: str) -> None:
        self._record("stop_app_executors", app_name)

    def sandboxes(self, app_name: str) -> list[dict[str, str]]:
        self._record("sandboxes", app_name)
        return []


class Throttle:
    """At most one action per `interval_s` (the original's 10 s reconcile throttle)."""

    def __init__(self, interval_s: float) -> None:
        self._interval_s = interval_s
        self._last = -1e18
        self._lock = threading.Lock()

    def try_acquire(self) -> float:
        """0.0 when allowed now, else the seconds to wait."""
        with self._lock:
            now = time.monotonic()
            wait = self._last + self._interval_s - now
            if wait > 0:
                return wait
            self._last = now
            return 0.0

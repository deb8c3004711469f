"""What the REST API asks of the leader beyond configuration and state, and its Mesos side.

Scheduling itself (schedule, reschedule, unschedule, kill on disable or delete) follows the
configuration in ZooKeeper through the config listener, so a change takes effect exactly once
whether it came through the API or straight into ZooKeeper. What is left are requests that need
Mesos: reconciliation, stopping an app's executors, finding sandboxes and killing tasks
(`SchedulingActions`).
`MesosActions` does them through the term's driver; `RecordedActions` only records them, for an
API that runs without a Mesos driver.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from scheduler.leader.mesos.driver import MesosDriver
from scheduler.leader.mesos.reconcile import Reconciler
from scheduler.model.errors import SchedulerError
from scheduler.model.task_id import DELIMITER

log = logging.getLogger(__name__)


class SchedulingActions(Protocol):
    def reconcile(self, explicit: bool) -> None:
        """Ask Mesos for task states (explicit: the tasks we track; implicit: all)."""

    def stop_app_executors(self, app_name: str) -> None:
        """Send `STOP` to every executor of the app (after the app was deleted)."""

    def sandboxes(self, app_name: str) -> list[dict[str, str]]:
        """`[{"hostname", "path"}]` of the app's executor sandboxes."""

    def can_kill(self) -> bool:
        """Whether a kill can be sent now (connected to Mesos)."""
        ...

    def kill_task(self, task_id: str) -> None:
        """Ask Mesos to kill a task (SIGTERM, then SIGKILL after the task's kill grace);
        MesosUnavailable when it cannot be sent."""


class MesosUnavailable(SchedulerError):
    http_status = 503


class MesosActions:
    """`SchedulingActions` through the term's Mesos driver (any API thread)."""

    def __init__(
        self,
        driver: MesosDriver,
        reconciler: Reconciler,
        framework_id: Callable[[], str | None],
    ) -> None:
        self._driver = driver
        self._reconciler = reconciler
        self._framework_id = framework_id

    def reconcile(self, explicit: bool) -> None:
        if not self._driver.connected.is_set():
            raise MesosUnavailable("not connected to Mesos; reconciliation runs on reconnect")
        self._reconciler.reconcile(explicit)

    def _executors(self, app_name: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        try:
            state = self._driver.master_state()
        except (OSError, ValueError) as exc:
            raise MesosUnavailable(f"cannot read the Mesos master state: {exc}") from exc
        framework_id = self._framework_id()
        agents = {a.get("id"): a for a in state.get("slaves", [])}
        found = []
        for framework in state.get("frameworks", []):
            if framework.get("id") != framework_id:
                continue
            for ex in framework.get("executors", []):
                ex_id = str(ex.get("executor_id") or ex.get("id") or "")
                if ex_id.startswith(f"{app_name}{DELIMITER}"):
                    found.append((ex, agents.get(ex.get("slave_id"), {})))
        return found

    def stop_app_executors(self, app_name: str) -> None:
        try:
            executors = self._executors(app_name)
        except MesosUnavailable as exc:
            log.warning("actions: executors of %s not stopped: %s", app_name, exc.message)
            return
        for ex, _agent in executors:
            ex_id = str(ex.get("executor_id") or ex.get("id"))
            self._driver.send_message(ex_id, str(ex.get("slave_id")), b"STOP")
            log.info("actions: STOP sent to executor %s", ex_id)

    def can_kill(self) -> bool:
        return self._driver.connected.is_set()

    def kill_task(self, task_id: str) -> None:
        if not self._driver.connected.is_set() or not self._driver.kill(task_id):
            raise MesosUnavailable(f"not connected to Mesos; the kill of {task_id} was not sent")
        log.info("actions: kill of %s sent", task_id)

    def sandboxes(self, app_name: str) -> list[dict[str, str]]:
        out = []
        for ex, agent in self._executors(app_name):
            out.append(
                {"hostname": str(agent.get("hostname", "")), "path": str(ex.get("directory", ""))}
            )
        return out


@dataclass
class RecordedActions:
    """Records each request; stands in where no Mesos driver is attached to the term."""

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

    def can_kill(self) -> bool:
        return True

    def kill_task(self, task_id: str) -> None:
        self._record("kill_task", task_id)


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

"""`SchedulingActions` on Mesos: reconcile, STOP an app's executors, find sandboxes."""

from __future__ import annotations

import logging
from typing import Any

from scheduler.errors import SchedulerError
from scheduler.mesos.driver import MesosDriver
from scheduler.mesos.reconcile import Reconciler
from scheduler.state.task_id import DELIMITER

log = logging.getLogger(__name__)


class MesosUnavailable(SchedulerError):
    http_status = 503


class MesosActions:
    def __init__(self, driver: MesosDriver, reconciler: Reconciler, framework_id: Any) -> None:
        self._driver = driver
        self._reconciler = reconciler
        self._framework_id = framework_id  # Callable[[], str | None]

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

    def sandboxes(self, app_name: str) -> list[dict[str, str]]:
        out = []
        for ex, agent in self._executors(app_name):
            out.append(
                {"hostname": str(agent.get("hostname", "")), "path": str(ex.get("directory", ""))}
            )
        return out

"""The pymesos edge: `MesosExecutor` (driver callbacks) and `DriverReporter` (status updates).

pymesos is untyped; its `Any` stays in this module. Callbacks run on pymesos's IO thread and
only hand work to `TaskSupervisor` — except `shutdown`, see there.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from pymesos import Executor

from .records import ExecutionRecord, encode_status_data
from .supervisor import TaskSupervisor

log = logging.getLogger(__name__)

__all__ = ["DriverReporter", "MesosExecutor", "status_update"]

_SEND_ATTEMPTS = 3
_SEND_RETRY_S = 0.5
_SHUTDOWN_MARGIN_S = 1.0


def status_update(
    task_id: str, state: str, message: str = "", record: ExecutionRecord | None = None
) -> dict[str, Any]:
    """A TaskStatus dict for pymesos (which fills in uuid, timestamp and source)."""
    status: dict[str, Any] = {"task_id": {"value": task_id}, "state": state}
    if message:
        status["message"] = message
    if record is not None:
        status["data"] = encode_status_data(record)
    return status


class DriverReporter:
    """Sends status updates through a `MesosExecutorDriver`; never raises."""

    def __init__(self) -> None:
        self._driver: Any = None
        self._stopped = threading.Event()

    def attach(self, driver: Any) -> None:
        self._driver = driver

    def close(self) -> None:
        """No more retries (the driver is going away)."""
        self._stopped.set()

    def report(
        self,
        task_id: str,
        state: str,
        message: str = "",
        record: ExecutionRecord | None = None,
    ) -> None:
        status = status_update(task_id, state, message, record)
        for attempt in range(1, _SEND_ATTEMPTS + 1):
            try:
                # pymesos adds uuid/timestamp/source to the dict it is given: a fresh copy per
                # attempt, so a retry is a new update rather than a duplicate uuid.
                self._driver.sendStatusUpdate(dict(status))
                return
            except Exception as exc:  # noqa: BLE001 - pymesos raises bare RuntimeError/OSError
                if attempt == _SEND_ATTEMPTS or self._stopped.wait(_SEND_RETRY_S * attempt):
                    log.error("task %s: could not send %s: %s", task_id, state, exc)
                    return
                log.warning("task %s: sending %s failed (%s), retrying", task_id, state, exc)


class MesosExecutor(Executor):  # type: ignore[misc]  # pymesos is untyped
    """The pymesos `Executor` callbacks of the app executor."""

    def __init__(self, supervisor: TaskSupervisor) -> None:
        self._supervisor = supervisor
        self._shutdown_once = threading.Lock()
        self._shut_down = False

    def registered(
        self, driver: Any, executor_info: Any, framework_info: Any, agent_info: Any
    ) -> None:
        hostname = agent_info.get("hostname", "") if isinstance(agent_info, dict) else ""
        log.info(
            "executor %s: registered with agent %s (%s)",
            (executor_info.get("executor_id") or {}).get("value"),
            (agent_info.get("id") or {}).get("value"),
            hostname,
        )
        self._supervisor.registered(hostname)

    def reregistered(self, driver: Any, agent_info: Any) -> None:
        log.info("executor: re-registered with the agent")

    def disconnected(self, driver: Any) -> None:
        log.warning("executor: disconnected from the agent")

    def launchTask(self, driver: Any, task: Any) -> None:  # pymesos API name
        self._supervisor.launch(task)

    def launchTaskGroup(self, driver: Any, tasks: Any) -> None:  # pymesos API name
        for task in tasks:
            self._supervisor.launch(task)

    def killTask(self, driver: Any, task_id: Any) -> None:  # pymesos API name
        self._supervisor.kill(str(task_id["value"]))

    def frameworkMessage(self, driver: Any, message: Any) -> None:  # pymesos API name
        self._supervisor.message(str(message))

    def error(self, driver: Any, message: Any) -> None:
        log.error("executor: error from the agent: %s", message)

    def shutdown(self, driver: Any) -> None:
        """Stop every task before returning: the one callback that blocks, on purpose.

        pymesos aborts the driver as soon as this returns (no more updates can be sent), and
        unless MESOS_LOCAL is set it SIGKILLs this process group after the agent's shutdown
        grace period; task workers live in their own sessions and would be orphaned.
        So the tasks are stopped here, within that grace period, and report TASK_KILLED.
        pymesos may call this twice (SHUTDOWN, then the stream closing); the second is a no-op.
        """
        with self._shutdown_once:
            if self._shut_down:
                return
            self._shut_down = True
        grace_s = float(getattr(driver, "grace_shutdown_period", 0.0) or 0.0)
        budget_s = max(0.5, grace_s - _SHUTDOWN_MARGIN_S) if grace_s else 0.5
        log.info("executor: shutdown requested, stopping tasks within %.1fs", budget_s)
        started = time.monotonic()
        if not self._supervisor.stop_tasks(budget_s, "the agent shut the executor down"):
            log.error("executor: tasks still running %.1fs into shutdown", budget_s)
        log.info("executor: tasks stopped in %.2fs", time.monotonic() - started)
        self._supervisor.request_exit()

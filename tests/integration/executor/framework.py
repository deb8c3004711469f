"""A small pymesos test framework (a real `MesosSchedulerDriver`) over the local Mesos stand-in.

Tests queue tasks with `launch()`; the next offer launches everything queued, each task with
its app's ExecutorInfo (`executor.taskdata.executor_info`: executor id `{app}@-@{agentId}`,
the app archive as URI, `bin/start.sh` as command). Updates are kept for assertions; pymesos
acknowledges them.
"""

from __future__ import annotations

import base64
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pymesos import MesosSchedulerDriver, Scheduler

from executor.records import ExecutionRecord, decode_status_data
from executor.taskdata import TaskData, executor_id, executor_info
from tests.support.waiting import wait_for

TERMINAL = {
    "TASK_FINISHED",
    "TASK_FAILED",
    "TASK_KILLED",
    "TASK_ERROR",
    "TASK_LOST",
    "TASK_DROPPED",
    "TASK_GONE",
}
_REFUSE_S = 3600.0  # until the next revive: offers come only when tasks wait


@dataclass(frozen=True)
class App:
    """An app as the scheduler registers it: an archive (appURL) and its bootstrap script."""

    name: str
    archive: Path
    bootstrap_script: str = "bin/start.sh"
    environment: dict[str, str] = field(default_factory=dict)

    def executor_info(self, agent_id: str) -> dict[str, Any]:
        info = executor_info(
            app_name=self.name,
            agent_id=agent_id,
            app_url=self.archive.as_uri(),
            bootstrap_script=self.bootstrap_script,
            cpus=0.1,
            mem_mb=64,
            cache=False,
        )
        info["command"]["environment"] = {
            "variables": [{"name": k, "value": v} for k, v in sorted(self.environment.items())]
        }
        return info


@dataclass(frozen=True)
class Status:
    task_id: str
    state: str
    message: str
    reason: str
    source: str
    record: ExecutionRecord | None
    received_s: float  # time.perf_counter() when the update arrived


class TestFramework(Scheduler):  # type: ignore[misc]  # pymesos is untyped
    """Launches queued tasks on offers and records what comes back."""

    __test__ = False  # not a pytest class

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[tuple[App, dict[str, Any]]] = []
        self._statuses: list[Status] = []
        self._lost: list[tuple[str, int]] = []
        self.agent_ids: set[str] = set()
        self.driver: Any = None

    # -- pymesos callbacks (IO thread) ---------------------------------------------------------

    def resourceOffers(self, driver: Any, offers: list[dict[str, Any]]) -> None:  # pymesos API
        for offer in offers:
            agent_id = offer["agent_id"]["value"]
            # Decide and answer under the lock: a `launch()` + revive can't fall in between, so
            # no queued task is left behind a fresh decline filter.
            with self._lock:
                self.agent_ids.add(agent_id)
                batch, self._pending = self._pending, []
                if not batch:
                    driver.declineOffer([offer["id"]], {"refuse_seconds": _REFUSE_S})
                    continue
                tasks = [
                    {
                        **template,
                        "agent_id": offer["agent_id"],
                        "executor": app.executor_info(agent_id),
                    }
                    for app, template in batch
                ]
                driver.launchTasks([offer["id"]], tasks, {"refuse_seconds": _REFUSE_S})

    def statusUpdate(self, driver: Any, status: dict[str, Any]) -> None:  # pymesos API
        try:
            record = decode_status_data(status.get("data"))
        except ValueError:
            record = None
        with self._lock:
            self._statuses.append(
                Status(
                    task_id=status["task_id"]["value"],
                    state=status["state"],
                    message=status.get("message", ""),
                    reason=status.get("reason", ""),
                    source=status.get("source", ""),
                    record=record,
                    received_s=time.perf_counter(),
                )
            )

    def executorLost(  # pymesos API
        self, driver: Any, executor_id: dict[str, str], agent_id: dict[str, str], status: int
    ) -> None:
        with self._lock:
            self._lost.append((executor_id["value"], status))

    # -- for tests -----------------------------------------------------------------------------

    def launch(self, app: App, data: TaskData | str, task_id: str | None = None) -> str:
        """Queue a task (data: TaskData, or raw TaskInfo.data text); returns its id."""
        if isinstance(data, TaskData):
            task_id = task_id or data.sharding.task_id
            raw = data.encode()
        else:
            task_id = task_id or f"raw@-@0@-@READY@-@S@-@{uuid.uuid4()}"
            raw = data
        template = {
            "name": task_id,
            "task_id": {"value": task_id},
            "resources": [
                {"name": "cpus", "type": "SCALAR", "scalar": {"value": 0.1}},
                {"name": "mem", "type": "SCALAR", "scalar": {"value": 32}},
            ],
            "data": raw,
        }
        with self._lock:
            self._pending.append((app, template))
            self.driver.reviveOffers()
        return task_id

    def kill(self, task_id: str) -> None:
        self.driver.killTask({"value": task_id})

    def send_message(self, app: App, agent_id: str, text: str) -> None:
        data = base64.b64encode(text.encode()).decode()
        self.driver.sendFrameworkMessage(
            {"value": executor_id(app.name, agent_id)}, {"value": agent_id}, data
        )

    def shutdown_executor(self, app: App, agent_id: str) -> None:
        """The scheduler API's SHUTDOWN call (pymesos has no method for it)."""
        self.driver._send(
            {
                "type": "SHUTDOWN",
                "framework_id": {"value": self.driver.framework_id},
                "shutdown": {
                    "executor_id": {"value": executor_id(app.name, agent_id)},
                    "agent_id": {"value": agent_id},
                },
            }
        )

    def statuses(self, task_id: str) -> list[Status]:
        with self._lock:
            return [s for s in self._statuses if s.task_id == task_id]

    def states(self, task_id: str) -> list[str]:
        return [s.state for s in self.statuses(task_id)]

    def lost_executors(self) -> list[tuple[str, int]]:
        with self._lock:
            return list(self._lost)

    def wait_state(self, task_id: str, state: str, timeout_s: float = 30.0) -> Status:
        return wait_for(
            lambda: next((s for s in self.statuses(task_id) if s.state == state), None),
            timeout_s,
            message=f"{state} of {task_id} (got {self.states(task_id)})",
        )

    def wait_terminal(self, task_id: str, timeout_s: float = 30.0) -> Status:
        return wait_for(
            lambda: next((s for s in self.statuses(task_id) if s.state in TERMINAL), None),
            timeout_s,
            message=f"a terminal state of {task_id} (got {self.states(task_id)})",
        )

    def with_message(self, task_id: str, message: str) -> list[Status]:
        return [s for s in self.statuses(task_id) if s.message == message]


def start_driver(framework: TestFramework, master: str) -> Any:
    driver = MesosSchedulerDriver(
        framework, {"user": "", "name": "executor-tests", "hostname": "localhost"}, master
    )
    framework.driver = driver
    driver.start()
    wait_for(lambda: driver.connected and driver.framework_id, 15.0, message="subscription")
    return driver

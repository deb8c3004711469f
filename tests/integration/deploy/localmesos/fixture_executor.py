"""A real pymesos executor the stand-in runs as a process (standalone: no project imports).

Each task's `data` is base64 JSON telling it what to do:
    {"mode": "finish"}                   RUNNING, then FINISHED
    {"mode": "noop"}                     FINISHED at once (benchmark)
    {"mode": "fail"}                     RUNNING, then FAILED
    {"mode": "run", "finish_file": P}    RUNNING, then FINISHED once file P exists, or KILLED
    {"mode": "exit", "code": N}          RUNNING, then the whole executor exits with N
A framework message is echoed back prefixed with `echo:`.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import threading
from typing import Any

from pymesos import Executor, MesosExecutorDriver, decode_data, encode_data


class FixtureExecutor(Executor):  # type: ignore[misc]
    def __init__(self) -> None:
        self._kills: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def launchTask(self, driver: Any, task: dict[str, Any]) -> None:
        spec = json.loads(base64.b64decode(task.get("data") or "e30=").decode() or "{}")
        task_id = task["task_id"]["value"]
        killed = threading.Event()
        with self._lock:
            self._kills[task_id] = killed
        mode = spec.get("mode", "finish")
        if mode == "noop":
            _update(driver, task_id, "TASK_FINISHED")
            return
        _update(driver, task_id, "TASK_RUNNING")
        if mode == "finish":
            _update(driver, task_id, "TASK_FINISHED")
        elif mode == "fail":
            _update(driver, task_id, "TASK_FAILED", "fixture failure")
        elif mode == "exit":
            sys.stdout.flush()
            os._exit(int(spec.get("code", 3)))
        elif mode == "run":
            threading.Thread(
                target=self._run,
                args=(driver, task_id, spec.get("finish_file"), killed),
                name=f"fixture-task-{task_id}",
                daemon=True,
            ).start()

    def launchTaskGroup(self, driver: Any, tasks: list[dict[str, Any]]) -> None:
        for task in tasks:
            self.launchTask(driver, task)

    def _run(
        self, driver: Any, task_id: str, finish_file: str | None, killed: threading.Event
    ) -> None:
        while not killed.wait(0.05):
            if finish_file and os.path.exists(finish_file):
                _update(driver, task_id, "TASK_FINISHED", "finish file appeared")
                return
        _update(driver, task_id, "TASK_KILLED", "killed by the scheduler")

    def killTask(self, driver: Any, task_id: dict[str, str]) -> None:
        with self._lock:
            killed = self._kills.get(task_id["value"])
        if killed is None:
            _update(driver, task_id["value"], "TASK_LOST", "unknown task")
        else:
            killed.set()

    def frameworkMessage(self, driver: Any, message: str) -> None:
        driver.sendFrameworkMessage(encode_data(b"echo:" + decode_data(message)))


def _update(driver: Any, task_id: str, state: str, message: str | None = None) -> None:
    status: dict[str, Any] = {"task_id": {"value": task_id}, "state": state}
    if message:
        status["message"] = message
    driver.sendStatusUpdate(status)


def main() -> int:
    with open("executor.pid", "w") as pid_file:  # the cwd is the sandbox
        pid_file.write(str(os.getpid()))
    driver = MesosExecutorDriver(FixtureExecutor())
    driver.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())

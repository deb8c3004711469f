"""`TaskSupervisor`: the app's executor on one agent — it owns every task runner of the app.

pymesos callbacks only put work on a queue (`launch`, `kill`, `message`, `registered`); the
`exec-control` thread takes it from there: decoding task data (bad data is TASK_ERROR for that
task only; the executor keeps serving the others), starting runners, passing on kills, and the
framework message `STOP` (stop every task, report TASK_KILLED, then ask the process to exit).
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import queue
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .taskdata import TaskData, TaskDataError
from .tasks import RunEnvironment, StatusReporter, TaskRunner, new_runner

log = logging.getLogger(__name__)

__all__ = ["STOP_MESSAGE", "ExecutorSettings", "TaskSupervisor", "worker_environment"]

STOP_MESSAGE = "STOP"
DEFAULT_KILL_GRACE_S = 3.0
_FINISHED_IDS_KEPT = 1000


@dataclass(frozen=True)
class ExecutorSettings:
    app_dir: Path
    python: str = sys.executable
    kill_grace_s: float = DEFAULT_KILL_GRACE_S
    # Where each task's output files go (MESOS_SANDBOX or MESOS_DIRECTORY); None outside Mesos.
    sandbox: Path | None = None

    @classmethod
    def from_environment(
        cls,
        environ: Mapping[str, str],
        *,
        app_dir: str | None = None,
        kill_grace_s: float | None = None,
    ) -> ExecutorSettings:
        """App dir: the option, else EJC_APP_DIR, MESOS_SANDBOX, MESOS_DIRECTORY, the cwd.

        Sandbox (for the tasks' output files): MESOS_SANDBOX, else MESOS_DIRECTORY, else none.
        Kill grace: the option, else EJC_KILL_GRACE_SECONDS, else 3 s. Raises ValueError.
        """
        directory = (
            app_dir
            or environ.get("EJC_APP_DIR")
            or environ.get("MESOS_SANDBOX")
            or environ.get("MESOS_DIRECTORY")
            or os.getcwd()
        )
        path = Path(directory).resolve()
        if not path.is_dir():
            raise ValueError(f"app directory {path} does not exist")
        if kill_grace_s is None:
            text = environ.get("EJC_KILL_GRACE_SECONDS", "")
            try:
                kill_grace_s = float(text) if text else DEFAULT_KILL_GRACE_S
            except ValueError as exc:
                raise ValueError(f"EJC_KILL_GRACE_SECONDS: not a number: {text!r}") from exc
        if kill_grace_s < 0:
            raise ValueError("the kill grace period must be >= 0 seconds")
        sandbox_dir = environ.get("MESOS_SANDBOX") or environ.get("MESOS_DIRECTORY")
        sandbox = Path(sandbox_dir).resolve() if sandbox_dir else None
        if sandbox is not None and not sandbox.is_dir():
            sandbox = None  # the tasks' output then goes to the executor's own files
        return cls(app_dir=path, kill_grace_s=kill_grace_s, sandbox=sandbox)


def worker_environment(environ: Mapping[str, str], app_dir: Path) -> dict[str, str]:
    """The environment of worker processes: the executor's, plus EJC_APP_DIR."""
    env = dict(environ)
    env["EJC_APP_DIR"] = str(app_dir)
    env["PYTHONUNBUFFERED"] = "1"  # job output reaches the sandbox files as it is printed
    return env


def local_ip(environ: Mapping[str, str]) -> str:
    """This agent's address: LIBPROCESS_IP, else the agent endpoint's host, else the resolver's."""
    if environ.get("LIBPROCESS_IP"):
        return environ["LIBPROCESS_IP"]
    endpoint = environ.get("MESOS_AGENT_ENDPOINT", "")
    host = endpoint.rpartition(":")[0]
    if host:
        return host
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return ""


class TaskSupervisor:
    """Runs the tasks Mesos gives this executor. Thread-safe entry points; see module doc."""

    def __init__(
        self,
        settings: ExecutorSettings,
        reporter: StatusReporter,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        env = dict(os.environ if environ is None else environ)
        self.settings = settings
        self._reporter = reporter
        self._worker_env = worker_environment(env, settings.app_dir)
        self._hostname = socket.gethostname()
        self._ip = local_ip(env)
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._runners: dict[str, TaskRunner] = {}
        self._finished: deque[str] = deque(maxlen=_FINISHED_IDS_KEPT)
        self._lock = threading.Lock()
        self._closing = False
        self._thread = threading.Thread(target=self._control_loop, name="exec-control")
        self.exit_requested = threading.Event()

    # -- entry points (pymesos callbacks, signal-free threads); none of them blocks -------------

    def start(self) -> None:
        self._thread.start()

    def registered(self, hostname: str) -> None:
        self._queue.put(("registered", hostname))

    def launch(self, task: Mapping[str, Any]) -> None:
        self._queue.put(("launch", task))

    def kill(self, task_id: str) -> None:
        self._queue.put(("kill", task_id))

    def message(self, data: str) -> None:
        """A framework message as pymesos delivers it (base64 text)."""
        self._queue.put(("message", data))

    def request_exit(self) -> None:
        self.exit_requested.set()

    # -- blocking ------------------------------------------------------------------------------

    def stop_tasks(self, timeout_s: float, reason: str = "the executor is stopping") -> bool:
        """Kill every task and wait for them (TASK_KILLED is sent for each); refuse new ones.

        Blocks up to `timeout_s`; False if a task did not stop in time.
        """
        with self._lock:
            self._closing = True
            runners = [r for r in self._runners.values() if not r.done.is_set()]
        if runners:
            log.info("executor: stopping %d task(s)", len(runners))
        # Leave half the time for the SIGKILL and the reaping after the grace period.
        for runner in runners:
            runner.request_kill(grace_s=timeout_s / 2, reason=reason)
        deadline = time.monotonic() + timeout_s
        stopped = True
        for runner in runners:
            if not runner.join(max(0.0, deadline - time.monotonic())):
                stopped = False
        return stopped

    def stop(self, timeout_s: float) -> bool:
        """Stop every task, then the control thread. Blocks up to about `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        stopped = self.stop_tasks(timeout_s)
        self._queue.put(("quit", None))
        if self._thread.ident is not None:
            self._thread.join(max(0.1, deadline - time.monotonic()))
            if self._thread.is_alive():
                log.error("executor: thread %s still alive at stop", self._thread.name)
                stopped = False
        return stopped

    def running_task_ids(self) -> list[str]:
        with self._lock:
            return [task_id for task_id, r in self._runners.items() if not r.done.is_set()]

    # -- the control thread --------------------------------------------------------------------

    def _control_loop(self) -> None:
        while True:
            kind, arg = self._queue.get()
            if kind == "quit":
                return
            try:
                self._handle(kind, arg)
            except Exception:  # thread top: one bad item must not stop the rest
                log.exception("executor: failed to handle %s", kind)
            self._forget_finished()

    def _handle(self, kind: str, arg: Any) -> None:
        if kind == "registered":
            if arg:
                self._hostname = str(arg)
        elif kind == "launch":
            self._launch(arg)
        elif kind == "kill":
            self._kill(arg)
        elif kind == "message":
            self._message(arg)

    def _launch(self, task: Mapping[str, Any]) -> None:
        task_id = str(task["task_id"]["value"])
        raw = task.get("data") or ""
        try:
            data = TaskData.decode(raw)
        except TaskDataError as exc:
            log.error("task %s: %s", task_id, exc)
            self._reporter.report(task_id, "TASK_ERROR", str(exc))
            return
        with self._lock:
            if self._closing:
                closing = True
            else:
                closing = False
                existing = self._runners.get(task_id)
                if existing is not None and not existing.done.is_set():
                    log.error("task %s: launched again while running; ignored", task_id)
                    return
                runner = new_runner(
                    task_id,
                    raw,
                    data,
                    RunEnvironment(
                        app_dir=self.settings.app_dir,
                        python=self.settings.python,
                        worker_env=self._worker_env,
                        hostname=self._hostname,
                        ip=self._ip,
                        sandbox=self.settings.sandbox,
                    ),
                    self._reporter,
                    _kill_grace_s(task, self.settings.kill_grace_s),
                )
                self._runners[task_id] = runner
        if closing:
            self._reporter.report(task_id, "TASK_KILLED", "the executor is shutting down")
            return
        log.info(
            "task %s: launching %s %s job %s (item %d of %d)",
            task_id,
            data.execution_type,
            data.job.job_type,
            data.job.job_name,
            data.sharding.sharding_item,
            data.sharding.sharding_total_count,
        )
        runner.start()

    def _kill(self, task_id: str) -> None:
        with self._lock:
            runner = self._runners.get(task_id)
        if runner is not None:
            runner.request_kill()
        elif task_id in self._finished:
            log.info("task %s: kill ignored, the task has already ended", task_id)
        else:
            log.warning("task %s: kill for a task this executor does not run", task_id)
            self._reporter.report(task_id, "TASK_KILLED", "not running on this executor")

    def _message(self, data: str) -> None:
        try:
            text = base64.b64decode(data, validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            log.warning("executor: undecodable framework message ignored")
            return
        if text.strip() == STOP_MESSAGE:
            log.info("executor: STOP received, stopping every task and exiting")
            self.stop_tasks(max(30.0, self.settings.kill_grace_s + 15.0), "the scheduler sent STOP")
            self.request_exit()
        else:
            log.warning("executor: unknown framework message %r ignored", text[:100])

    def _forget_finished(self) -> None:
        with self._lock:
            done = [task_id for task_id, r in self._runners.items() if r.done.is_set()]
            for task_id in done:
                runner = self._runners.pop(task_id)
                runner.join(1.0)
                self._finished.append(task_id)


def _kill_grace_s(task: Mapping[str, Any], default_s: float) -> float:
    """TaskInfo.kill_policy.grace_period if the scheduler set one, else the default."""
    policy = task.get("kill_policy") or {}
    nanos = (
        (policy.get("grace_period") or {}).get("nanoseconds") if isinstance(policy, dict) else None
    )
    if isinstance(nanos, int | float) and not isinstance(nanos, bool) and nanos >= 0:
        return float(nanos) / 1e9
    return default_s

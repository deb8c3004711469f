"""What the REST API asks of the leader beyond configuration and state, and its Mesos side.

Scheduling itself (schedule, reschedule, unschedule, kill on disable or delete) follows the
configuration in ZooKeeper through the config listener, so a change takes effect exactly once
whether it came through the API or straight into ZooKeeper. What is left are requests that need
Mesos: reconciliation, stopping an app's executors, finding sandboxes, reading a run's output
files from its agent and killing tasks (`OperatorActions`). Sandboxes are found as on real
Mesos (`sandbox.py`): the agent through the master, the directory in the agent's own `/state`.
`MesosActions` does them through the term's driver; `RecordedActions` only records them, for an
API that runs without a Mesos driver.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any, Protocol

from scheduler.leader.mesos.driver import MesosDriver
from scheduler.leader.mesos.reconcile import Reconciler
from scheduler.leader.mesos.sandbox import (
    FileChunk,
    SandboxNotFound,
    address_of,
    agent_state,
    executor_directories,
    get_agents,
    read_file,
    relative_to_work_dir,
    task_directory,
)
from scheduler.model.errors import SchedulerError
from scheduler.model.task_id import DELIMITER

log = logging.getLogger(__name__)

AGENTS_REREAD_S = 5.0
_DIRECTORIES_KEPT = 1000


class OperatorActions(Protocol):
    def reconcile(self, explicit: bool) -> None:
        """Ask Mesos for task states (explicit: the tasks we track; implicit: all)."""

    def stop_app_executors(self, app_name: str) -> None:
        """Send `STOP` to every executor of the app (after the app was deleted)."""

    def sandboxes(self, app_name: str, job_names: Collection[str] = ()) -> list[dict[str, str]]:
        """`[{"hostname", "path", "executorId"}]`: the sandboxes of the app's executors and of
        the running command tasks of `job_names`, `path` below the agent's work directory."""
        ...

    def read_run_file(
        self, task_id: str, agent_id: str, path: str, offset: int, length: int
    ) -> FileChunk:
        """Bytes of the file `path` (relative to the sandbox of the executor that ran
        `task_id` on `agent_id`) from `offset`; `offset=-1`: its size. Raises
        MesosUnavailable, AgentUnreachable, SandboxNotFound."""
        ...

    def can_kill(self) -> bool:
        """Whether a kill can be sent now (connected to Mesos)."""
        ...

    def kill_task(self, task_id: str) -> None:
        """Ask Mesos to kill a task (SIGTERM, then SIGKILL after the task's kill grace);
        MesosUnavailable when it cannot be sent."""


class MesosUnavailable(SchedulerError):
    http_status = 503


class MesosActions:
    """`OperatorActions` through the term's Mesos driver (any API thread)."""

    def __init__(
        self,
        driver: MesosDriver,
        reconciler: Reconciler,
        framework_id: Callable[[], str | None],
    ) -> None:
        self._driver = driver
        self._reconciler = reconciler
        self._framework_id = framework_id
        self._lock = threading.Lock()
        # Agent id -> host:port, from the master's agent list (read again for an unknown id,
        # at most every AGENTS_REREAD_S).
        self._agents: dict[str, str] = {}
        self._agents_read_at = -1e18
        # Task id -> its sandbox directory (it never changes; the newest few are kept).
        self._directories: OrderedDict[str, str] = OrderedDict()

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

    def sandboxes(self, app_name: str, job_names: Collection[str] = ()) -> list[dict[str, str]]:
        try:
            state = self._driver.master_state()
        except (OSError, ValueError) as exc:
            raise MesosUnavailable(f"cannot read the Mesos master state: {exc}") from exc
        framework_id = self._framework_id() or ""
        jobs = set(job_names)
        wanted: dict[str, set[str]] = {}
        for framework in state.get("frameworks", []):
            if framework.get("id") != framework_id:
                continue
            for ex in framework.get("executors", []):
                ex_id = str(ex.get("executor_id") or "")
                if ex_id.startswith(f"{app_name}{DELIMITER}"):
                    wanted.setdefault(str(ex.get("slave_id", "")), set()).add(ex_id)
            for task in framework.get("tasks", []):
                task_id = str(task.get("id", ""))
                # A command task (no executor of ours): its executor has the task's id.
                if not task.get("executor_id") and task_id.split(DELIMITER, 1)[0] in jobs:
                    wanted.setdefault(str(task.get("slave_id", "")), set()).add(task_id)
        agents = {str(a.get("id")): a for a in state.get("slaves", [])}
        out: list[dict[str, str]] = []
        for agent_id, executor_ids in sorted(wanted.items()):
            agent = agents.get(agent_id)
            address = address_of(agent) if agent is not None else None
            if agent is None or address is None:
                continue  # the agent left the cluster
            agent_json = agent_state(address)
            found = executor_directories(agent_json, framework_id, executor_ids)
            for executor_id, directory in sorted(found.items()):
                out.append(
                    {
                        "hostname": str(agent.get("hostname", "")),
                        "path": relative_to_work_dir(directory, agent_json),
                        "executorId": executor_id,
                    }
                )
        return out

    def read_run_file(
        self, task_id: str, agent_id: str, path: str, offset: int, length: int
    ) -> FileChunk:
        address = self._agent_address(agent_id)
        with self._lock:
            directory = self._directories.get(task_id)
        if directory is None:
            directory = task_directory(agent_state(address), task_id)
            if directory is None:
                raise SandboxNotFound(
                    f"the Mesos agent {agent_id} ({address}) does not know task {task_id} "
                    "(its sandbox may have been removed)"
                )
            with self._lock:
                self._directories[task_id] = directory
                while len(self._directories) > _DIRECTORIES_KEPT:
                    self._directories.popitem(last=False)
        try:
            return read_file(address, f"{directory.rstrip('/')}/{path}", offset, length)
        except SandboxNotFound as exc:
            raise SandboxNotFound(
                f"task {task_id} has no {path} in its sandbox on agent {agent_id} (yet)"
            ) from exc

    def _agent_address(self, agent_id: str) -> str:
        with self._lock:
            known = self._agents.get(agent_id)
            stale = time.monotonic() - self._agents_read_at >= AGENTS_REREAD_S
        if known is not None:
            return known
        master = self._driver.master
        if master is None:
            raise MesosUnavailable("not connected to a Mesos master")
        if stale:
            try:
                agents = get_agents(master)
            except (OSError, ValueError) as exc:
                raise MesosUnavailable(f"cannot read the Mesos master's agents: {exc}") from exc
            with self._lock:
                self._agents = agents
                self._agents_read_at = time.monotonic()
            if agent_id in agents:
                return agents[agent_id]
        raise SandboxNotFound(
            f"agent {agent_id} is not registered with the Mesos master: its sandboxes are gone"
        )


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

    def sandboxes(self, app_name: str, job_names: Collection[str] = ()) -> list[dict[str, str]]:
        self._record("sandboxes", app_name)
        return []

    def read_run_file(
        self, task_id: str, agent_id: str, path: str, offset: int, length: int
    ) -> FileChunk:
        self._record("read_run_file", f"{task_id} {path} {offset} {length}")
        raise MesosUnavailable("no Mesos driver in this term: run output cannot be read")

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

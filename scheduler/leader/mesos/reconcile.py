"""Reconciliation: explicit (the tasks in ZooKeeper) then implicit, on every (re)subscription,
every `reconcile_interval_minutes`, and on request (REST operate endpoints); and at once,
explicit, for the tasks held on an agent Mesos says is lost.

Why the last: Mesos reports a removed agent's tasks LOST/GONE only to a framework connected at
that moment, and a task that ended on the agent while an earlier update of it was still
unacknowledged may never reach the leader as ended. Such a task would stay "running" here and,
under overlapPolicy FORBID, block its job until the next periodic reconciliation (10 minutes by
default). Explicit reconciliation of the agent's tasks gets an answer for each: its latest state,
or TASK_LOST/GONE/GONE_BY_OPERATOR/UNKNOWN for a task Mesos no longer knows, which the status
handler counts as ended (failover per the job's settings) (issue 24).

Explicit reconciliation is asked again until every task asked about was answered, 2 s after the
question and then with a doubling back-off up to a minute, as Mesos's reconciliation guide
says: a master that has just failed over answers nothing for a task whose agent has not
re-registered with it yet, and an answer can be lost with a connection. A task counts as
answered on any status update of it (`on_status`, a status handler listener), or once it is no
longer held as running.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Protocol

from scheduler.leader.lifecycle import ThreadedComponent
from scheduler.model.task_id import TaskId
from scheduler.storage.state import RunningTask
from scheduler.storage.term_stores import TermStores

log = logging.getLogger(__name__)

RETRY_FIRST_S = 2.0
RETRY_MAX_S = 60.0


class ReconcilingDriver(Protocol):
    """What reconciliation asks of the term's Mesos driver (`MesosDriver` is one)."""

    @property
    def connected(self) -> threading.Event:
        """Set while subscribed to a master."""
        ...

    def reconcile_tasks(self, tasks: list[tuple[str, str]]) -> bool:
        """Ask for the state of these (task id, agent id); of every task when empty."""
        ...


class Reconciler(ThreadedComponent):
    name = "reconcile"
    thread_name = "sched-reconcile"

    def __init__(
        self, stores: TermStores, driver: ReconcilingDriver, interval_minutes: float
    ) -> None:
        super().__init__()
        self._stores = stores
        self._driver = driver
        self._interval_s = interval_minutes * 60.0
        self.runs = 0
        self.retries = 0
        # Tasks asked about explicitly and not answered yet (task id -> agent id), and when to
        # ask again; guarded by `_lock` (status listeners run on `sched-mesos-events`).
        self._lock = threading.Lock()
        self._unanswered: dict[str, str] = {}
        # Tasks whose answer counts only from a time on (`ask_later`): task id -> that time.
        self._not_before: dict[str, float] = {}
        self._retry_s = RETRY_FIRST_S
        self._retry_at = 0.0
        self._wake = threading.Event()

    def reconcile(self, explicit: bool) -> None:
        """Ask Mesos for task states; updates arrive as status updates."""
        if explicit:
            tasks = [(t.task_id, t.agent_id) for t in self._stores.running.tasks()]
            if tasks:
                self._await_answers(tasks, replace=True)  # before: answers may come at once
                self._driver.reconcile_tasks(tasks)
            log.info("reconcile: explicit for %s tasks", len(tasks))
        else:
            self._driver.reconcile_tasks([])
            log.info("reconcile: implicit")
        self.runs += 1

    def reconcile_agent(self, agent_id: str) -> None:
        """Explicit reconciliation of the tasks held on `agent_id`, which Mesos said is lost.
        Called on `sched-mesos-events`; one ZooKeeper read, one call to Mesos."""
        tasks = [
            (t.task_id, t.agent_id) for t in self._stores.running.tasks() if t.agent_id == agent_id
        ]
        if tasks:
            self._await_answers(tasks, replace=False)
            self._driver.reconcile_tasks(tasks)
        log.warning("reconcile: agent %s lost; explicit for its %s tasks", agent_id, len(tasks))
        self.runs += 1

    def ask_later(self, tasks: list[RunningTask], after_s: float) -> None:
        """Explicit reconciliation of `tasks` in `after_s` (a launcher listener: their ACCEPT
        went unanswered, and they are taken as on their way until then), asked again until
        answered, as any explicit question. Never blocks."""
        at = time.monotonic() + after_s
        with self._lock:
            was_waiting = bool(self._unanswered)
            for task in tasks:
                self._unanswered[task.task_id] = task.agent_id
                self._not_before[task.task_id] = at
            if not was_waiting or at < self._retry_at:
                self._retry_s = RETRY_FIRST_S
                self._retry_at = at
        self._wake.set()

    def on_status(self, status: dict[str, Any], parsed: TaskId) -> None:
        """A status handler listener: an update of a task answers for it, unless it came
        before the task's `ask_later` time (an answer then, to a reconciliation asked about
        every task, says nothing: the status handler takes the task as on its way). Never
        blocks."""
        task_id = str(status.get("task_id", {}).get("value", ""))
        with self._lock:
            not_before = self._not_before.get(task_id)
            if not_before is not None:
                if time.monotonic() < not_before:
                    return
                del self._not_before[task_id]
            self._unanswered.pop(task_id, None)

    @property
    def unanswered(self) -> int:
        """Tasks asked about explicitly that Mesos has not answered for yet."""
        with self._lock:
            return len(self._unanswered)

    def _await_answers(self, tasks: list[tuple[str, str]], replace: bool) -> None:
        """Expect an answer for each of `tasks`; ask again from RETRY_FIRST_S on until then."""
        with self._lock:
            if replace:
                self._unanswered = dict(tasks)
            else:
                self._unanswered.update(tasks)
            self._retry_s = RETRY_FIRST_S
            self._retry_at = time.monotonic() + self._retry_s
        self._wake.set()

    def _retry(self) -> None:
        """Ask again for the tasks still unanswered that are still held as running."""
        with self._lock:
            if not self._unanswered or time.monotonic() < self._retry_at:
                return
            asked = dict(self._unanswered)
            self._retry_s = min(RETRY_MAX_S, self._retry_s * 2)
            self._retry_at = time.monotonic() + self._retry_s
        held = {t.task_id for t in self._stores.running.tasks()}
        tasks = [(t, a) for t, a in asked.items() if t in held]
        with self._lock:
            for task_id in asked:
                if task_id not in held:
                    self._unanswered.pop(task_id, None)
                    self._not_before.pop(task_id, None)
        if tasks and self._driver.reconcile_tasks(tasks):
            self.retries += 1
            log.warning(
                "reconcile: %s tasks not answered yet; asked again (next in %.0f s): %s",
                len(tasks),
                self._retry_s,
                ", ".join(t for t, _ in tasks[:5]),
            )

    def on_connected(self) -> None:
        self.reconcile(True)
        self.reconcile(False)

    def _interrupt(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        periodic = self._interval_s > 0  # periodic reconciliation is off otherwise
        next_run = time.monotonic() + self._interval_s
        while not self._stopping.is_set():
            with self._lock:
                retry_at = self._retry_at if self._unanswered else None
            due = [t for t in (next_run if periodic else None, retry_at) if t is not None]
            timeout_s = max(0.0, min(due) - time.monotonic()) if due else None
            self._wake.wait(timeout_s)
            self._wake.clear()
            if not self._driver.connected.is_set():
                # (Re)subscribing reconciles anew; meanwhile look again now and then.
                self._stopping.wait(0.5)
                continue
            try:
                if periodic and time.monotonic() >= next_run:
                    next_run = time.monotonic() + self._interval_s
                    self.reconcile(True)
                    self.reconcile(False)
                else:
                    self._retry()
            except Exception:
                log.exception("reconcile: reconciliation failed")

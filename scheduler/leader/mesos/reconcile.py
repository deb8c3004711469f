"""Reconciliation: explicit (the tasks in ZooKeeper) then implicit, on every (re)subscription,
every `reconcile_interval_minutes`, and on request (REST operate endpoints); and at once,
explicit, for the tasks held on an agent Mesos says is lost.

Why the last: Mesos reports a removed agent's tasks LOST/GONE only to a framework connected at
that moment, and a task that ended on the agent while an earlier update of it was still
unacknowledged may never reach the leader as ended. Such a task would stay "running" here and,
under overlapPolicy FORBID, block its job until the next periodic reconciliation (10 minutes by
default). Explicit reconciliation of the agent's tasks gets an answer for each: its latest state,
or TASK_LOST/GONE/GONE_BY_OPERATOR/UNKNOWN for a task Mesos no longer knows, which the status
handler counts as ended (failover per the job's settings) (issue 24)."""

from __future__ import annotations

import logging
import threading
from typing import Protocol

from scheduler.leader.lifecycle import ThreadedComponent
from scheduler.storage.term_stores import TermStores

log = logging.getLogger(__name__)


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

    def reconcile(self, explicit: bool) -> None:
        """Ask Mesos for task states; updates arrive as status updates."""
        if explicit:
            tasks = [(t.task_id, t.agent_id) for t in self._stores.running.tasks()]
            if tasks:
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
            self._driver.reconcile_tasks(tasks)
        log.warning("reconcile: agent %s lost; explicit for its %s tasks", agent_id, len(tasks))
        self.runs += 1

    def on_connected(self) -> None:
        self.reconcile(True)
        self.reconcile(False)

    def start(self) -> None:
        if self._interval_s > 0:  # periodic reconciliation is off otherwise
            self._start_thread()

    def _run(self) -> None:
        while not self._stopping.wait(self._interval_s):
            if self._driver.connected.is_set():
                try:
                    self.reconcile(True)
                    self.reconcile(False)
                except Exception:
                    log.exception("reconcile: periodic reconciliation failed")

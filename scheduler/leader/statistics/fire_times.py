"""`FireTimes`: one term's fire times of pending runs, matched to the launches that run them.

The producer reports each fire that queued a run, the launcher each task it launched; the
statistics' launch rows and the fire-to-launch latency of `/metrics` read the match. The term's
wiring builds one per term and feeds it.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Sequence

from scheduler.model.task_id import TaskId, TaskType

_TASKS_KEPT = 100_000
_FIRES_KEPT_PER_JOB = 1000
# Shards of one run are launched within one launcher round, a few milliseconds apart.
_SAME_RUN_S = 2.0


class FireTimes:
    """A term's fire times of pending runs, per job, matched to the launches that run them.

    The producer reports each fire that queued a run (`fired`); the launcher each task it
    launched (`launched`, with the same thread for all shards of a run). A READY launch runs the
    job's oldest pending run, so it takes the oldest fire time; the shards of one run are
    launched together and share it. Fires this leader did not queue (a previous leader's, a
    trigger) are not known: such runs have no fire time. Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[str, deque[float]] = {}
        # job -> (fire time, items launched, when): the run being launched.
        self._current: dict[str, tuple[float | None, set[int], float]] = {}
        self._of_task: OrderedDict[str, float | None] = OrderedDict()
        # Tasks of node fires (workflow nodes, backfills: issue 28), whose fire the launcher
        # noted: task id -> backfill id ("" for a workflow node's).
        self._node_tasks: OrderedDict[str, str] = OrderedDict()

    def fired(self, job_name: str, fire_time: float) -> None:
        with self._lock:
            self._pending.setdefault(job_name, deque(maxlen=_FIRES_KEPT_PER_JOB)).append(fire_time)

    def next_fire(self, job_name: str) -> float | None:
        """The fire time the job's next READY launch will take (`launched`), None when this
        term queued none (a trigger, a previous leader's fire)."""
        with self._lock:
            pending = self._pending.get(job_name)
            return pending[0] if pending else None

    def forget(self, job_name: str) -> None:
        with self._lock:
            self._pending.pop(job_name, None)
            self._current.pop(job_name, None)

    def launched(self, tasks: Sequence[TaskId]) -> list[tuple[float | None, bool]]:
        """For each of a round's launched `tasks`: (the fire time of the run it belongs to,
        whether it is the run's first task). A FAILOVER task has none."""
        now = time.monotonic()
        found: list[tuple[float | None, bool]] = []
        with self._lock:
            for task in tasks:
                found.append(self._launched(task, now))
            while len(self._of_task) > _TASKS_KEPT:
                self._of_task.popitem(last=False)
        return found

    def _launched(self, task: TaskId, now: float) -> tuple[float | None, bool]:
        if task.type is not TaskType.READY:
            return None, False
        task_id = str(task)
        if task_id in self._node_tasks:
            # Its own fire, noted by the launcher: no pending cron fire of the job is taken.
            return self._of_task.get(task_id), task.item == 0
        current = self._current.get(task.job_name)
        first = current is None or task.item in current[1] or now - current[2] > _SAME_RUN_S
        if first:
            pending = self._pending.get(task.job_name)
            fire = pending.popleft() if pending else None
            current = (fire, set(), now)
            self._current[task.job_name] = current
        assert current is not None
        current[1].add(task.item)
        self._of_task[task_id] = current[0]
        return current[0], first

    def node_fire_launched(self, task_id: str, fire_time: float, backfill_id: str) -> None:
        """The launcher launched `task_id` for a node fire (a workflow node's, or a backfill's
        when `backfill_id`): its fire is that fire's time, before `launched` is asked."""
        with self._lock:
            self._node_tasks[task_id] = backfill_id
            self._of_task[task_id] = fire_time
            while len(self._node_tasks) > _TASKS_KEPT:
                self._node_tasks.popitem(last=False)
            while len(self._of_task) > _TASKS_KEPT:
                self._of_task.popitem(last=False)

    def backfill_of(self, task_id: str) -> str:
        """The backfill `task_id` was launched for ("": none, or not launched this term)."""
        with self._lock:
            return self._node_tasks.get(task_id, "")

    def fire_of(self, task_id: str) -> float | None:
        """The fire time `launched` matched to `task_id` (None: none known)."""
        with self._lock:
            return self._of_task.get(task_id)

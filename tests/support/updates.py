"""Task status updates as tests record them, and the waits on them.

`Update` is the one record of a status update, whether a pymesos framework received it from
Mesos (`tests.support.mesosfw.RecordingScheduler`) or an executor's task runner reported it in
process (`Recorder`). `UpdateLog` keeps them in arrival order and answers the questions tests
ask: the states of a task, its updates with a message, the first update in a state, the first
terminal one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Set
from dataclasses import dataclass, field
from typing import Any

from executor.records import ExecutionRecord
from tests.support.waiting import wait_for

# The states after which Mesos sends nothing more for a task. TASK_UNREACHABLE and TASK_UNKNOWN
# are not among them: a partition-aware framework may still hear of the task again.
TERMINAL_STATES = frozenset(
    {
        "TASK_FINISHED",
        "TASK_FAILED",
        "TASK_KILLED",
        "TASK_ERROR",
        "TASK_LOST",
        "TASK_DROPPED",
        "TASK_GONE",
        "TASK_GONE_BY_OPERATOR",
    }
)
DEFAULT_WAIT_S = 30.0


@dataclass(frozen=True)
class Update:
    """One status update of a task.

    `record` is the executor's execution record decoded from the update's data (None when there
    is none or the data is not one); `status` is the TaskStatus as the framework received it
    (empty for an update reported in process); `received_s` is `time.perf_counter()` on arrival.
    """

    task_id: str
    state: str
    message: str = ""
    record: ExecutionRecord | None = None
    reason: str = ""
    source: str = ""
    status: dict[str, Any] = field(default_factory=dict)
    received_s: float = field(default_factory=time.perf_counter)


class UpdateLog:
    """Status updates in arrival order; safe to add to from any thread.

    `cond` guards `updates` (hold it to read the list directly) and is notified on each
    addition; subclasses guard their other records with it too.
    """

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.updates: list[Update] = []

    def add(self, update: Update) -> None:
        with self.cond:
            self.updates.append(update)
            self.cond.notify_all()

    def of(self, task_id: str) -> list[Update]:
        """Every update of `task_id`, oldest first."""
        with self.cond:
            return [u for u in self.updates if u.task_id == task_id]

    def states(self, task_id: str) -> list[str]:
        return [u.state for u in self.of(task_id)]

    def with_message(self, task_id: str, message: str) -> list[Update]:
        return [u for u in self.of(task_id) if u.message == message]

    def last(self, task_id: str) -> Update | None:
        found = self.of(task_id)
        return found[-1] if found else None

    def wait_state(self, task_id: str, state: str, timeout_s: float = DEFAULT_WAIT_S) -> Update:
        """The first update of `task_id` in `state`, waiting up to `timeout_s` for it."""
        return self._wait_first(task_id, {state}, f"{state} of {task_id}", timeout_s)

    def wait_terminal(self, task_id: str, timeout_s: float = DEFAULT_WAIT_S) -> Update:
        """The first terminal update of `task_id`, waiting up to `timeout_s` for it."""
        return self._wait_first(
            task_id, TERMINAL_STATES, f"a terminal state of {task_id}", timeout_s
        )

    def _wait_first(self, task_id: str, states: Set[str], what: str, timeout_s: float) -> Update:
        try:
            return wait_for(
                lambda: next((u for u in self.of(task_id) if u.state in states), None),
                timeout_s,
                message=what,
            )
        except AssertionError as exc:
            # The states seen by the deadline, not those seen when the wait began.
            raise AssertionError(f"{exc} (got {self.states(task_id)})") from exc.__cause__


class Recorder(UpdateLog):
    """A status reporter for task runners driven in process (no Mesos): keeps what they report."""

    def report(
        self, task_id: str, state: str, message: str = "", record: ExecutionRecord | None = None
    ) -> None:
        self.add(Update(task_id, state, message, record))


__all__ = ["DEFAULT_WAIT_S", "TERMINAL_STATES", "Recorder", "Update", "UpdateLog"]

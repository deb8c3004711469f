"""Runs as the scheduler counts and records them: results, command tasks' execution records,
fire times in the event trace. Pure functions and in-memory bookkeeping, no I/O.

A run is one task (one shard of one fire) or, for a DAEMON job, each run its executor reports
(TASK_RUNNING "COMPLETE"). Its result is `success`, `failure`, `timeout` (Mesos stopped it at
its `max_completion_time`: reason `REASON_MAX_COMPLETION_TIME_REACHED`) or `killed`.

TRANSIENT SCRIPT jobs run as Mesos command tasks, with no executor of ours to write execution
records; `CommandRuns` makes them from the command executor's own status updates (its
`executor_id` is the task id): TASK_RUNNING starts the record, the terminal update completes it
with the command's exit status in `failureCause` ("Command exited with status 3"). Each task's
record has an id made from its task id, so a repeated update writes the same row.
"""

from __future__ import annotations

import functools
import re
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from executor.records import ExecutionRecord
from scheduler.model.task_id import TaskId
from scheduler.model.task_states import TERMINAL_STATES

__all__ = [
    "COMMAND_EXECUTION_SOURCE",
    "RESULTS",
    "TIMEOUT_REASON",
    "CommandRuns",
    "backfill_of_message",
    "exit_status",
    "fire_time_of",
    "is_command_update",
    "launch_message",
    "run_id",
    "run_result",
]

RESULTS = ("success", "failure", "timeout", "killed")
TIMEOUT_REASON = "REASON_MAX_COMPLETION_TIME_REACHED"
# The execution source of the records the scheduler writes for command tasks (the executor's
# are CLOUD_EXECUTOR).
COMMAND_EXECUTION_SOURCE = "CLOUD_SCHEDULER"
_RUN_ID_NAMESPACE = uuid.UUID("5b0c1e2a-6f1d-4b8e-9a51-2f3c8d7e4a10")
_EXIT_STATUS = re.compile(r"exited with status (-?\d{1,10})\b")
_LAUNCHED = "launched"
_FIRED = re.compile(
    r"^launched(?:; backfill ([0-9]{8}T[0-9]{6}Z-[0-9a-f]{8}))?"
    r"; fired at (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,6})?Z)$"
)


FIRE_TASK_KEY = "ejcFireKey"
"""Set by the status handler in an update of a task that runs a recorded fire (a workflow
node's or a backfill's: its running node's `workflowFire`), to that fire's key: only such a
task's end can move a workflow run or a backfill, so their engines wake for those alone."""

NO_RUN_KEY = "ejcNoRun"
"""Set (True) by the status handler in a terminal update of a task that ended while no run of
it was going on (an idle daemon task gone with its cluster, issue 30): the listeners count no
run for it."""


def run_result(state: str, reason: str | None, record: ExecutionRecord | None) -> str:
    """The result of a run that ended with this update (and its complete record, if any)."""
    if state == "TASK_KILLED":
        return "killed"
    if reason == TIMEOUT_REASON:
        return "timeout"
    if record is not None and record.complete:
        return "success" if record.is_success else "failure"
    return "success" if state == "TASK_FINISHED" else "failure"


def is_command_update(status: Mapping[str, Any]) -> bool:
    """An update from a Mesos command executor: its executor id is the task's id (ours, the
    custom executor's, is `{app}@-@{agentId}`, never a task id)."""
    task_id = _value(status.get("task_id"))
    return bool(task_id) and _value(status.get("executor_id")) == task_id


def exit_status(message: str | None) -> int | None:
    """The exit status a terminal message names ("Command exited with status 3"), or None."""
    found = _EXIT_STATUS.search(message or "")
    return int(found.group(1)) if found else None


def launch_message(fire_time: float | None, backfill_id: str = "") -> str:
    """The TASK_STAGING trace message: `launched`, with the fire it runs for when known, and
    the backfill it belongs to (issue 28: `launched; backfill <id>; fired at <UTC time>`)."""
    if fire_time is None:
        return _LAUNCHED
    moment = datetime.fromtimestamp(fire_time, UTC).replace(tzinfo=None)
    backfill = f"; backfill {backfill_id}" if backfill_id else ""
    return f"{_LAUNCHED}{backfill}; fired at {moment.isoformat(timespec='milliseconds')}Z"


def fire_time_of(message: str | None) -> datetime | None:
    """The fire time (naive UTC) in a `launch_message`, or None."""
    found = _FIRED.match(message or "")
    if found is None:
        return None
    return datetime.fromisoformat(found.group(2).removesuffix("Z"))


def backfill_of_message(message: str | None) -> str | None:
    """The backfill id in a `launch_message`, or None (not a backfill's run)."""
    found = _FIRED.match(message or "")
    return found.group(1) if found is not None else None


class CommandRuns:
    """Execution records of command tasks, from their updates (one thread calls it: the
    Mesos event thread). Remembers when each running task started, for its end record."""

    def __init__(self, kept: int = 100_000) -> None:
        self._kept = kept
        self._started: OrderedDict[str, int] = OrderedDict()

    def record_of(self, status: Mapping[str, Any], parsed: TaskId) -> ExecutionRecord | None:
        """The record this update starts or completes; None for every other update (not a
        command task's, a reconciliation answer, a state that neither starts nor ends)."""
        if not is_command_update(status) or status.get("source") == "SOURCE_MASTER":
            return None
        task_id = str(parsed)
        state = str(status.get("state", ""))
        at_ms = _millis(status.get("timestamp"))
        if state == "TASK_RUNNING":
            self._started[task_id] = at_ms
            self._started.move_to_end(task_id)
            while len(self._started) > self._kept:
                self._started.popitem(last=False)
            return self._record(parsed, at_ms)
        if state not in TERMINAL_STATES:
            return None
        started = self._started.pop(task_id, at_ms)
        message = str(status.get("message") or status.get("reason") or state)
        failure = None if state == "TASK_FINISHED" else message
        return self._record(parsed, started).finished(at_ms, failure)

    def started_ms(self, task_id: str) -> int | None:
        return self._started.get(task_id)

    @staticmethod
    def _record(parsed: TaskId, start_ms: int) -> ExecutionRecord:
        task_id = str(parsed)
        return ExecutionRecord(
            id=run_id(task_id),
            job_name=parsed.job_name,
            task_id=task_id,
            sharding_item=parsed.item,
            hostname="",
            ip="",
            start_time_ms=start_ms,
            execution_source=COMMAND_EXECUTION_SOURCE,
        )


@functools.lru_cache(maxsize=4096)
def run_id(task_id: str) -> str:
    """The execution record id of a command task's run: the same for its start and its end, in
    every process that sees them (a name-based UUID of the task id). Cached: each run's id is
    asked for at its start and its end by the statistics and the metrics (SHA-1 each time was
    5% of the Mesos event thread, issue 29)."""
    return uuid.uuid5(_RUN_ID_NAMESPACE, task_id).hex


def _value(wrapped: Any) -> str:
    return str(wrapped.get("value", "")) if isinstance(wrapped, Mapping) else ""


def _millis(timestamp: Any) -> int:
    """Epoch milliseconds of a status timestamp (seconds, float); now when it has none."""
    if isinstance(timestamp, int | float) and not isinstance(timestamp, bool) and timestamp > 0:
        return int(timestamp * 1000)
    return int(datetime.now(UTC).timestamp() * 1000)

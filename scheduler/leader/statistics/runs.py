"""A job's runs, read from the event trace (`JOB_STATUS_TRACE_LOG`).

A run here is one task: one shard of one fire (a DAEMON job's task is one run that reports
many). Each has a TASK_STAGING row written at launch, whose message names the fire it runs
for; its later rows give its state, when it started (its first TASK_RUNNING), when it ended
(its first terminal row), why (that row's message) and where its output is (the executor's
TASK_RUNNING message naming the files).

`runs(engine, job, limit, before)` lists them newest launch first, a page at a time:
`before` is the (launch time, task id) of the last run of the previous page. Pure functions of
an engine; times are naive UTC.

A cron fire that a calendar excluded (issue 28) ran nothing, yet the view
(`runs_and_exclusions`) lists it, in time order among the runs, as an `ExcludedFire`: its
event-trace row (`FIRE_EXCLUDED`, written when the producer or the workflow engine accounted
it), with result `fire_excluded`, the fire time and the reason naming the calendar and its
part; it has no task (`taskId` null, and as a page's last entry its cursor is its time:
`before` then lists what came strictly before it).
Other fires that ran nothing (skipped, capped) are not listed: they are in the event trace.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, and_, or_, select
from sqlalchemy.orm import Session

from executor.records import parse_output_message
from scheduler.leader.statistics.models import StatusTraceLog
from scheduler.model.job_events import JobEventKind
from scheduler.model.runs import backfill_of_message, exit_status, fire_time_of
from scheduler.model.task_id import InvalidTaskId, TaskId
from scheduler.model.task_states import TERMINAL_STATES

__all__ = ["ExcludedFire", "Run", "launch_of", "run_of", "runs", "runs_and_exclusions"]

# A task's states in the order they happen, for rows written within one clock tick.
_RANK = {"TASK_STAGING": 0, "TASK_STARTING": 1, "TASK_RUNNING": 2, "TASK_KILLING": 3}
_DAEMON_RUN_MESSAGES = ("BEGIN", "COMPLETE")
_STAGING = "TASK_STAGING"
_EXCLUDED = JobEventKind.FIRE_EXCLUDED.trace_state
# The (first) fire an excluded-fire row names: "fire at T excluded: ..." or "N fires from T to
# U excluded: ..." (model/fires.py).
_EXCLUDED_FIRE = re.compile(r"(?:fire at|[0-9]+ fires from) ([0-9T:.+-]{19,40}) ")


@dataclass(frozen=True)
class Run:
    task_id: str
    job_name: str
    sharding_item: int
    task_type: str
    agent_id: str
    launch_time: datetime
    fire_time: datetime | None
    start_time: datetime | None
    end_time: datetime | None
    state: str
    result: str
    message: str
    output: dict[str, str] | None
    backfill_id: str | None = None
    """The backfill whose fire this run ran (issue 28), from its TASK_STAGING row; None: none."""

    def to_json(self) -> dict[str, Any]:
        """The run as the API shows it (ISO 8601 UTC times, null when unknown)."""
        ended = self.end_time is not None
        return {
            "taskId": self.task_id,
            "jobName": self.job_name,
            "shardingItem": self.sharding_item,
            "type": self.task_type,
            "agentId": self.agent_id,
            "launchTime": _iso(self.launch_time),
            "fireTime": _iso(self.fire_time),
            "backfillId": self.backfill_id,
            "startTime": _iso(self.start_time),
            "endTime": _iso(self.end_time),
            "state": self.state,
            "result": self.result,
            "reason": self.message if ended and self.result != "success" else None,
            "message": self.message,
            "exitStatus": exit_status(self.message) if ended else None,
        }


@dataclass(frozen=True)
class ExcludedFire:
    """A cron fire a calendar excluded: listed among the runs, though it ran nothing."""

    job_name: str
    recorded_at: datetime
    """When the fire was accounted (its trace row's time): its place among the runs."""
    fire_time: datetime | None
    reason: str

    def to_json(self) -> dict[str, Any]:
        """As a run, with result `fire_excluded` and no task (null where a run has one)."""
        return {
            "taskId": None,
            "jobName": self.job_name,
            "shardingItem": None,
            "type": None,
            "agentId": None,
            "launchTime": _iso(self.recorded_at),
            "fireTime": _iso(self.fire_time),
            "backfillId": None,
            "startTime": None,
            "endTime": None,
            "state": _EXCLUDED,
            "result": "fire_excluded",
            "reason": self.reason,
            "message": self.reason,
            "exitStatus": None,
        }


def _excluded_fire(job_name: str, at: datetime, message: str | None) -> ExcludedFire:
    fire = None
    found = _EXCLUDED_FIRE.match(message or "")
    if found is not None:
        try:
            fire = datetime.fromisoformat(found.group(1)).astimezone(UTC).replace(tzinfo=None)
        except ValueError:
            fire = None
    return ExcludedFire(job_name, at, fire, message or "")


def launch_of(engine: Engine, job_name: str, task_id: str) -> datetime | None:
    """When the run `task_id` of `job_name` was launched (its TASK_STAGING row), or None."""
    with Session(engine) as session:
        return session.scalars(
            select(StatusTraceLog.creation_time)
            .where(
                StatusTraceLog.job_name == job_name,
                StatusTraceLog.state == "TASK_STAGING",
                StatusTraceLog.task_id == task_id,
            )
            .limit(1)
        ).first()


def runs(
    engine: Engine,
    job_name: str,
    limit: int,
    before: tuple[datetime, str] | None = None,
) -> tuple[list[Run], tuple[datetime, str] | None]:
    """Up to `limit` runs of `job_name` launched before `before`, newest first, and the cursor
    of the next page (None when there is none)."""
    found, cursor = _page(engine, job_name, limit, before, (_STAGING,))
    return [run for run in found if isinstance(run, Run)], cursor


def runs_and_exclusions(
    engine: Engine,
    job_name: str,
    limit: int,
    before: tuple[datetime, str] | None = None,
) -> tuple[list[Run | ExcludedFire], tuple[datetime, str] | None]:
    """As `runs`, with the fires a calendar excluded among them (the runs view): an excluded
    fire's task id in the cursor is "" (its time is the cursor)."""
    return _page(engine, job_name, limit, before, (_STAGING, _EXCLUDED))


def _page(
    engine: Engine,
    job_name: str,
    limit: int,
    before: tuple[datetime, str] | None,
    states: tuple[str, ...],
) -> tuple[list[Run | ExcludedFire], tuple[datetime, str] | None]:
    query = select(
        StatusTraceLog.task_id,
        StatusTraceLog.creation_time,
        StatusTraceLog.state,
        StatusTraceLog.message,
    ).where(StatusTraceLog.job_name == job_name, StatusTraceLog.state.in_(states))
    if before is not None:
        at, task_id = before
        query = query.where(
            or_(
                StatusTraceLog.creation_time < at,
                and_(StatusTraceLog.creation_time == at, StatusTraceLog.task_id < task_id),
            )
        )
    query = query.order_by(
        StatusTraceLog.creation_time.desc(), StatusTraceLog.task_id.desc()
    ).limit(limit + 1)
    with Session(engine) as session:
        page = [
            (str(task_id) if state == _STAGING else "", at, state, message)
            for task_id, at, state, message in session.execute(query)
        ]
        more = len(page) > limit
        page = page[:limit]
        rows = _rows_of(session, [task_id for task_id, _at, state, _m in page if task_id])
    found = [
        _summary(task_id, rows.get(task_id, [])) if task_id else _excluded_fire(job_name, at, m)
        for task_id, at, _state, m in page
    ]
    listed = [run for run in found if run is not None]
    cursor = (page[-1][1], page[-1][0]) if more and page else None
    return listed, cursor


def run_of(engine: Engine, job_name: str, task_id: str) -> Run | None:
    """The run `task_id` of `job_name` as the trace knows it, or None."""
    with Session(engine) as session:
        rows = _rows_of(session, [task_id])
    trail = [row for row in rows.get(task_id, []) if row.job_name == job_name]
    return _summary(task_id, trail) if trail else None


def _rows_of(session: Session, task_ids: Sequence[str]) -> dict[str, list[StatusTraceLog]]:
    if not task_ids:
        return {}
    out: dict[str, list[StatusTraceLog]] = {task_id: [] for task_id in task_ids}
    # A daemon task's BEGIN and COMPLETE rows (two a run, forever) say nothing of the task.
    query = (
        select(StatusTraceLog)
        .where(
            StatusTraceLog.task_id.in_(list(task_ids)),
            or_(
                StatusTraceLog.state != "TASK_RUNNING",
                StatusTraceLog.message.is_(None),
                StatusTraceLog.message.not_in(_DAEMON_RUN_MESSAGES),
            ),
        )
        .order_by(StatusTraceLog.creation_time)
    )
    for row in session.scalars(query):
        out[row.task_id].append(row)
    return out


def _summary(task_id: str, trail: list[StatusTraceLog]) -> Run | None:
    if not trail:
        return None
    try:
        parsed = TaskId.parse(task_id)
    except InvalidTaskId:
        return None
    trail = sorted(trail, key=lambda r: (r.creation_time, _RANK.get(r.state, 9)))
    staging = next((r for r in trail if r.state == "TASK_STAGING"), None)
    first_running = next((r for r in trail if r.state == "TASK_RUNNING"), None)
    terminal = next((r for r in trail if r.state in TERMINAL_STATES), None)
    last = terminal or trail[-1]
    output = None
    for row in trail:
        if row.state == "TASK_RUNNING":
            output = parse_output_message(row.message)
            if output is not None:
                break
    message = (terminal.message or "") if terminal is not None else ""
    return Run(
        task_id=task_id,
        job_name=parsed.job_name,
        sharding_item=parsed.item,
        task_type=parsed.type.value,
        agent_id=last.slave_id or parsed.agent_id,
        launch_time=(staging or trail[0]).creation_time,
        fire_time=fire_time_of(staging.message) if staging is not None else None,
        backfill_id=backfill_of_message(staging.message) if staging is not None else None,
        start_time=first_running.creation_time if first_running is not None else None,
        end_time=terminal.creation_time if terminal is not None else None,
        state=last.state,
        result=_result(terminal),
        message=message,
        output=output,
    )


def _result(terminal: StatusTraceLog | None) -> str:
    if terminal is None:
        return "running"
    if terminal.state == "TASK_FINISHED":
        return "success"
    if terminal.state == "TASK_KILLED":
        return "killed"
    return "failure"


def _iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.isoformat(timespec="milliseconds") + "Z"

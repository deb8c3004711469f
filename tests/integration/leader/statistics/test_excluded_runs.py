"""Fires a calendar excluded (issue 28) in a job's runs view: listed in time order among the
runs, with result `fire_excluded`, the fire time and the reason, no task; pages go on across
them (on SQLite and a real PostgreSQL server)."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import Engine

from scheduler.leader.statistics import runs as trace_runs
from scheduler.leader.statistics.runs import ExcludedFire, Run
from scheduler.leader.statistics.writer import TraceWriter
from scheduler.model.fires import FireDecision, FireOutcome, FirePlan, fire_events
from scheduler.model.runs import launch_message
from scheduler.model.task_id import TaskId, TaskType
from tests.support.waiting import wait_for

T0 = datetime(2024, 3, 1, 10, 0, 0)  # naive UTC
REASON = "calendar maint: excludeRanges[0] 2024-03-01T10:00:01+00:00 - 2024-03-01T10:00:05+00:00"


def _epoch(moment: datetime) -> float:
    return (moment - datetime(1970, 1, 1)).total_seconds()


def _write(engine: Engine, runs: list[tuple[str, datetime]], excluded: list[datetime]) -> None:
    """TASK_STAGING rows of `runs`, and the FIRE_EXCLUDED row of each of `excluded` as the
    statistics write a producer's event (task id "", its reason as the message)."""
    writer = TraceWriter(engine, idle_wait_s=0.05, linger_s=0.0)
    writer.start()
    try:
        for task_id, at in runs:
            tid = TaskId.parse(task_id)
            writer.record_status(
                job_name="j",
                task_id=task_id,
                state="TASK_STAGING",
                slave_id=tid.agent_id,
                execution_type="READY",
                sharding_item=f"[{tid.item}]",
                message=launch_message(_epoch(at)),
                creation_time=at,
            )
        for at in excluded:
            plan = FirePlan((FireDecision(_epoch(at), FireOutcome.EXCLUDED, REASON),), 0)
            (event,) = fire_events("j", plan, None)
            writer.record_status(
                job_name="j",
                task_id=event.task_id or "",
                state=event.kind.trace_state,
                execution_type=event.execution_type,
                sharding_item="",
                message=event.reason,
                creation_time=at + timedelta(milliseconds=5),
            )
        total = len(runs) + len(excluded)
        wait_for(lambda: writer.written == total, 20, message="rows written")
    finally:
        writer.stop(5.0)


def test_excluded_fires_are_listed_among_the_runs_and_paged_across(engine: Engine) -> None:
    t = [T0 + timedelta(seconds=s) for s in range(8)]
    runs = [(str(TaskId.new("j", 0, TaskType.READY, "agent-1")), t[i]) for i in (0, 6, 7)]
    _write(engine, runs, [t[2], t[4]])
    everything, end = trace_runs.runs_and_exclusions(engine, "j", 10)
    assert end is None
    kinds = [type(r).__name__ for r in everything]
    assert kinds == ["Run", "Run", "ExcludedFire", "ExcludedFire", "Run"]
    excluded = everything[2]
    assert isinstance(excluded, ExcludedFire)
    assert excluded.to_json() == {
        "taskId": None,
        "jobName": "j",
        "shardingItem": None,
        "type": None,
        "agentId": None,
        "launchTime": "2024-03-01T10:00:04.005Z",
        "fireTime": "2024-03-01T10:00:04.000Z",
        "backfillId": None,
        "startTime": None,
        "endTime": None,
        "state": "FIRE_EXCLUDED",
        "result": "fire_excluded",
        "reason": f"fire at 2024-03-01T10:00:04.000+00:00 excluded: {REASON}",
        "message": f"fire at 2024-03-01T10:00:04.000+00:00 excluded: {REASON}",
        "exitStatus": None,
    }
    # Pages of two: the third page starts after an excluded fire, from its time.
    first, cursor = trace_runs.runs_and_exclusions(engine, "j", 2)
    assert cursor is not None
    second, cursor = trace_runs.runs_and_exclusions(engine, "j", 2, cursor)
    assert cursor is not None and cursor[1] == ""  # an excluded fire ended the page
    third, end = trace_runs.runs_and_exclusions(engine, "j", 2, cursor)
    assert end is None
    assert [*first, *second, *third] == everything
    assert all(isinstance(r, Run) for r in third)
    # The runs alone (as other readers ask): no excluded fire.
    only, _end = trace_runs.runs(engine, "j", 10)
    assert [r.task_id for r in only] == [r.task_id for r in everything if isinstance(r, Run)]

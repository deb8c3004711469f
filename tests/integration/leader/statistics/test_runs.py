"""A job's runs read back from the event trace, and the execution records of command tasks, on
SQLite and a real PostgreSQL server."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from executor.records import output_message
from scheduler.leader.statistics import runs as trace_runs
from scheduler.leader.statistics.component import Statistics
from scheduler.leader.statistics.models import ExecutionLog
from scheduler.leader.statistics.writer import TraceWriter
from scheduler.model.runs import COMMAND_EXECUTION_SOURCE, launch_message
from scheduler.model.settings import load_settings
from scheduler.model.task_id import LaunchedTask, TaskId, TaskType
from scheduler.storage.registry import Registry
from scheduler.storage.transactions import Fence
from tests.support.waiting import wait_for

T0 = datetime(2024, 3, 1, 10, 0, 0)  # naive UTC


def _epoch(moment: datetime) -> float:
    return (moment - datetime(1970, 1, 1)).total_seconds()


def _task(job: str, item: int, kind: TaskType = TaskType.READY) -> str:
    return str(TaskId.new(job, item, kind, "agent-1"))


def _write(engine: Engine, rows: list[tuple[str, str, str, datetime]]) -> None:
    """(task id, state, message, time) rows through a real trace writer."""
    writer = TraceWriter(engine, idle_wait_s=0.05, linger_s=0.0)
    writer.start()
    try:
        for task_id, state, message, at in rows:
            tid = TaskId.parse(task_id)
            assert writer.record_status(
                job_name=tid.job_name,
                task_id=task_id,
                state=state,
                slave_id=tid.agent_id,
                execution_type=tid.type.value,
                sharding_item=f"[{tid.item}]",
                message=message,
                creation_time=at,
            )
        wait_for(lambda: writer.written == len(rows), 20, message="rows written")
    finally:
        writer.stop(5.0)


def test_runs_list_newest_first_with_times_results_and_output_files(engine: Engine) -> None:
    failed, killed, running = _task("j", 0), _task("j", 1), _task("j", 0, TaskType.FAILOVER)
    other = _task("other", 0)
    t = [T0 + timedelta(seconds=i) for i in range(20)]
    files = output_message(f"tasks/{failed}/stdout", f"tasks/{failed}/stderr")
    _write(
        engine,
        [
            (failed, "TASK_STAGING", launch_message(_epoch(T0 - timedelta(seconds=2))), t[0]),
            (failed, "TASK_STARTING", "", t[1]),
            (failed, "TASK_RUNNING", files, t[2]),
            (failed, "TASK_FAILED", "Command exited with status 3", t[3]),
            (killed, "TASK_STAGING", "launched", t[4]),
            (killed, "TASK_RUNNING", "", t[5]),
            (killed, "TASK_RUNNING", "BEGIN", t[6]),
            (killed, "TASK_RUNNING", "COMPLETE", t[7]),
            (killed, "TASK_KILLED", "killed by the scheduler", t[8]),
            (running, "TASK_STAGING", "launched", t[9]),
            (running, "TASK_RUNNING", "", t[10]),
            (other, "TASK_STAGING", "launched", t[11]),
        ],
    )
    page, cursor = trace_runs.runs(engine, "j", 2)
    assert [r.task_id for r in page] == [running, killed]
    assert cursor == (t[4], killed)
    rest, end = trace_runs.runs(engine, "j", 2, cursor)
    assert [r.task_id for r in rest] == [failed] and end is None

    first = rest[0].to_json()
    assert first == {
        "taskId": failed,
        "jobName": "j",
        "shardingItem": 0,
        "type": "READY",
        "agentId": "agent-1",
        "launchTime": "2024-03-01T10:00:00.000Z",
        "fireTime": "2024-03-01T09:59:58.000Z",
        "backfillId": None,
        "startTime": "2024-03-01T10:00:02.000Z",
        "endTime": "2024-03-01T10:00:03.000Z",
        "state": "TASK_FAILED",
        "result": "failure",
        "reason": "Command exited with status 3",
        "message": "Command exited with status 3",
        "exitStatus": 3,
    }
    assert rest[0].output == {
        "stdout": f"tasks/{failed}/stdout",
        "stderr": f"tasks/{failed}/stderr",
    }
    by_id = {r.task_id: r for r in page}
    assert (by_id[killed].result, by_id[killed].state) == ("killed", "TASK_KILLED")
    assert by_id[killed].start_time == t[5] and by_id[killed].output is None
    assert by_id[running].to_json()["result"] == "running"
    assert by_id[running].end_time is None and by_id[running].task_type == "FAILOVER"
    # A time as the cursor: runs launched strictly before it.
    before_time, _ = trace_runs.runs(engine, "j", 10, (t[9], ""))
    assert [r.task_id for r in before_time] == [killed, failed]
    assert trace_runs.run_of(engine, "j", failed) == rest[0]
    assert trace_runs.run_of(engine, "other", failed) is None
    assert trace_runs.launch_of(engine, "j", killed) == t[4]
    assert trace_runs.launch_of(engine, "other", killed) is None


def test_runs_launched_in_the_same_instant_are_each_listed_once_across_pages(
    engine: Engine,
) -> None:
    tasks = [_task("same", item) for item in range(5)]
    _write(engine, [(task, "TASK_STAGING", "launched", T0) for task in tasks])
    seen: list[str] = []
    cursor = None
    for _ in range(5):
        page, cursor = trace_runs.runs(engine, "same", 2, cursor)
        seen += [r.task_id for r in page]
        if cursor is None:
            break
    assert sorted(seen) == sorted(tasks) and len(seen) == 5


def _command_status(task_id: str, state: str, at: datetime, message: str = "") -> dict[str, object]:
    status: dict[str, object] = {
        "task_id": {"value": task_id},
        "state": state,
        "source": "SOURCE_EXECUTOR",
        "executor_id": {"value": task_id},
        "agent_id": {"value": "agent-1"},
        "timestamp": _epoch(at),
    }
    if message:
        status["message"] = message
    return status


def test_command_tasks_get_execution_records_from_their_updates(
    trace_url: str, registry: Registry, fence: Fence
) -> None:
    settings = load_settings({}, {}, {"event_trace_rdb_url": trace_url})
    ok, bad = _task("script", 0), _task("script", 1)
    backfill = "20240301T095000Z-0a1b2c3d"  # shard 1 runs a backfill's fire (issue 28)
    statistics = Statistics(
        settings,
        registry,
        fence,
        fire_of=lambda task_id: _epoch(T0 - timedelta(seconds=1)),
        backfill_of=lambda task_id: backfill if task_id == bad else "",
    )
    statistics.start()
    try:
        wait_for(lambda: statistics.engine is not None, 20, message="schema migrated")
        engine = statistics.engine
        assert engine is not None
        for task_id in (ok, bad):
            tid = TaskId.parse(task_id)
            statistics.on_launched([LaunchedTask(tid, "agent-1", task_id)])
            statistics.on_status(_command_status(task_id, "TASK_STARTING", T0), tid)
            statistics.on_status(
                _command_status(task_id, "TASK_RUNNING", T0 + timedelta(seconds=1)), tid
            )
        statistics.on_status(
            _command_status(
                ok, "TASK_FINISHED", T0 + timedelta(seconds=3), "Command exited with status 0"
            ),
            TaskId.parse(ok),
        )
        end = _command_status(
            bad, "TASK_FAILED", T0 + timedelta(seconds=4), "Command exited with status 3"
        )
        statistics.on_status(end, TaskId.parse(bad))
        # A repeated terminal update (at least once delivery) writes the same record again.
        statistics.on_status(end, TaskId.parse(bad))

        def records() -> dict[str, ExecutionLog] | None:
            with Session(engine) as session:
                rows = {r.task_id: r for r in session.scalars(select(ExecutionLog))}
            done = [r for r in rows.values() if r.complete_time is not None]
            return rows if len(done) == 2 else None

        rows = wait_for(records, 20, message="two complete execution records")
        assert len(rows) == 2
        assert rows[ok].is_success is True and rows[ok].failure_cause == ""
        assert rows[ok].start_time == T0 + timedelta(seconds=1)
        assert rows[ok].complete_time == T0 + timedelta(seconds=3)
        assert rows[bad].is_success is False
        assert rows[bad].failure_cause == "Command exited with status 3"
        assert rows[bad].execution_source == COMMAND_EXECUTION_SOURCE
        assert rows[bad].sharding_item == 1

        def listed() -> list[trace_runs.Run] | None:
            page, _ = trace_runs.runs(engine, "script", 10)
            return page if len(page) == 2 and all(r.end_time for r in page) else None

        page = wait_for(listed, 20, message="both runs ended in the trace")
        by_id = {r.task_id: r.to_json() for r in page}
        assert by_id[bad]["exitStatus"] == 3 and by_id[bad]["result"] == "failure"
        assert by_id[ok]["exitStatus"] == 0 and by_id[ok]["reason"] is None
        assert by_id[ok]["fireTime"] == "2024-03-01T09:59:59.000Z"
        assert by_id[ok]["backfillId"] is None and by_id[bad]["backfillId"] == backfill
        assert by_id[bad]["fireTime"] == "2024-03-01T09:59:59.000Z"
    finally:
        statistics.stop()

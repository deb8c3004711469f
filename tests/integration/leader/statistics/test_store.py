"""The trace and statistics store against a real SQLite file and a real PostgreSQL server."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, create_engine, inspect, select
from sqlalchemy.orm import Session

from executor.records import ExecutionRecord
from scheduler.leader.statistics import (
    TraceWriter,
    create_trace_engine,
    queries,
    upgrade_to_head,
)
from scheduler.leader.statistics.database import HEAD_REVISION
from scheduler.leader.statistics.models import Base, ExecutionLog, StatusTraceLog
from scheduler.model.errors import InvalidRequest
from tests.support.waiting import wait_for

T0_MS = 1_700_000_000_000  # 2023-11-14T22:13:20Z


def _record(n: int, job: str = "job_a", ip: str = "10.0.0.1") -> ExecutionRecord:
    return ExecutionRecord(
        id=f"run-{n:03d}",
        job_name=job,
        task_id=f"{job}@-@{n % 3}@-@READY@-@agent-1@-@u{n}",
        sharding_item=n % 3,
        hostname="host-1",
        ip=ip,
        start_time_ms=T0_MS + n * 60_000,
    )


def _write(engine: Engine, *entries: ExecutionRecord) -> TraceWriter:
    writer = TraceWriter(engine)
    for entry in entries:
        assert writer.record_execution(entry)
    writer.start()
    writer.stop(timeout_s=5)
    assert writer.counters()["written"] == len(entries)
    return writer


def test_migrations_create_every_table_match_the_models_and_are_idempotent(
    trace_url: str,
) -> None:
    upgrade_to_head(trace_url)
    upgrade_to_head(trace_url)
    engine = create_trace_engine(trace_url)
    try:
        tables = set(inspect(engine).get_table_names())
        with engine.connect() as connection:
            context = MigrationContext.configure(connection)
            assert context.get_current_revision() == HEAD_REVISION
            differences = compare_metadata(context, Base.metadata)
    finally:
        engine.dispose()
    assert tables >= {
        "JOB_EXECUTION_LOG",
        "JOB_STATUS_TRACE_LOG",
        "TASK_RESULT_STATISTICS_MINUTE",
        "TASK_RESULT_STATISTICS_HOUR",
        "TASK_RESULT_STATISTICS_DAY",
        "TASK_RUNNING_STATISTICS",
        "JOB_RUNNING_STATISTICS",
        "JOB_REGISTER_STATISTICS",
        "STATISTICS_COUNTED_RESULT",
    }
    # The migrations build exactly what the models describe (tables, columns, indexes).
    assert differences == []


def test_writer_persists_status_traces_in_the_background(engine: Engine) -> None:
    writer = TraceWriter(engine)
    writer.start()
    try:
        assert writer.record_status(
            job_name="job_a",
            task_id="t1",
            slave_id="agent-1",
            state="TASK_RUNNING",
            execution_type="READY",
            sharding_item="[0]",
            message="ok",
        )
        found = wait_for(
            lambda: queries.status_traces(engine, {"taskId": "t1"})["rows"], 5, message="trace"
        )
    finally:
        writer.stop(timeout_s=5)
    assert found[0]["state"] == "TASK_RUNNING"
    assert found[0]["originalTaskId"] == "t1"
    assert found[0]["shardingItems"] == "[0]"
    assert found[0]["creationTime"].endswith("Z")


def test_execution_start_then_complete_updates_one_row(engine: Engine) -> None:
    start = _record(1)
    _write(engine, start, start.finished(T0_MS + 120_000, "boom"))
    rows = queries.executions(engine, {})["rows"]
    assert len(rows) == 1
    assert rows[0]["success"] is False
    assert rows[0]["failureCause"] == {"plainText": "boom"}
    assert rows[0]["completeTime"] == "2023-11-14T22:15:20.000Z"


def test_complete_without_start_is_upserted_and_a_late_start_keeps_it(engine: Engine) -> None:
    start = _record(2)
    _write(engine, start.finished(T0_MS + 300_000))
    _write(engine, start)
    with Session(engine) as session:
        row = session.scalars(select(ExecutionLog)).one()
    assert row.is_success is True
    assert row.complete_time is not None


def test_a_completion_in_a_later_batch_updates_the_stored_row_and_keeps_its_start(
    engine: Engine,
) -> None:
    # One batch inserts a new run and updates a stored one (the writer's Core statements).
    _write(engine, _record(3))
    later = dataclasses.replace(_record(3), start_time_ms=T0_MS)  # a later leader's guess
    _write(engine, _record(4), later.finished(T0_MS + 900_000, "exit 2"))
    with Session(engine) as session:
        rows = {row.id: row for row in session.scalars(select(ExecutionLog))}
    done, going = rows["run-003"], rows["run-004"]
    assert done.start_time == datetime(2023, 11, 14, 22, 16, 20)  # T0 + 3 min, as stored
    assert done.complete_time == datetime(2023, 11, 14, 22, 28, 20)
    assert (done.is_success, done.failure_cause) == (False, "exit 2")
    assert going.start_time == datetime(2023, 11, 14, 22, 17, 20)
    assert (going.complete_time, going.is_success, going.failure_cause) == (None, None, None)


def test_paging_filters_sorting_and_time_range(engine: Engine) -> None:
    _write(engine, *[_record(n, job="job_a" if n % 2 else "job_b") for n in range(25)])
    page = queries.executions(engine, {"per_page": "10", "page": "3"})
    assert page["total"] == 25 and len(page["rows"]) == 5
    only_a = queries.executions(engine, {"jobName": "job_a", "sort": "startTime", "order": "desc"})
    assert only_a["total"] == 12
    times = [row["startTime"] for row in only_a["rows"]]
    assert times == sorted(times, reverse=True)
    ranged = queries.executions(
        engine,
        {"startTime": "2023-11-14 22:14:20", "endTime": "2023-11-14T22:18:20+00:00"},
    )
    assert ranged["total"] == 5
    assert queries.executions(engine, {"isSuccess": "true"})["total"] == 0
    assert queries.executions(engine, {"jobName": "", "ip": "10.0.0.1"})["total"] == 25


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"per_page": "x"}, "per_page"),
        ({"page": "0"}, "page"),
        ({"sort": "nope"}, "sort"),
        ({"order": "sideways"}, "order"),
        ({"startTime": "yesterday"}, "startTime"),
        ({"startTime": "2024-01-02 00:00:00", "endTime": "2024-01-01 00:00:00"}, "endTime"),
        ({"isSuccess": "maybe"}, "isSuccess"),
    ],
)
def test_bad_parameters_raise_invalid_request_naming_the_field(
    engine: Engine, params: dict[str, str], field: str
) -> None:
    with pytest.raises(InvalidRequest) as caught:
        queries.executions(engine, params)
    assert field in caught.value.fields
    assert caught.value.http_status == 400


def test_sql_injection_in_sort_is_refused_and_in_filters_is_harmless(engine: Engine) -> None:
    _write(engine, _record(1))
    with pytest.raises(InvalidRequest):
        queries.executions(engine, {"sort": "id; DROP TABLE JOB_EXECUTION_LOG"})
    with pytest.raises(InvalidRequest):
        queries.status_traces(engine, {"order": "asc, (SELECT 1)"})
    assert queries.executions(engine, {"jobName": "x' OR '1'='1"})["total"] == 0
    assert queries.executions(engine, {})["total"] == 1


def test_unreachable_database_holds_entries_and_writes_them_when_it_is_back(
    tmp_path: Path,
) -> None:
    # The database's folder does not exist yet: every connect fails (OperationalError).
    url = "sqlite:///" + str(tmp_path / "later" / "x.db")
    engine = create_engine(url)
    writer = TraceWriter(engine)
    writer.start()
    try:
        assert writer.record_status(job_name="j", task_id="t", state="TASK_FAILED")
        assert writer.record_execution(_record(1))
        wait_for(lambda: writer.problem, 5, message="the batch failed")
        assert writer.counters()["written"] == 0
        assert writer.counters()["pending"] == 2  # held, in the batch in hand
        assert writer.database.describe()["state"] == "down"
        (tmp_path / "later").mkdir()
        upgrade_to_head(url)  # the database is back
        writer.retry_now()
        wait_for(lambda: writer.counters()["written"] == 2, 5, message="held batch written")
        assert writer.database.describe()["state"] == "up"
        assert writer.database.describe()["lastOutage"]["seconds"] >= 0
    finally:
        writer.stop(timeout_s=5)
    assert writer.counters()["errors"] == 0
    assert queries.status_traces(engine, {})["total"] == 1
    engine.dispose()


def test_entries_held_for_an_unreachable_database_are_counted_as_dropped_at_stop(
    tmp_path: Path,
) -> None:
    engine = create_engine("sqlite:///" + str(tmp_path / "missing" / "x.db"))
    writer = TraceWriter(engine)
    writer.start()
    assert writer.record_status(job_name="j", task_id="t", state="TASK_FAILED")
    assert writer.record_execution(_record(1))
    wait_for(lambda: writer.problem, 5, message="the batch failed")
    writer.stop(timeout_s=1)
    assert writer.counters() == {"written": 0, "dropped": 2, "errors": 0, "pending": 0}
    engine.dispose()


def test_a_refused_entry_is_lost_alone(engine: Engine) -> None:
    writer = TraceWriter(engine)
    good = _record(1)
    bad = dataclasses.replace(_record(2), id="x" * 300)  # longer than the id column allows
    assert writer.record_execution(good)
    assert writer.record_execution(bad)
    writer.start()
    writer.stop(timeout_s=5)
    if engine.dialect.name == "sqlite":
        # SQLite does not enforce VARCHAR lengths: both are stored.
        assert writer.counters()["written"] == 2
    else:
        assert writer.counters()["written"] == 1
        assert writer.counters()["errors"] == 1
    assert queries.executions(engine, {"jobName": "job_a"})["rows"][0]["id"] == good.id


def test_a_full_buffer_drops_the_oldest_entries_counts_and_logs_them(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    writer = TraceWriter(engine, max_records=2)
    accepted = [writer.record_status(job_name="j", task_id=f"t{n}", state="X") for n in range(5)]
    assert accepted == [True, True, False, False, False]
    writer.start()
    writer.stop(timeout_s=5)
    assert writer.counters() == {"written": 2, "dropped": 3, "errors": 0, "pending": 0}
    # The newest history is kept.
    rows = queries.status_traces(engine, {"jobName": "j"})["rows"]
    assert sorted(row["taskId"] for row in rows) == ["t3", "t4"]
    # Logged at most once per interval, each line naming how many: here the first drop at once,
    # the two after it when the writer stopped.
    lines = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert lines == [
        "trace writer: 1 dropped (buffer full while the database was down); 1 dropped in all",
        "trace writer: 2 dropped (buffer full while the database was down); 3 dropped in all",
    ]


def test_statistics_queries_answer_empty_tables(engine: Engine) -> None:
    now = datetime.now(UTC) - timedelta(seconds=1)
    assert queries.task_running_statistics(engine, "lastWeek", now) == []
    assert queries.job_running_statistics(engine, "lastHour", now) == []
    assert queries.job_register_statistics(engine) == []
    assert queries.task_result_summary(engine, "lastWeek", now)["successCount"] == 0


def _two_milliseconds_later() -> Callable[[], bool]:
    until = datetime.now(UTC) + timedelta(milliseconds=2)
    return lambda: datetime.now(UTC) > until


def test_trace_rows_get_ids_that_sort_in_the_order_they_were_recorded(engine: Engine) -> None:
    # Issue 29: ids in time order put the rows of one batch on the same pages of the primary
    # key's index (random ids cost SQLite a page write per row).
    writer = TraceWriter(engine, idle_wait_s=0.05, linger_s=0.0)
    writer.start()
    recorded: list[str] = []
    try:
        for i in range(40):
            if i % 10 == 0:
                # Let the clock's millisecond move on now and then.
                wait_for(_two_milliseconds_later(), 1)
            task = f"t{i:02d}"
            writer.record_status(job_name="job_a", task_id=task, state="TASK_RUNNING")
            recorded.append(task)
        wait_for(lambda: writer.written == 40, 10, message="40 rows written")
    finally:
        writer.stop(timeout_s=5)
    with Session(engine) as session:
        rows = session.execute(select(StatusTraceLog.id, StatusTraceLog.task_id)).all()
    ids = [row.id for row in rows]
    assert len(set(ids)) == 40
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    by_id = [row.task_id for row in sorted(rows, key=lambda row: row.id)]
    # Within a millisecond the order is the random part's; across the pauses it is time's.
    assert [t[:2] for t in by_id] == [t[:2] for t in recorded]


def test_a_sqlite_trace_file_is_written_ahead_so_readers_never_hold_up_the_writer(
    tmp_path: Path,
) -> None:
    engine = create_trace_engine(f"sqlite:///{tmp_path}/data/trace.db")
    try:
        upgrade_to_head(engine)
        _write(engine, _record(1))
        with engine.connect() as reader:
            assert reader.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert reader.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
            # A reader in the middle of its transaction (an API page being read). With the
            # rollback journal the writer's commit would wait for it (the busy timeout, then
            # "database is locked"); with the write-ahead log it commits at once, and the
            # reader goes on seeing the state its transaction began with.
            reader.exec_driver_sql("BEGIN")
            assert reader.execute(select(ExecutionLog.id)).scalars().all() == ["run-001"]
            writer = _write(engine, _record(2))
            assert writer.counters()["errors"] == 0
            assert reader.execute(select(ExecutionLog.id)).scalars().all() == ["run-001"]
            reader.rollback()
            ids = reader.execute(select(ExecutionLog.id)).scalars().all()
            assert sorted(ids) == ["run-001", "run-002"]
        assert (tmp_path / "data" / "trace.db-wal").exists()
    finally:
        engine.dispose()


def test_a_replica_loads_alembic_only_when_its_statistics_migrate() -> None:
    # Alembic (with Mako and Pygments) cost every replica about 0.2 s of CPU at its start; only
    # the leader's statistics thread needs it, in `upgrade_to_head`.
    probe = (
        "import sys, scheduler.__main__, scheduler.wiring.replica, scheduler.wiring.term\n"
        "print(sorted(m for m in ('alembic', 'mako', 'pygments') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout

"""Task result counters and samples: ZooKeeper journal -> database, exactly once, on a real
ZooKeeper and on SQLite and a real PostgreSQL server."""

from __future__ import annotations

import base64
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, select
from sqlalchemy.orm import Session

from scheduler.leader.mesos.status import StatusHandler
from scheduler.leader.statistics import ResultCounters, ResultJournal, Sampler, queries
from scheduler.leader.statistics.component import Statistics
from scheduler.leader.statistics.counters import StatisticInterval, period_start
from scheduler.leader.statistics.models import (
    CountedResult,
    JobRegisterStatistics,
    JobRunningStatistics,
    TaskResultStatistics,
    TaskResultStatisticsDay,
    TaskResultStatisticsHour,
    TaskResultStatisticsMinute,
    TaskRunningStatistics,
)
from scheduler.model.errors import NotLeader
from scheduler.model.settings import load_settings
from scheduler.model.task_id import LaunchedTask, TaskId, TaskType
from scheduler.storage.layout import RESULTS, RUNNING
from scheduler.storage.registry import Registry
from scheduler.storage.result_journal import bucket_name
from scheduler.storage.state import RunningTask
from scheduler.storage.term_stores import TermStores
from scheduler.storage.transactions import Fence, FencedWriter
from tests.support.bodies import job_config
from tests.support.waiting import wait_for

T0 = datetime(2024, 3, 1, 10, 0, 0)  # naive UTC


def _epoch(moment: datetime) -> float:
    return (moment - datetime(1970, 1, 1)).total_seconds()


def _journal(
    registry: Registry, fence: Fence, journal: ResultJournal, at: datetime, *results: bool
) -> None:
    writer = FencedWriter(registry, fence)
    for success in results:
        writer.commit("journal a result", journal.ops(success, now=_epoch(at)))


def _rows(engine: Engine, table: type[TaskResultStatistics]) -> dict[datetime, tuple[int, int]]:
    with Session(engine) as session:
        return {
            row.statistics_time: (row.success_count, row.failed_count)
            for row in session.scalars(select(table))
        }


def _nonzero(engine: Engine, table: type[TaskResultStatistics]) -> dict[datetime, tuple[int, int]]:
    return {at: counts for at, counts in _rows(engine, table).items() if counts != (0, 0)}


def _journaled(registry: Registry) -> int:
    return sum(len(registry.children(f"{RESULTS}/{b}")) for b in registry.children(RESULTS))


def test_each_result_is_journaled_in_the_bucket_of_its_own_minute(
    registry: Registry, fence: Fence
) -> None:
    journal = ResultJournal(registry)
    moments = [
        T0 + timedelta(seconds=59.9),
        T0 + timedelta(minutes=1),
        T0 + timedelta(seconds=30),  # back to the first minute (a clock stepped back)
        T0 + timedelta(minutes=1, seconds=1),
    ]
    for moment in moments:
        _journal(registry, fence, journal, moment, True)
    assert {
        bucket: len(registry.children(f"{RESULTS}/{bucket}"))
        for bucket in registry.children(RESULTS)
    } == {bucket_name(_epoch(T0)): 2, bucket_name(_epoch(T0 + timedelta(minutes=1))): 2}


def test_journaled_results_land_in_minute_hour_and_day_rows(
    engine: Engine, registry: Registry, fence: Fence
) -> None:
    journal = ResultJournal(registry)
    _journal(registry, fence, journal, T0 + timedelta(seconds=5), True, True, False)
    _journal(registry, fence, journal, T0 + timedelta(minutes=1, seconds=1), True)
    assert _journaled(registry) == 4
    counters = ResultCounters(engine, registry, fence, journal)
    assert counters.roll(T0 + timedelta(minutes=1, seconds=30)) == 4
    assert _journaled(registry) == 0
    assert _rows(engine, TaskResultStatisticsMinute) == {
        T0: (2, 1),
        T0 + timedelta(minutes=1): (1, 0),
    }
    # A new database also gets a zero row for the hour and the day that just ended.
    assert _rows(engine, TaskResultStatisticsHour) == {
        T0 - timedelta(hours=1): (0, 0),
        T0: (3, 1),
    }
    assert _rows(engine, TaskResultStatisticsDay) == {
        T0.replace(hour=0) - timedelta(days=1): (0, 0),
        T0.replace(hour=0): (3, 1),
    }
    # A later roll adds to the same rows (one row per period) and adds nothing twice.
    _journal(registry, fence, journal, T0 + timedelta(minutes=1, seconds=40), False)
    assert counters.roll(T0 + timedelta(minutes=1, seconds=50)) == 1
    assert counters.roll(T0 + timedelta(minutes=1, seconds=55)) == 0
    assert _rows(engine, TaskResultStatisticsMinute)[T0 + timedelta(minutes=1)] == (1, 1)
    assert _nonzero(engine, TaskResultStatisticsHour) == {T0: (3, 2)}


def test_a_leader_dying_between_the_database_and_zookeeper_counts_nothing_twice(
    engine: Engine, registry: Registry, fence: Fence, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = ResultJournal(registry)
    _journal(registry, fence, journal, T0, True, False, True)
    first = ResultCounters(engine, registry, fence, journal)

    def die(*_args: Any) -> None:
        raise RuntimeError("killed after the database commit")

    monkeypatch.setattr(first, "_delete", die)
    with pytest.raises(RuntimeError):
        first.roll(T0 + timedelta(seconds=10))
    assert _journaled(registry) == 3  # still in ZooKeeper
    assert _nonzero(engine, TaskResultStatisticsMinute) == {T0: (2, 1)}
    # The next leader finds the entries already counted: it only deletes them.
    _journal(registry, fence, journal, T0 + timedelta(seconds=20), True)
    second = ResultCounters(engine, registry, fence, ResultJournal(registry))
    assert second.roll(T0 + timedelta(seconds=30)) == 1
    assert second.already_counted == 3
    assert _journaled(registry) == 0
    assert _nonzero(engine, TaskResultStatisticsMinute) == {T0: (3, 1)}


def test_results_wait_in_zookeeper_while_the_database_is_down(
    engine: Engine, registry: Registry, fence: Fence, tmp_path: Any
) -> None:
    journal = ResultJournal(registry)
    _journal(registry, fence, journal, T0, True, False)
    down = create_engine(f"sqlite:///{tmp_path}/missing/db.sqlite")
    with pytest.raises(Exception, match="unable to open database file"):
        ResultCounters(down, registry, fence, journal).roll(T0 + timedelta(seconds=5))
    down.dispose()
    assert _journaled(registry) == 2
    assert ResultCounters(engine, registry, fence, journal).roll(T0 + timedelta(seconds=9)) == 2
    assert _nonzero(engine, TaskResultStatisticsMinute) == {T0: (1, 1)}


def test_a_deposed_leader_cannot_delete_the_journal(
    engine: Engine, registry: Registry, fence: Fence
) -> None:
    journal = ResultJournal(registry)
    _journal(registry, fence, journal, T0, True)
    deposed = Fence(fence.node_path, lambda: False)
    with pytest.raises(NotLeader):
        ResultCounters(engine, registry, deposed, journal).roll(T0 + timedelta(seconds=5))
    assert _journaled(registry) == 1
    # Counted once all the same when the real leader rolls.
    assert ResultCounters(engine, registry, fence, journal).roll(T0 + timedelta(seconds=6)) == 0
    assert _nonzero(engine, TaskResultStatisticsMinute) == {T0: (1, 0)}
    assert _journaled(registry) == 0


def test_ended_periods_without_results_get_zero_rows_also_across_a_gap(
    engine: Engine, registry: Registry, fence: Fence
) -> None:
    journal = ResultJournal(registry)
    counters = ResultCounters(engine, registry, fence, journal)
    # A new database: only the period that just ended gets a row (no made-up history).
    counters.roll(T0 + timedelta(seconds=5))
    assert _rows(engine, TaskResultStatisticsMinute) == {T0 - timedelta(minutes=1): (0, 0)}
    # No leader for five minutes: the gap is back-filled with zeros.
    _journal(registry, fence, journal, T0 + timedelta(minutes=5, seconds=1), True)
    counters.roll(T0 + timedelta(minutes=5, seconds=10))
    minutes = _rows(engine, TaskResultStatisticsMinute)
    assert sorted(minutes) == [T0 + timedelta(minutes=m) for m in range(-1, 6)]
    assert minutes[T0 + timedelta(minutes=5)] == (1, 0)
    assert sum(s for s, _f in minutes.values()) == 1
    summary = queries.task_result_summary(
        engine, "lastMinute", T0 + timedelta(minutes=5, seconds=10)
    )
    assert (summary["successCount"], summary["failedCount"]) == (0, 0)  # minute 4 (ended)
    summary = queries.task_result_summary(
        engine, "lastMinute", T0 + timedelta(minutes=6, seconds=1)
    )
    assert summary["successCount"] == 1
    assert (
        queries.task_result_summary(engine, "online", T0 + timedelta(days=1))["successCount"] == 1
    )


def test_counted_names_are_pruned_after_two_days(
    engine: Engine, registry: Registry, fence: Fence
) -> None:
    journal = ResultJournal(registry)
    _journal(registry, fence, journal, T0, True)
    counters = ResultCounters(engine, registry, fence, journal)
    counters.roll(T0 + timedelta(seconds=1))
    with Session(engine) as session:
        assert len(list(session.scalars(select(CountedResult)))) == 1
    counters.roll(T0 + timedelta(days=2, minutes=1))
    with Session(engine) as session:
        assert list(session.scalars(select(CountedResult))) == []


def test_sampler_writes_one_row_per_period_and_back_fills_with_the_last_value(
    engine: Engine, registry: Registry
) -> None:
    for job, tasks in (("a", 2), ("b", 1)):
        for n in range(tasks):
            registry.create(f"{RUNNING}/{job}/{job}@-@{n}@-@READY@-@s0@-@u{n}", b"{}")
    registry.ensure(f"{RUNNING}/idle")  # a job folder without tasks: not running
    for job in ("a", "b", "c"):
        registry.create(f"/config/job/{job}", b"{}")
    sampler = Sampler(engine, registry)
    assert sampler.sample(T0 + timedelta(seconds=1))
    assert not sampler.sample(T0 + timedelta(seconds=30))  # same minute
    # Another leader in the same minute finds it sampled.
    assert not Sampler(engine, registry).sample(T0 + timedelta(seconds=40))
    registry.delete(f"{RUNNING}/b")
    assert Sampler(engine, registry).sample(T0 + timedelta(minutes=3, seconds=2))

    def counts(table: Any, column: str) -> dict[datetime, int]:
        with Session(engine) as session:
            return {r.statistics_time: getattr(r, column) for r in session.scalars(select(table))}

    minute = timedelta(minutes=1)
    assert counts(TaskRunningStatistics, "running_count") == {
        T0: 3,
        T0 + minute: 3,  # back-filled: no leader sampled it
        T0 + 2 * minute: 3,
        T0 + 3 * minute: 2,
    }
    assert counts(JobRunningStatistics, "running_count") == {
        T0: 2,
        T0 + minute: 2,
        T0 + 2 * minute: 2,
        T0 + 3 * minute: 1,
    }
    assert counts(JobRegisterStatistics, "registered_count") == {T0.replace(hour=0): 3}
    week = queries.task_running_statistics(engine, "lastWeek", T0 + 4 * minute)
    assert [row["runningCount"] for row in week] == [3, 3, 3, 2]
    assert week[0]["statisticsTime"] == "2024-03-01T10:00:00.000Z"
    registers = queries.job_register_statistics(engine)
    assert [row["registeredCount"] for row in registers] == [3]


# -- the status handler journals a result exactly when it records the state change ----------


def _status(task_id: str, state: str, message: str = "") -> dict[str, Any]:
    return {
        "task_id": {"value": task_id},
        "state": state,
        "message": message,
        "uuid": base64.b64encode(b"u").decode(),
    }


def _register(stores: TermStores, name: str, execution_type: str) -> None:
    job = job_config(name, jobExecutionType=execution_type, cron="0/5 * * * * ?", strict=False)
    stores.registry.create(f"/config/job/{job.job_name}", job.to_bytes())


def _handler(stores: TermStores, journal: ResultJournal | None) -> StatusHandler:
    return StatusHandler(stores, lambda _t: True, lambda: None, journal)


def _running(stores: TermStores, job: str, item: int, idle: bool = False) -> str:
    tid = TaskId.new(job, item, TaskType.READY, "agent-1")
    stores.running.add(RunningTask(str(tid), "agent-1", idle=idle))
    return str(tid)


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("TASK_FINISHED", "s"),
        ("TASK_FAILED", "f"),
        ("TASK_LOST", "f"),
        ("TASK_ERROR", "f"),
        ("TASK_KILLED", None),
    ],
)
def test_a_terminal_update_journals_one_result_even_when_mesos_resends_it(
    stores: TermStores, registry: Registry, state: str, expected: str | None
) -> None:
    journal = ResultJournal(registry)
    handler = _handler(stores, journal)
    task_id = _running(stores, "job", 0)
    assert handler.handle(_status(task_id, state))
    assert handler.handle(_status(task_id, state))  # resent after a crash before the ack
    names = [n for b in registry.children(RESULTS) for n in registry.children(f"{RESULTS}/{b}")]
    assert [n.rsplit("-", 1)[1] for n in names] == ([expected] if expected else [])
    assert stores.running.tasks("job") == []


def test_a_stale_update_after_the_end_neither_revives_the_task_nor_counts_it_twice(
    stores: TermStores, registry: Registry
) -> None:
    _register(stores, "job", "TRANSIENT")
    journal = ResultJournal(registry)
    handler = _handler(stores, journal)
    task_id = _running(stores, "job", 0)
    assert handler.handle(_status(task_id, "TASK_RUNNING"))
    assert handler.handle(_status(task_id, "TASK_FINISHED"))
    # Mesos retries a RUNNING that raced with its ack, then retries the FINISHED too.
    assert handler.handle(_status(task_id, "TASK_RUNNING"))
    assert stores.running.tasks("job") == []
    assert handler.handle(_status(task_id, "TASK_FINISHED"))
    assert _journaled(registry) == 1


def test_a_daemon_run_completing_journals_one_success(
    stores: TermStores, registry: Registry, fence: Fence
) -> None:
    _register(stores, "daemon", "DAEMON")
    journal = ResultJournal(registry)
    handler = _handler(stores, journal)
    task_id = _running(stores, "daemon", 0)
    handler.handle(_status(task_id, "TASK_RUNNING"))
    for _run in range(2):
        assert handler.handle(_status(task_id, "TASK_RUNNING", "BEGIN"))
        assert handler.handle(_status(task_id, "TASK_RUNNING", "COMPLETE"))
        assert handler.handle(_status(task_id, "TASK_RUNNING", "COMPLETE"))  # resent
    assert _journaled(registry) == 2


def test_a_failed_state_write_journals_nothing(
    stores: TermStores, registry: Registry, fence: Fence
) -> None:
    journal = ResultJournal(registry)
    task_id = _running(stores, "job", 1)
    deposed = TermStores.build(registry, Fence(fence.node_path, lambda: False), "UTC", 1000)
    assert not _handler(deposed, journal).handle(_status(task_id, "TASK_FINISHED"))
    assert _journaled(registry) == 0
    assert journal.pending == 0
    assert [t.task_id for t in stores.running.tasks("job")] == [task_id]


def test_the_journal_bucket_is_the_utc_minute() -> None:
    assert bucket_name(_epoch(T0 + timedelta(seconds=59))) == "202403011000"
    assert period_start(StatisticInterval.HOUR, T0 + timedelta(minutes=59)) == T0


# -- the component: STAGING rows at launch, original task ids, results end to end ----------


def test_component_traces_launches_with_original_task_ids_and_counts_results(
    trace_url: str, registry: Registry, fence: Fence, stores: TermStores
) -> None:
    settings = load_settings({}, {}, {"event_trace_rdb_url": trace_url})
    statistics = Statistics(settings, registry, fence)
    handler = _handler(stores, statistics.journal)
    handler.listeners.append(statistics.on_status)
    statistics.start()
    try:
        wait_for(lambda: statistics.engine is not None, 20, message="schema migrated")
        failed = _running(stores, "job", 0)
        statistics.on_launched([LaunchedTask(TaskId.parse(failed), "agent-1", failed)])
        assert handler.handle(_status(failed, "TASK_RUNNING"))
        assert handler.handle(_status(failed, "TASK_FAILED"))
        # The failover launch that replaces it names it as its original task.
        relaunch = str(TaskId.new("job", 0, TaskType.FAILOVER, "agent-2"))
        stores.running.add(RunningTask(relaunch, "agent-2"))
        statistics.on_launched([LaunchedTask(TaskId.parse(relaunch), "agent-2", failed)])
        assert handler.handle(_status(relaunch, "TASK_FINISHED"))
        engine = statistics.engine
        assert engine is not None

        def rows() -> list[tuple[str, str, str]] | None:
            found = queries.status_traces(engine, {"jobName": "job", "per_page": "100"})["rows"]
            return (
                sorted((r["taskId"], r["state"], r["originalTaskId"]) for r in found)
                if len(found) == 5
                else None
            )

        assert wait_for(rows, 10, message="five trace rows") == sorted(
            [
                (failed, "TASK_STAGING", failed),
                (failed, "TASK_RUNNING", failed),
                (failed, "TASK_FAILED", failed),
                (relaunch, "TASK_STAGING", failed),
                (relaunch, "TASK_FINISHED", failed),
            ]
        )
        # The results reach the tables through the journal within a roll interval.
        wait_for(
            lambda: (
                _nonzero(engine, TaskResultStatisticsDay)
                and list(_nonzero(engine, TaskResultStatisticsDay).values()) == [(1, 1)]
            ),
            20,
            message="one success and one failure counted",
        )
        # The roll commits the counts, then deletes the journal entries, then updates the
        # pending figure it reports: the tables can show the counts a moment before the rest.
        wait_for(lambda: _journaled(registry) == 0, 10, message="journal entries deleted")
        wait_for(
            lambda: statistics.info()["journal"] == {"pending": 0, "dropped": 0},
            10,
            message="journal reported empty",
        )
    finally:
        statistics.stop()

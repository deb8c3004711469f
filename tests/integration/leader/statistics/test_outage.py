"""The trace database down under the statistics component: SQLite's disk full (a real SQLITE_FULL,
made with `PRAGMA max_page_count`) and a real PostgreSQL server stopped, on a real ZooKeeper.

Status handling goes on, trace entries wait in the bounded buffer and are written in order when
the database is back, what the bound made drop is counted and logged, results wait in the
ZooKeeper journal, samples wait in the sampler's buffer, and `info()` (the leader's /health)
says the database is down and since when, then that it is back.
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, event, make_url, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from deploy.postgres import PostgresServer
from scheduler.leader.mesos.status import StatusHandler
from scheduler.leader.statistics import Sampler, create_trace_engine, upgrade_to_head
from scheduler.leader.statistics.component import Statistics
from scheduler.leader.statistics.models import (
    StatusTraceLog,
    TaskResultStatisticsMinute,
    TaskRunningStatistics,
)
from scheduler.leader.statistics.outage import STALL_S
from scheduler.model.settings import load_settings
from scheduler.model.task_id import LaunchedTask, TaskId, TaskType
from scheduler.storage import result_journal
from scheduler.storage.layout import RESULTS, RUNNING
from scheduler.storage.registry import Registry
from scheduler.storage.result_journal import ResultJournal
from scheduler.storage.state import RunningTask
from scheduler.storage.term_stores import TermStores
from scheduler.storage.transactions import Fence, FencedWriter
from tests.support.tcpproxy import TcpProxy
from tests.support.waiting import wait_for

T0 = datetime(2024, 3, 1, 10, 0, 0)  # naive UTC


class _Disk:
    """SQLite's disk, made full on demand: every connection taken from a pool gets
    `max_page_count` at the file's current size, so any write that needs a new page fails with
    SQLITE_FULL ("database or disk is full"), as on a full file system."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self.full = threading.Event()

    def on_checkout(self, dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("PRAGMA database_list")
            if not any(row[2] == self.path for row in cursor.fetchall()):
                return  # another test's engine
            if self.full.is_set():
                pages = cursor.execute("PRAGMA page_count").fetchone()[0]
                cursor.execute(f"PRAGMA max_page_count = {pages}")
            else:
                cursor.execute("PRAGMA max_page_count = 1073741823")
        finally:
            cursor.close()


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[_Disk]:
    disk = _Disk(tmp_path / "trace.db")
    event.listen(Engine, "checkout", disk.on_checkout)
    yield disk
    event.remove(Engine, "checkout", disk.on_checkout)


def _status(task_id: str, state: str) -> dict[str, Any]:
    return {"task_id": {"value": task_id}, "state": state, "uuid": base64.b64encode(b"u").decode()}


def _journaled(registry: Registry) -> int:
    return sum(len(registry.children(f"{RESULTS}/{b}")) for b in registry.children(RESULTS))


def _traced(engine: Engine, job: str) -> list[str]:
    """Task ids of the job's trace rows, in the order they were recorded."""
    with Session(engine) as session:
        rows = session.execute(
            select(StatusTraceLog.task_id, StatusTraceLog.creation_time).where(
                StatusTraceLog.job_name == job
            )
        ).all()
    return [task for task, _ in sorted(rows, key=lambda row: row[1])]


def _counted(engine: Engine) -> int:
    with Session(engine) as session:
        return sum(r.success_count for r in session.scalars(select(TaskResultStatisticsMinute)))


class _Run:
    """Tasks of one job through a real status handler and the statistics listeners."""

    def __init__(self, stores: TermStores, statistics: Statistics, job: str) -> None:
        self.stores = stores
        self.statistics = statistics
        self.job = job
        self.handler = StatusHandler(stores, lambda _t: True, lambda: None, statistics.journal)
        self.handler.listeners.append(statistics.on_status)
        self.task_ids: list[str] = []

    def one(self) -> None:
        """A task launched (its STAGING row), then finished (journaled, its FINISHED row)."""
        parsed = TaskId.new(self.job, len(self.task_ids), TaskType.READY, "agent-1")
        task_id = str(parsed)
        self.stores.running.add(RunningTask(task_id, "agent-1"))
        self.statistics.on_launched([LaunchedTask(parsed, "agent-1", task_id)])
        assert self.handler.handle(_status(task_id, "TASK_FINISHED"))
        self.task_ids.append(task_id)


def test_sqlite_disk_full_holds_traces_drops_the_oldest_beyond_the_bound_and_writes_the_rest(
    disk: _Disk,
    registry: Registry,
    fence: Fence,
    stores: TermStores,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = load_settings(
        {}, {}, {"event_trace_rdb_url": f"sqlite:///{disk.path}", "trace_buffer_max_records": "100"}
    )
    statistics = Statistics(settings, registry, fence)
    statistics.start()
    try:
        engine = wait_for(lambda: statistics.engine, 20, message="schema migrated")
        before = _Run(stores, statistics, "before")
        for _ in range(3):
            before.one()
        wait_for(lambda: len(_traced(engine, "before")) == 6, 10, message="traces written")
        assert statistics.info()["state"] == "up"

        disk.full.set()
        during = _Run(stores, statistics, "during")
        # Status handling goes on: each task leaves the running state in ZooKeeper and its
        # result is journaled there. The first rows may still fit in the file's last pages;
        # tasks go on until a write needs a page the disk does not have.

        def one_more_until_down() -> dict[str, Any] | None:
            during.one()
            info = statistics.info()
            return info if info["state"] == "down" else None

        down = wait_for(one_more_until_down, 20, interval_s=0.05, message="the outage in info()")
        assert "database or disk is full" in down["problem"]
        assert down["downSince"].endswith("Z")
        assert len(during.task_ids) < 100
        while len(during.task_ids) < 100:
            during.one()
        assert stores.running.tasks("during") == []
        assert _journaled(registry) >= 1  # waiting for the database in ZooKeeper
        # 200 entries (a STAGING and a FINISHED row per task) against a bound of 100.
        info = statistics.info()
        assert info["trace"]["pending"] == 100
        assert info["trace"]["max"] == 100
        assert info["trace"]["dropped"] > 0
        written_before = len(_traced(engine, "during"))
        assert written_before + info["trace"]["dropped"] + 100 == 200

        disk.full.clear()
        wait_for(lambda: statistics.info()["trace"]["pending"] == 0, 20, message="held written")
        up = wait_for(
            lambda: (lambda i: i if i["state"] == "up" else None)(statistics.info()),
            10,
            message="back in info()",
        )
        assert up["lastOutage"]["seconds"] > 0
        assert up["outages"] == 1
        # Nothing silently lost: every entry is written or counted as dropped, in order, and
        # the newest ones are the ones kept.
        recorded = [task for task in during.task_ids for _ in ("STAGING", "FINISHED")]
        traced = _traced(engine, "during")
        assert len(traced) + up["trace"]["dropped"] == len(recorded) == 200
        assert up["trace"]["errors"] == 0
        assert traced == sorted(traced, key=recorded.index)  # in the order recorded
        assert traced[-75:] == recorded[-75:]
        # Results waited in ZooKeeper and are counted now, every one.
        wait_for(lambda: _counted(engine) == 103, 20, message="every result counted")
        assert statistics.info()["journal"]["dropped"] == 0
        assert _journaled(registry) == 0
        lines = [r.getMessage() for r in caplog.records]
        assert any("trace writer:" in line and "dropped in all" in line for line in lines)
        assert any("back after" in line for line in lines)
    finally:
        statistics.stop()


def test_samples_taken_while_the_database_is_down_are_written_when_it_is_back(
    postgres: PostgresServer, postgres_url: str, registry: Registry
) -> None:
    engine = create_trace_engine(postgres_url)
    upgrade_to_head(engine)
    registry.create(f"{RUNNING}/a/a@-@0@-@READY@-@s0@-@u0", b"{}")
    sampler = Sampler(engine, registry, max_rows=4)
    assert sampler.sample(T0)
    postgres.stop()
    try:
        for minute, count in enumerate([2, 3, 1, 5], start=1):
            registry.delete(f"{RUNNING}/a")
            for n in range(count):
                registry.create(f"{RUNNING}/a/a@-@{n}@-@READY@-@s0@-@u{n}", b"{}")
            sampler.observe(T0 + timedelta(minutes=minute, seconds=1))
            with pytest.raises(OperationalError):
                sampler.write()
        # Two rows a minute against a bound of four: the two oldest minutes' were dropped.
        assert (sampler.pending, sampler.dropped) == (4, 4)
    finally:
        postgres.start()
    assert sampler.write()
    assert sampler.pending == 0
    with Session(engine) as session:
        rows = {
            r.statistics_time: r.running_count
            for r in session.scalars(select(TaskRunningStatistics))
        }
    engine.dispose()
    # The minutes kept have the count read at their start; the dropped ones are back-filled
    # with the last value written before them, as for a time without a leader.
    assert rows == {
        T0: 1,
        T0 + timedelta(minutes=1): 1,
        T0 + timedelta(minutes=2): 1,
        T0 + timedelta(minutes=3): 1,
        T0 + timedelta(minutes=4): 5,
    }


def test_postgresql_stopped_and_started_again(
    postgres: PostgresServer,
    postgres_url: str,
    registry: Registry,
    fence: Fence,
    stores: TermStores,
) -> None:
    settings = load_settings({}, {}, {"event_trace_rdb_url": postgres_url})
    statistics = Statistics(settings, registry, fence)
    statistics.start()
    try:
        engine = wait_for(lambda: statistics.engine, 20, message="schema migrated")
        run = _Run(stores, statistics, "job")
        run.one()
        wait_for(lambda: len(_traced(engine, "job")) == 2, 10, message="traces written")
        postgres.stop()
        try:
            # Nothing is being written: the statistics thread's probe finds the outage.
            down = wait_for(
                lambda: (lambda i: i if i["state"] == "down" else None)(statistics.info()),
                15,
                message="the outage in info()",
            )
            assert "OperationalError" in down["problem"]
            for _ in range(20):
                run.one()
            assert stores.running.tasks("job") == []
        finally:
            postgres.start()
        wait_for(lambda: len(_traced(engine, "job")) == 42, 20, message="held traces written")
        assert _traced(engine, "job") == [t for t in run.task_ids for _ in (1, 2)]
        wait_for(lambda: _counted(engine) == 21, 20, message="every result counted")
        info = wait_for(
            lambda: (lambda i: i if i["state"] == "up" else None)(statistics.info()),
            10,
            message="back in info()",
        )
        assert info["trace"]["dropped"] == 0
        assert info["lastOutage"]["seconds"] > 0
    finally:
        statistics.stop()


def test_postgresql_behind_a_silent_partition_is_down_after_the_stall_and_loses_nothing(
    postgres: PostgresServer,
    postgres_url: str,
    registry: Registry,
    fence: Fence,
    stores: TermStores,
) -> None:
    """The database's host gone from the network without a reset (a proxy that forwards
    nothing more, either way): calls on open connections wait for ever, so nothing fails; the
    calls in flight for STALL_S say the database is down, from when they began."""
    proxy = TcpProxy("127.0.0.1", int(make_url(postgres_url).port or 0))
    url = make_url(postgres_url).set(port=proxy.port).render_as_string(hide_password=False)
    settings = load_settings({}, {}, {"event_trace_rdb_url": url})
    statistics = Statistics(settings, registry, fence)
    statistics.start()
    try:
        engine = wait_for(lambda: statistics.engine, 20, message="schema migrated")
        run = _Run(stores, statistics, "job")
        run.one()
        wait_for(lambda: len(_traced(engine, "job")) == 2, 10, message="traces written")
        proxy.cut(silent=True)
        cut_at = time.time()
        try:
            for _ in range(10):
                run.one()  # status handling goes on
            assert stores.running.tasks("job") == []
            down = wait_for(
                lambda: (lambda i: i if i["state"] == "down" else None)(statistics.info()),
                STALL_S + 10,
                message="the partition in info()",
            )
            # Seen by a call stalled on an open connection, or (when the pool opened a new one
            # meanwhile, as under load) by that connection's own timeout: either is the
            # partition, never an error the database gave.
            assert "no answer for" in down["problem"] or "ConnectionTimeout" in down["problem"], (
                down
            )
            # Down from the call that did not return, not from when it was noticed.
            since = statistics.down_since()
            assert since is not None
            assert cut_at - 1 <= since <= cut_at + 6
        finally:
            proxy.restore()
        wait_for(lambda: len(_traced(engine, "job")) == 22, 30, message="held traces written")
        wait_for(lambda: _counted(engine) == 11, 20, message="every result counted")
        info = wait_for(
            lambda: (lambda i: i if i["state"] == "up" else None)(statistics.info()),
            10,
            message="back in info()",
        )
        assert info["trace"]["dropped"] == 0
        assert info["lastOutage"]["seconds"] >= STALL_S
    finally:
        statistics.stop()
        proxy.close()


def test_a_full_result_journal_counts_and_logs_what_it_could_not_keep(
    registry: Registry,
    fence: Fence,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Results wait in ZooKeeper while the database is down, up to MAX_PENDING (20,000; 3 here):
    beyond, a result is not journaled, counted, and logged at most every 10 s with how many."""
    monkeypatch.setattr(result_journal, "MAX_PENDING", 3)
    journal = ResultJournal(registry)
    writer = FencedWriter(registry, fence)
    kept = 0
    for _ in range(6):
        ops = journal.ops(True)
        if ops:
            writer.commit("journal a result", ops)
            kept += 1
    assert (kept, journal.pending, journal.dropped) == (3, 3, 3)
    assert _journaled(registry) == 3
    journal.log_drops()  # the statistics thread's tick: what was not logged yet
    journal.log_drops()  # nothing new: no line
    lines = [r.getMessage() for r in caplog.records if "result journal full" in r.getMessage()]
    assert lines == [
        "statistics: result journal full (3 entries waiting for the database): 1 results not "
        "counted (1 in all)",
        "statistics: result journal full (3 entries waiting for the database): 2 results not "
        "counted (3 in all)",
    ]

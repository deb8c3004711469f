"""Sampled statistics, as the original's StatisticManager kept them (TASK_RUNNING_STATISTICS,
JOB_RUNNING_STATISTICS, JOB_REGISTER_STATISTICS): running tasks and jobs every minute,
registered jobs every day, read from ZooKeeper (the state every leader shares, not leader
memory).

A sample is a row at the period's start (naive UTC). One row per period: a leader that finds
the period already sampled (by the previous leader) leaves it. Periods without a leader are
back-filled with the latest row's value, as the original did (`findBlankStatisticTimes`), up to
`BACKFILL_LIMIT` periods back; tasks keep running while no leader runs, so the last value is the
best estimate, and the endpoints' charts stay continuous.

Reading and writing are apart: `observe` reads ZooKeeper when a period starts and buffers its
rows (at most `max_rows`; beyond, the oldest are dropped, counted and logged); `write` writes
the buffered rows in order and keeps them when the database fails, so a database outage costs
no sample (each period gets the count read at its start, not the last value before the outage).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import cast

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from scheduler.leader.statistics.counters import StatisticInterval, period_start, utc_naive
from scheduler.leader.statistics.models import (
    JobRegisterStatistics,
    JobRunningStatistics,
    TaskRunningStatistics,
)
from scheduler.leader.statistics.outage import DropLog
from scheduler.storage.layout import JOBS, RUNNING, running_folder
from scheduler.storage.registry import Registry

__all__ = ["BACKFILL_LIMIT", "Sampler"]

log = logging.getLogger(__name__)

BACKFILL_LIMIT = {StatisticInterval.MINUTE: 7 * 24 * 60, StatisticInterval.DAY: 366}
_LENGTH = {StatisticInterval.MINUTE: timedelta(minutes=1), StatisticInterval.DAY: timedelta(days=1)}
_Row = TaskRunningStatistics | JobRunningStatistics | JobRegisterStatistics
_Table = type[TaskRunningStatistics] | type[JobRunningStatistics] | type[JobRegisterStatistics]


@dataclass(frozen=True)
class _Sample:
    table: _Table
    interval: StatisticInterval
    start: datetime
    count: int
    taken: datetime


class Sampler:
    """Owned by the statistics thread of one term; `dropped` may be read from any thread."""

    def __init__(self, engine: Engine, registry: Registry, max_rows: int = 10_000) -> None:
        self._engine = engine
        self._registry = registry
        self._sampled_minute: datetime | None = None
        self._sampled_day: datetime | None = None
        self._max_rows = max(1, max_rows)
        self._lock = threading.Lock()
        self._rows: deque[_Sample] = deque()
        self._drops = DropLog("statistics: samples", "buffer full while the database was down")

    @property
    def dropped(self) -> int:
        return self._drops.total

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._rows)

    def sample(self, now: datetime | None = None) -> bool:
        """`observe`, then `write`: True when something was written. Raises what ZooKeeper
        or the database raises (the next call retries; observed rows stay buffered)."""
        self.observe(now)
        return self.write()

    def observe(self, now: datetime | None = None) -> None:
        """Read the current minute's (and day's) counts from ZooKeeper unless done, and buffer
        their rows. Raises what ZooKeeper raises (the next call reads again)."""
        moment = utc_naive(now or datetime.now(UTC))
        minute = period_start(StatisticInterval.MINUTE, moment)
        day = period_start(StatisticInterval.DAY, moment)
        if minute != self._sampled_minute:
            per_job = [
                len(self._registry.children(running_folder(job)))
                for job in self._registry.children(RUNNING)
            ]
            tasks = sum(per_job)
            running_jobs = sum(1 for count in per_job if count)
            minutely = StatisticInterval.MINUTE
            self._buffer(_Sample(TaskRunningStatistics, minutely, minute, tasks, moment))
            self._buffer(_Sample(JobRunningStatistics, minutely, minute, running_jobs, moment))
            self._sampled_minute = minute
        if day != self._sampled_day:
            registered = len(self._registry.children(JOBS))
            daily = StatisticInterval.DAY
            self._buffer(_Sample(JobRegisterStatistics, daily, day, registered, moment))
            self._sampled_day = day

    def write(self) -> bool:
        """Write the buffered rows, oldest first, each in its own transaction; True when one
        was written (a period already sampled, by a previous leader, is left). Raises what
        the database raises; the rows not written stay buffered."""
        wrote = False
        while True:
            with self._lock:
                if not self._rows:
                    return wrote
                row = self._rows[0]
            with Session(self._engine) as session, session.begin():
                wrote |= _put(session, row.table, row.interval, row.start, row.count, row.taken)
            with self._lock:
                if self._rows and self._rows[0] is row:
                    self._rows.popleft()

    def _buffer(self, row: _Sample) -> None:
        with self._lock:
            full = len(self._rows) >= self._max_rows
            if full:
                self._rows.popleft()
            self._rows.append(row)
        if full:
            self._drops.dropped()


def _put(
    session: Session,
    table: _Table,
    interval: StatisticInterval,
    start: datetime,
    count: int,
    now: datetime,
) -> bool:
    """Insert the row of period `start` unless it exists; back-fill the gap before it."""
    query = select(table).order_by(table.statistics_time.desc()).limit(1)
    latest = cast(_Row | None, session.scalars(query).first())
    if latest is not None and latest.statistics_time >= start:
        return False
    length = _LENGTH[interval]
    if latest is not None:
        gap = max(latest.statistics_time + length, start - length * BACKFILL_LIMIT[interval])
        filled = 0
        while gap < start:
            session.add(_row(table, _count(latest), gap, now))
            gap += length
            filled += 1
        if filled:
            log.info(
                "statistics: %d %s periods back-filled in %s", filled, interval, table.__tablename__
            )
    session.add(_row(table, count, start, now))
    return True


def _count(row: TaskRunningStatistics | JobRunningStatistics | JobRegisterStatistics) -> int:
    if isinstance(row, JobRegisterStatistics):
        return row.registered_count
    return row.running_count


def _row(
    table: _Table, count: int, start: datetime, now: datetime
) -> TaskRunningStatistics | JobRunningStatistics | JobRegisterStatistics:
    if table is JobRegisterStatistics:
        return JobRegisterStatistics(
            registered_count=count, statistics_time=start, creation_time=now
        )
    return table(running_count=count, statistics_time=start, creation_time=now)

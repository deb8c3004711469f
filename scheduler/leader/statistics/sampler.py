"""Sampled statistics, as the original's StatisticManager kept them (TASK_RUNNING_STATISTICS,
JOB_RUNNING_STATISTICS, JOB_REGISTER_STATISTICS): running tasks and jobs every minute,
registered jobs every day, read from ZooKeeper (the state every leader shares, not leader
memory).

A sample is a row at the period's start (naive UTC). One row per period: a leader that finds
the period already sampled (by the previous leader) leaves it. Periods without a leader are
back-filled with the latest row's value, as the original did (`findBlankStatisticTimes`), up to
`BACKFILL_LIMIT` periods back; tasks keep running while no leader runs, so the last value is the
best estimate, and the endpoints' charts stay continuous.
"""

from __future__ import annotations

import logging
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
from scheduler.storage.config_store import JOBS
from scheduler.storage.registry import Registry
from scheduler.storage.state import RUNNING

__all__ = ["BACKFILL_LIMIT", "Sampler"]

log = logging.getLogger(__name__)

BACKFILL_LIMIT = {StatisticInterval.MINUTE: 7 * 24 * 60, StatisticInterval.DAY: 366}
_LENGTH = {StatisticInterval.MINUTE: timedelta(minutes=1), StatisticInterval.DAY: timedelta(days=1)}
_Row = TaskRunningStatistics | JobRunningStatistics | JobRegisterStatistics
_Table = type[TaskRunningStatistics] | type[JobRunningStatistics] | type[JobRegisterStatistics]


class Sampler:
    """Owned by the statistics thread of one term."""

    def __init__(self, engine: Engine, registry: Registry) -> None:
        self._engine = engine
        self._registry = registry
        self._sampled_minute: datetime | None = None
        self._sampled_day: datetime | None = None

    def sample(self, now: datetime | None = None) -> bool:
        """Sample the current minute (and day) unless done; True when something was written.
        Raises what ZooKeeper or the database raises (the next call retries)."""
        moment = utc_naive(now or datetime.now(UTC))
        minute = period_start(StatisticInterval.MINUTE, moment)
        day = period_start(StatisticInterval.DAY, moment)
        wrote = False
        if minute != self._sampled_minute:
            per_job = [
                len(self._registry.children(f"{RUNNING}/{job}"))
                for job in self._registry.children(RUNNING)
            ]
            tasks = sum(per_job)
            running_jobs = sum(1 for count in per_job if count)
            with Session(self._engine) as session, session.begin():
                wrote |= _put(
                    session, TaskRunningStatistics, StatisticInterval.MINUTE, minute, tasks, moment
                )
                wrote |= _put(
                    session,
                    JobRunningStatistics,
                    StatisticInterval.MINUTE,
                    minute,
                    running_jobs,
                    moment,
                )
            self._sampled_minute = minute
        if day != self._sampled_day:
            registered = len(self._registry.children(JOBS))
            with Session(self._engine) as session, session.begin():
                wrote |= _put(
                    session, JobRegisterStatistics, StatisticInterval.DAY, day, registered, moment
                )
            self._sampled_day = day
        return wrote


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

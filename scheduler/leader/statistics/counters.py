"""ResultCounters: moves the task result journal (`storage.result_journal`) from ZooKeeper into
the TASK_RESULT_STATISTICS_{MINUTE,HOUR,DAY} tables (the original's, with its columns), exactly
once.

For each journal bucket (a UTC minute), one database transaction adds the bucket's new results
to the minute's, its hour's and its day's rows and records the entry names in
STATISTICS_COUNTED_RESULT; then the entries are deleted from ZooKeeper (fenced). An entry whose
name is already recorded was counted by a leader that died before deleting it: it is only
deleted. So nothing counted is lost when a leader dies at any point, and nothing is counted
twice. Rows are additive: the current minute, hour and day get a row as soon as they have a
result, and later rolls add to it.

Periods that saw no result get a zero row once they have ended, including periods during which
no leader ran (back-filled up to `BACKFILL_LIMIT` periods back), so charts have one row per
period as the original wrote them. (Results of a period without a leader are not lost: Mesos
keeps the updates until a leader acknowledges them, and they count in the minute they are
processed.)
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from sqlalchemy import Engine, delete, func, insert, select
from sqlalchemy.orm import Session

from scheduler.leader.statistics.models import (
    CountedResult,
    TaskResultStatistics,
    TaskResultStatisticsDay,
    TaskResultStatisticsHour,
    TaskResultStatisticsMinute,
)
from scheduler.leader.statistics.outage import DatabaseState
from scheduler.model.errors import Conflict, NotFound
from scheduler.storage.layout import RESULTS, result_bucket_path, result_succeeded
from scheduler.storage.registry import Registry
from scheduler.storage.result_journal import ResultJournal, bucket_minute
from scheduler.storage.transactions import Fence, FencedWriter, Op

__all__ = ["BACKFILL_LIMIT", "ResultCounters", "StatisticInterval", "period_start"]

log = logging.getLogger(__name__)


class StatisticInterval(StrEnum):
    MINUTE = "MINUTE"
    HOUR = "HOUR"
    DAY = "DAY"


TABLES: dict[StatisticInterval, type[TaskResultStatistics]] = {
    StatisticInterval.MINUTE: TaskResultStatisticsMinute,
    StatisticInterval.HOUR: TaskResultStatisticsHour,
    StatisticInterval.DAY: TaskResultStatisticsDay,
}
LENGTHS = {
    StatisticInterval.MINUTE: timedelta(minutes=1),
    StatisticInterval.HOUR: timedelta(hours=1),
    StatisticInterval.DAY: timedelta(days=1),
}
# How far back zero rows are back-filled after a time without a leader (what the endpoints show).
BACKFILL_LIMIT = {
    StatisticInterval.MINUTE: 24 * 60,
    StatisticInterval.HOUR: 7 * 24,
    StatisticInterval.DAY: 366,
}
_COUNTED_KEPT = timedelta(days=2)
_DELETE_CHUNK = 200  # znodes per ZooKeeper transaction
_IN_CHUNK = 500  # names per SQL IN (...)


def period_start(interval: StatisticInterval, moment: datetime) -> datetime:
    """The start (naive UTC) of the period of `interval` containing `moment`."""
    moment = utc_naive(moment)
    if interval is StatisticInterval.MINUTE:
        return moment.replace(second=0, microsecond=0)
    if interval is StatisticInterval.HOUR:
        return moment.replace(minute=0, second=0, microsecond=0)
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


class ResultCounters:
    """Owned by the statistics thread of one term; `roll()` blocks on ZooKeeper and the DB."""

    def __init__(
        self,
        engine: Engine,
        registry: Registry,
        fence: Fence,
        journal: ResultJournal,
        database: DatabaseState | None = None,
    ) -> None:
        """`database`: told of its calls, so that one that does not return is seen."""
        self._engine = engine
        self._database = database
        self._registry = registry
        self._fence = fence
        self._journal = journal
        self.counted = 0  # results this term moved into the tables
        self.already_counted = 0  # entries a previous leader had counted but not deleted
        self._filled: dict[StatisticInterval, datetime] = {}

    def roll(self, now: datetime | None = None) -> int:
        """Move every journaled result into the tables, then add the zero rows of ended periods.

        Returns the number of results counted. Raises what the database or ZooKeeper raises
        (the journal stays in ZooKeeper: the next roll, here or on the next leader, retries).
        """
        moment = utc_naive(now or datetime.now(UTC))
        self._zero_rows(moment)
        counted = 0
        left = 0
        for bucket in sorted(self._registry.children(RESULTS)):
            minute = bucket_minute(bucket)
            path = result_bucket_path(bucket)
            if minute is None:
                log.warning("statistics: %s is not a journal bucket; removed", path)
                FencedWriter(self._registry, self._fence).delete(path)
                continue
            names = self._registry.children(path)
            if names:
                counted += self._count(minute, names, moment)
                self._delete(path, names)
            if minute < period_start(StatisticInterval.MINUTE, moment) - timedelta(minutes=1):
                try:
                    FencedWriter(self._registry, self._fence).delete(path, recursive=False)
                except Conflict:
                    left += len(self._registry.children(path))  # journaled meanwhile
        self._journal.seen(left)
        self.counted += counted
        return counted

    def _call(self) -> AbstractContextManager[None]:
        return self._database.call("statistics") if self._database else nullcontext()

    def _count(self, minute: datetime, names: list[str], now: datetime) -> int:
        with self._call(), Session(self._engine) as session, session.begin():
            known: set[str] = set()
            for i in range(0, len(names), _IN_CHUNK):
                chunk = names[i : i + _IN_CHUNK]
                known.update(
                    session.scalars(select(CountedResult.id).where(CountedResult.id.in_(chunk)))
                )
            new = [name for name in names if name not in known]
            success = sum(result_succeeded(name) for name in new)
            failed = len(new) - success
            if new:
                for interval in StatisticInterval:
                    _add(session, interval, period_start(interval, minute), success, failed, now)
                # One bulk INSERT of plain rows: objects through the unit of work cost about
                # 55 us a row against 20 (measured in process, 500 rows a transaction).
                session.execute(
                    insert(CountedResult),
                    [{"id": name, "statistics_time": minute, "counted_time": now} for name in new],
                )
        if known:
            self.already_counted += len(known)
            log.info(
                "statistics: %d journaled results were already counted by a previous leader",
                len(known),
            )
        return len(new)

    def _delete(self, path: str, names: list[str]) -> None:
        writer = FencedWriter(self._registry, self._fence)
        for i in range(0, len(names), _DELETE_CHUNK):
            ops = [Op.delete(f"{path}/{name}") for name in names[i : i + _DELETE_CHUNK]]
            try:
                writer.commit(f"delete journaled results in {path}", ops)
            except NotFound:
                # Another (deposed, still running) leader deleted some: delete one by one.
                for op in ops:
                    try:
                        writer.commit(f"delete {op.path}", [op])
                    except NotFound:
                        continue

    def _zero_rows(self, now: datetime) -> None:
        """A zero row for each ended period without one, back to the first row ever written
        (at most BACKFILL_LIMIT periods back). Scans once per ended period per term. Also
        prunes STATISTICS_COUNTED_RESULT. Touches the database only when a minute has ended."""
        ended = {i: period_start(i, now) - LENGTHS[i] for i in StatisticInterval}
        if all(self._filled.get(i) == ended[i] for i in StatisticInterval):
            return
        with self._call(), Session(self._engine) as session, session.begin():
            session.execute(
                delete(CountedResult).where(CountedResult.counted_time < now - _COUNTED_KEPT)
            )
            for interval in StatisticInterval:
                length = LENGTHS[interval]
                last_ended = ended[interval]
                if self._filled.get(interval) == last_ended:
                    continue
                table = TABLES[interval]
                window = last_ended - length * (BACKFILL_LIMIT[interval] - 1)
                first = session.scalar(select(func.min(table.statistics_time)))
                # A new database gets the period that just ended: no history is made up.
                moment = last_ended if first is None else max(window, first)
                present = set(
                    session.scalars(
                        select(table.statistics_time).where(table.statistics_time >= moment)
                    )
                )
                while moment <= last_ended:
                    if moment not in present:
                        _add(session, interval, moment, 0, 0, now)
                    moment += length
        self._filled.update(ended)


def _add(
    session: Session,
    interval: StatisticInterval,
    start: datetime,
    success: int,
    failed: int,
    now: datetime,
) -> None:
    table = TABLES[interval]
    row = session.scalars(
        select(table).where(table.statistics_time == start).order_by(table.id).limit(1)
    ).first()
    if row is None:
        session.add(
            table(
                success_count=success,
                failed_count=failed,
                statistic_interval=str(interval),
                statistics_time=start,
                creation_time=now,
            )
        )
    else:
        row.success_count += success
        row.failed_count += failed


def utc_naive(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        return moment
    return moment.astimezone(UTC).replace(tzinfo=None)

"""ResultCounters: task successes and failures per MINUTE, HOUR and DAY (reference 4.14).

Design, so counts survive a leader change (the original lost them, reference 10 item 18):

- Counts are kept per *period* (the minute, hour and day that contain the update's time), not
  in one "current" counter that a timer resets, so a late or skipped timer tick moves nothing
  into the wrong period.
- Writing is additive: a period's row is created on first write and later writes add to it.
  So `flush()` at term end may write the partial current periods, and the next leader's
  `roll()` adds the rest of those periods to the same rows: one row per period, no count lost,
  none counted twice (each update is counted by the leader that processed it).
- A period whose write fails stays in memory and is retried by the next `roll()`/`flush()`.

`record()` is memory-only and may be called from any thread; `roll()` and `flush()` write and
block on the database (call them from a timer thread, not the Mesos event thread).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from scheduler.statistics.models import (
    TaskResultStatistics,
    TaskResultStatisticsDay,
    TaskResultStatisticsHour,
    TaskResultStatisticsMinute,
)

__all__ = ["ResultCounters", "StatisticInterval", "period_start"]

log = logging.getLogger(__name__)


class StatisticInterval(StrEnum):
    MINUTE = "MINUTE"
    HOUR = "HOUR"
    DAY = "DAY"


_TABLES: dict[StatisticInterval, type[TaskResultStatistics]] = {
    StatisticInterval.MINUTE: TaskResultStatisticsMinute,
    StatisticInterval.HOUR: TaskResultStatisticsHour,
    StatisticInterval.DAY: TaskResultStatisticsDay,
}
_LENGTHS = {
    StatisticInterval.MINUTE: timedelta(minutes=1),
    StatisticInterval.HOUR: timedelta(hours=1),
    StatisticInterval.DAY: timedelta(days=1),
}


def period_start(interval: StatisticInterval, moment: datetime) -> datetime:
    """The start (naive UTC) of the period of `interval` containing `moment`."""
    moment = _utc_naive(moment)
    if interval is StatisticInterval.MINUTE:
        return moment.replace(second=0, microsecond=0)
    if interval is StatisticInterval.HOUR:
        return moment.replace(minute=0, second=0, microsecond=0)
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


@dataclass
class _Counts:
    success: int = 0
    failed: int = 0


_Key = tuple[StatisticInterval, datetime]


class ResultCounters:
    """In-memory success/failed counts, written to TASK_RESULT_STATISTICS_* by period."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._lock = threading.Lock()
        self._counts: dict[_Key, _Counts] = {}
        self.errors = 0

    def record(self, success: bool, now: datetime | None = None) -> None:
        """Count one finished task. Memory only: never blocks on the database, never raises."""
        moment = now or datetime.now(UTC)
        with self._lock:
            for interval in StatisticInterval:
                counts = self._counts.setdefault(
                    (interval, period_start(interval, moment)), _Counts()
                )
                if success:
                    counts.success += 1
                else:
                    counts.failed += 1

    def pending(self) -> dict[tuple[str, datetime], tuple[int, int]]:
        """What is counted and not yet written: {(interval, period start): (success, failed)}."""
        with self._lock:
            return {
                (str(interval), start): (c.success, c.failed)
                for (interval, start), c in self._counts.items()
            }

    def roll(self, now: datetime | None = None) -> int:
        """Write every period that ended by `now`, plus a zero row for each just-ended period
        that saw no update (so charts have one row per period, as the original wrote).

        Returns the number of periods written; a database failure is logged at WARNING and
        counted in `errors`, and the counts are kept for the next call.
        """
        moment = _utc_naive(now or datetime.now(UTC))
        with self._lock:
            due = {k: c for k, c in self._counts.items() if k[1] + _LENGTHS[k[0]] <= moment}
            for interval in StatisticInterval:
                previous = period_start(interval, moment) - _LENGTHS[interval]
                due.setdefault((interval, previous), _Counts())
            for key in due:
                self._counts.pop(key, None)
        return self._write(due, moment)

    def flush(self, now: datetime | None = None) -> int:
        """Write everything counted, the current (unfinished) periods included; for term end.

        The rows are added to by whoever counts the rest of those periods. Returns the number
        of periods written; on failure as `roll`.
        """
        moment = _utc_naive(now or datetime.now(UTC))
        with self._lock:
            due = self._counts
            self._counts = {}
        return self._write(due, moment)

    def _write(self, due: dict[_Key, _Counts], now: datetime) -> int:
        if not due:
            return 0
        try:
            with Session(self._engine) as session, session.begin():
                for (interval, start), counts in sorted(due.items()):
                    _add(session, interval, start, counts, now)
        except Exception as exc:  # noqa: BLE001 - any database failure: keep counts, retry later
            with self._lock:
                self.errors += 1
                for key, counts in due.items():
                    kept = self._counts.setdefault(key, _Counts())
                    kept.success += counts.success
                    kept.failed += counts.failed
            log.warning("statistics: %d periods not written, kept for retry: %s", len(due), exc)
            return 0
        return len(due)


def _add(
    session: Session, interval: StatisticInterval, start: datetime, counts: _Counts, now: datetime
) -> None:
    table = _TABLES[interval]
    row = session.scalars(
        select(table).where(table.statistics_time == start).order_by(table.id).limit(1)
    ).first()
    if row is None:
        session.add(
            table(
                success_count=counts.success,
                failed_count=counts.failed,
                statistic_interval=str(interval),
                statistics_time=start,
                creation_time=now,
            )
        )
    else:
        row.success_count += counts.success
        row.failed_count += counts.failed


def _utc_naive(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        return moment
    return moment.astimezone(UTC).replace(tzinfo=None)

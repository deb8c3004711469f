"""A backfill's fire list (issue 28): every fire of a job's cron in a past range, in order,
calendar exclusions applied, bounded; and the pacing of their launches.

`backfill_fires(spec, start, end, ...)` promises:
- the fire times of `spec` (the job's `CronSpec`, in its zone, with APScheduler's DST rules:
  see `model/config/cron.py`) `t` with `start <= t <= end` (both bounds INCLUSIVE, compared as
  instants), ascending, no instant twice, each in the spec's zone with its real offset (a fire
  of a wall time skipped in spring reads an hour later, 03:30+02:00); compare them as instants
  (`astimezone(UTC)`): two datetimes of one ZoneInfo compare by wall time, ignoring `fold`;
- minus those `excluded(t)` says are in an excluded period (the calendars the job lists;
  the calendar model's predicate, called once per fire in range, in order), counted apart;
- at most `max_fires` (the `max_backfill_fires` setting, default 1,000) kept fires: a range
  holding more is refused with TooManyFires (InvalidRequest, 400) naming the count and the cap,
  never silently truncated. To stay bounded it looks at no more than `max_fires` * SCAN_FACTOR
  fires in range (kept and excluded): a range holding more is refused with that lower bound
  ("holds more than 10,000 fires"), even when a calendar would have excluded most of them.
A range holding no fire is an empty list here: a dry run shows it, and `Backfill.start`
refuses to record one (there is nothing to run).

`next_launch_at(fires_per_minute, last_launched_at, now)` is the pacing: a pure function of
times, so a new leader computes the same answer from the stored `last_launched_at`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from scheduler.model.config.cron import CronSpec
from scheduler.model.errors import InvalidRequest

__all__ = [
    "DEFAULT_MAX_BACKFILL_FIRES",
    "MAX_BACKFILL_FIRES_LIMIT",
    "SCAN_FACTOR",
    "FireList",
    "TooManyFires",
    "backfill_fires",
    "launch_interval",
    "next_launch_at",
]

DEFAULT_MAX_BACKFILL_FIRES = 1_000
MAX_BACKFILL_FIRES_LIMIT = 10_000
"""The largest cap the setting may give: a backfill's stored state holds every fire time (29
bytes each in JSON, so about 290 KB at this bound), which must stay far below ZooKeeper's 1 MB
node; a larger range is several backfills."""
SCAN_FACTOR = 10
# Longer than any offset change (2 h, Antarctica/Troll): see `_fires_from`.
_DST_MARGIN = timedelta(hours=3)


@dataclass(frozen=True)
class FireList:
    """The fires a backfill will run (ascending, aware, in the cron's zone) and how many fires in
    the range a calendar excluded (not run, counted so the answer can say so)."""

    times: tuple[datetime, ...]
    excluded: int = 0


class TooManyFires(InvalidRequest):
    """A range holding more fires than the cap. `count` is exact when `exact`, else a lower
    bound (the scan stopped); `cap` is `max_backfill_fires`. `fields` names `to` (narrow the
    range) with the same text as the message."""

    def __init__(self, count: int, exact: bool, cap: int) -> None:
        held = f"{count:,}" if exact else f"more than {count:,}"
        text = (
            f"the range holds {held} fires, more than max_backfill_fires ({cap:,}); "
            "narrow it or split it into several backfills"
        )
        super().__init__(f"invalid backfill request: {text}", fields={"to": text})
        self.count = count
        self.exact = exact
        self.cap = cap


def _never(_fire: datetime) -> bool:
    return False


def backfill_fires(
    spec: CronSpec,
    start: datetime,
    end: datetime,
    *,
    excluded: Callable[[datetime], bool] = _never,
    max_fires: int = DEFAULT_MAX_BACKFILL_FIRES,
) -> FireList:
    """The fires of `spec` in `[start, end]` (see the module docstring for every promise).

    Raises TooManyFires (400) past the cap; ValueError for a naive bound or a `max_fires`
    outside 1..MAX_BACKFILL_FIRES_LIMIT (a caller's bug, not the client's). An `excluded` that
    raises propagates (the calendar's bug must not run a fire it meant to skip).
    """
    for name, moment in (("start", start), ("end", end)):
        if moment.tzinfo is None or moment.utcoffset() is None:
            raise ValueError(f"{name} must be timezone-aware")
    if not 1 <= max_fires <= MAX_BACKFILL_FIRES_LIMIT:
        raise ValueError(f"max_fires must be between 1 and {MAX_BACKFILL_FIRES_LIMIT}")
    scan_limit = max_fires * SCAN_FACTOR
    kept: list[datetime] = []
    skipped = 0
    seen = 0
    # Compared in UTC: two datetimes of one ZoneInfo compare by wall time, so the two 02:30
    # of an autumn night (fold 0 and 1) would be equal.
    last = end.astimezone(UTC)
    for fire in _fires_from(spec, start):
        if fire.astimezone(UTC) > last:
            break
        if seen == scan_limit:
            raise TooManyFires(scan_limit, exact=False, cap=max_fires)
        seen += 1
        if excluded(fire):
            skipped += 1
            continue
        kept.append(fire)
    if len(kept) > max_fires:
        raise TooManyFires(len(kept), exact=True, cap=max_fires)
    return FireList(tuple(kept), skipped)


def _fires_from(spec: CronSpec, start: datetime) -> Iterator[datetime]:
    """The fires of `spec` at or after `start`, strictly ascending as instants."""
    trigger = spec.trigger()
    start_utc = start.astimezone(UTC)
    previous: datetime | None = None
    previous_utc = start_utc
    # APScheduler answers the first fire at or after `now` (rounded up to a whole second), read
    # as a wall time. A fire of a wall time skipped in spring (02:15 on the night clocks jump
    # from 02:00 to 03:00) is found only from before the jump: asked from 03:15 it is missed,
    # though its instant (01:15 UTC) is 03:15. So within _DST_MARGIN after an offset change the
    # sequence starts before it and the fires before `start` are passed over.
    zone = ZoneInfo(spec.time_zone)
    earlier = start_utc - _DST_MARGIN
    if earlier.astimezone(zone).utcoffset() != start_utc.astimezone(zone).utcoffset():
        previous_utc = earlier
    while True:
        fire: datetime | None = trigger.get_next_fire_time(previous, previous or previous_utc)
        if fire is None:
            return
        fire_utc = fire.astimezone(UTC)
        if previous is not None and fire_utc <= previous_utc:
            raise RuntimeError(f"cron {spec.expression!r}: APScheduler did not move forward")
        if fire_utc < previous_utc:  # never expected; keeps the inclusive promise
            raise RuntimeError(f"cron {spec.expression!r}: APScheduler answered a past fire")
        previous, previous_utc = fire, fire_utc
        if fire_utc < start_utc:
            continue  # before the range: the walk began before an offset change
        # Through UTC, so a fire in a skipped spring hour reads as the real wall time (03:30+02:00,
        # not APScheduler's 02:30+01:00) and a repeated autumn hour carries its fold.
        yield fire_utc.astimezone(fire.tzinfo)


def launch_interval(fires_per_minute: float) -> timedelta:
    """The least time between two launches at this rate, rounded UP to a whole microsecond so
    that spacing launches by it never exceeds the rate. ValueError for a rate that is not a
    positive finite number."""
    if not (math.isfinite(fires_per_minute) and fires_per_minute > 0):
        raise ValueError("fires_per_minute must be a positive finite number")
    return timedelta(microseconds=math.ceil(60_000_000 / fires_per_minute))


def next_launch_at(
    fires_per_minute: float | None, last_launched_at: datetime | None, now: datetime
) -> datetime:
    """When the next fire of a backfill may launch: `now` when there is no rate or nothing was
    launched yet, else the later of `now` and `last_launched_at + launch_interval(rate)`.

    A caller that launches only when this is not after its clock, and records that launch time
    as the new `last_launched_at`, never launches two fires closer than the interval: at most
    `ceil(rate * window / 60)` fires in any window. A `last_launched_at` in the future (a clock
    stepped back) delays the next launch rather than allowing a burst. Every datetime must be
    aware (ValueError otherwise).
    """
    for name, moment in (("now", now), ("last_launched_at", last_launched_at)):
        if moment is not None and (moment.tzinfo is None or moment.utcoffset() is None):
            raise ValueError(f"{name} must be timezone-aware")
    if fires_per_minute is None or last_launched_at is None:
        return now
    earliest = last_launched_at + launch_interval(fires_per_minute)
    return earliest if earliest > now else now

"""The questions the scheduler asks of a job's calendars (issue 28): is this fire excluded, and
which are the next fires that are not. No I/O.

Several calendars combine as a union: a fire is excluded when any of them excludes it (a job's
`excludeCalendars` lists them). The producer asks `excluded_by` of each cron fire and records a
skipped fire with the part it names; the preview of next fire times asks `next_allowed` of the
cron's candidate fire times (`cron_candidates`, over `CronSpec.next_fire_times`, or any iterator
of aware datetimes in increasing order).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime

from scheduler.model.calendar.definition import Calendar
from scheduler.model.config.cron import CronSpec

__all__ = [
    "MAX_SKIPPED",
    "AllowedFires",
    "Exclusion",
    "cron_candidates",
    "excluded_by",
    "next_allowed",
]

MAX_SKIPPED = 100_000
"""Candidates `next_allowed` skips at most by default: a calendar that excludes everything (or
a fire every second through a month-long range) must not keep the caller looping. A minute cron
across a weekend skips 2,880; an every-second cron across one excluded day 86,400. Reaching the
bound costs about 2 s on the shared 2-core machine with `cron_candidates` (APScheduler takes
~19 us a candidate, `Calendar.excludes` ~5 us even for a calendar at every count's bound): an
interactive caller that cannot wait that long passes a smaller `max_skipped`."""


@dataclass(frozen=True)
class Exclusion:
    """Why a fire is excluded: the first calendar (in the order given) and its part covering it."""

    calendar_name: str
    part: str

    def __str__(self) -> str:
        return f"calendar {self.calendar_name}: {self.part}"


@dataclass(frozen=True)
class AllowedFires:
    """What `next_allowed` found."""

    fire_times: tuple[datetime, ...]
    """The allowed candidates, in the candidates' order: at most `count`."""
    skipped: int
    """Excluded candidates passed over before the last one returned (or before giving up)."""
    gave_up: bool
    """True when `max_skipped` candidates were skipped before `count` allowed ones were found:
    `fire_times` holds those found so far, and whether more follow is unknown (the preview says
    "no allowed fire among the next N"). False when `count` were found or the candidates ran out
    (a cron whose schedule ends)."""


def excluded_by(calendars: Iterable[Calendar], instant: datetime) -> Exclusion | None:
    """The first of `calendars` that excludes `instant` (aware), with the part that does, or None
    when none does (an empty list excludes nothing). ValueError for a naive `instant`."""
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ValueError("instant must be timezone-aware")
    for calendar in calendars:
        part = calendar.covering_part(instant)
        if part is not None:
            return Exclusion(calendar.calendar_name, part)
    return None


def next_allowed(
    candidates: Iterable[datetime],
    calendars: Iterable[Calendar],
    count: int,
    *,
    max_skipped: int = MAX_SKIPPED,
) -> AllowedFires:
    """The first `count` of `candidates` that no calendar excludes, in order.

    Reads the candidates lazily and at most `count + max_skipped` of them, so an endless
    iterator is fine. Never returns an excluded instant, and never passes over an allowed one
    (the result is exactly the allowed candidates' prefix). ValueError for a negative `count` or
    `max_skipped`, or a naive candidate.
    """
    if count < 0 or max_skipped < 0:
        raise ValueError("count and max_skipped must not be negative")
    chosen = tuple(calendars)
    found: list[datetime] = []
    skipped = 0
    if count == 0:
        return AllowedFires((), 0, gave_up=False)
    for candidate in candidates:
        if candidate.tzinfo is None or candidate.utcoffset() is None:
            raise ValueError("candidates must be timezone-aware")
        if not any(calendar.excludes(candidate) for calendar in chosen):
            found.append(candidate)
            if len(found) == count:
                return AllowedFires(tuple(found), skipped, gave_up=False)
        else:
            skipped += 1
            if skipped > max_skipped:
                return AllowedFires(tuple(found), max_skipped, gave_up=True)
    return AllowedFires(tuple(found), skipped, gave_up=False)


def cron_candidates(spec: CronSpec, after: datetime, *, batch: int = 64) -> Iterator[datetime]:
    """`spec`'s fire times strictly after `after` (aware), lazily and without end (until the
    schedule ends), asked of APScheduler `batch` at a time: the candidates `next_allowed` takes."""
    if batch < 1:
        raise ValueError("batch must be at least 1")
    while True:
        fires = spec.next_fire_times(after, batch)
        yield from fires
        if len(fires) < batch:
            return
        after = fires[-1]

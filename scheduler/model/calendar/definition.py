"""A named calendar of excluded periods (issue 28), read from the API's JSON and judged in its
own time zone. No I/O.

`Calendar.from_json(data, default_time_zone=...)` reads the contract's body and checks the whole
of it before anything is written; every problem is one `InvalidRequest` (400) whose `fields` name
each bad field (`weekly[2].days`, `excludeRanges[0].to`, `calendarName`, ...). The bounds
(MAX_DATES, MAX_RANGES, MAX_WEEKLY, MAX_YEARLY, MIN_YEAR, MAX_YEAR) and the item readers are in
`parts.py`; at every bound the calendar's JSON is about 110 KB, below `_wire.STORED_MAX_BYTES`.

- `calendarName` (required): a name as apps and jobs have (`_wire.name_problem`).
- `timeZone` (optional, default: the caller's `default_time_zone`): an IANA zone name; every
  local date and wall time below is read in it. `to_json` always writes it, so a stored calendar
  does not change meaning when the scheduler's default zone does.
- `excludeDates`: local dates `"YYYY-MM-DD"` (at most MAX_DATES); the whole local day is excluded.
  Years of dates and ranges are between MIN_YEAR (1970) and MAX_YEAR (9998).
- `excludeRanges`: `[{"from", "to"}]` ISO 8601 date-times (at most MAX_RANGES), `from < to`,
  half-open `[from, to)`. Both ends carry a UTC offset (`Z`, `+02:00`: absolute instants) or
  neither (wall times in the calendar's zone); one of each is refused.
- `weekly`: `[{"days": ["SAT", ...], "from": "HH:MM", "to": "HH:MM"}]` (at most MAX_WEEKLY),
  days among MON..SUN (case-insensitive, each once), `to` may be `"24:00"`. `from > to` is a
  window across midnight that starts on each listed day (`SAT 22:00-02:00` ends on Sunday);
  `from == to` is refused.
- `yearly`: `"MM-DD"` local dates every year (at most MAX_YEARLY; `"02-29"` only in leap years).
- `ics` (optional): an iCalendar text (at most `ics.ICS_MAX_BYTES`), converted by `ics.py`
  into `excludeDates`, `excludeRanges` and `yearly` items that are added to the body's own
  (the bounds hold for the sum); an event it cannot convert is a 400 naming `ics` and the event.
  The calendar keeps the converted parts, never the text (`to_json` has no `ics`).

At least one of the four parts must hold something. Unknown fields are refused. Every string
is bounded before it is parsed and every list before it is walked, so hostile input costs little.

How an instant is judged (`Calendar.excludes`, `Calendar.covering_part`): it is turned into the
calendar zone's local wall time (through UTC, so a fire APScheduler writes as a wall time
that does not exist is judged at the instant it is), and dates, yearly dates, weekly
windows and offset-free ranges are compared with that wall time. Across daylight saving changes
this means:

- a window in the hour that spring-forward skips (Berlin `02:00-03:00` on the last Sunday of
  March, Lord Howe's `02:00-02:30` in October) covers no instant that day: no such local time
  occurs. A cron whose wall time is skipped fires at the shifted wall time (APScheduler moves
  it), which is judged as what it is;
- a window over the hour that fall-back repeats covers both of its occurrences (two real hours
  for a one-hour window);
- a window across midnight covers the end of its listed day and the start of the next.

Ranges with offsets are compared as instants, unaffected by the zone.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Generic, TypeVar
from zoneinfo import ZoneInfo

from scheduler.model.calendar.ics import ics_parts
from scheduler.model.calendar.parts import (
    MAX_DATES,
    MAX_RANGES,
    MAX_YEARLY,
    ExcludedRange,
    WeeklyWindow,
    YearlyDate,
    read_parts,
)
from scheduler.model.config import _wire
from scheduler.model.config.cron import time_zone_problem
from scheduler.model.errors import InvalidRequest

__all__ = ["FIELDS", "PARTS", "Calendar"]

_KIND = "a calendar"
PARTS = ("excludeDates", "excludeRanges", "weekly", "yearly")
FIELDS = frozenset({"calendarName", "timeZone", "ics", *PARTS})
_DAY_S = 86_400


@dataclass(frozen=True)
class Calendar:
    """A named calendar: what it excludes and the zone it is read in. Built by `from_json`
    (which checks it); equal calendars compare equal after a JSON round trip."""

    calendar_name: str
    time_zone: str
    exclude_dates: tuple[date, ...] = ()
    """Sorted, each once."""
    exclude_ranges: tuple[ExcludedRange, ...] = ()
    weekly: tuple[WeeklyWindow, ...] = ()
    yearly: tuple[YearlyDate, ...] = ()
    """Sorted, each once."""
    _index: _Index = field(init=False, compare=False, repr=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", _Index.of(self))

    def excludes(self, instant: datetime) -> bool:
        """Whether some part of this calendar covers `instant` (aware; ValueError if naive).

        Costs two set look-ups and three bisections whatever the calendar's size: the preview
        may ask it of 100,000 candidates (`exclusion.MAX_SKIPPED`)."""
        index = self._index
        wall = self._wall(instant)
        second = _second_of_week(wall)
        return (
            wall.date() in index.dates
            or YearlyDate(wall.month, wall.day) in index.yearly
            or index.instants.covers(instant.astimezone(UTC))
            or index.wall_times.covers(wall)
            or index.week.covers(second)
        )

    def _wall(self, instant: datetime) -> datetime:
        """`instant`'s naive wall time in the calendar's zone; ValueError when it is naive."""
        if instant.tzinfo is None or instant.utcoffset() is None:
            raise ValueError("instant must be timezone-aware")
        # Through UTC: `astimezone` to the zone an instant already has returns it unchanged, and
        # APScheduler hands out fires in a spring-forward gap as that zone's non-existent wall
        # time (02:30 on the day 02:00 becomes 03:00), which is the instant of 03:30.
        local = instant.astimezone(UTC).astimezone(self._index.zone)
        return local.replace(tzinfo=None, fold=0)

    def covering_part(self, instant: datetime) -> str | None:
        """The first part covering `instant`, named for a trace or a run's reason
        (`excludeDates 2026-12-25`, `weekly[0] SAT 02:00-04:00`), or None when none does.
        ValueError for a naive `instant`. Walks the ranges and windows to name one, so ask
        `excludes` first where most instants are not excluded."""
        if not self.excludes(instant):
            return None
        wall = self._wall(instant)
        if wall.date() in self._index.dates:
            return f"excludeDates {wall.date().isoformat()}"
        yearly = YearlyDate(wall.month, wall.day)
        if yearly in self._index.yearly:
            return f"yearly {yearly.to_json()}"
        for position, excluded in enumerate(self.exclude_ranges):
            point = wall if excluded.is_local else instant
            if excluded.start <= point < excluded.end:
                return f"excludeRanges[{position}] {excluded.label()}"
        second = _second_of_week(wall)
        for position, window in enumerate(self.weekly):
            if any(start <= second < end for start, end in window.intervals_s()):
                return f"weekly[{position}] {window.label()}"
        raise AssertionError("excludes() and covering_part() disagree")  # a bug, not input

    def to_json(self) -> dict[str, object]:
        """The contract's JSON, every part written (empty lists too) and `timeZone` explicit."""
        return {
            "calendarName": self.calendar_name,
            "timeZone": self.time_zone,
            "excludeDates": [d.isoformat() for d in self.exclude_dates],
            "excludeRanges": [r.to_json() for r in self.exclude_ranges],
            "weekly": [w.to_json() for w in self.weekly],
            "yearly": [y.to_json() for y in self.yearly],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object], *, default_time_zone: str) -> Calendar:
        """Read and check a calendar body (see the module's docstring). Raises InvalidRequest
        naming every bad field; `default_time_zone` is used when `timeZone` is absent."""
        ics_problem: str | None = None
        if data.get("ics") is not None:
            data, ics_problem = _with_ics(data)
        reader = _wire.FieldReader(data, strict=True, limits={"timeZone": 64})
        reader.refuse_unknown(FIELDS, f"is not a field of {_KIND}")
        if ics_problem is not None:
            reader.problem("ics", ics_problem)
        name = reader.required_text("calendarName")
        if name is not None and (problem := _wire.name_problem(name)):
            reader.problem("calendarName", problem)
        zone = reader.optional_text("timeZone")
        if zone is not None and (problem := time_zone_problem(zone)):
            reader.problem("timeZone", problem)
        parts = read_parts(reader)
        if parts.empty() and not any(key.startswith((*PARTS, "ics")) for key in reader.problems):
            reader.problem("body", "must hold at least one of " + ", ".join(PARTS))
        if zone is None and (problem := time_zone_problem(default_time_zone)):
            reader.problem("timeZone", f"absent, and the default: {problem}")
        reader.raise_if_any(_KIND)
        assert name is not None  # raise_if_any would have raised
        return cls(
            calendar_name=name,
            time_zone=zone or default_time_zone,
            exclude_dates=tuple(sorted(set(parts.exclude_dates))),
            exclude_ranges=tuple(parts.exclude_ranges),
            weekly=tuple(parts.weekly),
            yearly=tuple(sorted(set(parts.yearly))),
        )


def _with_ics(data: Mapping[str, object]) -> tuple[Mapping[str, object], str | None]:
    """`data` with the parts of its `ics` text added to its own lists (a part that is not a
    list is left for the reader to refuse), or `data` and why the text was refused."""
    text = data.get("ics")
    if not isinstance(text, str):
        return data, "must be the text of an iCalendar (.ics) file"
    limits = {"excludeDates": MAX_DATES, "excludeRanges": MAX_RANGES, "yearly": MAX_YEARLY}
    room = {}
    for key, limit in limits.items():
        own = data.get(key)
        room[key] = max(0, limit - len(own)) if isinstance(own, list) else limit
    try:
        converted = ics_parts(text, room=room)
    except InvalidRequest as exc:
        return data, exc.fields.get("ics", exc.message)
    merged = dict(data)
    for key, items in converted.as_json().items():
        own = data.get(key)
        if own is None:
            merged[key] = items
        elif isinstance(own, list):
            merged[key] = [*own, *items]
    return merged, None


_K = TypeVar("_K", int, datetime)


@dataclass(frozen=True)
class _Intervals(Generic[_K]):
    """Half-open intervals merged into disjoint sorted ones, asked with one bisection."""

    starts: tuple[_K, ...]
    ends: tuple[_K, ...]

    @classmethod
    def merged(cls, pieces: list[tuple[_K, _K]]) -> _Intervals[_K]:
        starts: list[_K] = []
        ends: list[_K] = []
        for start, end in sorted(pieces):
            if starts and start <= ends[-1]:  # overlapping or touching: one interval
                ends[-1] = max(ends[-1], end)
            else:
                starts.append(start)
                ends.append(end)
        return cls(tuple(starts), tuple(ends))

    def covers(self, point: _K) -> bool:
        slot = bisect_right(self.starts, point) - 1
        return slot >= 0 and point < self.ends[slot]


@dataclass(frozen=True)
class _Index:
    """What `excludes` looks up, built once per calendar."""

    zone: ZoneInfo
    dates: frozenset[date]
    yearly: frozenset[YearlyDate]
    instants: _Intervals[datetime]
    """The ranges with offsets, in UTC."""
    wall_times: _Intervals[datetime]
    """The ranges without offsets (naive wall times)."""
    week: _Intervals[int]
    """The weekly windows, in seconds of the week."""

    @classmethod
    def of(cls, calendar: Calendar) -> _Index:
        ranges = calendar.exclude_ranges
        return cls(
            zone=ZoneInfo(calendar.time_zone),
            dates=frozenset(calendar.exclude_dates),
            yearly=frozenset(calendar.yearly),
            instants=_Intervals.merged(
                [(r.start.astimezone(UTC), r.end.astimezone(UTC)) for r in ranges if not r.is_local]
            ),
            wall_times=_Intervals.merged([(r.start, r.end) for r in ranges if r.is_local]),
            week=_Intervals.merged([i for w in calendar.weekly for i in w.intervals_s()]),
        )


def _second_of_week(wall: datetime) -> int:
    return wall.weekday() * _DAY_S + wall.hour * 3600 + wall.minute * 60 + wall.second

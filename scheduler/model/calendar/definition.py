"""A named calendar of excluded periods (issue 28), read from the API's JSON and judged in its
own time zone. No I/O.

`Calendar.from_json(data, default_time_zone=...)` reads the contract's body and checks the whole
of it before anything is written; every problem is one `InvalidRequest` (400) whose `fields` name
each bad field (`weekly[2].days`, `excludeRanges[0].to`, `calendarName`, ...):

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
- `ics` is refused here: importing an iCalendar file needs a parsing library added to the lock
  (issue 28 asks for a well-kept one); the wiring will parse it into `excludeDates` and
  `excludeRanges` before calling `from_json`.

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

import re
from bisect import bisect_right
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from enum import IntEnum
from typing import Generic, TypeVar
from zoneinfo import ZoneInfo

from scheduler.model.config import _wire
from scheduler.model.config.cron import time_zone_problem

__all__ = [
    "FIELDS",
    "MAX_DATES",
    "MAX_RANGES",
    "MAX_WEEKLY",
    "MAX_YEAR",
    "MAX_YEARLY",
    "MIN_YEAR",
    "Calendar",
    "ExcludedRange",
    "Weekday",
    "WeeklyWindow",
    "YearlyDate",
]

_T = TypeVar("_T")
_KIND = "a calendar"
PARTS = ("excludeDates", "excludeRanges", "weekly", "yearly")
FIELDS = frozenset({"calendarName", "timeZone", "ics", *PARTS})
RANGE_FIELDS = frozenset({"from", "to"})
WEEKLY_FIELDS = frozenset({"days", "from", "to"})
MAX_DATES = 1000
MAX_RANGES = 1000
MAX_WEEKLY = 100
MAX_YEARLY = 366
# An ISO 8601 date-time with microseconds and an offset is 32 characters; room for a little more.
_DATETIME_MAX_LENGTH = 40
# An error names at most this many problems of one list (a body of 1,000 bad dates gets a
# short answer).
_ITEM_PROBLEMS_NAMED = 10
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_MONTH_DAY = re.compile(r"([0-9]{2})-([0-9]{2})")
_CLOCK = re.compile(r"([0-9]{2}):([0-9]{2})")
# Python's fromisoformat takes more shapes than ISO 8601's extended format (week dates, no
# separators, non-ASCII digits through the regex-free path): only this shape reaches it.
_DATETIME = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]{1,6})?)?"
    r"(?:Z|[+-][0-9]{2}:[0-9]{2})?"
)
_DAY_S = 86_400
_WEEK_S = 7 * _DAY_S
_LEAP_YEAR = 2000  # a year in which every MM-DD that ever exists exists
# Years of dates and ranges: far from datetime's ends, where converting an instant between
# zones overflows (0001-01-01T00:00+01:00 has no UTC time).
MIN_YEAR = 1970
MAX_YEAR = 9998


class Weekday(IntEnum):
    """Days as `datetime.weekday()` numbers them, named as the contract spells them."""

    MON = 0
    TUE = 1
    WED = 2
    THU = 3
    FRI = 4
    SAT = 5
    SUN = 6


@dataclass(frozen=True)
class ExcludedRange:
    """`[start, end)`: both aware (instants) or both naive (wall times in the calendar's zone)."""

    start: datetime
    end: datetime

    @property
    def is_local(self) -> bool:
        return self.start.tzinfo is None

    def to_json(self) -> dict[str, object]:
        return {"from": _iso(self.start), "to": _iso(self.end)}


@dataclass(frozen=True)
class WeeklyWindow:
    """Wall times `[start, end)` on each of `days`; minutes since local midnight, `end` up to
    1440. `start > end` crosses midnight into the day after each listed day."""

    days: tuple[Weekday, ...]
    start_minute: int
    end_minute: int

    def intervals_s(self) -> list[tuple[int, int]]:
        """The seconds of the week (Monday 00:00 = 0) covered, as `[start, end)` pairs inside
        one week; a window past Sunday midnight wraps to Monday."""
        crosses_midnight = self.start_minute > self.end_minute
        length_s = (self.end_minute - self.start_minute + 1440 * crosses_midnight) * 60
        out: list[tuple[int, int]] = []
        for day in self.days:
            start = day * _DAY_S + self.start_minute * 60
            end = start + length_s
            if end <= _WEEK_S:
                out.append((start, end))
            else:
                out.extend(((start, _WEEK_S), (0, end - _WEEK_S)))
        return out

    def to_json(self) -> dict[str, object]:
        return {
            "days": [d.name for d in self.days],
            "from": _clock(self.start_minute),
            "to": _clock(self.end_minute),
        }


@dataclass(frozen=True, order=True)
class YearlyDate:
    month: int
    day: int

    def to_json(self) -> str:
        return f"{self.month:02d}-{self.day:02d}"


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
                ends = excluded.to_json()
                return f"excludeRanges[{position}] {ends['from']} - {ends['to']}"
        second = _second_of_week(wall)
        for position, window in enumerate(self.weekly):
            if any(start <= second < end for start, end in window.intervals_s()):
                days = ",".join(d.name for d in window.days)
                hours = f"{_clock(window.start_minute)}-{_clock(window.end_minute)}"
                return f"weekly[{position}] {days} {hours}"
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
        reader = _wire.FieldReader(data, strict=True, limits={"timeZone": 64})
        reader.refuse_unknown(FIELDS, f"is not a field of {_KIND}")
        if reader.present("ics"):
            reader.problem(
                "ics",
                "importing an iCalendar file is not available yet: "
                "send its days as excludeDates and excludeRanges",
            )
        name = reader.required_text("calendarName")
        if name is not None and (problem := _wire.name_problem(name)):
            reader.problem("calendarName", problem)
        zone = reader.optional_text("timeZone")
        if zone is not None and (problem := time_zone_problem(zone)):
            reader.problem("timeZone", problem)
        dates = _read_list(reader, "excludeDates", MAX_DATES, _parse_date)
        ranges = _read_list(reader, "excludeRanges", MAX_RANGES, _parse_range)
        weekly = _read_list(reader, "weekly", MAX_WEEKLY, _parse_weekly)
        yearly = _read_list(reader, "yearly", MAX_YEARLY, _parse_yearly)
        nothing = not (dates or ranges or weekly or yearly)
        if nothing and not any(key.startswith(PARTS) for key in reader.problems):
            reader.problem("body", "must hold at least one of " + ", ".join(PARTS))
        if zone is None and (problem := time_zone_problem(default_time_zone)):
            reader.problem("timeZone", f"absent, and the default: {problem}")
        reader.raise_if_any(_KIND)
        assert name is not None  # raise_if_any would have raised
        return cls(
            calendar_name=name,
            time_zone=zone or default_time_zone,
            exclude_dates=tuple(sorted(set(dates))),
            exclude_ranges=tuple(ranges),
            weekly=tuple(weekly),
            yearly=tuple(sorted(set(yearly))),
        )


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


class _ItemError(ValueError):
    """One bad list item; `field` is the sub-field at fault ('' for the item itself)."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.field = field


def _read_list(
    reader: _wire.FieldReader, key: str, limit: int, parse: Callable[[object], _T]
) -> list[_T]:
    """The items of list field `key`, each parsed; problems are recorded as `key[i]` or
    `key[i].sub`, at most _ITEM_PROBLEMS_NAMED of them."""
    raw = reader.raw(key)
    if raw is None:
        return []
    if not isinstance(raw, list):
        reader.problem(key, "must be a list")
        return []
    if len(raw) > limit:
        reader.problem(key, f"must hold at most {limit} items, not {len(raw)}")
        return []
    out: list[_T] = []
    named = 0
    for position, item in enumerate(raw):
        try:
            out.append(parse(item))
        except _ItemError as exc:
            if named < _ITEM_PROBLEMS_NAMED:
                label = f"{key}[{position}]" + (f".{exc.field}" if exc.field else "")
                reader.problem(label, str(exc))
            named += 1
    if named > _ITEM_PROBLEMS_NAMED:
        reader.problem(f"{key}[...]", f"and {named - _ITEM_PROBLEMS_NAMED} more bad items")
    return out


def _text(item: object, max_length: int, what: str, field: str = "") -> str:
    if not isinstance(item, str):
        raise _ItemError(f"must be {what}", field)
    if len(item) > max_length:
        raise _ItemError(f"must be {what} (at most {max_length} characters)", field)
    return item


def _parse_date(item: object) -> date:
    text = _text(item, 10, 'a date "YYYY-MM-DD"')
    if not _DATE.fullmatch(text):
        raise _ItemError(f'must be a date "YYYY-MM-DD", not {_wire.shown(text)}')
    try:
        day = date.fromisoformat(text)
    except ValueError as exc:
        raise _ItemError(f"{text} is not a date") from exc
    if not MIN_YEAR <= day.year <= MAX_YEAR:
        raise _ItemError(f"the year must be between {MIN_YEAR} and {MAX_YEAR}")
    return day


def _parse_yearly(item: object) -> YearlyDate:
    text = _text(item, 5, 'a day of the year "MM-DD"')
    match = _MONTH_DAY.fullmatch(text)
    if match is None:
        raise _ItemError(f'must be a day of the year "MM-DD", not {_wire.shown(text)}')
    month, day = int(match[1]), int(match[2])
    try:
        date(_LEAP_YEAR, month, day)
    except ValueError as exc:
        raise _ItemError(f"{text} is not a day of any year") from exc
    return YearlyDate(month, day)


def _parse_range(item: object) -> ExcludedRange:
    if not isinstance(item, dict):
        raise _ItemError('must be an object {"from", "to"}')
    unknown = [key for key in item if key not in RANGE_FIELDS]
    if unknown:
        raise _ItemError("is not a field of a range", _wire.field_label(str(unknown[0])))
    start = _parse_datetime(item.get("from"), "from")
    end = _parse_datetime(item.get("to"), "to")
    if (start.tzinfo is None) != (end.tzinfo is None):
        raise _ItemError(
            "from and to must both carry a UTC offset (instants) or neither (local times)", "to"
        )
    if start >= end:
        raise _ItemError(f"must be after from ({_iso(start)})", "to")
    return ExcludedRange(start, end)


def _parse_datetime(item: object, field: str) -> datetime:
    what = "an ISO 8601 date-time such as 2026-12-24T18:00 or 2026-12-24T18:00:00Z"
    if item is None:
        raise _ItemError("is required", field)
    text = _text(item, _DATETIME_MAX_LENGTH, what, field)
    if not _DATETIME.fullmatch(text):
        raise _ItemError(f"must be {what}, not {_wire.shown(text)}", field)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise _ItemError(f"{text} is not a date-time ({exc})", field) from exc
    if not MIN_YEAR <= moment.year <= MAX_YEAR:
        raise _ItemError(f"the year must be between {MIN_YEAR} and {MAX_YEAR}", field)
    return moment


def _parse_weekly(item: object) -> WeeklyWindow:
    if not isinstance(item, dict):
        raise _ItemError('must be an object {"days", "from", "to"}')
    unknown = [key for key in item if key not in WEEKLY_FIELDS]
    if unknown:
        raise _ItemError("is not a field of a weekly window", _wire.field_label(str(unknown[0])))
    raw_days = item.get("days")
    if not isinstance(raw_days, list) or not raw_days:
        raise _ItemError("must be a non-empty list of days (MON..SUN)", "days")
    if len(raw_days) > len(Weekday):
        raise _ItemError(f"must list at most {len(Weekday)} days", "days")
    days: list[Weekday] = []
    for raw in raw_days:
        text = _text(raw, 3, "a day among MON..SUN", "days").upper()
        if text not in Weekday.__members__:
            raise _ItemError(f"{_wire.shown(raw)} is not a day among MON..SUN", "days")
        if Weekday[text] in days:
            raise _ItemError(f"{text} is listed twice", "days")
        days.append(Weekday[text])
    start = _parse_clock(item.get("from"), "from", allow_end=False)
    end = _parse_clock(item.get("to"), "to", allow_end=True)
    if start == end:
        raise _ItemError("must differ from from (a window across midnight has from > to)", "to")
    return WeeklyWindow(tuple(days), start, end)


def _parse_clock(item: object, field: str, *, allow_end: bool) -> int:
    if item is None:
        raise _ItemError("is required", field)
    highest = "24:00" if allow_end else "23:59"
    what = f'a wall time "HH:MM" from 00:00 to {highest}'
    text = _text(item, 5, what, field)
    match = _CLOCK.fullmatch(text)
    if match is None:
        raise _ItemError(f"must be {what}, not {_wire.shown(text)}", field)
    hour, minute = int(match[1]), int(match[2])
    total = hour * 60 + minute
    if minute > 59 or total > (1440 if allow_end else 1439):
        raise _ItemError(f"must be {what}, not {text}", field)
    return total


def _clock(minute: int) -> str:
    return f"{minute // 60:02d}:{minute % 60:02d}"


def _iso(moment: datetime) -> str:
    return moment.isoformat()

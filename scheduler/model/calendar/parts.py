"""The parts of a calendar (issue 28): excluded ranges, weekly windows, yearly dates, and how
each item of the API's JSON lists is read and bounded (`read_parts`). The contract is in
`definition.py`'s docstring; no I/O."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from enum import IntEnum
from typing import NamedTuple, TypeVar

from scheduler.model.config import _wire

__all__ = [
    "MAX_DATES",
    "MAX_RANGES",
    "MAX_WEEKLY",
    "MAX_YEAR",
    "MAX_YEARLY",
    "MIN_YEAR",
    "ExcludedRange",
    "Parts",
    "Weekday",
    "WeeklyWindow",
    "YearlyDate",
    "read_parts",
]

_T = TypeVar("_T")
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

    def label(self) -> str:
        return f"{_iso(self.start)} - {_iso(self.end)}"


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

    def label(self) -> str:
        days = ",".join(d.name for d in self.days)
        return f"{days} {_clock(self.start_minute)}-{_clock(self.end_minute)}"

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


class Parts(NamedTuple):
    """The four lists of a calendar body as read (problems recorded on the reader)."""

    exclude_dates: list[date]
    exclude_ranges: list[ExcludedRange]
    weekly: list[WeeklyWindow]
    yearly: list[YearlyDate]

    def empty(self) -> bool:
        return not (self.exclude_dates or self.exclude_ranges or self.weekly or self.yearly)


def read_parts(reader: _wire.FieldReader) -> Parts:
    """Read `excludeDates`, `excludeRanges`, `weekly` and `yearly`, each bounded, recording
    each bad item as `key[i]` or `key[i].sub` on `reader`."""
    return Parts(
        _read_list(reader, "excludeDates", MAX_DATES, _parse_date),
        _read_list(reader, "excludeRanges", MAX_RANGES, _parse_range),
        _read_list(reader, "weekly", MAX_WEEKLY, _parse_weekly),
        _read_list(reader, "yearly", MAX_YEARLY, _parse_yearly),
    )


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

"""Cron expressions (Quartz, as Elastic-Job users write them, and 5-field crontab) translated
exactly into APScheduler 3.x `CronTrigger` fields, or refused.

Each field is expanded here into the set of values it matches, with the source syntax's own
rules, and written back as explicit APScheduler values. So nothing reaches APScheduler that it
would read differently: its 0 = Monday day-of-week numbering (crontab and Quartz both start at
Sunday), its silent dropping of a step on a named day range (`mon-fri/2`), its refusal of
overflowing ranges (`FRI-MON`, `22-2`, which Quartz allows). What APScheduler cannot express is
refused with a message naming the problem: `W`, `LW`, `L-n`, `C`, both day fields restricted.

- Quartz: `sec min hour day-of-month month day-of-week [year]`, day-of-week 1-7 = SUN-SAT,
  `?`, `L` (last day; `6L` last Friday; `L` alone in day-of-week = SAT), `6#3` (third Friday).
- crontab: `min hour day-of-month month day-of-week`, day-of-week 0-7 (0 and 7 = Sunday),
  `@hourly` and friends. Quartz-only syntax in 5 fields (`?`, `L`, `W`, `#`) is refused with the
  6-field Quartz form suggested: `0/10 * * * ?` is a Quartz cron that lost its seconds, not
  "every 10 minutes". Unix cron runs a job when *either* day field matches if both are
  restricted (neither starts with `*`); APScheduler needs both to match, so that case is refused.
  When one of them starts with `*` (`*/2`), cron ANDs them too, which translates exactly.

Daylight saving time is APScheduler's (>= 3.11.2): a wall time skipped in spring fires at the
same UTC instant an hour later in wall terms; a wall time repeated in autumn fires at each of
its two instants.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from functools import lru_cache
from itertools import pairwise
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import tzlocal
from apscheduler.triggers.cron import CronTrigger  # type: ignore[import-untyped]

from scheduler.model.errors import InvalidRequest

__all__ = [
    "MAX_CRON_LENGTH",
    "CronSpec",
    "CronSyntax",
    "next_fire_times",
    "parse_cron",
    "system_time_zone",
    "time_zone_problem",
]

MAX_CRON_LENGTH = 200


class CronSyntax(StrEnum):
    QUARTZ = "quartz"
    CRONTAB = "crontab"


@dataclass(frozen=True)
class CronSpec:
    """A parsed cron: the original text, its zone, and the exact APScheduler trigger fields."""

    expression: str
    time_zone: str
    syntax: CronSyntax
    fields: tuple[tuple[str, str], ...]
    """`CronTrigger` keyword arguments (year, month, day, day_of_week, hour, minute, second)."""

    @property
    def schedule_key(self) -> tuple[tuple[tuple[str, str], ...], str]:
        """Equal for expressions that translate to the same fields in the same zone, such as
        `0 0 12 ? * 2-6` and `0 12 * * mon-fri`: one APScheduler job per key is enough."""
        return self.fields, self.time_zone

    def trigger(self) -> CronTrigger:
        """The APScheduler trigger of these fields and zone; raises nothing for a spec made by
        `parse_cron`. Shared between equal specs (a trigger holds no state between calls), so
        that thousands of jobs on one cron build it once."""
        return _trigger(self.fields, self.time_zone)

    def next_fire_times(self, after: datetime, count: int) -> list[datetime]:
        return next_fire_times(self, after, count)


@lru_cache(maxsize=4096)
def _trigger(fields: tuple[tuple[str, str], ...], time_zone: str) -> CronTrigger:
    return CronTrigger(timezone=ZoneInfo(time_zone), **dict(fields))


def parse_cron(expression: str, time_zone: str, *, now: datetime | None = None) -> CronSpec:
    """Parse a Quartz (6-7 fields) or crontab (5 fields, or `@daily`...) expression.

    Raises InvalidRequest with field `cron` (and `timeZone` for an unknown zone) when the
    expression cannot be honoured exactly, or never fires after `now` (default: the clock).
    """
    start = datetime.now(UTC) if now is None else now.astimezone(UTC)
    memo_key = (expression, time_zone) if isinstance(expression, str) else None
    parsed = _parsed.get(memo_key) if memo_key is not None else None
    if parsed is not None:
        known = _fires_at.get(parsed.schedule_key)
        if known is not None and known > start:
            return parsed  # the same text and zone parsed before, and it fires after `start`
    problems: dict[str, str] = {}
    zone_problem = time_zone_problem(time_zone)
    if zone_problem is not None:
        problems["timeZone"] = zone_problem
    try:
        syntax, fields = _translated(expression)
    except _CronError as exc:
        problems["cron"] = str(exc)
    if problems:
        raise _invalid(expression, problems)
    spec = CronSpec(expression, time_zone, syntax, fields)
    try:
        trigger = spec.trigger()
    except ValueError as exc:  # a translation bug rather than user input; still a clear refusal
        raise _invalid(expression, {"cron": f"APScheduler refused it ({exc})"}) from exc
    if memo_key is not None and len(_parsed) < 4096:
        _parsed[memo_key] = spec
    known = _fires_at.get(spec.schedule_key)
    if known is not None and known > start:
        return spec  # fires after `start`: its next fire, found for an equal spec, is later
    fire = trigger.get_next_fire_time(None, start)
    if fire is None:
        when = start.strftime("%Y-%m-%d %H:%M:%S UTC")
        raise _invalid(expression, {"cron": f"never fires after {when}"})
    if len(_fires_at) < 4096:
        _fires_at[spec.schedule_key] = fire
    return spec


# The next fire found for each (fields, zone) parsed: equal specs parsed before it need not
# ask APScheduler again whether they fire at all (thousands of jobs share a few crons).
_fires_at: dict[tuple[tuple[tuple[str, str], ...], str], datetime] = {}
# The spec of each (text, zone) parsed (immutable, so shared): a leader starting with 100,000
# jobs on a few crons parses each cron once (issue 29).
_parsed: dict[tuple[str, str], CronSpec] = {}


def next_fire_times(spec: CronSpec, after: datetime, count: int) -> list[datetime]:
    """The next `count` fire times strictly after `after` (aware), in the spec's zone.

    Fewer are returned when the schedule ends (a year range). Raises ValueError for a naive
    `after` or a negative count.
    """
    if after.tzinfo is None or after.utcoffset() is None:
        raise ValueError("after must be timezone-aware")
    if count < 0:
        raise ValueError("count must not be negative")
    trigger = spec.trigger()
    result: list[datetime] = []
    previous: datetime | None = None
    start = after.astimezone(UTC) + timedelta(microseconds=1)
    while len(result) < count:
        fire = trigger.get_next_fire_time(previous, previous or start)
        if fire is None:
            break
        if previous is not None and fire.astimezone(UTC) <= previous.astimezone(UTC):
            raise RuntimeError(f"cron {spec.expression!r}: APScheduler did not move forward")
        result.append(fire)
        previous = fire
    return result


def time_zone_problem(name: str) -> str | None:
    """Why `name` is not a usable IANA time zone, or None."""
    if not name or name != name.strip():
        return f"{name!r} is not an IANA time zone name"
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return f"unknown time zone {name!r} (expected an IANA name such as 'Asia/Shanghai')"
    return None


def system_time_zone() -> str:
    """The system's IANA zone name ('UTC' when it has none); reads the OS configuration."""
    name = tzlocal.get_localzone_name()
    return name if name and time_zone_problem(name) is None else "UTC"


class _CronError(ValueError):
    pass


class _QuartzOnly(_CronError):
    """Quartz syntax in a 5-field (crontab) expression: most likely a Quartz cron that lost its
    seconds field, such as `0/10 * * * ?`, which crontab would read as every 10 minutes."""


def _invalid(expression: str, problems: Mapping[str, str]) -> InvalidRequest:
    text = "; ".join(problems.values())
    return InvalidRequest(f"invalid cron {expression!r}: {text}", fields=dict(problems))


@dataclass(frozen=True)
class _Field:
    label: str
    low: int
    high: int
    period: int  # values wrap modulo this in a Quartz overflowing range; 0 = no wrapping
    max_step: int
    names: Mapping[str, int]


_MONTH_NAMES = {
    name: number
    for number, name in enumerate(
        ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"), 1
    )
}
_QUARTZ_DAY_NAMES = {
    name: number for number, name in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"), 1)
}
_CRONTAB_DAY_NAMES = {name: number - 1 for name, number in _QUARTZ_DAY_NAMES.items()}
_NO_NAMES: Mapping[str, int] = {}

# Step limits are Quartz's ("Increment > 59" and so on).
_Q_SECOND = _Field("seconds", 0, 59, 60, 59, _NO_NAMES)
_Q_MINUTE = _Field("minutes", 0, 59, 60, 59, _NO_NAMES)
_Q_HOUR = _Field("hours", 0, 23, 24, 23, _NO_NAMES)
_Q_DOM = _Field("day-of-month", 1, 31, 31, 31, _NO_NAMES)
_Q_MONTH = _Field("month", 1, 12, 12, 12, _MONTH_NAMES)
_Q_DOW = _Field("day-of-week", 1, 7, 7, 7, _QUARTZ_DAY_NAMES)
_Q_YEAR = _Field("year", 1970, 2099, 0, 129, _NO_NAMES)

_C_MINUTE = _Field("minute", 0, 59, 0, 59, _NO_NAMES)
_C_HOUR = _Field("hour", 0, 23, 0, 23, _NO_NAMES)
_C_DOM = _Field("day-of-month", 1, 31, 0, 31, _NO_NAMES)
_C_MONTH = _Field("month", 1, 12, 0, 12, _MONTH_NAMES)
_C_DOW = _Field("day-of-week", 0, 7, 0, 7, _CRONTAB_DAY_NAMES)

_CRONTAB_MACROS = {
    "@YEARLY": "0 0 1 1 *",
    "@ANNUALLY": "0 0 1 1 *",
    "@MONTHLY": "0 0 1 * *",
    "@WEEKLY": "0 0 * * 0",
    "@DAILY": "0 0 * * *",
    "@MIDNIGHT": "0 0 * * *",
    "@HOURLY": "0 * * * *",
}

_ITEM = re.compile(
    r"(?P<start>\*|[0-9]{1,4}|[A-Z]{3})(?:-(?P<end>[0-9]{1,4}|[A-Z]{3}))?(?:/(?P<step>[0-9]{1,4}))?"
)
_QUARTZ_LAST_WEEKDAY = re.compile(r"([0-9]{1,4}|[A-Z]{3})L")
_QUARTZ_NTH_WEEKDAY = re.compile(r"([0-9]{1,4}|[A-Z]{3})#([0-9]{1,4})")
_QUARTZ_ONLY = re.compile(r"#|^L|[0-9]L$|[0-9]W$")
# APScheduler's weekday order: its day_of_week 0 is Monday.
_AP_DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_ORDINALS = ("1st", "2nd", "3rd", "4th", "5th")
_MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # longest, leap February


def _translated(expression: str) -> tuple[CronSyntax, tuple[tuple[str, str], ...]]:
    """`_translate`, remembered for text: the translation of a text never changes (thousands
    of jobs share a few crons)."""
    if not isinstance(expression, str):
        syntax, fields = _translate(expression)  # refuses it
        return syntax, tuple(fields.items())
    return _translated_text(expression)


@lru_cache(maxsize=4096)
def _translated_text(expression: str) -> tuple[CronSyntax, tuple[tuple[str, str], ...]]:
    syntax, fields = _translate(expression)
    return syntax, tuple(fields.items())


def _translate(expression: str) -> tuple[CronSyntax, dict[str, str]]:
    if not isinstance(expression, str):
        raise _CronError("must be a string")
    if len(expression) > MAX_CRON_LENGTH:
        raise _CronError(f"must be at most {MAX_CRON_LENGTH} characters")
    text = expression.strip().upper()
    if text.startswith("@"):
        macro = _CRONTAB_MACROS.get(text)
        if macro is None:
            raise _CronError(
                f"unknown macro {expression.strip()!r}; supported: "
                + ", ".join(sorted(m.lower() for m in _CRONTAB_MACROS))
            )
        return CronSyntax.CRONTAB, _translate_crontab(macro.split())
    parts = text.split()
    if len(parts) == 5:
        try:
            return CronSyntax.CRONTAB, _translate_crontab(parts)
        except _QuartzOnly as exc:
            raise _CronError(
                f"{exc}, seconds first, such as {_as_quartz(expression.split())!r} (5 fields "
                "are crontab: minute hour day-of-month month day-of-week)"
            ) from None
    if len(parts) in (6, 7):
        return CronSyntax.QUARTZ, _translate_quartz(parts)
    raise _CronError(
        f"expected 5 fields (crontab: minute hour day-of-month month day-of-week) or 6-7 fields "
        f"(Quartz: second minute hour day-of-month month day-of-week [year]), got {len(parts)}"
    )


def _as_quartz(parts: list[str]) -> str:
    """A 5-field expression written with Quartz syntax, as the 6-field Quartz cron it likely
    meant: seconds 0 in front, and '?' in the day field the other one leaves free."""
    minute, hour, dom, month, dow = parts
    if dom != "?" and dow == "*":
        dow = "?"
    elif dow != "?" and dom == "*":
        dom = "?"
    return " ".join(("0", minute, hour, dom, month, dow))


def _translate_quartz(parts: list[str]) -> dict[str, str]:
    second, minute, hour, dom, month, dow = parts[:6]
    year = parts[6] if len(parts) == 7 else "*"
    for field, text in zip(
        (_Q_SECOND, _Q_MINUTE, _Q_HOUR, _Q_MONTH, _Q_YEAR),
        (second, minute, hour, month, year),
        strict=True,
    ):
        if "?" in text:
            raise _CronError(f"{field.label}: '?' is only allowed in day-of-month and day-of-week")
    dom_free = dom in ("*", "?")
    dow_free = dow in ("*", "?")
    if not dom_free and not dow_free:
        raise _CronError(
            "day-of-month and day-of-week are both restricted; Quartz needs '?' in one of them"
        )
    months = _expand_list(month, _Q_MONTH, wrap=True)
    fields = {
        "year": _numbers(_expand_list(year, _Q_YEAR, wrap=False), _Q_YEAR),
        "month": _numbers(months, _Q_MONTH),
        "day": "*",
        "day_of_week": "*",
        "hour": _numbers(_expand_list(hour, _Q_HOUR, wrap=True), _Q_HOUR),
        "minute": _numbers(_expand_list(minute, _Q_MINUTE, wrap=True), _Q_MINUTE),
        "second": _numbers(_expand_list(second, _Q_SECOND, wrap=True), _Q_SECOND),
    }
    if not dom_free:
        fields["day"] = _quartz_day_of_month(dom, months)
    elif not dow_free:
        position = _quartz_weekday_position(dow)
        if position is not None:
            fields["day"] = position
        else:
            days = _expand_list("7" if dow == "L" else dow, _Q_DOW, wrap=True)  # lone L = SAT
            fields["day_of_week"] = _weekdays({(day + 5) % 7 for day in days})  # SUN=1 -> 6
    return fields


def _quartz_day_of_month(text: str, months: set[int]) -> str:
    days: set[int] = set()
    last = False
    for item in text.split(","):
        if item == "L":
            last = True
        elif item == "LW":
            raise _CronError("day-of-month: 'LW' (last weekday of the month) is not supported")
        elif item.startswith("L-"):
            raise _CronError(
                f"day-of-month: {item!r} (days before the last day of the month) is not supported"
            )
        elif "W" in item:
            raise _CronError(f"day-of-month: {item!r}: 'W' (nearest weekday) is not supported")
        elif "C" in item:
            raise _CronError(f"day-of-month: {item!r}: 'C' (calendar) is not supported")
        elif "#" in item or "L" in item:
            raise _CronError(f"day-of-month: {item!r}: '#' and 'nL' belong in day-of-week")
        else:
            days |= _expand(item, _Q_DOM, wrap=True)
    _check_days_exist(days, months, last)
    values = [_numbers(days, _Q_DOM)] if days else []
    return ",".join([*values, "last"] if last else values)


def _quartz_weekday_position(text: str) -> str | None:
    """`6L` -> 'last fri', `6#3` -> '3rd fri' (APScheduler's `day` field), else None."""
    last = _QUARTZ_LAST_WEEKDAY.fullmatch(text)
    nth = _QUARTZ_NTH_WEEKDAY.fullmatch(text)
    if last is None and nth is None:
        for item in text.split(","):
            if "#" in item or (item.endswith("L") and item != "L"):
                raise _CronError(
                    f"day-of-week: {item!r} must be the only value in day-of-week "
                    "(Quartz supports one 'nL' or 'n#k')"
                )
            if "W" in item:
                raise _CronError(f"day-of-week: {item!r}: 'W' belongs in day-of-month")
            if "C" in item:
                raise _CronError(f"day-of-week: {item!r}: 'C' (calendar) is not supported")
        return None
    match = last or nth
    assert match is not None
    day = _value(match.group(1), _Q_DOW)
    name = _AP_DAYS[(day + 5) % 7]
    if nth is None:
        return f"last {name}"
    week = int(nth.group(2))
    if not 1 <= week <= 5:
        raise _CronError(f"day-of-week: {text!r}: the week after '#' must be 1-5")
    return f"{_ORDINALS[week - 1]} {name}"


def _translate_crontab(parts: list[str]) -> dict[str, str]:
    minute, hour, dom, month, dow = parts
    for field, text in zip((_C_MINUTE, _C_HOUR, _C_MONTH), (minute, hour, month), strict=True):
        if "?" in text:
            raise _CronError(f"{field.label}: '?' is only allowed in day-of-month and day-of-week")
    for label, text in (("day-of-month", dom), ("day-of-week", dow)):
        for item in text.split(","):
            if "?" in item or _QUARTZ_ONLY.search(item):
                raise _QuartzOnly(
                    f"{label}: {item!r} is Quartz syntax; write it as a 6-7 field Quartz cron"
                )
    # Vixie cron: a day field starting with '*' is unrestricted for the OR rule.
    dom_star = dom.startswith("*")
    dow_star = dow.startswith("*")
    if not dom_star and not dow_star:
        raise _CronError(
            "day-of-month and day-of-week are both restricted: cron would run when either "
            "matches, which cannot be scheduled exactly; use '*' in one of them (or two jobs)"
        )
    months = _expand_list(month, _C_MONTH, wrap=False)
    days = _expand_list(dom, _C_DOM, wrap=False)
    _check_days_exist(days, months, last=False)
    weekdays = _expand_list(dow, _C_DOW, wrap=False)
    return {
        "year": "*",
        "month": _numbers(months, _C_MONTH),
        "day": _numbers(days, _C_DOM),
        "day_of_week": _weekdays({(day + 6) % 7 for day in weekdays}),  # 0 and 7 = SUN -> 6
        "hour": _numbers(_expand_list(hour, _C_HOUR, wrap=False), _C_HOUR),
        "minute": _numbers(_expand_list(minute, _C_MINUTE, wrap=False), _C_MINUTE),
        "second": "0",
    }


def _expand_list(text: str, field: _Field, *, wrap: bool) -> set[int]:
    values: set[int] = set()
    for item in text.split(","):
        values |= _expand(item, field, wrap=wrap)
    return values


def _expand(item: str, field: _Field, *, wrap: bool) -> set[int]:
    """The values one list item matches, with Quartz's rules for overflowing ranges."""
    match = _ITEM.fullmatch(item)
    if match is None:
        raise _CronError(f"{field.label}: cannot read {item!r}")
    start, end, step_text = match.group("start", "end", "step")
    step = int(step_text) if step_text else 1
    if step_text and not 1 <= step <= field.max_step:
        raise _CronError(f"{field.label}: step {step} must be between 1 and {field.max_step}")
    if start == "*":
        if end is not None:
            raise _CronError(f"{field.label}: cannot read {item!r}")
        first, last = field.low, field.high
    else:
        first = _value(start, field)
        last = _value(end, field) if end is not None else (field.high if step_text else first)
    if last < first:
        if not wrap or not field.period:
            raise _CronError(f"{field.label}: range {item!r} runs backwards")
        last += field.period  # Quartz: "22-2" is 22, 23, 0, 1, 2
    values = set()
    for value in range(first, last + 1, step):
        if value > field.high:
            value %= field.period
            if value == 0 and field.low == 1:
                value = field.period
        values.add(value)
    return values


def _value(text: str, field: _Field) -> int:
    if text.isdigit():
        value = int(text)
        if not field.low <= value <= field.high:
            hint = " (1 = SUN ... 7 = SAT in Quartz)" if field is _Q_DOW else ""
            raise _CronError(f"{field.label}: {value} is outside {field.low}-{field.high}{hint}")
        return value
    number = field.names.get(text)
    if number is None:
        raise _CronError(f"{field.label}: unknown name {text!r}")
    return number


def _check_days_exist(days: set[int], months: set[int], last: bool) -> None:
    if last or not days:
        return
    if all(day > _MONTH_DAYS[month - 1] for day in days for month in months):
        raise _CronError(
            "never fires: day-of-month "
            + ",".join(map(str, sorted(days)))
            + " does not occur in the given months"
        )


def _numbers(values: set[int], field: _Field) -> str:
    if values >= set(range(field.low, field.high + 1)):
        return "*"
    ordered = sorted(values)
    if len(ordered) >= 3:
        step = ordered[1] - ordered[0]
        if step > 1 and all(b - a == step for a, b in pairwise(ordered)):
            return f"{ordered[0]}-{ordered[-1]}/{step}"  # numeric ranges keep their step
    return ",".join(_runs(ordered, str))


def _weekdays(values: set[int]) -> str:
    if len(values) == 7:
        return "*"
    return ",".join(_runs(sorted(values), lambda day: _AP_DAYS[day]))


def _runs(values: list[int], show: Callable[[int], str]) -> list[str]:
    """[1, 2, 3, 7] -> ['1-3', '7']."""
    out: list[str] = []
    index = 0
    while index < len(values):
        end = index
        while end + 1 < len(values) and values[end + 1] == values[end] + 1:
            end += 1
        first, last = show(values[index]), show(values[end])
        out.append(first if end == index else f"{first}-{last}")
        index = end + 1
    return out

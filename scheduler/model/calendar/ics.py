"""An iCalendar (`.ics`, RFC 5545) text turned into a calendar's parts (issue 28). No I/O.

`ics_parts(text, room=...)` parses the text with the `icalendar` library and converts each
VEVENT into the parts of the contract's JSON (`definition.py`), so that `Calendar.from_json`
merges them with the body's explicit parts and checks them as it checks those:

- an all-day event (`DTSTART;VALUE=DATE`) excludes each day from DTSTART to DTEND exclusive
  (no DTEND: DTSTART + DURATION, else the one day): `excludeDates`;
- the same with `RRULE:FREQ=YEARLY` and no other rule part: each of its days every year
  (`yearly`, `MM-DD`);
- a timed event is an excluded range `[DTSTART, DTEND)` (or DTSTART + DURATION): converted to
  UTC when it has a TZID (an IANA zone, or a VTIMEZONE of the file that the library resolves)
  or is in UTC (`Z`); a floating time (neither) is a wall time in the calendar's own zone.

Anything else is refused, never dropped: any other RRULE, an RDATE, EXDATE or RECURRENCE-ID, a
cancelled event, a TZID that names no zone, a timed event that ends where it starts, a
property the library could not read, more items than a part may hold (`room`), a text over
ICS_MAX_BYTES, with more than MAX_COMPONENTS components or more than MAX_EVENTS events. The
one InvalidRequest (400) names the field `ics` and each refused event by its SUMMARY and UID
(at most _EVENTS_NAMED of them), with why.

Non-event components (VTIMEZONE, VTODO, VJOURNAL, VFREEBUSY, VALARM) exclude nothing and are
left alone; a VTIMEZONE is used by the library to read the events' TZIDs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

import icalendar

from scheduler.model.calendar.parts import MAX_DATES, MAX_RANGES, MAX_YEAR, MAX_YEARLY, MIN_YEAR
from scheduler.model.config import _wire
from scheduler.model.errors import InvalidRequest

__all__ = ["ICS_MAX_BYTES", "MAX_COMPONENTS", "MAX_EVENTS", "IcsParts", "ics_parts"]

ICS_MAX_BYTES = 256 * 1024
"""The largest `ics` text accepted (UTF-8 bytes); a year of public holidays is a few KB."""
MAX_EVENTS = MAX_DATES + MAX_RANGES + MAX_YEARLY
"""More events than every part could hold cannot fit: refused before any is converted."""
MAX_COMPONENTS = 4 * MAX_EVENTS
"""BEGIN lines a text may hold (events, their alarms, time zones): counted before parsing, so
that a text of thousands of nested components costs little."""
_EVENTS_NAMED = 5
_LABEL_MAX = 60
_REFUSED_PROPERTIES = ("RDATE", "EXDATE", "RECURRENCE-ID")


@dataclass
class IcsParts:
    """The parts converted, as the contract's JSON spells them (`Calendar.from_json` reads
    them with the body's own)."""

    exclude_dates: list[str] = field(default_factory=list)
    exclude_ranges: list[dict[str, str]] = field(default_factory=list)
    yearly: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, list[Any]]:
        return {
            "excludeDates": self.exclude_dates,
            "excludeRanges": self.exclude_ranges,
            "yearly": self.yearly,
        }


class _Refused(ValueError):
    """Why one event cannot be converted."""


def ics_parts(text: str, *, room: Mapping[str, int] | None = None) -> IcsParts:
    """Convert `text` (see the module's docstring). `room` bounds how many items the events may
    add to each part (`excludeDates`, `excludeRanges`, `yearly`; default: the part's maximum),
    so that the body's explicit items and the file's together stay within the calendar's
    bounds. Raises InvalidRequest naming `ics` for anything it cannot convert."""
    if (problem := _wire.text_problem(text, ICS_MAX_BYTES)) is not None:
        raise _invalid(problem)
    if (components := text.upper().count("BEGIN:")) > MAX_COMPONENTS:
        raise _invalid(f"holds {components} components (BEGIN lines); at most {MAX_COMPONENTS}")
    try:
        parsed = icalendar.Calendar.from_ical(text)
    except ValueError as exc:
        raise _invalid(f"is not an iCalendar text: {_short(str(exc))}") from exc
    if not isinstance(parsed, icalendar.Calendar):
        raise _invalid("must hold one VCALENDAR")
    events = [event for event in parsed.walk("VEVENT") if isinstance(event, icalendar.Event)]
    if not events:
        raise _invalid("holds no VEVENT: there is nothing to exclude")
    if len(events) > MAX_EVENTS:
        raise _invalid(f"holds {len(events)} events; at most {MAX_EVENTS} can be converted")
    limits = {"excludeDates": MAX_DATES, "excludeRanges": MAX_RANGES, "yearly": MAX_YEARLY}
    limits.update(room or {})
    out = IcsParts()
    refused: list[str] = []
    for event in events:
        try:
            _convert(event, out, limits)
        except _Refused as exc:
            refused.append(f"{_label(event)}: {exc}")
    if refused:
        more = len(refused) - _EVENTS_NAMED
        shown = "; ".join(refused[:_EVENTS_NAMED]) + (f"; and {more} more" if more > 0 else "")
        raise _invalid(shown)
    return out


def _invalid(problem: str) -> InvalidRequest:
    return _wire.invalid("a calendar", {"ics": problem})


def _short(text: str) -> str:
    return _wire.shown(text[:200])


def _label(event: icalendar.Event) -> str:
    """`event 'Christmas' (UID abc)`: how a refusal names an event, bounded."""
    summary = str(event.get("SUMMARY") or "")[:_LABEL_MAX]
    uid = str(event.get("UID") or "")[:_LABEL_MAX]
    named = f"event {summary!r}" if summary else "event"
    return f"{named} (UID {uid})" if uid else named


def _convert(event: icalendar.Event, out: IcsParts, limits: Mapping[str, int]) -> None:
    """Add `event`'s parts to `out`; _Refused says why it cannot be."""
    if event.errors:
        name, why = event.errors[0]
        raise _Refused(f"{name} cannot be read: {_short(str(why))}")
    for name in _REFUSED_PROPERTIES:
        if name in event:
            raise _Refused(f"{name} is not supported (only a plain or yearly event is)")
    if str(event.get("STATUS") or "").upper() == "CANCELLED":
        raise _Refused("is cancelled (STATUS:CANCELLED): remove it from the file")
    start = _moment(event, "DTSTART")
    if start is None:
        raise _Refused("has no DTSTART")
    end = _end(event, start)
    yearly = _is_yearly(event)
    if isinstance(start, datetime):
        if yearly is not None:
            raise _Refused("a yearly RRULE is supported on an all-day event only")
        _add_range(start, end, out, limits)
        return
    if yearly is False:
        raise _Refused(
            f"RRULE {_short(_ical_text(event['RRULE']))} is not supported "
            "(only FREQ=YEARLY, without other parts)"
        )
    assert isinstance(end, date) and not isinstance(end, datetime)
    _add_days(start, end, out, limits, yearly=yearly is True)


def _ical_text(prop: Any) -> str:
    text = prop.to_ical()
    return text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)


def _moment(event: icalendar.Event, name: str) -> date | datetime | None:
    prop = event.get(name)
    if prop is None:
        return None
    value = getattr(prop, "dt", None)
    if not isinstance(value, date):
        raise _Refused(f"{name} must be a date or a date-time")
    if isinstance(value, datetime) and value.tzinfo is None and "TZID" in prop.params:
        zone = _short(str(prop.params["TZID"]))
        raise _Refused(f"{name}'s TZID {zone} names no known time zone")
    return value


def _end(event: icalendar.Event, start: date | datetime) -> date | datetime:
    end = _moment(event, "DTEND")
    if end is not None:
        if isinstance(end, datetime) != isinstance(start, datetime):
            raise _Refused("DTSTART and DTEND must both be dates or both date-times")
        return end
    duration = event.get("DURATION")
    if duration is not None:
        delta = getattr(duration, "dt", None)
        if not isinstance(delta, timedelta):
            raise _Refused("DURATION must be a duration")
        if not isinstance(start, datetime):
            if delta % timedelta(days=1):
                raise _Refused("an all-day event's DURATION must be whole days")
            return start + delta
        # RFC 5545 3.3.6: days are nominal (wall-clock days), hours and less are exact time,
        # so PT3H from 00:30 on a fall-back night ends at 02:30, not 03:30 (Python's aware
        # arithmetic adds to the wall time).
        wall = start + timedelta(days=delta.days)
        exact = timedelta(seconds=delta.seconds, microseconds=delta.microseconds)
        if wall.tzinfo is None:
            return wall + exact
        return wall.astimezone(UTC) + exact
    if isinstance(start, datetime):
        raise _Refused("a timed event needs a DTEND or a DURATION (it would exclude nothing)")
    return start + timedelta(days=1)


def _is_yearly(event: icalendar.Event) -> bool | None:
    """None: no RRULE; True: exactly FREQ=YEARLY; False: any other rule."""
    rule = event.get("RRULE")
    if rule is None:
        return None
    if isinstance(rule, list):  # several RRULE lines
        return False
    parts = {str(key).upper(): value for key, value in rule.items()}
    return list(parts) == ["FREQ"] and [str(v).upper() for v in parts["FREQ"]] == ["YEARLY"]


def _add_range(
    start: datetime, end: date | datetime, out: IcsParts, limits: Mapping[str, int]
) -> None:
    assert isinstance(end, datetime)
    if (start.tzinfo is None) != (end.tzinfo is None):
        raise _Refused("DTSTART and DTEND must both be floating times or both carry a zone")
    if start.tzinfo is not None:  # an instant: written in UTC, as the zone had it then
        start, end = start.astimezone(UTC), end.astimezone(UTC)
    if end <= start:
        raise _Refused("ends where or before it starts")
    for moment in (start, end):
        if not MIN_YEAR <= moment.year <= MAX_YEAR:
            raise _Refused(f"the year must be between {MIN_YEAR} and {MAX_YEAR}")
    if len(out.exclude_ranges) >= limits["excludeRanges"]:
        raise _Refused(f"does not fit: excludeRanges has room for {limits['excludeRanges']}")
    out.exclude_ranges.append({"from": start.isoformat(), "to": end.isoformat()})


def _add_days(
    start: date, end: date, out: IcsParts, limits: Mapping[str, int], *, yearly: bool
) -> None:
    if end <= start:
        raise _Refused("ends where or before it starts")
    if not (MIN_YEAR <= start.year <= MAX_YEAR and end.year <= MAX_YEAR + 1):
        raise _Refused(f"the year must be between {MIN_YEAR} and {MAX_YEAR}")
    days = (end - start).days
    key, target = ("yearly", out.yearly) if yearly else ("excludeDates", out.exclude_dates)
    if len(target) + days > limits[key]:
        # Checked before the days are made: a 1970-9998 event must not build millions of them.
        raise _Refused(f"its {days} day(s) do not fit: {key} has room for {limits[key]}")
    for offset in range(days):
        day = start + timedelta(days=offset)
        target.append(f"{day.month:02d}-{day.day:02d}" if yearly else day.isoformat())

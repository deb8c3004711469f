"""The iCalendar import of calendars (issue 28): all-day and timed events, zones across DST
changes, yearly events, and every refusal naming its event."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.model.calendar import MAX_DATES, Calendar
from scheduler.model.calendar.ics import ICS_MAX_BYTES, MAX_COMPONENTS, ics_parts
from scheduler.model.errors import InvalidRequest


def ics(*events: str, extra: str = "") -> str:
    body = "".join(f"BEGIN:VEVENT\r\n{e.strip()}\r\nEND:VEVENT\r\n" for e in events)
    return f"BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//t//EN\r\n{extra}{body}END:VCALENDAR\r\n"


def event(*lines: str, uid: str = "e1", summary: str = "Holiday") -> str:
    return "\r\n".join((f"UID:{uid}", f"SUMMARY:{summary}", *lines))


def refusal(text: str, **room: int) -> str:
    with pytest.raises(InvalidRequest) as caught:
        ics_parts(text, room=room or None)
    assert set(caught.value.fields) == {"ics"}
    return caught.value.fields["ics"]


def calendar(text: str, zone: str = "UTC", **parts: object) -> Calendar:
    return Calendar.from_json(
        {"calendarName": "c", "timeZone": zone, "ics": text, **parts}, default_time_zone="UTC"
    )


# --- all-day events ---------------------------------------------------------------------------


def test_an_all_day_event_excludes_each_day_up_to_its_end_exclusive() -> None:
    got = ics_parts(ics(event("DTSTART;VALUE=DATE:20261224", "DTEND;VALUE=DATE:20261227")))
    assert got.exclude_dates == ["2026-12-24", "2026-12-25", "2026-12-26"]
    assert got.exclude_ranges == [] and got.yearly == []


def test_an_all_day_event_without_an_end_is_one_day_and_a_duration_counts_days() -> None:
    assert ics_parts(ics(event("DTSTART;VALUE=DATE:20260501"))).exclude_dates == ["2026-05-01"]
    two = ics_parts(ics(event("DTSTART;VALUE=DATE:20260501", "DURATION:P2D")))
    assert two.exclude_dates == ["2026-05-01", "2026-05-02"]
    assert "whole days" in refusal(ics(event("DTSTART;VALUE=DATE:20260501", "DURATION:PT5H")))


def test_a_yearly_all_day_event_becomes_yearly_dates() -> None:
    got = ics_parts(
        ics(
            event("DTSTART;VALUE=DATE:20201225", "DTEND;VALUE=DATE:20201227", "RRULE:FREQ=YEARLY"),
            event("DTSTART;VALUE=DATE:20240229", "RRULE:FREQ=YEARLY", uid="leap"),
        )
    )
    assert got.yearly == ["12-25", "12-26", "02-29"] and got.exclude_dates == []


def test_an_all_day_event_is_judged_in_the_calendars_zone() -> None:
    cal = calendar(ics(event("DTSTART;VALUE=DATE:20261225")), zone="Pacific/Auckland")
    # 2026-12-25 in Auckland (UTC+13) starts at 11:00 UTC on the 24th.
    assert cal.excludes(datetime(2026, 12, 24, 11, 0, tzinfo=UTC))
    assert not cal.excludes(datetime(2026, 12, 24, 10, 59, tzinfo=UTC))


# --- timed events -----------------------------------------------------------------------------


def test_a_timed_event_with_a_tzid_becomes_a_utc_range_across_the_spring_change() -> None:
    # Berlin jumps from 02:00 to 03:00 on 2026-03-29: 01:30 CET to 03:30 CEST is one real hour.
    got = ics_parts(
        ics(
            event(
                "DTSTART;TZID=Europe/Berlin:20260329T013000",
                "DTEND;TZID=Europe/Berlin:20260329T033000",
            )
        )
    )
    assert got.exclude_ranges == [
        {"from": "2026-03-29T00:30:00+00:00", "to": "2026-03-29T01:30:00+00:00"}
    ]


def test_a_timed_event_across_the_autumn_change_covers_the_repeated_hour() -> None:
    # New York repeats 01:00-02:00 on 2026-11-01: 00:30 EDT to 02:30 EST is three real hours.
    got = ics_parts(
        ics(
            event(
                "DTSTART;TZID=America/New_York:20261101T003000",
                "DTEND;TZID=America/New_York:20261101T023000",
            )
        )
    )
    assert got.exclude_ranges == [
        {"from": "2026-11-01T04:30:00+00:00", "to": "2026-11-01T07:30:00+00:00"}
    ]
    cal = calendar(ics(event("DTSTART;TZID=America/New_York:20261101T003000", "DURATION:PT3H")))
    zone = ZoneInfo("America/New_York")
    assert cal.excludes(datetime(2026, 11, 1, 1, 30, fold=1, tzinfo=zone))  # the second 01:30
    assert not cal.excludes(datetime(2026, 11, 1, 2, 30, tzinfo=zone))


def test_a_utc_event_and_a_vtimezone_of_the_file_are_read() -> None:
    vtimezone = (
        "BEGIN:VTIMEZONE\r\nTZID:W. Europe Standard Time\r\n"
        "BEGIN:STANDARD\r\nDTSTART:16010101T030000\r\nTZOFFSETFROM:+0200\r\nTZOFFSETTO:+0100\r\n"
        "RRULE:FREQ=YEARLY;BYDAY=-1SU;BYMONTH=10\r\nEND:STANDARD\r\n"
        "BEGIN:DAYLIGHT\r\nDTSTART:16010101T020000\r\nTZOFFSETFROM:+0100\r\nTZOFFSETTO:+0200\r\n"
        "RRULE:FREQ=YEARLY;BYDAY=-1SU;BYMONTH=3\r\nEND:DAYLIGHT\r\nEND:VTIMEZONE\r\n"
    )
    got = ics_parts(
        ics(
            event("DTSTART:20260710T090000Z", "DTEND:20260710T100000Z"),
            event(
                "DTSTART;TZID=W. Europe Standard Time:20261210T090000",
                "DTEND;TZID=W. Europe Standard Time:20261210T100000",
                uid="outlook",
            ),
            extra=vtimezone,
        )
    )
    assert got.exclude_ranges == [
        {"from": "2026-07-10T09:00:00+00:00", "to": "2026-07-10T10:00:00+00:00"},
        {"from": "2026-12-10T08:00:00+00:00", "to": "2026-12-10T09:00:00+00:00"},
    ]


def test_a_floating_event_is_a_wall_time_range_in_the_calendars_zone() -> None:
    text = ics(event("DTSTART:20260704T220000", "DTEND:20260705T020000"))
    assert ics_parts(text).exclude_ranges == [
        {"from": "2026-07-04T22:00:00", "to": "2026-07-05T02:00:00"}
    ]
    cal = calendar(text, zone="Asia/Tokyo")
    assert cal.excludes(datetime(2026, 7, 4, 13, 0, tzinfo=UTC))  # 22:00 in Tokyo
    assert not cal.excludes(datetime(2026, 7, 4, 12, 59, tzinfo=UTC))


# --- merged with the body ---------------------------------------------------------------------


def test_the_converted_parts_are_added_to_the_bodys_own_and_the_text_is_not_kept() -> None:
    text = ics(
        event("DTSTART;VALUE=DATE:20261225", "RRULE:FREQ=YEARLY"),
        event("DTSTART;VALUE=DATE:20260101", uid="ny"),
    )
    cal = calendar(text, excludeDates=["2026-05-01", "2026-01-01"], yearly=["10-03"])
    assert [d.isoformat() for d in cal.exclude_dates] == ["2026-01-01", "2026-05-01"]
    assert [y.to_json() for y in cal.yearly] == ["10-03", "12-25"]
    assert "ics" not in cal.to_json()
    assert Calendar.from_json(cal.to_json(), default_time_zone="UTC") == cal


def test_the_bounds_hold_for_the_body_and_the_file_together_and_name_the_event() -> None:
    first = date(2030, 1, 1)
    body_dates = [(first + timedelta(days=i)).isoformat() for i in range(MAX_DATES - 1)]
    text = ics(event("DTSTART;VALUE=DATE:20261224", "DTEND;VALUE=DATE:20261226", summary="Xmas"))
    with pytest.raises(InvalidRequest) as caught:
        calendar(text, excludeDates=body_dates)
    why = caught.value.fields["ics"]
    assert "'Xmas' (UID e1)" in why and "room for 1" in why
    assert "body" not in caught.value.fields


# --- refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lines", "reason"),
    [
        (("DTSTART;VALUE=DATE:20260101", "RRULE:FREQ=WEEKLY;BYDAY=SA"), "FREQ=WEEKLY"),
        (("DTSTART;VALUE=DATE:20260101", "RRULE:FREQ=YEARLY;COUNT=3"), "COUNT=3"),
        (("DTSTART;VALUE=DATE:20260101", "RRULE:FREQ=YEARLY;INTERVAL=2"), "INTERVAL=2"),
        (("DTSTART:20260101T100000Z", "DURATION:PT1H", "RRULE:FREQ=YEARLY"), "all-day"),
        (("DTSTART;VALUE=DATE:20260101", "RDATE;VALUE=DATE:20260201"), "RDATE"),
        (("DTSTART;VALUE=DATE:20260101", "EXDATE;VALUE=DATE:20260101"), "EXDATE"),
        (("DTSTART;VALUE=DATE:20260101", "RECURRENCE-ID;VALUE=DATE:20260101"), "RECURRENCE-ID"),
        (("DTSTART;TZID=Mars/Olympus:20260101T100000", "DURATION:PT1H"), "Mars/Olympus"),
        (("DTSTART:20260101T100000Z",), "DTEND or a DURATION"),
        (("DTSTART:20260101T100000Z", "DTEND:20260101T100000Z"), "ends where or before"),
        (("DTSTART;VALUE=DATE:20260105", "DTEND;VALUE=DATE:20260101"), "ends where or before"),
        (("DTSTART;VALUE=DATE:20260101", "DTEND:20260102T100000Z"), "both be dates"),
        (("DTSTART:20260101T100000", "DTEND:20260101T110000Z"), "floating"),
        (("DTSTART;VALUE=DATE:20260101", "STATUS:CANCELLED"), "cancelled"),
        (("DTSTART:yesterday",), "DTSTART cannot be read"),
        (("DTEND;VALUE=DATE:20260101",), "no DTSTART"),
        (("DTSTART;VALUE=DATE:19000101",), "between 1970 and 9998"),
        (("DTSTART:99990101T000000Z", "DURATION:PT1H"), "between 1970 and 9998"),
    ],
)
def test_an_event_that_cannot_be_converted_is_refused_naming_it_and_why(
    lines: tuple[str, ...], reason: str
) -> None:
    why = refusal(ics(event(*lines, uid="the-uid", summary="The event")))
    assert why.startswith("event 'The event' (UID the-uid): ")
    assert reason in why


def test_a_huge_all_day_event_is_refused_before_its_days_are_made() -> None:
    why = refusal(ics(event("DTSTART;VALUE=DATE:19700101", "DTEND;VALUE=DATE:99981231")))
    assert "do not fit" in why and "excludeDates has room for 1000" in why


def test_every_refused_event_is_named_up_to_five_and_the_rest_counted() -> None:
    bad = [event("DTSTART:20260101T100000Z", uid=f"u{i}", summary=f"s{i}") for i in range(8)]
    why = refusal(ics(*bad, event("DTSTART;VALUE=DATE:20260101", uid="fine")))
    assert all(f"UID u{i})" in why for i in range(5)) and "u5" not in why
    assert why.endswith("and 3 more")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "not an iCalendar text"),
        ("garbage", "not an iCalendar text"),
        (ics(), "no VEVENT"),
        ("x" * (ICS_MAX_BYTES + 1), f"at most {ICS_MAX_BYTES} bytes"),
        ("BEGIN:X\r\n" * (MAX_COMPONENTS + 1), f"at most {MAX_COMPONENTS}"),
        ("BEGIN:VCALENDAR\r\nX:\x00\r\nEND:VCALENDAR", "NUL"),
    ],
)
def test_a_text_that_is_no_calendar_is_refused(text: str, reason: str) -> None:
    assert reason in refusal(text)


def test_ics_in_a_body_must_be_text() -> None:
    with pytest.raises(InvalidRequest) as caught:
        Calendar.from_json(
            {"calendarName": "c", "ics": ["BEGIN:VCALENDAR"]}, default_time_zone="UTC"
        )
    assert "ics" in caught.value.fields and "body" not in caught.value.fields


_LINES = st.sampled_from(
    [
        "BEGIN:VCALENDAR",
        "END:VCALENDAR",
        "BEGIN:VEVENT",
        "END:VEVENT",
        "DTSTART;VALUE=DATE:20261225",
        "DTSTART:20261225T100000Z",
        "DTSTART;TZID=Europe/Berlin:20260329T023000",
        "DTEND;VALUE=DATE:20261226",
        "DTEND:20261225T090000Z",
        "DURATION:PT1H",
        "DURATION:-P1D",
        "RRULE:FREQ=YEARLY",
        "RRULE:FREQ=DAILY",
        "BEGIN:VTIMEZONE",
        "TZID:x",
        "SUMMARY:\u00e9v\u00e9nement",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_LINES | st.text(max_size=20), max_size=12))
def test_any_text_is_converted_or_refused_naming_ics(lines: list[str]) -> None:
    text = "\r\n".join(lines)
    try:
        got = ics_parts(text)
    except InvalidRequest as exc:
        assert set(exc.fields) == {"ics"} and len(exc.fields["ics"]) < 2000
        return
    Calendar.from_json({"calendarName": "c", **got.as_json()}, default_time_zone="UTC")

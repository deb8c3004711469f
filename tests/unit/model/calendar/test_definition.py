"""A calendar read from the contract's JSON: what it accepts, what it refuses (naming each field),
its round trip, and how it judges instants in its zone, across daylight saving changes."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.model.calendar import MAX_DATES, Calendar, Weekday
from scheduler.model.errors import InvalidRequest


def calendar(zone: str = "UTC", **parts: object) -> Calendar:
    return Calendar.from_json(
        {"calendarName": "c", "timeZone": zone, **parts}, default_time_zone="UTC"
    )


def refusal(body: dict[str, object]) -> dict[str, str]:
    with pytest.raises(InvalidRequest) as caught:
        Calendar.from_json({"calendarName": "c", **body}, default_time_zone="UTC")
    assert caught.value.http_status == 400
    return caught.value.fields


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def excluded_minutes(cal: Calendar, start: datetime, end: datetime) -> list[datetime]:
    """Every whole UTC minute in [start, end) the calendar excludes."""
    out = []
    moment = start
    while moment < end:
        if cal.excludes(moment):
            out.append(moment)
        moment += timedelta(minutes=1)
    return out


# --- reading and refusing -------------------------------------------------------------------


def test_every_part_is_read_and_written_back_unchanged() -> None:
    body = {
        "calendarName": "ops",
        "timeZone": "Europe/Berlin",
        "excludeDates": ["2026-12-25", "2026-01-01"],
        "excludeRanges": [
            {"from": "2026-06-01T08:00:00", "to": "2026-06-01T12:00:00"},
            {"from": "2026-07-01T00:00:00+00:00", "to": "2026-07-02T00:00:00+00:00"},
        ],
        "weekly": [{"days": ["SAT", "SUN"], "from": "02:00", "to": "04:00"}],
        "yearly": ["12-31", "05-01"],
    }
    cal = Calendar.from_json(body, default_time_zone="UTC")
    assert cal.exclude_dates == (date(2026, 1, 1), date(2026, 12, 25))
    assert cal.weekly[0].days == (Weekday.SAT, Weekday.SUN)
    written = cal.to_json()
    assert written["yearly"] == ["05-01", "12-31"]
    assert written["weekly"] == body["weekly"]
    assert written["excludeRanges"] == body["excludeRanges"]
    assert Calendar.from_json(written, default_time_zone="Asia/Tokyo") == cal


def test_an_absent_zone_is_the_default_and_is_written_explicitly() -> None:
    cal = Calendar.from_json(
        {"calendarName": "c", "yearly": ["12-25"]}, default_time_zone="America/New_York"
    )
    assert cal.to_json()["timeZone"] == "America/New_York"


def test_days_are_case_insensitive_and_z_means_utc() -> None:
    cal = calendar(
        weekly=[{"days": ["sat", "Sun"], "from": "22:00", "to": "24:00"}],
        excludeRanges=[{"from": "2026-01-01T00:00Z", "to": "2026-01-01T01:00Z"}],
    )
    assert cal.weekly[0].days == (Weekday.SAT, Weekday.SUN)
    assert cal.exclude_ranges[0].start == utc(2026, 1, 1)
    assert cal.to_json()["weekly"] == [{"days": ["SAT", "SUN"], "from": "22:00", "to": "24:00"}]


def test_a_calendar_with_no_part_is_refused() -> None:
    assert "body" in refusal({})
    assert "body" in refusal({"excludeDates": [], "weekly": []})


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"yearly": ["12-25"], "colour": "red"}, "colour"),
        ({"yearly": ["12-25"], "ics": "BEGIN:VCALENDAR"}, "ics"),
        ({"yearly": ["12-25"], "timeZone": "Mars/Olympus"}, "timeZone"),
        ({"yearly": ["12-25"], "calendarName": "a/b"}, "calendarName"),
        ({"yearly": ["12-25"], "calendarName": ""}, "calendarName"),
        ({"yearly": ["12-25"], "calendarName": "x" * 101}, "calendarName"),
        ({"excludeDates": "2026-12-25"}, "excludeDates"),
        ({"excludeDates": ["2026-02-30"]}, "excludeDates[0]"),
        ({"excludeDates": ["2026-1-1"]}, "excludeDates[0]"),
        ({"excludeDates": ["20261225"]}, "excludeDates[0]"),
        ({"excludeDates": ["\uff12\uff10\uff12\uff16-12-25"]}, "excludeDates[0]"),
        ({"excludeDates": [20261225]}, "excludeDates[0]"),
        ({"excludeDates": ["2026-12-25", "x" * 10_000]}, "excludeDates[1]"),
        ({"excludeDates": ["1969-12-31"]}, "excludeDates[0]"),
        ({"excludeDates": ["9999-12-31"]}, "excludeDates[0]"),
        (
            {"excludeRanges": [{"from": "0001-01-01T00:00+01:00", "to": "2026-01-02T00:00Z"}]},
            "excludeRanges[0].from",
        ),
        (
            {"excludeRanges": [{"from": "2026-01-01T00:00Z", "to": "9999-12-31T23:59-01:00"}]},
            "excludeRanges[0].to",
        ),
        (
            {"excludeRanges": [{"from": "2026-01-01T00:00+24:00", "to": "2026-01-02T00:00Z"}]},
            "excludeRanges[0].from",
        ),
        (
            {"excludeRanges": [{"from": "2026-01-01T00:00:60", "to": "2026-01-02T00:00"}]},
            "excludeRanges[0].from",
        ),
        ({"yearly": ["02-30"]}, "yearly[0]"),
        ({"yearly": ["13-01"]}, "yearly[0]"),
        ({"yearly": ["1-1"]}, "yearly[0]"),
        (
            {"excludeRanges": [{"from": "2026-01-02T00:00", "to": "2026-01-01T00:00"}]},
            "excludeRanges[0].to",
        ),
        (
            {"excludeRanges": [{"from": "2026-01-01T00:00", "to": "2026-01-01T00:00"}]},
            "excludeRanges[0].to",
        ),
        (
            {"excludeRanges": [{"from": "2026-01-01T00:00Z", "to": "2026-01-02T00:00"}]},
            "excludeRanges[0].to",
        ),
        (
            {"excludeRanges": [{"from": "2026-01-01", "to": "2026-01-02T00:00"}]},
            "excludeRanges[0].from",
        ),
        (
            {"excludeRanges": [{"from": "2026-W01-1T00:00", "to": "2026-01-02T00:00"}]},
            "excludeRanges[0].from",
        ),
        (
            {"excludeRanges": [{"from": "2026-01-01T25:00", "to": "2026-01-02T00:00"}]},
            "excludeRanges[0].from",
        ),
        ({"excludeRanges": [{"to": "2026-01-02T00:00"}]}, "excludeRanges[0].from"),
        (
            {"excludeRanges": [{"from": "2026-01-01T00:00", "to": "2026-01-02T00:00", "x": 1}]},
            "excludeRanges[0].x",
        ),
        ({"excludeRanges": ["2026-01-01"]}, "excludeRanges[0]"),
        ({"weekly": [{"days": ["FUNDAY"], "from": "02:00", "to": "04:00"}]}, "weekly[0].days"),
        ({"weekly": [{"days": ["SAT", "sat"], "from": "02:00", "to": "04:00"}]}, "weekly[0].days"),
        ({"weekly": [{"days": [], "from": "02:00", "to": "04:00"}]}, "weekly[0].days"),
        ({"weekly": [{"days": ["MON"] * 8, "from": "02:00", "to": "04:00"}]}, "weekly[0].days"),
        ({"weekly": [{"days": ["SAT"], "from": "24:00", "to": "04:00"}]}, "weekly[0].from"),
        ({"weekly": [{"days": ["SAT"], "from": "02:00", "to": "12:60"}]}, "weekly[0].to"),
        ({"weekly": [{"days": ["SAT"], "from": "2:00", "to": "04:00"}]}, "weekly[0].from"),
        ({"weekly": [{"days": ["SAT"], "from": "02:00", "to": "24:01"}]}, "weekly[0].to"),
        ({"weekly": [{"days": ["SAT"], "from": "02:00", "to": "02:00"}]}, "weekly[0].to"),
        ({"weekly": [{"days": ["SAT"], "from": "02:00"}]}, "weekly[0].to"),
        (
            {"weekly": [{"days": ["SAT"], "from": "02:00", "to": "03:00", "tz": "UTC"}]},
            "weekly[0].tz",
        ),
    ],
)
def test_a_bad_field_is_refused_by_name(body: dict[str, object], field: str) -> None:
    assert field in refusal(body)


def test_every_bad_field_is_named_in_one_refusal() -> None:
    fields = refusal(
        {
            "timeZone": "Nowhere",
            "excludeDates": ["2026-13-01"],
            "weekly": [{"days": ["SAT"], "from": "09:00", "to": "09:00"}],
            "yearly": ["00-00"],
        }
    )
    assert set(fields) == {"timeZone", "excludeDates[0]", "weekly[0].to", "yearly[0]"}


def test_lists_are_bounded_before_they_are_walked() -> None:
    fields = refusal({"excludeDates": ["2026-12-25"] * (MAX_DATES + 1)})
    assert fields == {"excludeDates": f"must hold at most {MAX_DATES} items, not {MAX_DATES + 1}"}


def test_a_list_of_many_bad_items_gets_a_short_answer() -> None:
    fields = refusal({"excludeDates": ["nope"] * 500})
    assert len(fields) == 11
    assert fields["excludeDates[...]"] == "and 490 more bad items"


def test_a_naive_instant_is_refused() -> None:
    with pytest.raises(ValueError, match="aware"):
        calendar(yearly=["12-25"]).excludes(datetime(2026, 12, 25))


# --- judging instants -----------------------------------------------------------------------


def test_an_excluded_date_is_the_whole_local_day() -> None:
    cal = calendar("Europe/Berlin", excludeDates=["2026-12-25"])
    assert not cal.excludes(utc(2026, 12, 24, 22, 59, 59))
    assert cal.excludes(utc(2026, 12, 24, 23, 0))  # 00:00 CET
    assert cal.excludes(utc(2026, 12, 25, 22, 59, 59))
    assert not cal.excludes(utc(2026, 12, 25, 23, 0))
    assert cal.covering_part(utc(2026, 12, 25, 12)) == "excludeDates 2026-12-25"


def test_a_yearly_date_excludes_that_day_every_year_and_feb_29_in_leap_years() -> None:
    cal = calendar("America/New_York", yearly=["12-25", "02-29"])
    for year in (2026, 2027, 2040):
        assert cal.excludes(utc(year, 12, 25, 12))
        assert not cal.excludes(utc(year, 12, 26, 12))
    assert cal.excludes(utc(2028, 2, 29, 12))
    assert not cal.excludes(utc(2027, 3, 1, 12))
    assert cal.covering_part(utc(2028, 2, 29, 12)) == "yearly 02-29"


def test_a_range_with_offsets_is_instants_and_without_is_local_wall_time() -> None:
    absolute = calendar(
        "Asia/Tokyo",
        excludeRanges=[{"from": "2026-05-01T00:00:00Z", "to": "2026-05-01T01:00:00Z"}],
    )
    assert absolute.excludes(utc(2026, 5, 1, 0))
    assert absolute.excludes(utc(2026, 5, 1, 0, 59, 59))
    assert not absolute.excludes(utc(2026, 5, 1, 1))  # half-open
    local = calendar(
        "Asia/Tokyo", excludeRanges=[{"from": "2026-05-01T00:00", "to": "2026-05-01T01:00"}]
    )
    assert local.excludes(utc(2026, 4, 30, 15))  # 00:00 JST
    assert not local.excludes(utc(2026, 5, 1, 0))
    assert local.covering_part(utc(2026, 4, 30, 15, 30)) == (
        "excludeRanges[0] 2026-05-01T00:00:00 - 2026-05-01T01:00:00"
    )


def test_a_weekly_window_is_local_wall_time_on_its_days_only() -> None:
    cal = calendar("America/New_York", weekly=[{"days": ["SAT"], "from": "02:00", "to": "04:00"}])
    # Saturday 2026-11-28, EST (UTC-5)
    assert not cal.excludes(utc(2026, 11, 28, 6, 59, 59))
    assert cal.excludes(utc(2026, 11, 28, 7, 0))
    assert cal.excludes(utc(2026, 11, 28, 8, 59, 59))
    assert not cal.excludes(utc(2026, 11, 28, 9, 0))
    assert not cal.excludes(utc(2026, 11, 27, 7, 30))  # Friday
    assert cal.covering_part(utc(2026, 11, 28, 7)) == "weekly[0] SAT 02:00-04:00"


def test_a_weekly_window_across_midnight_ends_on_the_next_day() -> None:
    cal = calendar("Europe/Berlin", weekly=[{"days": ["SUN"], "from": "23:00", "to": "01:00"}])
    # Sunday 2026-11-29 23:00 CET is 22:00 UTC; it ends Monday 01:00 CET.
    assert excluded_minutes(cal, utc(2026, 11, 29), utc(2026, 12, 1)) == [
        utc(2026, 11, 29, 22) + timedelta(minutes=m) for m in range(120)
    ]
    # Sunday 00:30 after a Saturday: not covered (only Sunday starts the window).
    assert not cal.excludes(utc(2026, 11, 28, 23, 30))
    assert cal.covering_part(utc(2026, 11, 29, 23, 30)) == "weekly[0] SUN 23:00-01:00"


def test_a_sunday_window_across_midnight_wraps_into_monday() -> None:
    cal = calendar(weekly=[{"days": ["SUN"], "from": "22:00", "to": "06:00"}])
    assert cal.excludes(utc(2026, 11, 30, 5, 59))  # Monday
    assert not cal.excludes(utc(2026, 11, 30, 6, 0))
    assert not cal.excludes(utc(2026, 11, 29, 5, 0))  # Sunday morning: Saturday starts nothing


def test_a_whole_day_window_covers_the_whole_local_day() -> None:
    cal = calendar("Asia/Kathmandu", weekly=[{"days": ["SAT"], "from": "00:00", "to": "24:00"}])
    # Saturday 2026-11-28 in Kathmandu (UTC+5:45) is 11-27 18:15 UTC to 11-28 18:15 UTC.
    minutes = excluded_minutes(cal, utc(2026, 11, 27), utc(2026, 11, 30))
    assert len(minutes) == 24 * 60
    assert (minutes[0], minutes[-1]) == (utc(2026, 11, 27, 18, 15), utc(2026, 11, 28, 18, 14))


def test_overlapping_windows_name_one_that_covers() -> None:
    cal = calendar(
        weekly=[
            {"days": ["MON"], "from": "01:00", "to": "03:00"},
            {"days": ["MON"], "from": "02:00", "to": "05:00"},
        ]
    )
    assert cal.covering_part(utc(2026, 11, 30, 4)) == "weekly[1] MON 02:00-05:00"
    assert cal.covering_part(utc(2026, 11, 30, 1)) == "weekly[0] MON 01:00-03:00"
    assert not cal.excludes(utc(2026, 11, 30, 5))


# --- daylight saving changes ------------------------------------------------------------------


def test_berlin_a_window_in_the_skipped_hour_covers_nothing_that_day() -> None:
    # 2026-03-29: 02:00 CET becomes 03:00 CEST at 01:00 UTC.
    cal = calendar("Europe/Berlin", weekly=[{"days": ["SUN"], "from": "02:00", "to": "03:00"}])
    assert excluded_minutes(cal, utc(2026, 3, 28, 12), utc(2026, 3, 29, 12)) == []
    # A week later the same window is an hour of real time (00:00-01:00 UTC, CEST).
    assert excluded_minutes(cal, utc(2026, 4, 4, 12), utc(2026, 4, 5, 12)) == [
        utc(2026, 4, 5, 0) + timedelta(minutes=m) for m in range(60)
    ]


def test_berlin_a_window_over_the_repeated_hour_covers_both_occurrences() -> None:
    # 2026-10-25: 03:00 CEST becomes 02:00 CET at 01:00 UTC; 02:00-03:00 happens twice.
    cal = calendar("Europe/Berlin", weekly=[{"days": ["SUN"], "from": "02:00", "to": "03:00"}])
    assert excluded_minutes(cal, utc(2026, 10, 24, 12), utc(2026, 10, 25, 12)) == [
        utc(2026, 10, 25, 0) + timedelta(minutes=m) for m in range(120)
    ]


def test_berlin_a_local_range_over_the_change_is_wall_time() -> None:
    cal = calendar(
        "Europe/Berlin",
        excludeRanges=[{"from": "2026-03-29T01:30", "to": "2026-03-29T03:30"}],
    )
    # 01:30 CET (00:30 UTC) to 03:30 CEST (01:30 UTC): one real hour.
    assert excluded_minutes(cal, utc(2026, 3, 28, 23), utc(2026, 3, 29, 3)) == [
        utc(2026, 3, 29, 0, 30) + timedelta(minutes=m) for m in range(60)
    ]


def test_new_york_a_window_over_the_repeated_hour_and_across_midnight() -> None:
    # 2026-11-01: 02:00 EDT becomes 01:00 EST at 06:00 UTC; 01:00-02:00 happens twice.
    cal = calendar("America/New_York", weekly=[{"days": ["SAT"], "from": "23:30", "to": "01:30"}])
    # Saturday 23:30 EDT (03:30 UTC) to the first 01:30 EDT (05:30 UTC), then the repeated
    # 01:00-01:30 EST (06:00-06:30 UTC).
    expected = [utc(2026, 11, 1, 3, 30) + timedelta(minutes=m) for m in range(120)]
    expected += [utc(2026, 11, 1, 6) + timedelta(minutes=m) for m in range(30)]
    assert excluded_minutes(cal, utc(2026, 10, 31, 12), utc(2026, 11, 1, 12)) == expected


def test_new_york_an_excluded_date_on_a_spring_forward_day_is_23_hours() -> None:
    cal = calendar("America/New_York", excludeDates=["2026-03-08"])
    minutes = excluded_minutes(cal, utc(2026, 3, 7), utc(2026, 3, 10))
    assert len(minutes) == 23 * 60
    assert minutes[0] == utc(2026, 3, 8, 5)  # 00:00 EST
    assert minutes[-1] == utc(2026, 3, 9, 3, 59)  # 23:59 EDT


def test_lord_howe_the_half_hour_shift() -> None:
    # Lord Howe moves by 30 minutes: +10:30 in winter, +11:00 in summer.
    # 2026-04-05 02:00 (+11) becomes 01:30 (+10:30) at 15:00 UTC on 04-04: 01:30-02:00 twice.
    repeated = calendar(
        "Australia/Lord_Howe", weekly=[{"days": ["SUN"], "from": "01:30", "to": "02:00"}]
    )
    assert excluded_minutes(repeated, utc(2026, 4, 4, 10), utc(2026, 4, 4, 20)) == [
        utc(2026, 4, 4, 14, 30) + timedelta(minutes=m) for m in range(60)
    ]
    # 2026-10-04 02:00 (+10:30) becomes 02:30 (+11) at 15:30 UTC on 10-03: 02:00-02:30 skipped.
    skipped = calendar(
        "Australia/Lord_Howe", weekly=[{"days": ["SUN"], "from": "02:00", "to": "02:30"}]
    )
    assert excluded_minutes(skipped, utc(2026, 10, 3, 10), utc(2026, 10, 3, 20)) == []
    # A window across the skipped half hour is half an hour shorter that day.
    across = calendar(
        "Australia/Lord_Howe", weekly=[{"days": ["SUN"], "from": "01:30", "to": "03:00"}]
    )
    assert excluded_minutes(across, utc(2026, 10, 3, 10), utc(2026, 10, 3, 20)) == [
        utc(2026, 10, 3, 15) + timedelta(minutes=m) for m in range(60)
    ]


# --- hostile input ----------------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=30)
    | st.sampled_from(["SAT", "24:00", "02-29", "2026-03-29", "2026-03-29T02:30", "Z"]),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(["days", "from", "to", "x"]), inner, max_size=4)
    ),
    max_leaves=20,
)
keys = st.sampled_from(
    ["calendarName", "timeZone", "excludeDates", "excludeRanges", "weekly", "yearly", "ics", "z"]
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(keys, json_values, max_size=7))
def test_any_json_is_a_calendar_or_a_refusal_naming_fields(body: dict[str, object]) -> None:
    try:
        cal = Calendar.from_json(body, default_time_zone="UTC")
    except InvalidRequest as exc:
        assert exc.fields
        assert all(len(key) < 200 for key in exc.fields)
        return
    assert Calendar.from_json(cal.to_json(), default_time_zone="UTC") == cal
    cal.excludes(utc(2026, 3, 29, 1, 30))

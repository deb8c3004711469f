"""Several calendars judged together and the next allowed fires, checked against an independent
oracle (property tests) and on real crons across daylight saving changes."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime, time, timedelta
from itertools import count as counting
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.model.calendar import (
    Calendar,
    Exclusion,
    cron_candidates,
    excluded_by,
    next_allowed,
)
from scheduler.model.config.cron import parse_cron

ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kathmandu"]
DAYS = ["MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"]
START = datetime(2026, 1, 1, tzinfo=UTC)
END = datetime(2027, 12, 31, tzinfo=UTC)


def covered_by_oracle(cal: Calendar, instant: datetime) -> bool:
    """Whether some part covers `instant`, computed apart from the model: the local wall time
    compared with each date, range and each listed day's window built as naive datetimes."""
    local = instant.astimezone(UTC).astimezone(ZoneInfo(cal.time_zone)).replace(tzinfo=None)
    if local.date() in cal.exclude_dates:
        return True
    if any((y.month, y.day) == (local.month, local.day) for y in cal.yearly):
        return True
    for excluded in cal.exclude_ranges:
        point = local if excluded.start.tzinfo is None else instant
        if excluded.start <= point < excluded.end:
            return True
    for window in cal.weekly:
        for back in (0, 1):  # a window across midnight started the day before
            day = local.date() - timedelta(days=back)
            if day.weekday() not in window.days:
                continue
            midnight = datetime.combine(day, time())
            begin = midnight + timedelta(minutes=window.start_minute)
            finish = midnight + timedelta(minutes=window.end_minute)
            if finish <= begin:
                finish += timedelta(days=1)
            if begin <= local < finish:
                return True
    return False


def _clock(minute: int) -> str:
    return f"{minute // 60:02d}:{minute % 60:02d}"


@st.composite
def calendar_bodies(draw: st.DrawFn) -> dict[str, object]:
    """A valid calendar body: a few parts of each kind, dense enough to cover often."""
    body: dict[str, object] = {"calendarName": "c", "timeZone": draw(st.sampled_from(ZONES))}
    days = st.dates(date(2026, 1, 1), date(2027, 12, 31))
    body["excludeDates"] = [d.isoformat() for d in draw(st.lists(days, max_size=20))]
    body["yearly"] = [f"{d.month:02d}-{d.day:02d}" for d in draw(st.lists(days, max_size=3))]
    ranges = []
    for _ in range(draw(st.integers(0, 4))):
        start = draw(st.datetimes(datetime(2026, 1, 1), datetime(2027, 12, 30)))
        length = draw(st.timedeltas(timedelta(minutes=1), timedelta(days=20)))
        start = start.replace(microsecond=0)
        end = start + length
        if draw(st.booleans()):
            start, end = start.replace(tzinfo=UTC), end.replace(tzinfo=UTC)
        ranges.append({"from": start.isoformat(), "to": end.isoformat()})
    body["excludeRanges"] = ranges
    weekly = []
    for _ in range(draw(st.integers(0, 4))):
        # Midnight and the end of the day are drawn often: whole-day windows are edge cases.
        start_minute = draw(st.one_of(st.just(0), st.integers(0, 1439)))
        end_minute = draw(st.one_of(st.just(1440), st.integers(1, 1440)))
        if end_minute == start_minute:
            end_minute += 1
        picked = draw(st.lists(st.sampled_from(DAYS), min_size=1, max_size=7, unique=True))
        weekly.append({"days": picked, "from": _clock(start_minute), "to": _clock(end_minute)})
    body["weekly"] = weekly
    if not any(body[part] for part in ("excludeDates", "yearly", "excludeRanges", "weekly")):
        body["yearly"] = ["12-25"]
    return body


def calendars() -> st.SearchStrategy[Calendar]:
    return calendar_bodies().map(lambda b: Calendar.from_json(b, default_time_zone="UTC"))


# Daylight saving changes of 2026 (UTC): Berlin, New York, Lord Howe (30 minutes).
CHANGES = [
    datetime(2026, 3, 29, 1, tzinfo=UTC),
    datetime(2026, 10, 25, 1, tzinfo=UTC),
    datetime(2026, 3, 8, 7, tzinfo=UTC),
    datetime(2026, 11, 1, 6, tzinfo=UTC),
    datetime(2026, 4, 4, 15, tzinfo=UTC),
    datetime(2026, 10, 3, 15, 30, tzinfo=UTC),
]
anywhere = st.datetimes(
    START.replace(tzinfo=None), END.replace(tzinfo=None), timezones=st.just(UTC)
)
near_a_change = st.builds(
    lambda change, offset: change + offset,
    st.sampled_from(CHANGES),
    st.timedeltas(timedelta(hours=-26), timedelta(hours=26)),
)
instants = st.one_of(anywhere, near_a_change)


@settings(max_examples=200, deadline=None)
@given(calendars(), st.lists(instants, min_size=1, max_size=30))
def test_an_instant_is_excluded_iff_some_part_covers_it(
    cal: Calendar, moments: list[datetime]
) -> None:
    for moment in moments:
        assert cal.excludes(moment) == covered_by_oracle(cal, moment), moment


@settings(max_examples=100, deadline=None)
@given(calendars(), instants, st.sampled_from(ZONES))
def test_the_json_round_trip_keeps_the_calendar_and_its_judgement(
    cal: Calendar, moment: datetime, default_zone: str
) -> None:
    again = Calendar.from_json(cal.to_json(), default_time_zone=default_zone)
    assert again == cal
    assert again.excludes(moment) == cal.excludes(moment)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(calendars(), max_size=3),
    st.lists(instants, max_size=60).map(sorted),
    st.integers(0, 20),
    st.integers(0, 30),
)
def test_next_allowed_is_exactly_the_allowed_candidates_prefix(
    cals: list[Calendar], candidates: list[datetime], wanted: int, max_skipped: int
) -> None:
    result = next_allowed(iter(candidates), cals, wanted, max_skipped=max_skipped)
    allowed = [c for c in candidates if not any(covered_by_oracle(k, c) for k in cals)]
    assert all(not any(k.excludes(t) for k in cals) for t in result.fire_times)
    if result.gave_up:
        # Gave up on the excluded candidate beyond max_skipped: what it found is the allowed
        # candidates before that one, none passed over.
        seen = 0
        excluded = 0
        for seen, candidate in enumerate(candidates, start=1):  # noqa: B007
            excluded += candidate not in allowed
            if excluded > max_skipped:
                break
        assert excluded == max_skipped + 1
        assert result.fire_times == tuple(c for c in candidates[:seen] if c in allowed)
        assert result.skipped == max_skipped
        assert len(result.fire_times) < wanted
    else:
        assert result.fire_times == tuple(allowed[:wanted])


@settings(max_examples=100, deadline=None)
@given(st.lists(calendars(), min_size=1, max_size=4), instants)
def test_several_calendars_exclude_what_any_of_them_excludes(
    cals: list[Calendar], moment: datetime
) -> None:
    found = excluded_by(cals, moment)
    first = next((k for k in cals if k.excludes(moment)), None)
    if first is None:
        assert found is None
    else:
        assert found is not None
        assert found.calendar_name == first.calendar_name
        assert found.part == first.covering_part(moment)


def named(name: str, **parts: object) -> Calendar:
    return Calendar.from_json({"calendarName": name, **parts}, default_time_zone="UTC")


def test_the_first_excluding_calendar_is_named_with_its_part() -> None:
    holidays = named("holidays", yearly=["12-25"])
    maintenance = named("maintenance", weekly=[{"days": ["FRI"], "from": "00:00", "to": "24:00"}])
    christmas_2026 = datetime(2026, 12, 25, 3, tzinfo=UTC)  # a Friday
    assert excluded_by([maintenance, holidays], christmas_2026) == Exclusion(
        "maintenance", "weekly[0] FRI 00:00-24:00"
    )
    assert str(excluded_by([holidays, maintenance], christmas_2026)) == (
        "calendar holidays: yearly 12-25"
    )
    assert excluded_by([], christmas_2026) is None
    with pytest.raises(ValueError, match="aware"):
        excluded_by([holidays], datetime(2026, 12, 25))


def test_a_calendar_excluding_everything_gives_up_after_the_bound() -> None:
    always = named("always", weekly=[{"days": DAYS, "from": "00:00", "to": "24:00"}])
    endless: Iterator[datetime] = (START + timedelta(minutes=n) for n in counting())
    result = next_allowed(endless, [always], 5, max_skipped=1000)
    assert result.fire_times == ()
    assert result.gave_up
    assert result.skipped == 1000
    # It read no more than count + max_skipped candidates.
    assert next(endless) == START + timedelta(minutes=1001)


def test_next_allowed_stops_reading_once_it_has_enough() -> None:
    weekend = named("weekend", weekly=[{"days": ["SAT", "SUN"], "from": "00:00", "to": "24:00"}])
    endless = (START + timedelta(days=n) for n in counting())  # 2026-01-01 is a Thursday
    result = next_allowed(endless, [weekend], 3)
    assert [t.date().isoformat() for t in result.fire_times] == [
        "2026-01-01",
        "2026-01-02",
        "2026-01-05",
    ]
    assert result.skipped == 2
    assert not result.gave_up
    assert next(endless) == START + timedelta(days=5)


def test_candidates_that_run_out_are_not_giving_up() -> None:
    result = next_allowed(iter([START]), [named("x", yearly=["12-25"])], 10)
    assert result.fire_times == (START,)
    assert not result.gave_up
    assert next_allowed(iter([START]), [], 0).fire_times == ()
    with pytest.raises(ValueError, match="negative"):
        next_allowed(iter([START]), [], -1)


def test_a_cron_previewed_past_a_holiday_and_a_maintenance_window() -> None:
    spec = parse_cron("0 0 * * * ?", "Europe/Berlin")  # every hour
    cal = Calendar.from_json(
        {
            "calendarName": "ops",
            "timeZone": "Europe/Berlin",
            "excludeDates": ["2026-12-25"],
            "weekly": [{"days": ["SAT"], "from": "22:00", "to": "02:00"}],
        },
        default_time_zone="UTC",
    )
    after = datetime(2026, 12, 24, 20, 30, tzinfo=UTC)  # 21:30 CET, Thursday
    result = next_allowed(cron_candidates(spec, after), [cal], 4)
    zone = ZoneInfo("Europe/Berlin")
    assert [t.astimezone(zone).strftime("%a %d %H:%M") for t in result.fire_times] == [
        "Thu 24 22:00",
        "Thu 24 23:00",
        "Sat 26 00:00",
        "Sat 26 01:00",
    ]
    assert result.skipped == 24


def test_berlin_a_cron_in_the_skipped_hour_fires_shifted_and_is_judged_there() -> None:
    # APScheduler fires 02:30 on 2026-03-29 at 03:30 CEST (01:30 UTC); a 02:00-03:00 window
    # does not cover it, a 03:00-04:00 window does.
    spec = parse_cron("0 30 2 * * ?", "Europe/Berlin")
    after = datetime(2026, 3, 28, 12, tzinfo=UTC)
    early = named(
        "early",
        timeZone="Europe/Berlin",
        excludeDates=["2026-03-28"],
        weekly=[{"days": ["SUN"], "from": "02:00", "to": "03:00"}],
    )
    late = named(
        "late", timeZone="Europe/Berlin", weekly=[{"days": ["SUN"], "from": "03:00", "to": "04:00"}]
    )
    first = next_allowed(cron_candidates(spec, after), [early], 1).fire_times[0]
    assert first.astimezone(UTC) == datetime(2026, 3, 29, 1, 30, tzinfo=UTC)
    second = next_allowed(cron_candidates(spec, after), [late], 1).fire_times[0]
    assert second.astimezone(UTC) == datetime(2026, 3, 30, 0, 30, tzinfo=UTC)


def test_new_york_a_cron_in_the_repeated_hour_skips_both_fires() -> None:
    # 01:30 happens twice on 2026-11-01 in New York; APScheduler fires at both, and a window
    # over 01:00-02:00 excludes both.
    spec = parse_cron("0 30 1 * * ?", "America/New_York")
    after = datetime(2026, 10, 31, 12, tzinfo=UTC)
    fires = spec.next_fire_times(after, 3)
    assert [f.astimezone(UTC).hour for f in fires[:2]] == [5, 6]
    cal = named(
        "night",
        timeZone="America/New_York",
        weekly=[{"days": ["SUN"], "from": "01:00", "to": "02:00"}],
    )
    result = next_allowed(cron_candidates(spec, after), [cal], 1)
    assert result.fire_times[0].astimezone(UTC) == datetime(2026, 11, 2, 6, 30, tzinfo=UTC)
    assert result.skipped == 2


def test_lord_howe_a_cron_in_the_repeated_half_hour() -> None:
    spec = parse_cron("0 45 1 * * ?", "Australia/Lord_Howe")
    after = datetime(2026, 4, 4, 0, tzinfo=UTC)
    cal = named(
        "half",
        timeZone="Australia/Lord_Howe",
        weekly=[{"days": ["SUN"], "from": "01:30", "to": "02:00"}],
    )
    fires = spec.next_fire_times(after, 3)
    assert [f.astimezone(UTC).strftime("%d %H:%M") for f in fires] == [
        "04 14:45",
        "04 15:15",
        "05 15:15",
    ]
    result = next_allowed(cron_candidates(spec, after), [cal], 1)
    assert result.fire_times[0].astimezone(UTC) == datetime(2026, 4, 5, 15, 15, tzinfo=UTC)
    assert result.skipped == 2


def test_cron_candidates_end_with_the_schedule() -> None:
    spec = parse_cron("0 0 12 1 1 ? 2027", "UTC")
    assert list(cron_candidates(spec, START, batch=1)) == [datetime(2027, 1, 1, 12, tzinfo=UTC)]
    with pytest.raises(ValueError, match="batch"):
        next(cron_candidates(spec, START, batch=0))

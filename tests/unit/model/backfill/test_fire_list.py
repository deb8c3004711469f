"""A backfill's fire list and pacing (issue 28): exactly the cron's fires in the inclusive range,
in order, calendar exclusions applied and counted, capped with an error naming count and cap;
launches never faster than the rate. Property-tested against a brute-force oracle."""

from __future__ import annotations

import itertools
import math
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.model.backfill import (
    SCAN_FACTOR,
    FireList,
    TooManyFires,
    backfill_fires,
    fire_time_text,
    launch_interval,
    next_launch_at,
)
from scheduler.model.config import next_fire_times, parse_cron

T0 = datetime(2026, 11, 23, 0, 0, tzinfo=UTC)


def fires_of(expression: str, start: datetime, end: datetime, **kwargs: object) -> FireList:
    return backfill_fires(parse_cron(expression, "UTC", now=T0), start, end, **kwargs)  # type: ignore[arg-type]


def test_both_bounds_are_inclusive() -> None:
    hourly = fires_of("0 0 * * * ?", T0, T0 + timedelta(hours=3))
    assert hourly.times == tuple(T0 + timedelta(hours=h) for h in range(4))
    assert hourly.excluded == 0


def test_bounds_between_fires_take_only_the_fires_inside() -> None:
    start = T0 + timedelta(microseconds=1)
    end = T0 + timedelta(hours=3) - timedelta(microseconds=1)
    assert fires_of("0 0 * * * ?", start, end).times == (
        T0 + timedelta(hours=1),
        T0 + timedelta(hours=2),
    )


def test_bounds_in_other_offsets_are_compared_as_instants() -> None:
    plus_two = timezone(timedelta(hours=2))
    start = datetime(2026, 11, 23, 2, 0, tzinfo=plus_two)  # 00:00Z
    end = datetime(2026, 11, 23, 3, 0, tzinfo=plus_two)  # 01:00Z
    assert fires_of("0 0 * * * ?", start, end).times == (T0, T0 + timedelta(hours=1))


def test_a_range_without_fires_is_an_empty_list() -> None:
    spec = parse_cron("0 0 0 1 1 ? 2030", "UTC", now=T0)
    assert backfill_fires(spec, T0, T0 + timedelta(days=30)) == FireList((), 0)


def test_fires_come_in_the_crons_zone_across_the_autumn_change() -> None:
    # Europe/Berlin, 25 Oct 2026: 02:30 happens twice (CEST, then CET); both are fires.
    spec = parse_cron("0 30 2 * * ?", "Europe/Berlin", now=T0)
    zone = ZoneInfo("Europe/Berlin")
    start = datetime(2026, 10, 24, 12, 0, tzinfo=zone)
    end = datetime(2026, 10, 26, 12, 0, tzinfo=zone)
    texts = [fire_time_text(fire) for fire in backfill_fires(spec, start, end).times]
    assert texts == [
        "2026-10-25T02:30:00+02:00",
        "2026-10-25T02:30:00+01:00",
        "2026-10-26T02:30:00+01:00",
    ]


def test_a_wall_time_skipped_in_spring_fires_once_an_hour_later() -> None:
    spec = parse_cron("0 30 2 * * ?", "Europe/Berlin", now=T0)
    start = datetime(2026, 3, 28, 12, 0, tzinfo=UTC)
    end = datetime(2026, 3, 30, 12, 0, tzinfo=UTC)
    texts = [fire_time_text(fire) for fire in backfill_fires(spec, start, end).times]
    assert texts == ["2026-03-29T03:30:00+02:00", "2026-03-30T02:30:00+02:00"]


def test_a_range_starting_on_the_instant_of_a_skipped_wall_time_lists_its_fire() -> None:
    # 02:15 does not exist in Berlin on 29 Mar 2026; its fire is at 01:15 UTC (03:15 CEST).
    # APScheduler asked from that instant reads 03:15 and misses it: the range must not.
    spec = parse_cron("0 15 2 ? * SUN", "Europe/Berlin", now=T0)
    on_it = datetime(2026, 3, 29, 1, 15, tzinfo=UTC)
    listed = backfill_fires(spec, on_it, on_it).times
    assert [fire_time_text(fire) for fire in listed] == ["2026-03-29T03:15:00+02:00"]
    assert backfill_fires(spec, on_it + timedelta(seconds=1), on_it + timedelta(days=6)).times == ()


def test_excluded_fires_are_left_out_and_counted() -> None:
    def weekend(fire: datetime) -> bool:
        return fire.weekday() >= 5

    # Mon 23 Nov to Sun 29 Nov 2026, daily at noon: Sat and Sun excluded.
    daily = fires_of("0 0 12 * * ?", T0, T0 + timedelta(days=7), excluded=weekend)
    assert [fire.day for fire in daily.times] == [23, 24, 25, 26, 27]
    assert daily.excluded == 2


def test_the_calendars_predicate_sees_each_fire_in_range_once_in_order() -> None:
    seen: list[datetime] = []

    def record(fire: datetime) -> bool:
        seen.append(fire)
        return False

    listed = fires_of("0 */15 * * * ?", T0, T0 + timedelta(hours=1), excluded=record)
    assert seen == list(listed.times)
    assert len(seen) == 5


def test_a_predicate_that_fails_stops_the_list() -> None:
    def broken(fire: datetime) -> bool:
        raise LookupError("calendar gone")

    with pytest.raises(LookupError):
        fires_of("0 0 * * * ?", T0, T0 + timedelta(hours=1), excluded=broken)


def test_exactly_the_cap_is_accepted_and_one_more_is_refused_naming_both() -> None:
    end = T0 + timedelta(seconds=999)
    assert len(fires_of("* * * * * ?", T0, end).times) == 1000
    with pytest.raises(TooManyFires) as caught:
        fires_of("* * * * * ?", T0, end + timedelta(seconds=1))
    error = caught.value
    assert (error.count, error.exact, error.cap, error.http_status) == (1001, True, 1000, 400)
    assert "1,001" in error.message and "1,000" in error.message
    assert set(error.fields) == {"to"}


def test_the_cap_is_a_parameter() -> None:
    with pytest.raises(TooManyFires) as caught:
        fires_of("* * * * * ?", T0, T0 + timedelta(seconds=5), max_fires=3)
    assert (caught.value.count, caught.value.cap) == (6, 3)


def test_a_range_past_the_scan_bound_is_refused_with_a_lower_bound() -> None:
    every_second = T0 + timedelta(seconds=100 * SCAN_FACTOR)  # 10 * SCAN_FACTOR + 1 fires
    with pytest.raises(TooManyFires) as caught:
        fires_of("* * * * * ?", T0, every_second, max_fires=100)
    assert (caught.value.count, caught.value.exact) == (100 * SCAN_FACTOR, False)
    assert "more than 1,000" in caught.value.message


def test_excluded_fires_count_towards_the_scan_bound_only() -> None:
    def everything(fire: datetime) -> bool:
        return True

    end = T0 + timedelta(seconds=3 * SCAN_FACTOR - 1)  # exactly the scan bound
    assert fires_of("* * * * * ?", T0, end, excluded=everything, max_fires=3) == FireList(
        (), 3 * SCAN_FACTOR
    )
    with pytest.raises(TooManyFires):
        fires_of("* * * * * ?", T0, end + timedelta(seconds=1), excluded=everything, max_fires=3)


@pytest.mark.parametrize("cap", [0, -1, 10_001])
def test_a_cap_out_of_range_is_a_callers_bug(cap: int) -> None:
    with pytest.raises(ValueError, match="max_fires"):
        fires_of("* * * * * ?", T0, T0 + timedelta(seconds=1), max_fires=cap)


def test_naive_bounds_are_a_callers_bug() -> None:
    with pytest.raises(ValueError, match="aware"):
        fires_of("* * * * * ?", T0.replace(tzinfo=None), T0 + timedelta(seconds=1))


# --- properties -------------------------------------------------------------------------------

_values = st.one_of(st.just(None), st.sets(st.integers(0, 59), min_size=1, max_size=4))
_hours = st.one_of(st.just(None), st.sets(st.integers(0, 23), min_size=1, max_size=4))


def _field(values: set[int] | None) -> str:
    return "*" if values is None else ",".join(map(str, sorted(values)))


def _matches(values: set[int] | None, value: int) -> bool:
    return values is None or value in values


@settings(max_examples=150, deadline=None)
@given(
    seconds=_values,
    minutes=_values,
    hours=_hours,
    offset_h=st.integers(-12, 14),
    start_s=st.integers(0, 2 * 86_400),
    span_s=st.integers(0, 3_600),
    start_us=st.sampled_from([0, 1, 999_999]),
    cap=st.integers(1, 60),
    excluded_minutes=st.sets(st.integers(0, 59), max_size=30),
)
def test_the_list_is_exactly_the_crons_fires_in_range_against_brute_force(
    seconds: set[int] | None,
    minutes: set[int] | None,
    hours: set[int] | None,
    offset_h: int,
    start_s: int,
    span_s: int,
    start_us: int,
    cap: int,
    excluded_minutes: set[int],
) -> None:
    # A fixed-offset zone (Etc/GMT-3 is UTC+3), so the oracle reads each second's wall time by
    # arithmetic, without DST rules; DST cases are the examples and the property below.
    zone_name = "UTC" if offset_h == 0 else f"Etc/GMT{-offset_h:+d}"
    zone = ZoneInfo(zone_name)
    expression = f"{_field(seconds)} {_field(minutes)} {_field(hours)} * * ?"
    spec = parse_cron(expression, zone_name, now=T0)
    start = T0 + timedelta(seconds=start_s, microseconds=start_us)
    end = start + timedelta(seconds=span_s)
    first = start_s + (1 if start_us else 0)  # the first whole second at or after start
    oracle: list[datetime] = []
    for offset_s in range(first, start_s + span_s + 1):
        wall_s = offset_s + offset_h * 3600
        if (
            _matches(seconds, wall_s % 60)
            and _matches(minutes, wall_s // 60 % 60)
            and _matches(hours, wall_s // 3600 % 24)
        ):
            oracle.append(T0 + timedelta(seconds=offset_s))

    def excluded(fire: datetime) -> bool:
        return fire.minute in excluded_minutes

    kept = [fire for fire in oracle if not excluded(fire)]
    if len(oracle) > cap * SCAN_FACTOR:
        with pytest.raises(TooManyFires) as caught:
            backfill_fires(spec, start, end, excluded=excluded, max_fires=cap)
        assert (caught.value.count, caught.value.exact) == (cap * SCAN_FACTOR, False)
    elif len(kept) > cap:
        with pytest.raises(TooManyFires) as caught:
            backfill_fires(spec, start, end, excluded=excluded, max_fires=cap)
        assert (caught.value.count, caught.value.exact, caught.value.cap) == (len(kept), True, cap)
    else:
        listed = backfill_fires(spec, start, end, excluded=excluded, max_fires=cap)
        assert list(listed.times) == kept
        assert listed.excluded == len(oracle) - len(kept)
        assert all(fire.tzinfo == zone for fire in listed.times)


_ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata", "UTC"]
_CRONS = ["0 */7 * * * ?", "0 0,30 1-3 * * ?", "*/20 59 * * * ?", "0 15 2 ? * SUN", "30 */5 * * *"]


@settings(max_examples=60, deadline=None)
@given(
    expression=st.sampled_from(_CRONS),
    zone=st.sampled_from(_ZONES),
    # Around the 2026 spring and autumn changes of both hemispheres.
    around=st.sampled_from(
        [
            datetime(2026, 3, 8, 7, 0, tzinfo=UTC),
            datetime(2026, 3, 29, 1, 0, tzinfo=UTC),
            datetime(2026, 4, 4, 15, 0, tzinfo=UTC),
            datetime(2026, 10, 3, 15, 0, tzinfo=UTC),
            datetime(2026, 10, 25, 1, 0, tzinfo=UTC),
            datetime(2026, 11, 1, 6, 0, tzinfo=UTC),
        ]
    ),
    before_s=st.integers(0, 6 * 3600),
    span_s=st.integers(0, 12 * 3600),
    on_a_fire=st.booleans(),
)
def test_across_dst_the_list_is_the_crons_fire_sequence_cut_to_the_range(
    expression: str,
    zone: str,
    around: datetime,
    before_s: int,
    span_s: int,
    on_a_fire: bool,
) -> None:
    spec = parse_cron(expression, zone, now=T0)
    start = around - timedelta(seconds=before_s)
    if on_a_fire:  # start exactly on a fire: it must be listed
        start = next_fire_times(spec, start, 1)[0].astimezone(UTC)
    end = start + timedelta(seconds=span_s)
    # The cron's sequence walked from a day before (so no fire of a skipped wall time is lost
    # by where the walk starts), as instants in UTC: datetimes of one ZoneInfo compare by wall
    # time, ignoring fold.
    sequence = [
        fire.astimezone(UTC) for fire in next_fire_times(spec, start - timedelta(days=1), 600)
    ]
    expected = [fire for fire in sequence if start <= fire <= end]
    assert len(expected) < len(sequence)  # the sequence went past the range
    listed = backfill_fires(spec, start, end).times
    instants = [fire.astimezone(UTC) for fire in listed]
    assert instants == expected
    assert instants == sorted(set(instants))
    assert all(start <= fire <= end for fire in instants)
    assert all(str(fire.tzinfo) == zone for fire in listed)
    # Each fire reads as its instant's real wall time in the zone (no 02:30 of a skipped hour).
    assert all(fire == fire.astimezone(UTC).astimezone(ZoneInfo(zone)) for fire in listed)
    assert [fire_time_text(fire) for fire in listed] == [
        fire_time_text(fire.astimezone(ZoneInfo(zone))) for fire in instants
    ]
    if on_a_fire:
        assert instants[0] == start


# --- pacing -----------------------------------------------------------------------------------


def test_without_a_rate_or_a_launch_the_next_fire_goes_now() -> None:
    assert next_launch_at(None, T0 - timedelta(days=1), T0) == T0
    assert next_launch_at(None, T0, T0) == T0
    assert next_launch_at(30, None, T0) == T0


def test_with_a_rate_the_next_fire_waits_one_interval_after_the_last() -> None:
    assert next_launch_at(30, T0, T0) == T0 + timedelta(seconds=2)
    assert next_launch_at(30, T0, T0 + timedelta(seconds=5)) == T0 + timedelta(seconds=5)
    assert next_launch_at(0.5, T0, T0) == T0 + timedelta(minutes=2)


def test_a_last_launch_in_the_future_delays_rather_than_bursts() -> None:
    stepped_back = T0 - timedelta(hours=1)
    assert next_launch_at(60, T0, stepped_back) == T0 + timedelta(seconds=1)


def test_the_interval_is_rounded_up_to_a_microsecond() -> None:
    assert launch_interval(7) == timedelta(microseconds=8_571_429)  # 8.5714285... s
    assert launch_interval(600) == timedelta(milliseconds=100)
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError):
            launch_interval(bad)


def test_naive_times_are_a_callers_bug() -> None:
    with pytest.raises(ValueError, match="aware"):
        next_launch_at(1, None, T0.replace(tzinfo=None))
    with pytest.raises(ValueError, match="aware"):
        next_launch_at(1, T0.replace(tzinfo=None), T0)


@settings(max_examples=200, deadline=None)
@given(
    rate=st.floats(0.01, 600, allow_nan=False, allow_infinity=False),
    polls_us=st.lists(st.integers(0, 5_000_000), min_size=1, max_size=200),
)
def test_pacing_never_exceeds_the_rate_and_launches_as_soon_as_allowed(
    rate: float, polls_us: list[int]
) -> None:
    # A launcher polling at random moments launches whenever next_launch_at allows it.
    launches: list[datetime] = []
    now = T0
    scale = max(1, int(60 / rate))  # stretch the polls so slow rates launch more than once
    for step_us in polls_us:
        now += timedelta(microseconds=step_us * scale)
        last = launches[-1] if launches else None
        due = next_launch_at(rate, last, now)
        assert due >= now
        if last is not None:
            assert due == max(now, last + launch_interval(rate))
        if due == now:
            launches.append(now)
    assert launches  # the first poll always launches
    gaps_us = [
        (later - earlier) // timedelta(microseconds=1)
        for earlier, later in itertools.pairwise(launches)
    ]
    assert all(gap * rate >= 60_000_000 for gap in gaps_us)
    window = timedelta(minutes=1)
    for index, first in enumerate(launches):
        in_window = sum(1 for later in launches[index:] if later < first + window)
        assert in_window <= math.ceil(rate)

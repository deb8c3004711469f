"""Quartz and crontab translation, checked against concrete fire times.

2026-01-01 is a Thursday.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest
from apscheduler.triggers.cron import CronTrigger  # type: ignore[import-untyped]

from scheduler.model.config.cron import (
    CronSpec,
    CronSyntax,
    next_fire_times,
    parse_cron,
    system_time_zone,
    time_zone_problem,
)
from scheduler.model.errors import InvalidRequest

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, micro: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)


def fires(expression: str, after: datetime, count: int, zone: str = "UTC") -> list[datetime]:
    spec = parse_cron(expression, zone, now=NOW)
    return [fire.astimezone(UTC) for fire in spec.next_fire_times(after, count)]


def refusal(expression: str, zone: str = "UTC") -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        parse_cron(expression, zone, now=NOW)
    return caught.value


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        pytest.param(
            "0/5 * * * * ?",
            utc(2026, 1, 1),
            [utc(2026, 1, 1, 0, 0, 5), utc(2026, 1, 1, 0, 0, 10), utc(2026, 1, 1, 0, 0, 15)],
            id="every-5-seconds",
        ),
        pytest.param(
            "3/20 * * * * ?",
            utc(2026, 1, 1),
            [utc(2026, 1, 1, 0, 0, 3), utc(2026, 1, 1, 0, 0, 23), utc(2026, 1, 1, 0, 0, 43)],
            id="start-and-step",
        ),
        pytest.param(
            "0 0 12 ? * 2-6",
            utc(2026, 1, 2, 13),  # Friday afternoon
            [utc(2026, 1, 5, 12), utc(2026, 1, 6, 12), utc(2026, 1, 7, 12)],
            id="weekdays-2-6-are-mon-fri",
        ),
        pytest.param(
            "0 0 12 ? * MON-FRI",
            utc(2026, 1, 2, 13),
            [utc(2026, 1, 5, 12), utc(2026, 1, 6, 12), utc(2026, 1, 7, 12)],
            id="weekday-names",
        ),
        pytest.param(
            "0 0 0 ? * 1",
            NOW,
            [utc(2026, 1, 4), utc(2026, 1, 11)],
            id="quartz-1-is-sunday",
        ),
        pytest.param(
            "0 15 10 ? * 6#3",
            NOW,
            [utc(2026, 1, 16, 10, 15), utc(2026, 2, 20, 10, 15), utc(2026, 3, 20, 10, 15)],
            id="third-friday",
        ),
        pytest.param(
            "0 15 10 ? * FRI#3",
            NOW,
            [utc(2026, 1, 16, 10, 15), utc(2026, 2, 20, 10, 15)],
            id="third-friday-by-name",
        ),
        pytest.param(
            "0 0 0 L * ?",
            NOW,
            [utc(2026, 1, 31), utc(2026, 2, 28), utc(2026, 3, 31)],
            id="last-day-of-month",
        ),
        pytest.param(
            "0 0 0 L 2 ?",
            NOW,
            [utc(2026, 2, 28), utc(2027, 2, 28), utc(2028, 2, 29)],
            id="last-day-of-february-in-a-leap-year",
        ),
        pytest.param(
            "0 0 0 ? * 6L",
            NOW,
            [utc(2026, 1, 30), utc(2026, 2, 27), utc(2026, 3, 27)],
            id="last-friday",
        ),
        pytest.param(
            "0 0 0 ? * L",
            NOW,
            [utc(2026, 1, 3), utc(2026, 1, 10)],
            id="lone-L-in-day-of-week-is-saturday",
        ),
        pytest.param(
            "0 0 0 1,L * ?",
            NOW,
            [utc(2026, 1, 31), utc(2026, 2, 1), utc(2026, 2, 28), utc(2026, 3, 1)],
            id="first-and-last-day",
        ),
        pytest.param(
            "0 0 12 1/5 * ?",
            NOW,
            [utc(2026, 1, 1, 12), utc(2026, 1, 6, 12), utc(2026, 1, 11, 12)],
            id="every-5-days-from-the-1st",
        ),
        pytest.param(
            "0 0 22-2 * * ?",
            NOW,
            [utc(2026, 1, 1, 1), utc(2026, 1, 1, 2), utc(2026, 1, 1, 22), utc(2026, 1, 1, 23)],
            id="overflowing-hour-range",
        ),
        pytest.param(
            "0 0 0 ? * FRI-MON",
            NOW,
            [utc(2026, 1, 2), utc(2026, 1, 3), utc(2026, 1, 4), utc(2026, 1, 5), utc(2026, 1, 9)],
            id="overflowing-weekday-range",
        ),
        pytest.param(
            "0 0 0 ? * MON-FRI/2",
            NOW,
            [utc(2026, 1, 2), utc(2026, 1, 5), utc(2026, 1, 7), utc(2026, 1, 9)],
            id="step-on-named-weekday-range",
        ),
        pytest.param(
            "0 0 0 1 NOV-FEB ?",
            NOW,
            [utc(2026, 2, 1), utc(2026, 11, 1), utc(2026, 12, 1), utc(2027, 1, 1)],
            id="overflowing-month-range",
        ),
        pytest.param(
            "0 0 0 1 1 ? 2027/2",
            NOW,
            [utc(2027, 1, 1), utc(2029, 1, 1), utc(2031, 1, 1)],
            id="year-field",
        ),
        pytest.param(
            "  0   0  12 ? * mon-fri  ",
            utc(2026, 1, 2, 13),
            [utc(2026, 1, 5, 12)],
            id="whitespace-and-lower-case",
        ),
    ],
)
def test_quartz_expression_fires_at_the_expected_instants(
    expression: str, after: datetime, expected: list[datetime]
) -> None:
    assert fires(expression, after, len(expected)) == expected


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        pytest.param(
            "0 0 * * 0",
            NOW,
            [utc(2026, 1, 4), utc(2026, 1, 11)],
            id="0-is-sunday-not-monday",
        ),
        pytest.param("0 0 * * 7", NOW, [utc(2026, 1, 4), utc(2026, 1, 11)], id="7-is-sunday"),
        pytest.param("0 0 * * 1", NOW, [utc(2026, 1, 5), utc(2026, 1, 12)], id="1-is-monday"),
        pytest.param("0 0 * * sun", NOW, [utc(2026, 1, 4)], id="day-name"),
        pytest.param(
            "0 0 * * 5-7",
            NOW,
            [utc(2026, 1, 2), utc(2026, 1, 3), utc(2026, 1, 4), utc(2026, 1, 9)],
            id="range-up-to-7",
        ),
        pytest.param(
            "*/15 9-17 * * 1-5",
            utc(2026, 1, 2, 17, 40),  # Friday
            [utc(2026, 1, 2, 17, 45), utc(2026, 1, 5, 9), utc(2026, 1, 5, 9, 15)],
            id="business-hours",
        ),
        pytest.param(
            "0 0 */2 * 1",
            NOW,
            [utc(2026, 1, 5), utc(2026, 1, 19), utc(2026, 2, 9)],
            id="star-day-of-month-is-anded-like-vixie-cron",
        ),
        pytest.param("@hourly", NOW, [utc(2026, 1, 1, 1), utc(2026, 1, 1, 2)], id="hourly"),
        pytest.param("@daily", NOW, [utc(2026, 1, 2)], id="daily"),
        pytest.param("@midnight", NOW, [utc(2026, 1, 2)], id="midnight"),
        pytest.param("@weekly", NOW, [utc(2026, 1, 4)], id="weekly-is-sunday"),
        pytest.param("@monthly", NOW, [utc(2026, 2, 1)], id="monthly"),
        pytest.param("@yearly", NOW, [utc(2027, 1, 1)], id="yearly"),
        pytest.param("@annually", NOW, [utc(2027, 1, 1)], id="annually"),
    ],
)
def test_crontab_expression_fires_at_the_expected_instants(
    expression: str, after: datetime, expected: list[datetime]
) -> None:
    assert fires(expression, after, len(expected)) == expected


def test_syntax_is_recognised_by_field_count() -> None:
    assert parse_cron("0 0 * * *", "UTC", now=NOW).syntax is CronSyntax.CRONTAB
    assert parse_cron("0 0 0 * * ?", "UTC", now=NOW).syntax is CronSyntax.QUARTZ
    assert parse_cron("0 0 0 * * ? 2030", "UTC", now=NOW).syntax is CronSyntax.QUARTZ


def test_spec_keeps_the_original_text_and_zone() -> None:
    spec = parse_cron(" 0/5 * * * * ? ", "Asia/Shanghai", now=NOW)
    assert spec.expression == " 0/5 * * * * ? "
    assert spec.time_zone == "Asia/Shanghai"


def test_trigger_is_an_apscheduler_cron_trigger_in_the_spec_zone() -> None:
    trigger = parse_cron("0 0 12 ? * 2-6", "Asia/Shanghai", now=NOW).trigger()
    assert isinstance(trigger, CronTrigger)
    assert trigger.timezone == ZoneInfo("Asia/Shanghai")
    assert "day_of_week='mon-fri'" in str(trigger)


def test_equivalent_expressions_share_a_schedule_key() -> None:
    keys = {
        parse_cron(expression, "UTC", now=NOW).schedule_key
        for expression in (
            "0 0 12 ? * 2-6",
            "0 0 12 ? * MON-FRI",
            "0 12 * * 1-5",
            "0 12 * * mon-fri",
        )
    }
    assert len(keys) == 1
    other_zone = parse_cron("0 0 12 ? * 2-6", "Asia/Shanghai", now=NOW).schedule_key
    assert other_zone not in keys


def test_spec_is_hashable_and_compares_by_value() -> None:
    first = parse_cron("0 0 12 * * ?", "UTC", now=NOW)
    second = parse_cron("0 0 12 * * ?", "UTC", now=NOW)
    assert first == second
    assert len({first, second}) == 1


@pytest.mark.parametrize(
    ("expression", "problem"),
    [
        ("0 0 0 15W * ?", "'W' (nearest weekday) is not supported"),
        ("0 0 0 LW * ?", "'LW' (last weekday of the month) is not supported"),
        ("0 0 0 L-3 * ?", "(days before the last day of the month) is not supported"),
        ("0 0 0 5C * ?", "'C' (calendar) is not supported"),
        ("0 0 0 ? * 1C", "'C' (calendar) is not supported"),
        ("0 0 0 ? * 2W", "'W' belongs in day-of-month"),
        ("0 0 0 6#3 * ?", "'#' and 'nL' belong in day-of-week"),
        ("0 0 0 1 * 2", "day-of-month and day-of-week are both restricted"),
        ("0 0 0 1 * MON", "Quartz needs '?' in one of them"),
        ("0 0 0 ? * 6#3,2", "must be the only value in day-of-week"),
        ("0 0 0 ? * 1,6L", "must be the only value in day-of-week"),
        ("0 0 0 ? * 6#6", "the week after '#' must be 1-5"),
        ("0 0 0 ? * 6#0", "the week after '#' must be 1-5"),
        ("0 0 0 ? * 0", "day-of-week: 0 is outside 1-7 (1 = SUN ... 7 = SAT in Quartz)"),
        ("0 0 0 ? * 8", "day-of-week: 8 is outside 1-7"),
        ("60 * * * * ?", "seconds: 60 is outside 0-59"),
        ("0 60 * * * ?", "minutes: 60 is outside 0-59"),
        ("0 0 24 * * ?", "hours: 24 is outside 0-23"),
        ("0 0 0 32 * ?", "day-of-month: 32 is outside 1-31"),
        ("0 0 0 0 * ?", "day-of-month: 0 is outside 1-31"),
        ("0 0 0 1 13 ?", "month: 13 is outside 1-12"),
        ("0 0 0 1 1 ? 1969", "year: 1969 is outside 1970-2099"),
        ("0 0 0 1 1 ? 2030-2028", "year: range '2030-2028' runs backwards"),
        ("0/0 * * * * ?", "seconds: step 0 must be between 1 and 59"),
        ("0/60 * * * * ?", "seconds: step 60 must be between 1 and 59"),
        ("0 0 0/24 * * ?", "hours: step 24 must be between 1 and 23"),
        ("0 0 0 ? * MON/8", "day-of-week: step 8 must be between 1 and 7"),
        ("0 0 0 1 FOO ?", "month: unknown name 'FOO'"),
        ("0 0 0 ? * MONDAY", "day-of-week: cannot read 'MONDAY'"),
        ("? 0 0 1 * ?", "seconds: '?' is only allowed in day-of-month and day-of-week"),
        ("0 0 0 1 ? *", "month: '?' is only allowed in day-of-month and day-of-week"),
        ("0 0 0 1,? * ?", "day-of-month: cannot read '?'"),
        ("*-5 * * * * ?", "seconds: cannot read '*-5'"),
        ("1--2 * * * * ?", "seconds: cannot read '1--2'"),
        ("0 0 0 30 2 ?", "never fires: day-of-month 30 does not occur in the given months"),
        ("0 0 0 31 4,6,9,11 ?", "never fires: day-of-month 31 does not occur"),
        ("0 0 0 1 1 ? 2020", "never fires after 2026-01-01 00:00:00 UTC"),
        ("0 0 0 * *", "day-of-month: 0 is outside 1-31"),
        ("0 0 1 * 1", "day-of-month and day-of-week are both restricted: cron would run when"),
        ("0 0 1-7 * mon", "either matches, which cannot be scheduled exactly"),
        ("0 0 L * *", "day-of-month: 'L' is Quartz syntax; write it as a 6-7 field Quartz cron"),
        ("0 0 15W * *", "day-of-month: '15W' is Quartz syntax"),
        ("0 0 * * 5L", "day-of-week: '5L' is Quartz syntax"),
        ("0 0 * * 5#2", "day-of-week: '5#2' is Quartz syntax"),
        # A Quartz cron that lost its seconds is not read as crontab (every 10 minutes).
        ("0/10 * * * ?", "day-of-week: '?' is Quartz syntax; write it as a 6-7 field Quartz"),
        ("0/10 * * * ?", "seconds first, such as '0 0/10 * * * ?' (5 fields are crontab"),
        ("0 0 1 * ?", "such as '0 0 0 1 * ?'"),
        ("0 0 ? * MON", "day-of-month: '?' is Quartz syntax"),
        ("0 0 L * *", "such as '0 0 0 L * ?'"),
        ("0 0 * * 5#2", "such as '0 0 0 ? * 5#2'"),
        ("0 0 * * 8", "day-of-week: 8 is outside 0-7"),
        ("0 0 * * fri-mon", "day-of-week: range 'FRI-MON' runs backwards"),
        ("0 22-2 * * *", "hour: range '22-2' runs backwards"),
        ("0 ? * * *", "hour: '?' is only allowed in day-of-month and day-of-week"),
        ("@reboot", "unknown macro '@reboot'; supported:"),
        ("", "expected 5 fields (crontab"),
        ("* * * *", "got 4"),
        ("* * * * * * * *", "got 8"),
        ("0 0 0 1 1 ? " + "1" * 200, "must be at most 200 characters"),
    ],
)
def test_expression_that_cannot_be_honoured_exactly_is_refused(
    expression: str, problem: str
) -> None:
    error = refusal(expression)
    assert set(error.fields) == {"cron"}
    assert problem in error.fields["cron"]
    assert error.message.startswith(f"invalid cron {expression!r}: ")
    assert error.http_status == 400


def test_unknown_time_zone_is_refused_with_its_own_field() -> None:
    error = refusal("0 0 0 * * ?", zone="Mars/Olympus_Mons")
    assert error.fields == {
        "timeZone": "unknown time zone 'Mars/Olympus_Mons' (expected an IANA name such as "
        "'Asia/Shanghai')"
    }


def test_bad_zone_and_bad_cron_are_reported_together() -> None:
    error = refusal("0 0 0 15W * ?", zone="Nowhere/Land")
    assert set(error.fields) == {"timeZone", "cron"}


@pytest.mark.parametrize("zone", ["", " UTC", "/etc/passwd", "../UTC", "Asia/../UTC"])
def test_malformed_time_zone_names_are_refused(zone: str) -> None:
    assert time_zone_problem(zone) is not None


@pytest.mark.parametrize("zone", ["UTC", "Asia/Shanghai", "America/New_York", "Etc/GMT+5"])
def test_iana_time_zone_names_are_accepted(zone: str) -> None:
    assert time_zone_problem(zone) is None


def test_job_in_shanghai_fires_at_the_right_utc_instant() -> None:
    # 09:00 in Shanghai (UTC+8, no DST) is 01:00 UTC.
    assert fires("0 0 9 * * ?", NOW, 2, zone="Asia/Shanghai") == [
        utc(2026, 1, 1, 1),
        utc(2026, 1, 2, 1),
    ]
    assert fires("0 9 * * *", NOW, 1, zone="Asia/Shanghai") == [utc(2026, 1, 1, 1)]


def test_fire_times_are_returned_in_the_spec_zone() -> None:
    spec = parse_cron("0 0 9 * * ?", "Asia/Shanghai", now=NOW)
    (fire,) = spec.next_fire_times(NOW, 1)
    assert fire.tzinfo == ZoneInfo("Asia/Shanghai")
    assert (fire.hour, fire.minute) == (9, 0)


def test_skipped_wall_time_in_spring_fires_once_an_hour_later_in_wall_terms() -> None:
    # New York skips 02:00-03:00 on 2026-03-08; 02:30 EST would be 07:30 UTC.
    assert fires("0 30 2 * * ?", utc(2026, 3, 6, 12), 3, zone="America/New_York") == [
        utc(2026, 3, 7, 7, 30),
        utc(2026, 3, 8, 7, 30),
        utc(2026, 3, 9, 6, 30),
    ]


def test_repeated_wall_time_in_autumn_fires_at_both_instants() -> None:
    # New York repeats 01:00-02:00 on 2026-11-01: 01:30 EDT (05:30 UTC), then 01:30 EST.
    assert fires("0 30 1 * * ?", utc(2026, 10, 31, 12), 3, zone="America/New_York") == [
        utc(2026, 11, 1, 5, 30),
        utc(2026, 11, 1, 6, 30),
        utc(2026, 11, 2, 6, 30),
    ]


@pytest.mark.parametrize(
    ("zone", "after"),
    [
        ("America/New_York", utc(2026, 3, 7, 12)),
        ("America/New_York", utc(2026, 10, 31, 12)),
        ("Europe/Berlin", utc(2026, 3, 28, 12)),
        ("Europe/Berlin", utc(2026, 10, 24, 12)),
        ("Australia/Lord_Howe", utc(2026, 4, 4, 0)),  # a half-hour shift
    ],
)
def test_dst_changes_never_loop_or_go_backwards(zone: str, after: datetime) -> None:
    times = fires("0 */30 * * * ?", after, 96, zone=zone)
    assert len(times) == 96
    gaps = {later - earlier for earlier, later in pairwise(times)}
    assert gaps == {timedelta(minutes=30)}


def test_next_fire_times_are_strictly_after_the_start() -> None:
    spec = parse_cron("0 0 12 * * ?", "UTC", now=NOW)
    assert spec.next_fire_times(utc(2026, 1, 1, 12), 1) == [utc(2026, 1, 2, 12)]
    assert spec.next_fire_times(utc(2026, 1, 1, 11, 59, 59, 999999), 1) == [utc(2026, 1, 1, 12)]


def test_next_fire_times_stop_when_the_schedule_ends() -> None:
    spec = parse_cron("0 0 0 1 1 ? 2027-2028", "UTC", now=NOW)
    assert next_fire_times(spec, NOW, 5) == [utc(2027, 1, 1), utc(2028, 1, 1)]
    assert next_fire_times(spec, NOW, 0) == []


def test_next_fire_times_need_an_aware_start_and_a_count() -> None:
    spec = parse_cron("0 0 0 * * ?", "UTC", now=NOW)
    with pytest.raises(ValueError, match="timezone-aware"):
        next_fire_times(spec, datetime(2026, 1, 1), 1)
    with pytest.raises(ValueError, match="negative"):
        next_fire_times(spec, NOW, -1)


def test_start_in_another_zone_is_the_same_instant() -> None:
    start = datetime(2026, 1, 1, 8, tzinfo=ZoneInfo("Asia/Shanghai"))  # 00:00 UTC
    assert fires("0 0 * * * ?", start, 1) == [utc(2026, 1, 1, 1)]


def test_never_fires_check_uses_the_given_now() -> None:
    assert parse_cron("0 0 0 1 1 ? 2020", "UTC", now=utc(2019, 6, 1)).expression
    assert isinstance(parse_cron("0 0 0 * * ?", "UTC"), CronSpec)  # the real clock


def test_system_time_zone_is_a_usable_iana_name() -> None:
    assert time_zone_problem(system_time_zone()) is None


def test_a_cron_parsed_again_in_the_same_zone_is_the_same_spec_while_it_fires_later() -> None:
    # A leader starting with 100,000 jobs on a few crons parses each once (issue 29).
    first = parse_cron("0 15 10 ? * MON-FRI", "Europe/Paris")
    assert parse_cron("0 15 10 ? * MON-FRI", "Europe/Paris") is first
    assert parse_cron("0 15 10 ? * MON-FRI", "Asia/Tokyo") is not first
    # Asked about a moment after its fires end, it is parsed and refused as before.
    once = "0 0 0 1 1 ? 2030"
    assert parse_cron(once, "UTC").expression == once
    with pytest.raises(InvalidRequest, match="never fires after"):
        parse_cron(once, "UTC", now=datetime(2031, 1, 1, tzinfo=UTC))

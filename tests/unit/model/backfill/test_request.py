"""A backfill request's checks: each bad field named, nothing guessed (issue 28)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.model.backfill import (
    MAX_FIRES_PER_MINUTE,
    MIN_FIRES_PER_MINUTE,
    BackfillRequest,
    parse_time,
)
from scheduler.model.config import OverlapPolicy
from scheduler.model.errors import InvalidRequest

NOW = datetime(2026, 11, 26, 21, 0, tzinfo=UTC)
GOOD = {"from": "2026-11-23T00:00:00+01:00", "to": "2026-11-24T12:00:00Z"}


def refused(body: object) -> dict[str, str]:
    with pytest.raises(InvalidRequest) as caught:
        BackfillRequest.from_json(body, now=NOW)
    assert caught.value.http_status == 400
    return caught.value.fields


def test_a_full_request_is_read_with_its_offsets_and_options() -> None:
    request = BackfillRequest.from_json(
        {**GOOD, "firesPerMinute": 0.5, "dryRun": True, "overlapPolicy": "allow"}, now=NOW
    )
    assert request.start == datetime(2026, 11, 22, 23, 0, tzinfo=UTC)
    assert request.start.utcoffset() == timedelta(hours=1)
    assert request.end == datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
    assert request.fires_per_minute == 0.5
    assert request.dry_run is True
    assert request.overlap_policy is OverlapPolicy.ALLOW


def test_optional_fields_default_to_full_speed_no_dry_run_and_the_jobs_policy() -> None:
    request = BackfillRequest.from_json(dict(GOOD), now=NOW)
    assert (request.fires_per_minute, request.dry_run, request.overlap_policy) == (
        None,
        False,
        None,
    )


def test_a_range_ending_exactly_now_is_accepted() -> None:
    request = BackfillRequest.from_json({"from": GOOD["from"], "to": NOW.isoformat()}, now=NOW)
    assert request.end == NOW


@pytest.mark.parametrize("body", [[], "x", None, 5])
def test_a_body_that_is_not_an_object_is_refused(body: object) -> None:
    assert "body" in refused(body)


def test_missing_bounds_are_required() -> None:
    fields = refused({})
    assert fields == {"from": "is required", "to": "is required"}


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("2026-11-23T00:00:00", "UTC offset"),
        ("2026-11-23", "UTC offset"),
        ("yesterday", "ISO 8601"),
        ("2026-13-01T00:00:00Z", "ISO 8601"),
        (" 2026-11-23T00:00:00Z", "ISO 8601"),
        ("2026-11-23T00:00:00Z\n", "ISO 8601"),
        ("\uff12\uff10\uff12\uff16-11-23T00:00:00Z", "ISO 8601"),  # fullwidth digits
        ("2026-11-23T00:00:00+01:00" + "0" * 100, "at most 64"),
    ],
)
def test_a_time_without_an_offset_or_not_iso_is_refused_naming_the_field(
    text: str, why: str
) -> None:
    fields = refused({"from": text, "to": GOOD["to"]})
    assert set(fields) == {"from"}
    assert why in fields["from"]


@pytest.mark.parametrize("value", [5, 1.5, True, ["2026-11-23T00:00:00Z"], {"a": 1}])
def test_a_time_that_is_not_a_string_is_refused(value: object) -> None:
    assert "must be a string" in refused({"from": GOOD["from"], "to": value})["to"]


def test_from_not_before_to_names_both() -> None:
    fields = refused({"from": GOOD["to"], "to": GOOD["to"]})
    assert set(fields) == {"from", "to"}
    fields = refused({"from": "2026-11-24T13:00:00+01:00", "to": "2026-11-24T11:00:00Z"})
    assert set(fields) == {"from", "to"}


def test_the_same_instant_in_two_offsets_is_an_empty_range() -> None:
    # 01:00+01:00 is 00:00Z: equal instants, refused although the texts differ.
    assert set(refused({"from": "2026-11-24T01:00:00+01:00", "to": "2026-11-24T00:00:00Z"})) == {
        "from",
        "to",
    }


def test_a_range_reaching_into_the_future_is_refused() -> None:
    later = (NOW + timedelta(seconds=1)).isoformat()
    fields = refused({"from": GOOD["from"], "to": later})
    assert set(fields) == {"to"}
    assert "after now" in fields["to"]


def test_a_range_before_1970_is_refused() -> None:
    fields = refused({"from": "1969-12-31T23:59:59Z", "to": GOOD["to"]})
    assert set(fields) == {"from"}


@pytest.mark.parametrize(
    "rate",
    [0, -1, MIN_FIRES_PER_MINUTE / 2, MAX_FIRES_PER_MINUTE + 0.001, 10**400, "1e999", "nan", True],
)
def test_a_rate_out_of_bounds_is_refused(rate: object) -> None:
    fields = refused({**GOOD, "firesPerMinute": rate})
    assert set(fields) == {"firesPerMinute"}


@pytest.mark.parametrize("rate", [MIN_FIRES_PER_MINUTE, 1, "30", MAX_FIRES_PER_MINUTE])
def test_rates_within_bounds_are_accepted(rate: object) -> None:
    request = BackfillRequest.from_json({**GOOD, "firesPerMinute": rate}, now=NOW)
    assert request.fires_per_minute == float(rate)  # type: ignore[arg-type]


def test_a_bad_overlap_policy_and_dry_run_are_named() -> None:
    fields = refused({**GOOD, "overlapPolicy": "SOMETIMES", "dryRun": "maybe"})
    assert set(fields) == {"overlapPolicy", "dryRun"}
    assert "FORBID, ALLOW, REPLACE" in fields["overlapPolicy"]


def test_unknown_fields_are_refused_and_a_flood_of_them_is_summed_up() -> None:
    fields = refused({**GOOD, "firesPerMin": 5})
    assert fields == {"firesPerMin": "is not a backfill field"}
    flood = {**GOOD, **{f"k{index}": index for index in range(10_000)}}
    fields = refused(flood)
    assert len(fields) == 11
    assert "9990 more" in fields["..."]


def test_every_problem_is_reported_at_once() -> None:
    fields = refused(
        {"from": "x", "to": "2099-01-01T00:00:00Z", "firesPerMinute": 0, "dryRun": 3, "z": 1}
    )
    assert set(fields) == {"from", "to", "firesPerMinute", "dryRun", "z"}


def test_a_naive_now_is_a_callers_bug() -> None:
    with pytest.raises(ValueError, match="aware"):
        BackfillRequest.from_json(dict(GOOD), now=NOW.replace(tzinfo=None))


def test_parse_time_keeps_the_offset_written() -> None:
    moment = parse_time("2026-03-29T02:30:00+05:45")
    assert moment.utcoffset() == timedelta(hours=5, minutes=45)
    assert moment == datetime(2026, 3, 28, 20, 45, tzinfo=timezone.utc)  # noqa: UP017


@pytest.mark.parametrize(
    ("start", "end"),
    [
        ("0001-01-01T00:00:00+01:00", "2026-01-01T00:00:00Z"),
        ("2026-01-01T00:00:00Z", "9999-12-31T23:59:59-01:00"),
        ("9999-12-31T23:59:59-23:59", "9999-12-31T23:59:59-23:59"),
    ],
)
def test_times_at_the_ends_of_the_calendar_are_refused_not_overflowed(start: str, end: str) -> None:
    assert refused({"from": start, "to": end})


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=80),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(
    body=st.dictionaries(
        st.sampled_from(["from", "to", "firesPerMinute", "dryRun", "overlapPolicy", "x"]),
        _json_values | st.datetimes(timezones=st.timezones()).map(datetime.isoformat),
    )
)
def test_any_body_is_a_checked_request_or_a_400_naming_fields(body: dict[str, object]) -> None:
    try:
        request = BackfillRequest.from_json(body, now=NOW)
    except InvalidRequest as exc:
        assert exc.fields
        assert set(exc.fields) <= set(body) | {"from", "to"}
        return
    assert request.start < request.end <= NOW
    assert request.fires_per_minute is None or (
        MIN_FIRES_PER_MINUTE <= request.fires_per_minute <= MAX_FIRES_PER_MINUTE
    )

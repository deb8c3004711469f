"""Cron fire accounting: due fires after the last recorded one, and what each fire becomes."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from scheduler.model.config import OverlapPolicy, parse_cron
from scheduler.model.fires import (
    DueFires,
    DueSince,
    FireOutcome,
    due_fires,
    fire_events,
    plan_fires,
)
from scheduler.model.job_events import JobEventCounts, JobEventKind

T0 = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
EVERY_2S = parse_cron("0/2 * * * * ?", "UTC").trigger()
FORBID, ALLOW, REPLACE = OverlapPolicy.FORBID, OverlapPolicy.ALLOW, OverlapPolicy.REPLACE


def times(*offsets: float) -> tuple[float, ...]:
    return tuple(T0 + o for o in offsets)


def test_due_fires_are_those_after_the_last_one_up_to_now_inclusive() -> None:
    assert due_fires(EVERY_2S, T0, T0 + 7.5).times == times(2, 4, 6)
    assert due_fires(EVERY_2S, T0, T0 + 8).times == times(2, 4, 6, 8)
    # A last fire recorded as a wall time just after the fire (older leaders did) counts alike.
    assert due_fires(EVERY_2S, T0 + 0.015, T0 + 4).times == times(2, 4)
    nothing = due_fires(EVERY_2S, T0 + 8, T0 + 9)
    assert nothing.times == () and nothing.last is None


_CRONS = ["0/2 * * * * ?", "* * * * * ?", "0,1 0/5 * * * ?", "30 * * * * ?", "0 0 3 * * ?"]


@settings(max_examples=150, deadline=None)
# Found by this test in CI: a record just under a microsecond before a fire second.
@example(cron="0,1 0/5 * * * ?", lasts=[-1.0, -1.192092896e-07], limit=2)
@given(
    cron=st.sampled_from(_CRONS),
    lasts=st.lists(
        st.one_of(
            st.floats(min_value=-900, max_value=30),
            # On a second, and within a microsecond of one (`due_fires` asks the cron from the
            # next microsecond on).
            st.integers(min_value=-900, max_value=30).map(float),
            st.integers(min_value=-900, max_value=30).map(lambda s: s - 1.2e-7),
            st.integers(min_value=-900, max_value=30).map(lambda s: s - 9e-7),
        ),
        min_size=1,
        max_size=12,
    ),
    limit=st.integers(min_value=1, max_value=40),
)
def test_due_since_answers_as_due_fires_for_every_record(
    cron: str, lasts: list[float], limit: int
) -> None:
    # The records of one fire's jobs, in any order, with repeats: each answer is what
    # due_fires works out alone (fires derived from an earlier record's whole list included;
    # a list cut at `limit` is never derived from).
    trigger = parse_cron(cron, "UTC").trigger()
    now = T0 + 30
    due_since = DueSince(trigger, now, limit)
    for last in lasts:
        assert due_since(T0 + last) == due_fires(trigger, T0 + last, now, limit)


def test_due_since_works_the_cron_out_only_for_records_before_its_anchor() -> None:
    calls: list[float] = []

    class Counting:
        def get_next_fire_time(self, previous: datetime | None, now: datetime) -> datetime | None:
            calls.append(now.timestamp())
            fire: datetime | None = EVERY_2S.get_next_fire_time(previous, now)
            return fire

    due_since = DueSince(Counting(), T0 + 10)
    assert due_since(T0 + 3).times == times(4, 6, 8, 10)
    worked = len(calls)
    # Later records: derived from that list, no cron arithmetic.
    assert due_since(T0 + 5.5).times == times(6, 8, 10)
    assert due_since(T0 + 10).times == ()
    assert len(calls) == worked
    # An earlier record is worked out (and lists more).
    assert due_since(T0 + 1).times == times(2, 4, 6, 8, 10)
    assert len(calls) > worked


def test_a_gap_too_long_to_count_lists_the_limit_and_jumps_to_the_newest_fire() -> None:
    week = 7 * 24 * 3600.0
    due = due_fires(EVERY_2S, T0, T0 + week + 1, limit=100)
    assert due.times == times(*range(2, 201, 2)) and due.more
    assert due.latest == T0 + week and due.last == T0 + week
    hourly = parse_cron("0 0 * * * ?", "UTC").trigger()
    assert due_fires(hourly, T0, T0 + week + 59, limit=3).latest == T0 + week


def plan(
    offsets: tuple[float, ...],
    *,
    misfire: bool,
    on_time_from: float | None,
    policy: OverlapPolicy = FORBID,
    pending: int = 0,
    running: bool = False,
    cap: int = 100,
) -> list[tuple[FireOutcome, str]]:
    result = plan_fires(
        DueFires(offsets),
        misfire=misfire,
        policy=policy,
        pending=pending,
        running=running,
        cap=cap,
        on_time_from=on_time_from,
    )
    return [(d.outcome, d.reason) for d in result.decisions]


Q, S, C = FireOutcome.QUEUED, FireOutcome.SKIPPED, FireOutcome.CAPPED


def outcomes(decisions: list[tuple[FireOutcome, str]]) -> list[FireOutcome]:
    return [outcome for outcome, _ in decisions]


def test_misfire_on_runs_every_missed_fire_up_to_the_cap() -> None:
    missed = times(2, 4, 6, 8, 10)
    assert outcomes(plan(missed, misfire=True, on_time_from=None)) == [Q] * 5
    capped = plan(missed, misfire=True, on_time_from=None, pending=1, cap=3)
    assert outcomes(capped) == [Q, Q, C, C, C]
    assert "3 runs are already pending" in capped[2][1]


def test_misfire_off_skips_missed_fires_and_runs_the_one_on_time() -> None:
    due = times(2, 4, 6)
    got = plan(due, misfire=False, on_time_from=T0 + 5)
    assert outcomes(got) == [S, S, Q]
    assert got[0][1] == "missed while no leader acted, and misfire is off"
    assert outcomes(plan(due, misfire=False, on_time_from=None)) == [S, S, S]


@pytest.mark.parametrize(
    ("policy", "running", "pending", "expected"),
    [
        (FORBID, False, 0, Q),
        (FORBID, True, 0, S),
        (ALLOW, True, 0, Q),
        (REPLACE, True, 0, Q),
        (ALLOW, False, 1, S),
        (REPLACE, True, 1, S),
    ],
)
def test_misfire_off_fire_on_time_follows_the_overlap_policy(
    policy: OverlapPolicy, running: bool, pending: int, expected: FireOutcome
) -> None:
    got = plan(
        times(2), misfire=False, on_time_from=T0, policy=policy, running=running, pending=pending
    )
    assert outcomes(got) == [expected]


def test_misfire_on_fire_waits_while_the_job_runs_whatever_the_policy() -> None:
    for policy in OverlapPolicy:
        got = plan(times(2), misfire=True, on_time_from=T0, policy=policy, running=True, pending=4)
        assert outcomes(got) == [Q]


def test_pending_count_after_the_plan() -> None:
    due = DueFires(times(2, 4, 6))
    on = plan_fires(
        due, misfire=True, policy=FORBID, pending=2, running=False, cap=4, on_time_from=None
    )
    assert on.pending == 4 and on.queued == 2
    off = plan_fires(
        due, misfire=False, policy=FORBID, pending=0, running=False, cap=4, on_time_from=T0
    )
    assert off.pending == 1 and off.queued == 1


def test_skipped_and_capped_fires_become_one_event_per_run_of_the_same_reason() -> None:
    result = plan_fires(
        DueFires(times(2, 4, 6, 8)),
        misfire=False,
        policy=FORBID,
        pending=0,
        running=False,
        cap=10,
        on_time_from=T0 + 7,
    )
    events = fire_events("job1", result, "http://127.0.0.1:1/hook")
    assert [(e.kind, e.fires) for e in events] == [(JobEventKind.FIRE_SKIPPED, 3)]
    event = events[0]
    assert event.time == T0 + 2 and event.webhook_url == "http://127.0.0.1:1/hook"
    assert event.reason.startswith(
        "3 fires from 2026-01-01T00:00:02.000+00:00 to 2026-01-01T00:00:06.000+00:00 skipped: "
    )
    assert event.webhook_body() == {
        "event": "fire_skipped",
        "jobName": "job1",
        "shardingItem": None,
        "taskId": None,
        "time": "2026-01-01T00:00:02.000+00:00",
        "reason": event.reason,
    }
    counts = JobEventCounts()
    for e in events:
        counts.add(e)
    assert counts.get(JobEventKind.FIRE_SKIPPED) == 3
    assert counts.counts()[JobEventKind.FIRE_SKIPPED] == 3


def test_fires_beyond_the_count_share_the_last_outcome_and_are_reported() -> None:
    due = DueFires(times(2, 4), more=True, latest=T0 + 1000)
    result = plan_fires(
        due, misfire=True, policy=FORBID, pending=0, running=False, cap=1, on_time_from=None
    )
    assert [d.outcome for d in result.decisions] == [Q, C]
    assert result.uncounted is not None and result.uncounted.outcome is C
    events = fire_events("job1", result, None)
    assert [e.kind for e in events] == [JobEventKind.FIRE_CAPPED, JobEventKind.FIRE_CAPPED]
    assert "more than 1 fires up to 2026-01-01T00:16:40.000+00:00 capped" in events[1].reason


def test_a_full_ready_queue_caps_a_job_with_nothing_pending() -> None:
    result = plan_fires(
        DueFires(times(2)),
        misfire=True,
        policy=FORBID,
        pending=0,
        running=False,
        cap=3,
        on_time_from=None,
        queue_full=True,
    )
    assert [(d.outcome, d.reason) for d in result.decisions] == [
        (C, "the ready queue holds 3 jobs already")
    ]

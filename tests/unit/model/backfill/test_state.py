"""A backfill's state (issue 28): its transitions, the impossible ones refused with a 409, and
its stored JSON read back exactly or refused field by field; property-tested over random runs
of transitions."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.model.backfill import (
    FIRE_TIMES_SHOWN,
    MAX_BACKFILL_FIRES_LIMIT,
    Backfill,
    BackfillRequest,
    BackfillStatus,
    FireList,
    backfill_fires,
    backfill_id_problem,
    new_backfill_id,
    preview_json,
)
from scheduler.model.config import OverlapPolicy, parse_cron
from scheduler.model.errors import Conflict, InvalidRequest

NOW = datetime(2026, 11, 26, 21, 0, tzinfo=UTC)
BACKFILL_ID = new_backfill_id(NOW, "0badcafe")


def make(fires: int = 3, rate: float | None = None) -> Backfill:
    request = BackfillRequest.from_json(
        {
            "from": "2026-11-23T00:00:00+01:00",
            "to": "2026-11-24T12:00:00+01:00",
            **({} if rate is None else {"firesPerMinute": rate}),
            "overlapPolicy": "REPLACE",
        },
        now=NOW,
    )
    times = tuple(request.start + timedelta(hours=hour) for hour in range(fires))
    return Backfill.start_new(BACKFILL_ID, "nightly.export", request, FireList(times, 2), NOW)


def test_a_new_backfill_runs_from_its_first_fire() -> None:
    backfill = make()
    assert backfill.status is BackfillStatus.RUNNING
    assert (backfill.next_index, backfill.fires, backfill.excluded_fires) == (0, 3, 2)
    assert backfill.next_fire == backfill.fire_times[0]
    assert backfill.overlap_policy is OverlapPolicy.REPLACE
    assert backfill.ended_at is None and backfill.last_launched_at is None


def test_ids_sort_by_creation_and_are_checked() -> None:
    assert BACKFILL_ID == "20261126T210000Z-0badcafe"
    later = new_backfill_id(NOW + timedelta(seconds=1), "00000000")
    assert sorted([later, BACKFILL_ID]) == [BACKFILL_ID, later]
    assert backfill_id_problem(BACKFILL_ID) is None
    for bad in ("", "../x", "20261126T210000Z-0BADCAFE", BACKFILL_ID + "0", "a" * 10_000):
        assert backfill_id_problem(bad) is not None
    with pytest.raises(ValueError):
        new_backfill_id(NOW, "xyz")
    with pytest.raises(ValueError):
        new_backfill_id(NOW.replace(tzinfo=None), "0badcafe")


def test_a_range_without_a_fire_to_run_is_refused_naming_from_and_to() -> None:
    request = BackfillRequest.from_json(
        {"from": "2026-11-23T00:00:00Z", "to": "2026-11-24T00:00:00Z"}, now=NOW
    )
    with pytest.raises(InvalidRequest) as caught:
        Backfill.start_new(BACKFILL_ID, "job", request, FireList((), 4), NOW)
    assert set(caught.value.fields) == {"from", "to"}
    assert "4 fires in it are excluded" in caught.value.message


def test_launching_every_fire_in_order_ends_it_done() -> None:
    backfill = make(fires=2)
    first = backfill.fire_launched(0, NOW + timedelta(seconds=1))
    assert (first.next_index, first.status) == (1, BackfillStatus.RUNNING)
    assert first.last_launched_at == NOW + timedelta(seconds=1)
    done = first.fire_launched(1, NOW + timedelta(seconds=2))
    assert (done.next_index, done.status, done.next_fire) == (2, BackfillStatus.DONE, None)
    assert done.ended_at == NOW + timedelta(seconds=2)
    assert done.due_at(NOW) is None


def test_a_fire_launched_twice_or_out_of_order_is_a_conflict() -> None:
    backfill = make().fire_launched(0, NOW)
    for index in (0, 2, -1):
        with pytest.raises(Conflict, match="the next one is fire 1 of 3"):
            backfill.fire_launched(index, NOW)


def test_no_fire_launches_while_paused_or_after_the_end() -> None:
    with pytest.raises(Conflict, match="PAUSED"):
        make().pause().fire_launched(0, NOW)
    with pytest.raises(Conflict, match="CANCELLED"):
        make().cancel(NOW).fire_launched(0, NOW)
    with pytest.raises(Conflict, match="DONE"):
        make(fires=1).fire_launched(0, NOW).fire_launched(1, NOW)


def test_pause_resume_and_cancel_repeat_harmlessly_but_not_after_the_end() -> None:
    paused = make().pause()
    assert paused.pause() == paused
    assert paused.due_at(NOW) is None
    running = paused.resume()
    assert running.status is BackfillStatus.RUNNING and running.resume() == running
    cancelled = running.cancel(NOW)
    assert (cancelled.status, cancelled.ended_at) == (BackfillStatus.CANCELLED, NOW)
    assert cancelled.cancel(NOW + timedelta(hours=1)) == cancelled  # keeps its first end
    for action in (cancelled.pause, cancelled.resume):
        with pytest.raises(Conflict):
            action()
    done = make(fires=1).fire_launched(0, NOW)
    for attempt in (done.pause, done.resume, lambda: done.cancel(NOW)):
        with pytest.raises(Conflict, match="DONE"):
            attempt()


def test_a_paused_backfill_can_be_cancelled() -> None:
    assert make().pause().cancel(NOW).status is BackfillStatus.CANCELLED


def test_due_at_paces_by_the_rate_from_the_last_launch() -> None:
    backfill = make(rate=30)
    assert backfill.due_at(NOW) == NOW
    launched = backfill.fire_launched(0, NOW)
    assert launched.due_at(NOW) == NOW + timedelta(seconds=2)
    assert make().fire_launched(0, NOW).due_at(NOW) == NOW  # no rate: at once


def test_naive_times_are_a_callers_bug() -> None:
    with pytest.raises(ValueError):
        make().fire_launched(0, NOW.replace(tzinfo=None))
    with pytest.raises(ValueError):
        make().cancel(NOW.replace(tzinfo=None))


def test_the_stored_json_reads_back_equal_with_every_field() -> None:
    backfill = make(rate=0.5).fire_launched(0, NOW).pause()
    body = backfill.to_json()
    assert list(body) == [
        "backfillId",
        "jobName",
        "from",
        "to",
        "status",
        "fireTimes",
        "nextIndex",
        "excludedFires",
        "firesPerMinute",
        "overlapPolicy",
        "createdAt",
        "lastLaunchedAt",
        "endedAt",
    ]
    assert body["fireTimes"] == [
        "2026-11-23T00:00:00+01:00",
        "2026-11-23T01:00:00+01:00",
        "2026-11-23T02:00:00+01:00",
    ]
    assert body["createdAt"] == "2026-11-26T21:00:00.000+00:00"
    assert Backfill.from_json(json.loads(json.dumps(body))) == backfill


def test_fire_times_keep_their_offsets_across_an_autumn_change() -> None:
    spec = parse_cron("0 30 2 * * ?", "Europe/Berlin", now=NOW)
    request = BackfillRequest.from_json(
        {"from": "2026-10-24T12:00:00+02:00", "to": "2026-10-26T12:00:00+01:00"}, now=NOW
    )
    fires = backfill_fires(spec, request.start, request.end)
    backfill = Backfill.start_new(BACKFILL_ID, "job", request, fires, NOW)
    body = backfill.to_json()
    assert body["fireTimes"][:2] == ["2026-10-25T02:30:00+02:00", "2026-10-25T02:30:00+01:00"]  # type: ignore[index]
    assert Backfill.from_json(body) == backfill
    assert Backfill.from_json(body).to_json() == body
    # The runs' fireTime: the instants, each with the offset Berlin had then.
    assert [fire.astimezone(UTC).hour for fire in backfill.fire_times[:2]] == [0, 1]


def test_the_largest_backfill_stays_far_below_a_zookeeper_node() -> None:
    largest = make(fires=MAX_BACKFILL_FIRES_LIMIT)
    stored = json.dumps(largest.to_json(), separators=(",", ":")).encode()
    assert len(stored) < 400_000
    assert Backfill.from_json(json.loads(stored)) == largest


def test_the_summary_counts_fires_and_lists_only_the_first_hundred() -> None:
    backfill = make(fires=250).fire_launched(0, NOW)
    summary = backfill.summary_json()
    assert summary["fires"] == 250
    assert summary["launched"] == 1
    assert len(summary["fireTimes"]) == FIRE_TIMES_SHOWN  # type: ignore[arg-type]
    assert summary["nextFireTime"] == "2026-11-23T01:00:00+01:00"
    preview = preview_json(FireList(backfill.fire_times, 7))
    assert (preview["fires"], preview["excludedFires"], preview["dryRun"]) == (250, 7, True)
    assert preview["backfillId"] is None
    assert len(preview["fireTimes"]) == FIRE_TIMES_SHOWN  # type: ignore[arg-type]


def _stored(**changes: object) -> dict[str, object]:
    body = make().fire_launched(0, NOW).to_json()
    body.update(changes)
    return body


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"backfillId": "../../x"}, "backfillId"),
        ({"jobName": "a/b"}, "jobName"),
        ({"jobName": None}, "jobName"),
        ({"from": "2026-11-23T00:00:00"}, "from"),
        ({"to": 5}, "to"),
        ({"status": "SLEEPING"}, "status"),
        ({"status": 1}, "status"),
        ({"fireTimes": []}, "fireTimes"),
        ({"fireTimes": "2026-11-23T00:00:00Z"}, "fireTimes"),
        ({"fireTimes": ["2026-11-23T01:00:00Z", "2026-11-23T00:00:00Z"]}, "fireTimes"),
        ({"fireTimes": ["2026-11-23T00:00:00Z", "2026-11-23T01:00:00+01:00"]}, "fireTimes"),
        ({"fireTimes": ["2026-11-23T00:00:00Z", 7]}, "fireTimes"),
        ({"nextIndex": 4}, "nextIndex"),
        ({"nextIndex": -1}, "nextIndex"),
        ({"nextIndex": True}, "nextIndex"),
        ({"nextIndex": 3}, "nextIndex"),  # all launched yet RUNNING
        ({"excludedFires": 1.5}, "excludedFires"),
        ({"firesPerMinute": 0}, "firesPerMinute"),
        ({"firesPerMinute": "5"}, "firesPerMinute"),
        ({"overlapPolicy": "forbid"}, "overlapPolicy"),
        ({"createdAt": None}, "createdAt"),
        ({"endedAt": "2026-11-26T21:00:00Z"}, "endedAt"),  # RUNNING with an end
        ({"status": "CANCELLED"}, "endedAt"),  # final without an end
        ({"status": "DONE", "endedAt": "2026-11-26T21:00:00Z"}, "nextIndex"),
        ({"extra": 1}, "extra"),
    ],
)
def test_a_damaged_stored_backfill_is_refused_naming_the_field(
    changes: dict[str, object], field: str
) -> None:
    with pytest.raises(InvalidRequest) as caught:
        Backfill.from_json(_stored(**changes))
    assert field in caught.value.fields


@pytest.mark.parametrize("data", [None, [], "x"])
def test_a_stored_backfill_that_is_not_an_object_is_refused(data: object) -> None:
    with pytest.raises(InvalidRequest):
        Backfill.from_json(data)


_ACTIONS = st.lists(
    st.sampled_from(["pause", "resume", "cancel", "launch", "launch_again"]), max_size=30
)


def _apply(backfill: Backfill, action: str, clock: datetime) -> Backfill:
    if action == "pause":
        return backfill.pause()
    if action == "resume":
        return backfill.resume()
    if action == "cancel":
        return backfill.cancel(clock)
    index = backfill.next_index if action == "launch" else backfill.next_index - 1
    return backfill.fire_launched(index, clock)


@settings(max_examples=200, deadline=None)
@given(actions=_ACTIONS, fires=st.integers(1, 6))
def test_random_transitions_follow_the_rules_and_round_trip(actions: list[str], fires: int) -> None:
    # A reference of the rules, beside the model: status and launched count.
    backfill = make(fires=fires, rate=60)
    status, launched = "RUNNING", 0
    clock = NOW
    for action in actions:
        clock += timedelta(seconds=1)
        final = status in ("CANCELLED", "DONE")
        expected: tuple[str, int] | None  # None: a Conflict
        if action == "pause":
            expected = None if final else ("PAUSED", launched)
        elif action == "resume":
            expected = None if final else ("RUNNING", launched)
        elif action == "cancel":
            expected = None if status == "DONE" else ("CANCELLED", launched)
        elif action == "launch" and status == "RUNNING":
            expected = ("DONE" if launched + 1 == fires else "RUNNING", launched + 1)
        else:  # a launch while not running, or a fire launched again
            expected = None
        if expected is None:
            with pytest.raises(Conflict):
                _apply(backfill, action, clock)
            continue
        before = backfill
        backfill = _apply(backfill, action, clock)
        status, launched = expected
        assert (backfill.status.value, backfill.next_index) == (status, launched)
        assert (backfill.ended_at is not None) == (status in ("CANCELLED", "DONE"))
        if before.status.final:
            assert backfill == before  # a repeated cancel changes nothing
        assert Backfill.from_json(json.loads(json.dumps(backfill.to_json()))) == backfill
        due = backfill.due_at(clock)
        assert (due is not None) == (status == "RUNNING")
        if due is not None and backfill.last_launched_at is not None:
            assert due >= backfill.last_launched_at + timedelta(seconds=1)

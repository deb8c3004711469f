"""Fire accounting with calendars (issue 28): an excluded fire adds no run whatever misfire and
the overlap policy say, is reported as a `fire_excluded` event naming the calendar and its part
(never with a webhook), and leaves the other fires' outcomes as they would be without it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.model.calendar import Calendar, excluded_by
from scheduler.model.config import OverlapPolicy
from scheduler.model.fires import DueFires, FireOutcome, FirePlan, fire_events, plan_fires
from scheduler.model.job_events import JobEventCounts, JobEventKind

T0 = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
FORBID = OverlapPolicy.FORBID


def window(start_s: float, end_s: float, name: str = "maint") -> Calendar:
    """A calendar excluding [T0 + start_s, T0 + end_s)."""
    ends = {
        k: datetime.fromtimestamp(T0 + s, UTC).isoformat()
        for k, s in (("from", start_s), ("to", end_s))
    }
    return Calendar.from_json(
        {"calendarName": name, "excludeRanges": [ends]}, default_time_zone="UTC"
    )


def predicate(*calendars: Calendar) -> Callable[[float], str | None]:
    def why(fire: float) -> str | None:
        exclusion = excluded_by(calendars, datetime.fromtimestamp(fire, UTC))
        return None if exclusion is None else str(exclusion)

    return why


def test_an_excluded_fire_adds_no_run_on_time_or_missed_misfire_on_or_off() -> None:
    excluded = predicate(window(4, 10))
    due = DueFires(tuple(T0 + s for s in (2, 4, 6, 8, 10)))
    for misfire in (True, False):
        for on_time_from in (None, T0):
            plan = plan_fires(
                due,
                misfire=misfire,
                policy=FORBID,
                pending=0,
                running=False,
                cap=100,
                on_time_from=on_time_from,
                excluded=excluded,
            )
            outcomes = [d.outcome for d in plan.decisions]
            assert outcomes[1:4] == [FireOutcome.EXCLUDED] * 3
            assert all(o is not FireOutcome.EXCLUDED for o in (outcomes[0], outcomes[4]))
            assert all("calendar maint:" in d.reason for d in plan.decisions[1:4])


def test_an_excluded_fire_does_not_take_the_place_of_a_pending_run() -> None:
    # Misfire off, fire on time: without the calendar the second fire would be skipped
    # (one pending); the excluded first one leaves it free to queue.
    due = DueFires((T0 + 2, T0 + 4))
    plan = plan_fires(
        due,
        misfire=False,
        policy=FORBID,
        pending=0,
        running=False,
        cap=100,
        on_time_from=T0,
        excluded=predicate(window(1, 3)),
    )
    assert [d.outcome for d in plan.decisions] == [FireOutcome.EXCLUDED, FireOutcome.QUEUED]
    assert plan.pending == 1 and plan.queued == 1


def test_excluded_fires_are_one_event_per_run_of_the_same_part_with_no_webhook() -> None:
    calendars = (window(0, 5, "first"), window(5, 9, "second"))
    due = DueFires(tuple(T0 + s for s in (2, 4, 6, 8, 10)))
    plan = plan_fires(
        due,
        misfire=True,
        policy=FORBID,
        pending=0,
        running=False,
        cap=100,
        on_time_from=None,
        excluded=predicate(*calendars),
    )
    events = fire_events("tick", plan, "http://hooks.example/x")
    assert [(e.kind, e.fires) for e in events] == [
        (JobEventKind.FIRE_EXCLUDED, 2),
        (JobEventKind.FIRE_EXCLUDED, 2),
    ]
    assert "calendar first:" in events[0].reason and "calendar second:" in events[1].reason
    assert events[0].reason.startswith("2 fires from 2026-01-01T00:00:02.000+00:00")
    assert all(e.webhook_url is None and not e.kind.is_failure for e in events)
    counts = JobEventCounts()
    for event in events:
        counts.add(event)
    assert counts.get(JobEventKind.FIRE_EXCLUDED) == 4


def test_fires_beyond_the_count_are_excluded_when_the_newest_is() -> None:
    due = DueFires((T0 + 2, T0 + 4), more=True, latest=T0 + 1000)
    plan = plan_fires(
        due,
        misfire=True,
        policy=FORBID,
        pending=0,
        running=False,
        cap=100,
        on_time_from=None,
        excluded=predicate(window(500, 2000)),
    )
    assert plan.uncounted is not None and plan.uncounted.outcome is FireOutcome.EXCLUDED
    events = fire_events("tick", plan, "http://hooks.example/x")
    assert events[-1].kind is JobEventKind.FIRE_EXCLUDED and events[-1].webhook_url is None


@settings(max_examples=200, deadline=None)
@given(
    offsets=st.lists(st.integers(1, 200), min_size=1, max_size=30, unique=True).map(sorted),
    start=st.integers(0, 200),
    length=st.integers(1, 100),
    misfire=st.booleans(),
    on_time_at=st.one_of(st.none(), st.integers(0, 200)),
    pending=st.integers(0, 3),
    running=st.booleans(),
    cap=st.integers(1, 5),
)
def test_excluded_fires_are_exactly_those_in_the_calendar_and_the_rest_plan_as_without_them(
    offsets: list[int],
    start: int,
    length: int,
    misfire: bool,
    on_time_at: int | None,
    pending: int,
    running: bool,
    cap: int,
) -> None:
    fires = tuple(T0 + o for o in offsets)
    inside = {f for f in fires if T0 + start <= f < T0 + start + length}
    on_time_from = None if on_time_at is None else T0 + on_time_at

    def planned(due: tuple[float, ...], excluded: Callable[[float], str | None] | None) -> FirePlan:
        return plan_fires(
            DueFires(due),
            misfire=misfire,
            policy=FORBID,
            pending=pending,
            running=running,
            cap=cap,
            on_time_from=on_time_from,
            excluded=excluded,
        )

    plan = planned(fires, predicate(window(start, start + length)))
    assert {d.time for d in plan.decisions if d.outcome is FireOutcome.EXCLUDED} == inside
    # The allowed fires, planned alone, decide the same: an excluded fire changes nothing.
    alone = planned(tuple(f for f in fires if f not in inside), None)
    rest = [d for d in plan.decisions if d.outcome is not FireOutcome.EXCLUDED]
    assert rest == list(alone.decisions) and plan.pending == alone.pending

"""The producer asks APScheduler for each cron fire a little early and waits for the exact
time itself: the early trigger's times, and the wait."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from apscheduler.jobstores.base import JobLookupError  # type: ignore[import-untyped]
from apscheduler.schedulers.background import BackgroundScheduler  # type: ignore[import-untyped]

from scheduler.leader.producer import (
    _FIRE_LEAD_S,
    _EarlyTrigger,
    _fire_due,
    _Scheduler,
    _wait_for_fire,
)
from scheduler.model.config.cron import parse_cron

LEAD = timedelta(seconds=_FIRE_LEAD_S)


def _at(hour: int, minute: int, second: int) -> datetime:
    return datetime(2026, 11, 23, hour, minute, second, tzinfo=UTC)


def test_the_early_trigger_fires_each_cron_time_the_lead_before_it() -> None:
    cron = parse_cron("0/2 * * * * ?", "UTC").trigger()
    early = _EarlyTrigger(cron, _FIRE_LEAD_S)
    start = _at(7, 0, 0) + timedelta(milliseconds=500)
    previous_true: datetime | None = None
    previous_early: datetime | None = None
    for _ in range(5):
        # APScheduler asks for the next time when it runs the previous one.
        true_fire = cron.get_next_fire_time(previous_true, previous_true or start)
        early_fire = early.get_next_fire_time(previous_early, previous_early or start)
        assert early_fire == true_fire - LEAD
        previous_true, previous_early = true_fire, early_fire
    assert previous_true == _at(7, 0, 10)
    # Asked exactly at an early time, that fire is the next one.
    assert early.get_next_fire_time(None, _at(7, 0, 12) - LEAD) == _at(7, 0, 12) - LEAD


def test_apscheduler_takes_the_early_trigger_and_plans_the_run_the_lead_ahead() -> None:
    cron = parse_cron("0 0 3 * * ?", "UTC").trigger()
    sched = BackgroundScheduler(timezone=UTC)
    sched.start(paused=True)
    try:
        job = sched.add_job(lambda: None, trigger=_EarlyTrigger(cron, _FIRE_LEAD_S))
        assert job.next_run_time == cron.get_next_fire_time(None, datetime.now(UTC)) - LEAD
        assert "ms early" in str(job.trigger)
    finally:
        sched.shutdown(wait=False)


class _Clock:
    """A clock that moves only when slept on (what the wait asks of time, recorded)."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.slept: list[float] = []

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_a_fire_called_early_waits_for_its_time() -> None:
    cron = parse_cron("* * * * * ?", "UTC").trigger()
    due = _at(7, 0, 1).timestamp()
    clock = _Clock(due - 0.004)
    assert _fire_due(cron, clock.now) == due
    assert _wait_for_fire(due, clock.now, clock.time, clock.sleep) == due
    assert len(clock.slept) == 1
    assert abs(clock.slept[0] - 0.004) < 1e-6  # float epoch seconds


def test_a_fire_called_late_does_not_wait() -> None:
    cron = parse_cron("0/2 * * * * ?", "UTC").trigger()
    clock = _Clock(_at(7, 0, 2).timestamp() + 0.3)  # 0.3 s after its fire, 1.7 s before the next
    assert _fire_due(cron, clock.now) == clock.now
    assert _wait_for_fire(clock.now, clock.now, clock.time, clock.sleep) == clock.now
    assert clock.slept == []


def test_a_clock_that_does_not_move_is_waited_on_at_most_twice_the_lead() -> None:
    cron = parse_cron("* * * * * ?", "UTC").trigger()
    due = _at(7, 0, 1).timestamp()
    clock = _Clock(due - 0.004)

    def stuck_sleep(seconds: float) -> None:
        clock.slept.append(seconds)
        clock.now += 0.001  # the wall clock crawls (stepped back meanwhile)

    assert _fire_due(cron, clock.now) == due
    assert _wait_for_fire(due, clock.now, clock.time, stuck_sleep) >= due - 0.004
    assert len(clock.slept) <= 2 * _FIRE_LEAD_S / 0.001 + 1


def test_a_one_shot_job_run_as_the_scheduler_shuts_down_ends_its_loop_quietly() -> None:
    # APScheduler's loop removes a one-shot job after submitting it; when `shutdown` came in
    # between, its `remove_job` found no such job and raised in the loop's thread.
    sched = _Scheduler(timezone=UTC)
    sched.start(paused=True)
    with pytest.raises(JobLookupError):
        sched.remove_job("nosuch")  # running: a missing job is still an error
    sched.shutdown(wait=False)
    sched.remove_job("nosuch")  # stopped: the loop's late removal raises nothing

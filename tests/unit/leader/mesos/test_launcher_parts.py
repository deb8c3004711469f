"""The parts the launcher is built from: the offers it holds between rounds, when it holds them
for a cron fire, and the jobs it reports once as never placeable."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from scheduler.leader.mesos.agent_census import UnplaceableJobs
from scheduler.leader.mesos.capacity import AgentCapacity
from scheduler.leader.mesos.offers import FIRE_AHEAD_S, FIRE_GRACE_S, FireHold, HeldOffers
from scheduler.model.config.app import AppConfig
from scheduler.model.config.job import JobConfig
from tests.support.bodies import job_config
from tests.support.waiting import wait_for
from tests.unit.leader.mesos.test_launch_round import offer

APP = AppConfig(app_name="app", cpu_count=0.5, memory_mb=128.0)


def _job(cpus: float) -> JobConfig:
    fields: dict[str, Any] = {"jobExecutionType": "DAEMON", "cron": "0/5 * * * * ?"}
    return job_config("big", cpuCount=cpus, **fields)


# -- HeldOffers -------------------------------------------------------------------------------


def test_held_offers_sum_per_agent_and_are_taken_once() -> None:
    held = HeldOffers()
    offered = held.add(
        [offer("o1", "a1", 1.0, 100.0), offer("o2", "a1", 2.0, 50.0), offer("o3", "a2", 4, 8)]
    )

    assert offered == {"a1": (3.0, 150.0), "a2": (4.0, 8.0)}
    assert len(held) == 3
    assert sorted(held.agents()) == ["a1", "a2"]
    assert sorted(o["id"]["value"] for o in held.take()) == ["o1", "o2", "o3"]
    assert len(held) == 0
    assert held.take() == []


def test_rescinded_offers_and_those_of_a_lost_agent_are_not_taken() -> None:
    held = HeldOffers()
    held.add([offer("o1", "a1", 1, 1), offer("o2", "a1", 1, 1), offer("o3", "a2", 1, 1)])

    held.rescind("o3")
    held.rescind("unknown")  # an offer never held: nothing to do
    held.drop_agent("a1")

    assert held.take() == []


# -- FireHold ---------------------------------------------------------------------------------


def test_offers_are_held_from_just_before_a_fire_until_just_after_it() -> None:
    fire_at = [time.time() + 60.0]
    hold = FireHold(lambda: fire_at[0])

    assert not hold.holding()  # a minute away
    assert hold.idle_wait_s() == 1.0

    fire_at[0] = time.time() + FIRE_AHEAD_S / 2
    # The source is asked again within a quarter of a second.
    wait_for(hold.holding, 2.0, message="offers held for the coming fire")
    assert 0.01 <= hold.idle_wait_s() <= FIRE_AHEAD_S / 2 + FIRE_GRACE_S

    fire_at[0] = time.time() + 3600.0  # the fire passed; the next is an hour away
    assert hold.holding()  # still held: until FIRE_GRACE_S after the fire that was due
    wait_for(lambda: not hold.holding(), FIRE_AHEAD_S + FIRE_GRACE_S + 2.0, message="hold ends")
    assert hold.idle_wait_s() == 1.0


def test_with_no_fire_known_nothing_is_held_and_a_failing_source_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert not FireHold(None).holding()
    assert FireHold(lambda: None).idle_wait_s() == 1.0

    def broken() -> float | None:
        raise RuntimeError("producer gone")

    with caplog.at_level(logging.ERROR, logger="scheduler.leader.mesos.offers"):
        assert not FireHold(broken).holding()
    assert "launcher: cannot tell when the next fire is" in caplog.text


# -- UnplaceableJobs --------------------------------------------------------------------------


def test_a_job_that_never_fits_is_reported_once_and_forgotten_when_it_fits_or_is_done(
    caplog: pytest.LogCaptureFixture,
) -> None:
    capacity = AgentCapacity()
    capacity.set_reported({"a1": (2.0, 4096.0)})
    jobs = UnplaceableJobs(capacity)

    with caplog.at_level(logging.INFO, logger="scheduler.leader.mesos.agent_census"):
        first = jobs.never_fits(_job(8.0), APP)
        again = jobs.never_fits(_job(8.0), APP)
    assert first is not None and again == first
    assert set(jobs.current()) == {"big"}
    assert caplog.text.count("can never run") == 1

    capacity.set_reported({"a1": (16.0, 4096.0)})  # a bigger agent joined
    with caplog.at_level(logging.INFO, logger="scheduler.leader.mesos.agent_census"):
        assert jobs.never_fits(_job(8.0), APP) is None
    assert jobs.current() == {}
    assert "launcher: job big can be placed again" in caplog.text

    capacity.set_reported({"a1": (2.0, 4096.0)})
    assert jobs.never_fits(_job(8.0), APP) is not None
    jobs.retain(set())  # its run is no longer pending
    assert jobs.current() == {}


class _Counting(AgentCapacity):
    def __init__(self) -> None:
        super().__init__()
        self.checked: list[str] = []

    def check(self, job: JobConfig, app: AppConfig) -> Any:
        self.checked.append(job.job_name)
        return super().check(job, app)


def test_jobs_of_one_shape_that_fits_are_checked_once_per_agents() -> None:
    """A burst of thousands of jobs alike costs one check, not one a job; a job that does not
    fit, or any job once the agents change, is checked on its own."""
    capacity = _Counting()
    capacity.set_reported({"a1": (2.0, 4096.0)})
    jobs = UnplaceableJobs(capacity)
    alike = [job_config(f"j{i}", jobExecutionType="DAEMON", cpuCount=1.0) for i in range(50)]
    assert all(jobs.never_fits(job, APP) is None for job in alike)
    assert capacity.checked == ["j0"]
    too_big = [job_config(f"big{i}", jobExecutionType="DAEMON", cpuCount=8.0) for i in range(2)]
    assert all(jobs.never_fits(job, APP) is not None for job in too_big)
    assert capacity.checked == ["j0", "big0", "big1"]
    assert set(jobs.current()) == {"big0", "big1"}

    capacity.set_reported({"a1": (0.5, 4096.0)})  # smaller: the shape no longer fits
    assert jobs.never_fits(alike[7], APP) is not None
    assert capacity.checked[-1] == "j7"

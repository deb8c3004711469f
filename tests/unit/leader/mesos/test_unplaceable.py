"""Runs that can never be placed: what the agents could offer, the per-task and whole-run
checks, and a starvation guard that passes them over instead of stalling every younger run."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.leader.mesos.capacity import AgentCapacity, shards_for
from scheduler.leader.mesos.placement import (
    AgentTotal,
    OfferSlot,
    Shard,
    StarvationGuard,
    never_fits,
    place,
)
from scheduler.model.config.app import AppConfig
from scheduler.model.config.job import JobConfig
from tests.support.bodies import job_config

STARVATION_S = 30.0


def shard(cpus: float = 0.5, mem: float = 64, *, item: int = 0, executor: bool = True) -> Shard:
    return Shard("job", item, "app", cpus, mem, 0.1, 32, executor)


def run(n: int, cpus: float = 0.5, mem: float = 64, executor: bool = True) -> list[Shard]:
    return [shard(cpus, mem, item=i, executor=executor) for i in range(n)]


AGENTS = [AgentTotal("a1", 4.0, 4096.0), AgentTotal("a2", 2.0, 8192.0)]


def job(**fields: Any) -> JobConfig:
    return job_config(
        "big",
        **{
            "jobExecutionType": "DAEMON",
            "cron": "0/5 * * * * ?",
            "cpuCount": 0.5,
            "memoryMB": 64,
            **fields,
        },
    )


APP = AppConfig(app_name="app", cpu_count=0.5, memory_mb=128.0)


# -- never_fits ------------------------------------------------------------------------------


def test_nothing_is_judged_while_no_agent_is_known() -> None:
    assert never_fits(run(1, mem=1e308), []) is None


def test_a_run_that_fits_some_agent_is_placeable() -> None:
    assert never_fits(run(2, cpus=1.5, mem=3000), AGENTS) is None


def test_a_task_needing_more_memory_than_any_agent_names_memory() -> None:
    found = never_fits(run(1, mem=1e308), AGENTS)
    assert found is not None
    assert (found.cpus, found.mem, found.whole_run) == (False, True, False)
    assert found.largest_mem_mb == 8192.0 and found.agents == 2


def test_a_task_needing_more_cpus_than_any_agent_names_cpus() -> None:
    found = never_fits(run(1, cpus=8), AGENTS)
    assert found is not None and (found.cpus, found.mem) == (True, False)
    assert found.task_cpus == pytest.approx(8.1)  # the app's executor is charged too


def test_the_executor_is_charged_on_top_of_the_task() -> None:
    # 4 cpus fit the largest agent exactly, but not with the executor's 0.1.
    assert never_fits(run(1, cpus=4.0), AGENTS) is not None
    assert never_fits(run(1, cpus=3.9), AGENTS) is None


def test_a_command_task_has_no_executor_to_charge() -> None:
    assert never_fits(run(1, cpus=4.0, executor=False), AGENTS) is None


def test_cpus_on_one_agent_and_memory_on_another_is_not_enough() -> None:
    # a1 has the cpus, a2 the memory; nobody has both.
    found = never_fits(run(1, cpus=3, mem=6000), AGENTS)
    assert found is not None and (found.cpus, found.mem, found.whole_run) == (True, True, False)


def test_a_run_whose_tasks_together_exceed_the_agents_is_unplaceable() -> None:
    # Each 1.5-cpu task fits an agent, but a READY run starts all or nothing: 5 x 1.5 cpus
    # plus an executor per agent is more than 4 + 2 cpus.
    found = never_fits(run(5, cpus=1.5), AGENTS)
    assert found is not None and found.whole_run and not (found.cpus or found.mem)
    # The executor is charged once per agent, not once per task: 2 x 1.9 + 0.1 + 0.1 on 4 cpus.
    assert never_fits(run(2, cpus=1.9), [AgentTotal("a", 4.0, 4096.0)]) is None


def test_never_fits_leaves_no_trace_on_the_agents() -> None:
    agents = list(AGENTS)
    never_fits(run(3), agents)
    assert agents == AGENTS


# -- what the agents could offer --------------------------------------------------------------


def test_capacity_keeps_the_largest_offer_and_prefers_what_the_master_reports() -> None:
    capacity = AgentCapacity()
    capacity.observe_offer("a1", 1.0, 512.0)
    capacity.observe_offer("a1", 3.0, 256.0)  # tasks ran: a smaller offer of another kind
    assert capacity.agents() == [AgentTotal("a1", 3.0, 512.0)]
    capacity.set_reported({"a1": (4.0, 4096.0), "a2": (2.0, 1024.0)})
    assert capacity.agents() == [AgentTotal("a1", 4.0, 4096.0), AgentTotal("a2", 2.0, 1024.0)]
    assert not capacity.unreported(["a1", "a2"]) and capacity.unreported(["a3"])


def test_an_agent_the_master_no_longer_lists_is_forgotten() -> None:
    capacity = AgentCapacity()
    capacity.observe_offer("gone", 64.0, 65536.0)
    capacity.set_reported({"a1": (4.0, 4096.0)})
    assert [a.agent_id for a in capacity.agents()] == ["a1"]


def test_capacity_version_grows_only_on_change() -> None:
    capacity = AgentCapacity()
    v0 = capacity.version
    capacity.observe_offer("a1", 1.0, 512.0)
    v1 = capacity.version
    capacity.observe_offer("a1", 0.5, 100.0)
    assert v1 > v0 and capacity.version == v1
    capacity.set_reported({"a1": (4.0, 4096.0)})
    v2 = capacity.version
    capacity.set_reported({"a1": (4.0, 4096.0)})
    assert v2 > v1 and capacity.version == v2


def test_no_judgement_before_the_master_answered_or_failed() -> None:
    capacity = AgentCapacity()
    capacity.observe_offer("a1", 0.5, 100.0)  # a first, partial offer
    huge = job(memoryMB=1e6)
    assert not capacity.settled and capacity.check(huge, APP) is None
    capacity.offers_only()  # the master cannot be read: offers are all there is
    assert capacity.settled and capacity.check(huge, APP) is not None


def test_check_describes_the_job_and_names_the_fields() -> None:
    capacity = AgentCapacity()
    capacity.set_reported({"a1": (4.0, 4096.0), "a2": (2.0, 8192.0)})
    found = capacity.check(job(memoryMB=1e6), APP)
    assert found is not None and found.job_name == "big"
    assert set(found.fields) == {"memoryMB"}
    assert "8192 MB" in found.reason and "executor" in found.reason
    found = capacity.check(job(cpuCount=16), APP)
    assert found is not None and set(found.fields) == {"cpuCount"}
    assert "16.5 cpus" in found.fields["cpuCount"] and "4" in found.fields["cpuCount"]
    found = capacity.check(job(cpuCount=3, memoryMB=6000), APP)
    assert found is not None and set(found.fields) == {"cpuCount", "memoryMB"}
    assert "no single agent has both" in found.reason
    found = capacity.check(job(shardingTotalCount=9, cpuCount=1.5), APP)
    assert found is not None and set(found.fields) == {"shardingTotalCount"}
    assert capacity.check(job(), APP) is None


def test_a_transient_script_job_is_checked_without_the_executor() -> None:
    # It runs as a Mesos command task: 4 cpus fit a 4-cpu agent exactly.
    capacity = AgentCapacity()
    capacity.set_reported({"a1": (4.0, 4096.0)})
    assert capacity.check(job(jobExecutionType="TRANSIENT", cpuCount=4), APP) is None
    assert capacity.check(job(jobExecutionType="DAEMON", cpuCount=4), APP) is not None
    assert not shards_for(job(jobExecutionType="TRANSIENT"), APP, [0])[0].uses_executor


# -- the starvation guard -----------------------------------------------------------------------


def test_a_run_that_can_fit_holds_back_younger_runs_only_after_the_starvation_time() -> None:
    guard = StarvationGuard(STARVATION_S)
    assert guard.missed("big", 100.0, can_ever_fit=True) is None
    assert guard.missed("big", 129.0, can_ever_fit=True) is None
    assert guard.missed("big", 131.0, can_ever_fit=True) == pytest.approx(31.0)
    assert guard.waiting_since("big", 500.0) == 100.0
    guard.placed("big")
    assert guard.waiting_since("big", 500.0) == 500.0
    assert guard.missed("big", 500.0, can_ever_fit=True) is None


def test_a_run_that_can_never_fit_never_holds_back_younger_runs() -> None:
    guard = StarvationGuard(STARVATION_S)
    for now in (0.0, 30.0, 3600.0):
        assert guard.missed("huge", now, can_ever_fit=False) is None
    # It keeps its place in the order, oldest first, so that it is tried first once it fits.
    assert guard.waiting_since("huge", 7200.0) == 0.0


def test_retain_forgets_jobs_without_pending_runs() -> None:
    guard = StarvationGuard(STARVATION_S)
    guard.missed("a", 0.0, True)
    guard.missed("b", 0.0, True)
    guard.retain({"b"})
    assert guard.waiting_since("a", 9.0) == 9.0 and guard.waiting_since("b", 9.0) == 0.0


def _rounds(
    capacity: AgentCapacity, pending: dict[str, list[Shard]], seconds: int, judge: bool = True
) -> dict[str, int]:
    """Rounds of one second on empty agents, as the launcher runs them: READY runs oldest
    first, each all or nothing; a run that misses may hold back the rest. Placed runs finish
    within the second and are pending again at once. `judge=False` treats every run as one
    that can fit (the guard before unplaceable runs were told apart). Returns the runs placed
    per job."""
    guard = StarvationGuard(STARVATION_S)
    placed = dict.fromkeys(pending, 0)
    for now in range(seconds):
        slots = [OfferSlot(a.agent_id, "", [], a.cpus, a.mem_mb) for a in capacity.agents()]
        order = sorted(pending, key=lambda name: guard.waiting_since(name, float(now)))
        for name in order:
            if place(slots, pending[name]) is not None:
                guard.placed(name)
                placed[name] += 1
                continue
            fits = not judge or never_fits(pending[name], capacity.agents()) is None
            if guard.missed(name, float(now), fits) is not None:
                break
    return placed


@pytest.mark.parametrize("huge", [run(1, mem=1e308), run(1, cpus=64), run(9, cpus=1.5)])
def test_younger_runs_keep_launching_every_round_while_an_unplaceable_run_waits(
    huge: list[Shard],
) -> None:
    capacity = AgentCapacity()
    capacity.set_reported({"a1": (4.0, 4096.0), "a2": (4.0, 4096.0)})
    small = {f"small{i}": run(2, cpus=0.5, mem=64) for i in range(3)}
    placed = _rounds(capacity, {"huge": huge, **small}, 120)
    assert placed["huge"] == 0
    assert [placed[name] for name in small] == [120, 120, 120]
    # The same rounds without telling unplaceable runs apart: everything stops after 30 s.
    stalled = _rounds(capacity, {"huge": huge, **small}, 120, judge=False)
    assert [stalled[name] for name in small] == [30, 30, 30]


def test_a_big_run_that_can_fit_is_still_protected_from_starvation() -> None:
    # Busy agents (1 cpu free each) cannot take the 2 x 3.5-cpu run now, but empty ones can:
    # after the starvation time it holds back younger runs so that resources free up for it.
    capacity = AgentCapacity()
    capacity.set_reported({"a1": (4.0, 4096.0), "a2": (4.0, 4096.0)})
    guard = StarvationGuard(STARVATION_S)
    busy = [OfferSlot("a1", "", [], 1.0, 4096.0), OfferSlot("a2", "", [], 1.0, 4096.0)]
    big = run(2, cpus=3.5)
    assert place(busy, big) is None
    assert never_fits(big, capacity.agents()) is None
    assert guard.missed("big", 0.0, True) is None
    assert guard.missed("big", STARVATION_S, True) == STARVATION_S

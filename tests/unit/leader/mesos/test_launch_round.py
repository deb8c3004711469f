"""The launch round's pure steps, called directly: offers as slots, slots chosen for a unit,
the shard items of running tasks and the overlap policy in force."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from executor.taskdata import executor_id
from scheduler.leader.mesos.launch_round import (
    PlacementUnit,
    choose,
    items_of,
    offer_slots,
    overlap_of,
    scalar,
)
from scheduler.leader.mesos.placement import OfferSlot
from scheduler.model.config.app import AppConfig
from scheduler.model.config.job import JobConfig
from scheduler.model.config.policies import OverlapPolicy
from scheduler.model.task_id import TaskId, TaskType
from tests.support.bodies import job_config

APP = AppConfig(app_name="app", cpu_count=0.5, memory_mb=128.0)


def job(**fields: Any) -> JobConfig:
    return job_config(
        job_type="SIMPLE",
        **{
            "jobClass": "jobs:run",
            "cron": "0/5 * * * * ?",
            "shardingTotalCount": 3,
            "cpuCount": 1.0,
            "memoryMB": 64,
            **fields,
        },
    )


def offer(
    offer_id: str, agent: str, cpus: float, mem: float, *executors: str, **extra: Any
) -> dict[str, Any]:
    return {
        "id": {"value": offer_id},
        "agent_id": {"value": agent},
        "hostname": f"host-{agent}",
        "resources": [
            {"name": "cpus", "type": "SCALAR", "scalar": {"value": cpus}},
            {"name": "mem", "type": "SCALAR", "scalar": {"value": mem}},
            {"name": "ports", "type": "RANGES", "ranges": {"range": [{"begin": 1, "end": 9}]}},
            *extra.get("resources", []),
        ],
        "executor_ids": [{"value": e} for e in executors],
    }


def slot(agent: str, cpus: float, mem: float, *executors: str) -> OfferSlot:
    return OfferSlot(agent, f"host-{agent}", [f"o-{agent}"], cpus, mem, set(executors))


def test_scalar_sums_only_scalar_resources_of_that_name() -> None:
    extra = {"name": "cpus", "type": "SCALAR", "scalar": {"value": 0.5}}
    odd = {"name": "cpus", "type": "SET", "set": {"item": ["x"]}}
    assert scalar(offer("o1", "a1", 2.0, 512.0, resources=[extra, odd]), "cpus") == 2.5
    assert scalar(offer("o1", "a1", 2.0, 512.0), "ports") == 0.0
    assert scalar({"id": {"value": "o"}}, "mem") == 0.0


def test_offer_slots_join_the_offers_of_one_agent() -> None:
    slots = offer_slots(
        [
            offer("o1", "a1", 1.0, 256.0, "app@-@a1"),
            offer("o2", "a2", 4.0, 1024.0),
            offer("o3", "a1", 0.5, 128.0, "other@-@a1"),
        ]
    )
    assert sorted(slots) == ["a1", "a2"]
    a1 = slots["a1"]
    assert a1.offer_ids == ["o1", "o3"]
    assert (a1.cpus, a1.mem_mb, a1.hostname) == (1.5, 384.0, "host-a1")
    assert a1.executor_ids == {"app@-@a1", "other@-@a1"}
    assert (slots["a2"].offer_ids, slots["a2"].cpus) == (["o2"], 4.0)


def test_a_ready_run_is_chosen_whole_or_not_at_all() -> None:
    unit = PlacementUnit(TaskType.READY, job(), APP, [0, 1, 2])
    # Two shards fit (each 1 cpu plus the executor's 0.5 once per agent), the third does not.
    slots = [slot("a1", 2.5, 1024.0), slot("a2", 0.4, 1024.0)]
    assert choose(unit, slots) is None
    assert [(s.cpus, s.mem_mb, s.executor_ids) for s in slots] == [
        (2.5, 1024.0, set()),
        (0.4, 1024.0, set()),
    ]
    slots.append(slot("a3", 1.5, 1024.0))
    chosen = choose(unit, slots)
    assert chosen is not None and sorted(chosen) == [0, 1, 2]
    assert sorted(s.agent_id for s in chosen.values()) == ["a1", "a1", "a3"]
    assert slots[0].cpus == 0.0 and slots[0].executor_ids == {executor_id("app", "a1")}


def test_failover_shards_are_each_placed_where_they_fit() -> None:
    unit = PlacementUnit(TaskType.FAILOVER, job(), APP, [0, 2])
    slots = [slot("a1", 1.0, 1024.0, executor_id("app", "a1"))]
    chosen = choose(unit, slots)
    assert chosen is not None and list(chosen) == [0]  # the executor runs: 1 cpu per shard
    assert slots[0].cpus == 0.0
    assert choose(unit, slots) is None


def test_items_of_skips_ids_that_do_not_parse() -> None:
    ids = [str(TaskId.new("job", 4, TaskType.READY, "a1")), "garbage", "j@-@x@-@READY@-@a@-@u"]
    ids.append(str(TaskId.new("job", 1, TaskType.FAILOVER, "a2")))
    assert items_of(ids) == {1, 4}


def test_a_daemon_job_never_overlaps_whatever_was_stored() -> None:
    assert overlap_of(job()) is OverlapPolicy.FORBID
    assert overlap_of(job(overlapPolicy="ALLOW")) is OverlapPolicy.ALLOW
    # Stored before the API refused it for a daemon job: read as stored, never in force.
    daemon = replace(job(jobExecutionType="DAEMON"), overlap_policy=OverlapPolicy.REPLACE)
    assert daemon.overlap is OverlapPolicy.REPLACE
    assert overlap_of(daemon) is OverlapPolicy.FORBID

"""A launch round's pure side: the units it places and the steps that need no I/O or thread.

A round gathers `PlacementUnit`s (one job's shards placed as one: a READY run whole, or its
failover shards each where it fits) into `Gathered`, turns the offers it holds into one
`OfferSlot` per agent (`offer_slots`), chooses slots for each unit (`choose`) and keeps each
unit placed as a `PlacedUnit` (its bookkeeping and TaskInfos). The `Launcher` component owns
the thread, the offers and the writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from executor.taskdata import executor_id
from scheduler.leader.mesos.capacity import shards_for
from scheduler.leader.mesos.placement import OfferSlot, place
from scheduler.model.config.app import AppConfig
from scheduler.model.config.job import JobConfig, JobExecutionType
from scheduler.model.config.policies import OverlapPolicy
from scheduler.model.task_id import TaskId, TaskType
from scheduler.storage.launch_book import Launch
from scheduler.storage.queue_cache import FailoverEntry
from scheduler.storage.workflow_store import NodeFire


def overlap_of(job: JobConfig) -> OverlapPolicy:
    """The job's overlap policy; a daemon job's runs never overlap, whatever was stored."""
    if job.execution_type is not JobExecutionType.TRANSIENT:
        return OverlapPolicy.FORBID
    return job.overlap


@dataclass
class PlacementUnit:
    """What the launcher places as one: one job's shards this round, either a READY run (all
    its shards, placed whole or not at all) or its failover shards (each where it fits)."""

    kind: TaskType
    job: JobConfig
    app: AppConfig
    items: list[int]
    """The shard items to place."""
    ready: tuple[int, int] | None = None
    """(pending runs, node version) of a READY unit's job, as the view read it."""
    requires: tuple[str, int] | None = None
    """(path, version) a READY unit's take requires (a fire's write not yet answered)."""
    failover: dict[int, FailoverEntry] = field(default_factory=dict)
    workflow: tuple[NodeFire, int] | None = None
    """A workflow node's fire (with its queue entry's version) this READY unit launches
    instead of a pending run of the job (issue 27)."""
    relaunch: dict[int, NodeFire] = field(default_factory=dict)
    """The failover shards that belong to a workflow node's fire, by item."""


@dataclass
class Gathered:
    """What a round found to do (gather: read only)."""

    units: list[PlacementUnit]
    pending: set[str]
    """Jobs with pending runs."""
    ready_runs: int
    failover_shards: int
    tidy_failover: list[tuple[str, int | None]] = field(default_factory=list)
    """Failover entries to drop: (job, item), item None for all of the job's."""
    tidy_ready: list[str] = field(default_factory=list)
    """Jobs whose pending runs are dropped (deleted, unreadable or disabled)."""
    replace: dict[str, list[str]] = field(default_factory=dict)
    """Jobs whose running tasks a pending run replaces (overlapPolicy REPLACE): task ids."""


@dataclass
class PlacedUnit:
    """A unit placed this round: its bookkeeping and, per task, the agent and TaskInfo."""

    launch: Launch
    ids: list[TaskId]
    """The ids of `launch.tasks`, in their order."""
    infos: list[tuple[str, dict[str, Any]]]
    originals: dict[str, str]
    """Task id -> the task it relaunches (failover), else itself."""
    workflow: NodeFire | None = None
    """The workflow node (or backfill) fire the unit launches (issues 27, 28)."""
    launch_fires: dict[str, NodeFire] = field(default_factory=dict)
    """Failover relaunches of node fires' shards: task id -> the node fire it runs for."""


def scalar(offer: dict[str, Any], name: str) -> float:
    """The total of the scalar resource `name` (`cpus`, `mem`) in one offer."""
    total = 0.0
    for res in offer.get("resources", []):
        if res.get("name") == name and res.get("type", "SCALAR") == "SCALAR":
            total += float(res.get("scalar", {}).get("value", 0.0))
    return total


def offer_slots(offers: list[dict[str, Any]]) -> dict[str, OfferSlot]:
    """The offers of a round, one slot per agent."""
    slots: dict[str, OfferSlot] = {}
    for offer in offers:
        agent = offer["agent_id"]["value"]
        slot = slots.get(agent)
        if slot is None:
            slot = slots[agent] = OfferSlot(agent, offer.get("hostname", ""), [], 0.0, 0.0)
        slot.offer_ids.append(offer["id"]["value"])
        slot.cpus += scalar(offer, "cpus")
        slot.mem_mb += scalar(offer, "mem")
        slot.executor_ids.update(e["value"] for e in offer.get("executor_ids", []))
    return slots


def choose(unit: PlacementUnit, slots: list[OfferSlot]) -> dict[int, OfferSlot] | None:
    """Item -> slot for `unit` (pure; the slots' free resources are updated): a READY run
    whole or not at all, failover shards each where it fits. None when nothing was placed."""
    executors = {s.agent_id: executor_id(unit.app.app_name, s.agent_id) for s in slots}
    shards = shards_for(unit.job, unit.app, unit.items)
    if unit.kind is TaskType.READY:
        return place(slots, shards, executors)
    chosen: dict[int, OfferSlot] = {}
    for shard in shards:
        one = place(slots, [shard], executors)
        if one is not None:
            chosen.update(one)
    return chosen or None


def items_of(task_ids: list[str]) -> set[int]:
    """The shard items of `task_ids` (an id that does not parse is skipped)."""
    items = set()
    for task_id in task_ids:
        try:
            items.add(TaskId.parse(task_id).item)
        except ValueError:
            continue
    return items

"""Place shards on offers: pure logic, no I/O.

A READY run places all its shards or none (no partial runs that hold resources while waiting);
FAILOVER shards are placed one by one. An app's executor resources are charged once per agent
where that app has no executor yet (counting executors this round starts too).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class OfferSlot:
    """What is left of one agent's offers this round."""

    agent_id: str
    hostname: str
    offer_ids: list[str]
    cpus: float
    mem_mb: float
    executor_ids: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Shard:
    job_name: str
    item: int
    app_name: str
    cpus: float
    mem_mb: float
    app_cpus: float
    app_mem_mb: float
    uses_executor: bool


_EPS = 1e-9


def _cost(slot: OfferSlot, shard: Shard, executor_id: str) -> tuple[float, float]:
    cpus, mem = shard.cpus, shard.mem_mb
    if shard.uses_executor and executor_id not in slot.executor_ids:
        cpus += shard.app_cpus
        mem += shard.app_mem_mb
    return cpus, mem


def place(
    slots: list[OfferSlot], shards: list[Shard], executor_id_of: dict[str, str] | None = None
) -> dict[int, OfferSlot] | None:
    """Place every shard (all or nothing) spreading over agents; returns item -> slot, or None.

    On success the slots' free resources and executor sets are updated; on failure they are
    left as they were. `executor_id_of` maps agent id -> this app's executor id on it.
    """
    ids = executor_id_of or {}
    saved = [(s.cpus, s.mem_mb, set(s.executor_ids)) for s in slots]
    chosen: dict[int, OfferSlot] = {}
    for shard in shards:
        # Spread: the agent with the most free cpu that fits (ties: most memory).
        best: OfferSlot | None = None
        for slot in slots:
            cpus, mem = _cost(slot, shard, ids.get(slot.agent_id, ""))
            if slot.cpus + _EPS >= cpus and slot.mem_mb + _EPS >= mem:
                if best is None or (slot.cpus, slot.mem_mb) > (best.cpus, best.mem_mb):
                    best = slot
        if best is None:
            for slot, (cpus, mem, executors) in zip(slots, saved, strict=True):
                slot.cpus, slot.mem_mb, slot.executor_ids = cpus, mem, executors
            return None
        cpus, mem = _cost(best, shard, ids.get(best.agent_id, ""))
        best.cpus -= cpus
        best.mem_mb -= mem
        if shard.uses_executor:
            best.executor_ids.add(ids.get(best.agent_id, ""))
        chosen[shard.item] = best
    return chosen

"""Place shards on offers: pure logic, no I/O.

A READY run places all its shards or none (no partial runs that hold resources while waiting);
FAILOVER shards are placed one by one. An app's executor resources are charged once per agent
where that app has no executor yet (counting executors this round starts too). `never_fits`
says whether a run could be placed at all were every known agent's resources free.
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


@dataclass(frozen=True)
class AgentTotal:
    """The most one agent can ever offer: its whole resources, nothing running."""

    agent_id: str
    cpus: float
    mem_mb: float


@dataclass(frozen=True)
class NeverFits:
    """Why a run can never be placed, even with every known agent's resources free.

    `task_cpus`/`task_mem_mb` are what one task needs on an agent where its app has no executor
    yet (job plus executor). `cpus`/`mem` say which of them no agent has; both are set when some
    agents have enough cpus and others enough memory but none both. `whole_run` is set when each
    task fits an agent but the run's tasks, all or nothing, do not fit the agents together.
    """

    task_cpus: float
    task_mem_mb: float
    largest_cpus: float
    largest_mem_mb: float
    agents: int
    cpus: bool = False
    mem: bool = False
    whole_run: bool = False


def never_fits(shards: list[Shard], agents: list[AgentTotal]) -> NeverFits | None:
    """Why a run of `shards` (all or nothing) can never be placed on `agents`, or None.

    None also when no agent is known: nothing can be said yet. The run-level answer is the
    launcher's own placement on empty agents, so "can fit" here means what the launcher does
    once enough resources are free, not what an ideal packing could do.
    """
    if not agents or not shards:
        return None
    empty = OfferSlot("", "", [], 0.0, 0.0)
    task_cpus, task_mem = _cost(empty, shards[0], "")
    largest_cpus = max(a.cpus for a in agents)
    largest_mem = max(a.mem_mb for a in agents)
    for shard in shards:
        cpus, mem = _cost(empty, shard, "")
        if not any(a.cpus + _EPS >= cpus and a.mem_mb + _EPS >= mem for a in agents):
            short_cpus = cpus > largest_cpus + _EPS
            short_mem = mem > largest_mem + _EPS
            if not (short_cpus or short_mem):
                short_cpus = short_mem = True  # no single agent has both
            return NeverFits(
                cpus, mem, largest_cpus, largest_mem, len(agents), short_cpus, short_mem
            )
    slots = [OfferSlot(a.agent_id, "", [], a.cpus, a.mem_mb) for a in agents]
    if place(slots, shards) is None:
        return NeverFits(
            task_cpus, task_mem, largest_cpus, largest_mem, len(agents), whole_run=True
        )
    return None


class StarvationGuard:
    """When younger READY runs stop being placed so that resources free up for an older one.

    Pure bookkeeping, called by the launcher thread only: `now` is a monotonic time. A READY
    run that did not fit starts waiting; once it has waited `starvation_s` the runs after it
    are held back until it is placed, unless it can never fit (then holding them back would
    stall them forever, and it is passed over instead).
    """

    def __init__(self, starvation_s: float) -> None:
        self._starvation_s = starvation_s
        self._since: dict[str, float] = {}

    def waiting_since(self, job_name: str, now: float) -> float:
        """When the job's pending run started waiting (`now` if it does not wait): the order
        in which READY runs are tried, oldest first."""
        return self._since.get(job_name, now)

    def missed(self, job_name: str, now: float, can_ever_fit: bool) -> float | None:
        """The job's READY run did not fit this round; `can_ever_fit` is False when it could
        not even with every known agent's resources free.

        Returns how long it has waited when the runs after it must be held back, else None.
        """
        since = self._since.setdefault(job_name, now)
        if not can_ever_fit or now - since < self._starvation_s:
            return None
        return now - since

    def placed(self, job_name: str) -> None:
        """The job's READY run was placed: it waits no more."""
        self._since.pop(job_name, None)

    def retain(self, job_names: set[str]) -> None:
        """Forget jobs without a pending run (run removed, job disabled or deregistered)."""
        for name in [n for n in self._since if n not in job_names]:
            del self._since[name]

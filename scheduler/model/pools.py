"""Concurrency pools (issue 28), pure: a pool's definition, the launcher's pick, the counts.

A pool is a named number of slots shared by every job that names it (`pool`, with `poolSlots`
per shard: see `model/config/pool_fields.py`). The launcher never runs tasks of a pool taking
more slots than its size, across all its jobs; the rest wait in the ready queue. No I/O here:
the caller gives the pools' sizes, the slots in use and the waiting units, and gets a decision.

**The definition.** `PoolConfig.from_json` reads the contract's `{"poolName", "size"}` (the
body of `POST /api/pool` and `PUT /api/pool/{name}`; `expected_name` is the path's name of a
PUT). `poolName` follows the app and job name rule; `size` is an integer from 1 to
MAX_POOL_SIZE (slots). Unknown fields are refused, the read-only `inUse` and `waiting` of a GET
answer with their own message. Every problem is one InvalidRequest (400) whose `fields` names
each bad field; nothing is written by this module. `fit_problem` says why a job's run could
never fit a pool (for the API, on a job's registration and a pool's resize).

**The pick** (`pick`), each launch round, over:
- `sizes`: each pool's size (pools that exist);
- `in_use`: the slots each pool's tasks hold, every task launched and not yet ended (staging,
  starting, running), with the `poolSlots` it launched with (`slots_in_use` counts them): a
  new leader counts before it launches, so a pool's limit holds across leader changes;
- `waiting`: the units the launcher would launch now but for their pool, in fire order: each a
  `WaitingUnit` (job, fire time, shard items, slots per shard, pool, whole or not). A unit the
  launcher could not launch anyway (its job disabled, FORBID while it runs, no agent can ever
  hold it) must be left out: admitted, it would keep slots it never uses from the others;
- `turns`: the `PoolTurns` of this term (which job of a pool was served last).

Rules, each tested in `tests/unit/model/test_pools.py`:
1. A unit whose job is in no pool always launches.
2. Never over: after the pick, the slots a pool's running tasks hold plus those its admitted
   units take are at most its size. A pool already over its size (shrunk while tasks ran)
   admits nothing until it drains below.
3. Never placeable, reported, never held in silence: a unit that could not launch even in the
   pool's whole emptiness (a whole unit taking more slots than the size; one shard of a
   shard-by-shard unit taking more), or whose pool does not exist, is in `never` with its
   `NeverReason`. It takes no turn and blocks nobody. (It is "never" for these sizes: the
   launcher reports it, as the runs view's reason, and may keep it for a resized or created pool.)
4. Fair between jobs, round-robin by job: in each pool, the job served least recently
   (`PoolTurns`; a job never served first) goes first, ties by its oldest waiting unit's fire
   time, then by job name. A job offers its units in fire order, one per turn; once served it
   goes behind every other waiting job of the pool, within the pick and across picks (when the
   launcher records what it launched with `PoolTurns.served`). So however often one job fires,
   each other waiting job of its pool is served before that job's next unit.
5. Partial placement: a whole unit (a READY run, whose shards the launcher places together)
   takes all its slots or none. A shard-by-shard unit (failover shards, each placed where it
   fits) takes as many of its shards as fit, in the order given, and the rest wait.
6. No starvation: when the unit whose turn it is does not fit the free slots (or only part of a
   shard-by-shard one does), the pool admits nothing more this pick: its slots only free up
   until that unit fits. With J jobs in a pool, every task ending within D picks and every
   admitted unit launched, a job with waiting units is served (a whole unit, or some shards of
   a shard-by-shard one) within J * (D + 1) picks, however the others fire.
7. Deterministic: the same input gives the same pick (no clock, no randomness, no set order).

`PoolPick.launch` lists the admitted units in fire order (ties in their order in `waiting`),
with the shards each may launch; the launcher launches what offers allow and then records the
jobs it launched with `PoolTurns.served`. A unit admitted but not launched (no offer fit) simply
comes back next round: its job's turn is not spent. `PoolPick.counts` gives each pool's `inUse`
(slots, admitted units counted as running) and `waiting` (units held or never placeable) for the
metrics and `GET /api/pool/{name}`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from types import MappingProxyType

from scheduler.model.config import _wire
from scheduler.model.config.pool_fields import MAX_POOL_SLOTS, POOL_LIMITS, pool_name_problem

__all__ = [
    "FIELDS",
    "MAX_POOL_SIZE",
    "READ_ONLY_FIELDS",
    "Admission",
    "Held",
    "NeverPlaceable",
    "NeverReason",
    "PoolConfig",
    "PoolCounts",
    "PoolPick",
    "PoolTurns",
    "RunningTask",
    "WaitingUnit",
    "fit_problem",
    "pick",
    "slots_in_use",
]

MAX_POOL_SIZE = 100_000
"""Slots of one pool: 10,000 shards (a job's most) of 10 slots each."""
FIELDS = frozenset({"poolName", "size"})
READ_ONLY_FIELDS = frozenset({"inUse", "waiting"})
_WHAT = "pool"
_LIMITS = {"poolName": POOL_LIMITS["pool"]}


@dataclass(frozen=True)
class PoolConfig:
    """A pool as stored and as the API's contract writes it: `{"poolName", "size"}`."""

    pool_name: str
    size: int

    def to_json(self) -> dict[str, object]:
        return {"poolName": self.pool_name, "size": self.size}

    @classmethod
    def from_json(
        cls, data: object, *, strict: bool = True, expected_name: str | None = None
    ) -> PoolConfig:
        """The pool `data` (a decoded JSON body) defines.

        `strict` (new API input) also refuses unknown fields; stored pools (`strict=False`) get
        the other checks, since only this scheduler writes them. `expected_name`: the name a
        `PUT /api/pool/{name}` updates, which `poolName` must equal (it may be left out).
        Raises InvalidRequest naming each bad field (`body` when `data` is not an object).
        """
        body = _wire.require_object(data, _WHAT)
        if expected_name is not None and body.get("poolName") is None:
            body = {**body, "poolName": expected_name}
        reader = _wire.FieldReader(body, strict=strict, limits=_LIMITS)
        if strict:
            for key in READ_ONLY_FIELDS.intersection(body):
                reader.problem(key, "is read-only (counted by the leader); leave it out")
            reader.refuse_unknown(FIELDS | READ_ONLY_FIELDS, "is not a field of a pool")
        name = reader.required_text("poolName")
        if name is not None and (problem := pool_name_problem(name)):
            reader.problem("poolName", problem)
        elif name is not None and expected_name is not None and name != expected_name:
            reader.problem("poolName", f"does not match the pool being updated ({expected_name!r})")
        size = reader.integer("size")
        if size is not None and not 1 <= size <= MAX_POOL_SIZE:
            reader.problem("size", f"must be between 1 and {MAX_POOL_SIZE}")
        reader.raise_if_any(_WHAT)
        assert name is not None and size is not None
        return cls(name, size)


def fit_problem(shards: int, pool_slots: int, pool: str, size: int) -> str | None:
    """Why a run of `shards` shards taking `pool_slots` each could never launch in the pool
    `pool` of `size` slots (a READY run takes all its slots at once), or None when it fits."""
    need = shards * pool_slots
    if need <= size:
        return None
    return (
        f"one run takes {need} slots ({shards} shards of {pool_slots}); "
        f"pool {pool!r} has only {size}"
    )


@dataclass(frozen=True)
class RunningTask:
    """One running task, as the pick counts it: its job's pool (None: no pool) and the slots
    it holds (the job's `poolSlots` when it launched)."""

    job: str
    pool: str | None
    slots: int = 1


def slots_in_use(tasks: Iterable[RunningTask]) -> dict[str, int]:
    """Slots held per pool by `tasks` (pools with none are left out)."""
    out: dict[str, int] = {}
    for task in tasks:
        if task.pool is not None:
            out[task.pool] = out.get(task.pool, 0) + task.slots
    return out


@dataclass(frozen=True)
class WaitingUnit:
    """What the launcher would launch now but for its pool: one job's shards of one fire.

    Raises ValueError on a unit no launcher would make (no shards, a shard twice, slots out of
    1..MAX_POOL_SLOTS, a naive fire time): these are bugs of the caller, not client input.
    """

    job: str
    fire_time: datetime
    """The logical fire time (aware); it orders a job's units and breaks ties between jobs."""
    shards: tuple[int, ...]
    slots_per_shard: int = 1
    pool: str | None = None
    whole: bool = True
    """True: a READY run, all its shards or none. False: failover shards, each on its own."""

    def __post_init__(self) -> None:
        if not self.shards or len(set(self.shards)) != len(self.shards):
            raise ValueError(f"unit of job {self.job}: shards must be distinct and not empty")
        if not 1 <= self.slots_per_shard <= MAX_POOL_SLOTS:
            raise ValueError(f"unit of job {self.job}: slots_per_shard out of range")
        if self.fire_time.tzinfo is None:
            raise ValueError(f"unit of job {self.job}: fire_time must be aware")

    @property
    def slots(self) -> int:
        """The slots the whole unit takes."""
        return len(self.shards) * self.slots_per_shard


@dataclass(frozen=True)
class PoolTurns:
    """Which job of a pool was served last: the memory of round-robin, kept by the launcher for
    its term (a new leader starts empty: every job is then first by its oldest fire)."""

    last: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    """Job -> serial of its last service (higher: more recent)."""
    clock: int = 0
    """The serial the next service gets."""

    def rank(self, job: str) -> int:
        """-1 for a job never served, else its last service's serial."""
        return self.last.get(job, -1)

    def served(self, jobs: Iterable[str]) -> PoolTurns:
        """These turns after `jobs` launched a unit each, in this order."""
        last = dict(self.last)
        clock = self.clock
        for job in jobs:
            last[job] = clock
            clock += 1
        return PoolTurns(MappingProxyType(last), clock)

    def retain(self, jobs: Collection[str]) -> PoolTurns:
        """These turns remembering only `jobs` (call with the registered jobs, so deleted ones
        do not accumulate)."""
        kept = {job: serial for job, serial in self.last.items() if job in jobs}
        return PoolTurns(MappingProxyType(kept), self.clock)


@dataclass(frozen=True)
class Admission:
    """A unit that may launch now: `index` in `waiting`, and the shards it may launch (all of
    them, but for a shard-by-shard unit that only partly fits)."""

    index: int
    unit: WaitingUnit
    shards: tuple[int, ...]


@dataclass(frozen=True)
class Held:
    """A unit (or a shard-by-shard unit's remaining shards) waiting for its pool's slots."""

    index: int
    unit: WaitingUnit
    shards: tuple[int, ...]
    reason: str
    """Why, for the runs view and the logs (safe to show): the unit whose turn it is waits for
    slots to free up; the others wait for their turn."""


class NeverReason(StrEnum):
    TOO_BIG = "too_big"
    """It would take more slots than the pool's whole size."""
    UNKNOWN_POOL = "unknown_pool"
    """Its job names a pool that does not exist."""


@dataclass(frozen=True)
class NeverPlaceable:
    index: int
    unit: WaitingUnit
    reason: NeverReason
    message: str
    """Safe to show: names the job, the pool and the numbers."""


@dataclass(frozen=True)
class PoolCounts:
    """One pool's figures for `/metrics` and `GET /api/pool/{name}`."""

    pool_name: str
    size: int
    in_use: int
    """Slots held by running tasks (and by the units admitted this pick)."""
    waiting: int
    """Units held for the pool's slots, or never placeable in it."""

    def to_json(self) -> dict[str, object]:
        return {
            "poolName": self.pool_name,
            "size": self.size,
            "inUse": self.in_use,
            "waiting": self.waiting,
        }


@dataclass(frozen=True)
class PoolPick:
    launch: tuple[Admission, ...]
    """Admitted units, in fire order (ties in their order in `waiting`); `held` and `never`
    too."""
    held: tuple[Held, ...]
    never: tuple[NeverPlaceable, ...]
    in_use: Mapping[str, int]
    """Slots per pool once the admitted units run (every pool of `sizes`)."""
    sizes: Mapping[str, int]

    def counts(self) -> dict[str, PoolCounts]:
        """Each pool's counts after this pick (every pool of `sizes`, by name)."""
        waiting = dict.fromkeys(self.sizes, 0)
        for unit in [h.unit for h in self.held] + [n.unit for n in self.never]:
            if unit.pool in waiting:
                waiting[unit.pool] += 1
        return {
            name: PoolCounts(name, size, self.in_use.get(name, 0), waiting[name])
            for name, size in sorted(self.sizes.items())
        }


def pick(
    sizes: Mapping[str, int],
    in_use: Mapping[str, int],
    waiting: Sequence[WaitingUnit],
    turns: PoolTurns | None = None,
) -> PoolPick:
    """Which of `waiting` may launch now, by the rules of this module's docstring.

    `sizes`: pool -> slots (the pools that exist); `in_use`: pool -> slots held by running tasks
    (a pool left out holds none); `waiting` in fire order. Pure and deterministic; linear in the
    units but for a sort per pool. Raises ValueError on a negative size or count.
    """
    if any(size < 0 for size in sizes.values()) or any(n < 0 for n in in_use.values()):
        raise ValueError("pool sizes and slots in use must not be negative")
    turns = PoolTurns() if turns is None else turns
    admitted: list[Admission] = []
    held: list[Held] = []
    never: list[NeverPlaceable] = []
    queues: dict[str, dict[str, deque[int]]] = {}  # pool -> job -> indices, fire order
    in_fire_order = sorted(range(len(waiting)), key=lambda i: (waiting[i].fire_time, i))
    for index in in_fire_order:
        unit = waiting[index]
        if unit.pool is None:
            admitted.append(Admission(index, unit, unit.shards))
        elif (refusal := _never(index, unit, sizes)) is not None:
            never.append(refusal)
        else:
            queues.setdefault(unit.pool, {}).setdefault(unit.job, deque()).append(index)
    used = {name: in_use.get(name, 0) for name in sizes}
    for pool, jobs in sorted(queues.items()):
        used[pool] = _fill_pool(pool, sizes[pool], used[pool], jobs, waiting, turns, admitted, held)
    fire_order = {index: rank for rank, index in enumerate(in_fire_order)}
    admitted.sort(key=lambda a: fire_order[a.index])
    held.sort(key=lambda h: fire_order[h.index])
    never.sort(key=lambda n: fire_order[n.index])
    return PoolPick(
        tuple(admitted),
        tuple(held),
        tuple(never),
        MappingProxyType(used),
        MappingProxyType(dict(sizes)),
    )


def _never(index: int, unit: WaitingUnit, sizes: Mapping[str, int]) -> NeverPlaceable | None:
    assert unit.pool is not None
    size = sizes.get(unit.pool)
    if size is None:
        message = f"job {unit.job}: pool {unit.pool!r} does not exist"
        return NeverPlaceable(index, unit, NeverReason.UNKNOWN_POOL, message)
    least = unit.slots if unit.whole else unit.slots_per_shard
    if least <= size:
        return None
    what = f"a run of {len(unit.shards)} shards" if unit.whole else "one shard"
    message = f"job {unit.job}: {what} takes {least} slots; pool {unit.pool!r} has only {size}"
    return NeverPlaceable(index, unit, NeverReason.TOO_BIG, message)


def _fill_pool(
    pool: str,
    size: int,
    used: int,
    jobs: dict[str, deque[int]],
    waiting: Sequence[WaitingUnit],
    turns: PoolTurns,
    admitted: list[Admission],
    held: list[Held],
) -> int:
    """Admit one pool's units round-robin by job until the one whose turn it is does not fit;
    append to `admitted` and `held`; return the slots used after."""
    # Each job's place in line: (last service, oldest waiting fire, name). A job served in this
    # pick goes behind every job still in line, as its new serial would put it across picks.
    line = sorted(
        (turns.rank(job), waiting[indices[0]].fire_time, job) for job, indices in jobs.items()
    )
    order = deque(job for _, _, job in line)
    while order:
        job = order.popleft()
        index = jobs[job].popleft()
        unit = waiting[index]
        free = max(0, size - used)
        if unit.whole:
            fits = len(unit.shards) if unit.slots <= free else 0
        else:
            fits = min(len(unit.shards), free // unit.slots_per_shard)
        if fits:
            admitted.append(Admission(index, unit, unit.shards[:fits]))
            used += fits * unit.slots_per_shard
        if fits < len(unit.shards):
            # Its turn, and it does not fit: nothing more of this pool launches, so the slots
            # only free up until it does (rule 6).
            left = unit.shards[fits:]
            need = len(left) * unit.slots_per_shard
            reason = f"{need} slots to free up in pool {pool!r} ({used} of {size} in use)"
            held.append(Held(index, unit, left, f"waiting for {reason}"))
            break
        if jobs[job]:
            order.append(job)
    for indices in jobs.values():
        reason = f"waiting for its turn in pool {pool!r} ({used} of {size} slots in use)"
        held.extend(Held(i, waiting[i], waiting[i].shards, reason) for i in indices)
    return used

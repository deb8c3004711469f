"""The launcher's concurrency-pool admission (issue 28): which gathered units may launch now.

Each round, after gather and before placement, `PoolAdmission.admit` applies the pure pick of
`model/pools.py` (its docstring is the contract) to the round's units:
- the sizes are the term's pools (`TermStores.pools`, read once per term);
- the slots in use are counted from every task in the running queue (staging, starting,
  running) of a job in a pool, with the `pool` and `poolSlots` its record was launched with
  (`RunningTask.pool`, `.pool_slots`; a record without them, written before pools or adopted by
  the status handler, counts with its job's current configuration). A task launched by this
  term is known from its launch; one found running at the start of the term is read once, in
  bulk, so a new leader counts what runs before it launches and the limit holds across leader
  changes;
- the waiting units are the round's units of jobs in a pool (READY runs whole, failover shards
  one by one, workflow and backfill node fires as READY runs), in fire order.
Units the pick holds are left out of the round (they stay queued); an admitted failover unit
keeps only the shards admitted. A unit that can never launch (its pool missing, or too small
for it) is reported once at WARNING and counted as waiting. `PoolTurns` lives as long as the
term's launcher: the jobs that launched are recorded with `launched`.

Cost: nothing when no job of the round is in a pool and no pool exists; else the running
queue's task ids (from the view) and the configuration of jobs with running tasks whose record
does not say (cached by the view), never a look at idle jobs. Called on the launcher's thread
only.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime

from scheduler.leader.mesos.launch_round import PlacementUnit
from scheduler.model.pools import (
    PoolCounts,
    PoolTurns,
    RunningTask,
    WaitingUnit,
    pick,
    slots_in_use,
)
from scheduler.model.task_id import TaskId, TaskType
from scheduler.storage.layout import running_path
from scheduler.storage.queue_cache import QueueCache
from scheduler.storage.state import RunningTask as RunningRecord
from scheduler.storage.term_stores import TermStores

__all__ = ["PoolAdmission"]

log = logging.getLogger(__name__)

_TURNS_KEPT = 10_000
_USE_CONFIG = None
"""A running task whose record names no pool: its job's current configuration says."""
_NO_POOL = ("", 0)
"""A task this term launched in no pool: it holds no slot (no configuration read for it)."""


class PoolAdmission:
    """The pools' pick over a round's units, with what it remembers across rounds of a term:
    the turns, each running task's pool and slots, the units already reported."""

    def __init__(self, stores: TermStores, queues: QueueCache) -> None:
        self._stores = stores
        self._queues = queues
        self.turns = PoolTurns()
        # Task id -> (pool, slots) it launched with; _USE_CONFIG: its record does not say.
        self._task_slots: dict[str, tuple[str, int] | None] = {}
        self._reported: set[str] = set()
        self.last_counts: Mapping[str, PoolCounts] = {}

    def admit(
        self,
        units: list[PlacementUnit],
        passed_over: set[str],
        fire_time: Callable[[PlacementUnit], float],
    ) -> list[PlacementUnit]:
        """The units of `units` that may launch now, in their order; a failover unit admitted
        in part keeps the admitted shards only. `passed_over`: jobs whose READY run can never
        be placed on the agents (left to the launcher, which passes them over: admitted, they
        would keep slots from the others). `fire_time`: a unit's logical fire (epoch seconds),
        which orders the waiting units. Notes the pools' counts in the pool store. Raises
        RegistryError when ZooKeeper fails (the round is abandoned)."""
        sizes = self._stores.pools.sizes()
        pooled = [
            index
            for index, unit in enumerate(units)
            if unit.job.pool is not None
            and not (unit.kind is TaskType.READY and unit.job.job_name in passed_over)
        ]
        if not sizes and not pooled:
            self._note({})
            return units
        in_use = self._in_use() if sizes else {}
        waiting = [self._waiting(units[index], fire_time(units[index])) for index in pooled]
        chosen = pick(sizes, in_use, waiting, self.turns)
        self._report([n.message for n in chosen.never])
        self._note(chosen.counts())
        admitted = {pooled[a.index]: a.shards for a in chosen.launch}
        out = []
        for index, unit in enumerate(units):
            if unit.job.pool is None or index not in pooled:
                out.append(unit)
            elif index in admitted:
                unit.items = [item for item in unit.items if item in admitted[index]]
                out.append(unit)
        return out

    def launched(self, tasks: Iterable[tuple[str, str | None, int]], jobs: list[str]) -> None:
        """Tasks written to the running queue this round ((task id, pool, slots)), and the
        jobs in a pool that launched a unit, in fire order (their turn is spent). A task
        launched in no pool holds no slot for this term, even if its job joins a pool while it
        runs (a new leader counts such a task with its job's configuration then)."""
        for task_id, pool, slots in tasks:
            self._task_slots[task_id] = (pool, slots) if pool is not None else _NO_POOL
        if jobs:
            turns = self.turns.served(jobs)
            if len(turns.last) > _TURNS_KEPT:
                turns = turns.retain(set(jobs))
            self.turns = turns

    def _note(self, counts: Mapping[str, PoolCounts]) -> None:
        self.last_counts = counts
        self._stores.pools.note_counts(counts)

    def _report(self, messages: list[str]) -> None:
        for message in messages:
            if message not in self._reported:
                log.warning("launcher: %s: its runs wait until the pool can hold them", message)
        self._reported = set(messages)

    @staticmethod
    def _waiting(unit: PlacementUnit, fire_s: float) -> WaitingUnit:
        job = unit.job
        return WaitingUnit(
            job.job_name,
            datetime.fromtimestamp(fire_s, UTC),
            tuple(unit.items),
            job.pool_slots,
            job.pool,
            whole=unit.kind is TaskType.READY,
        )

    def _in_use(self) -> dict[str, int]:
        """Slots held per pool by every task of the running queue."""
        running = self._queues.running()
        alive = {task_id for ids in running.values() for task_id in ids}
        self._task_slots = {t: got for t, got in self._task_slots.items() if t in alive}
        unknown = [
            (job, t) for job, ids in running.items() for t in ids if t not in self._task_slots
        ]
        if unknown:
            self._read_records(unknown)
        by_config = sorted(
            {job for job, ids in running.items() for t in ids if self._task_slots.get(t) is None}
        )
        configs = self._queues.jobs(by_config) if by_config else {}
        tasks = []
        for job, ids in running.items():
            for task_id in ids:
                got = self._task_slots.get(task_id)
                if got is None:
                    config = configs.get(job)
                    if config is None or config.pool is None:
                        continue
                    got = (config.pool, config.pool_slots)
                if got[0]:
                    tasks.append(RunningTask(job, got[0], got[1]))
        return slots_in_use(tasks)

    def _read_records(self, tasks: list[tuple[str, str]]) -> None:
        """Read the records of running tasks this term did not launch (once each, in bulk)."""
        paths = {running_path(job, task_id): task_id for job, task_id in tasks}
        got = self._stores.registry.get_many(list(paths))
        for path, task_id in paths.items():
            found = got.get(path)
            record = _record(found[0]) if found is not None else None
            if record is not None and record.pool is not None:
                self._task_slots[task_id] = (record.pool, record.pool_slots)
            else:
                self._task_slots[task_id] = _USE_CONFIG


def _record(data: bytes) -> RunningRecord | None:
    try:
        decoded = json.loads(data)
        if not isinstance(decoded, dict) or "id" not in decoded:
            return None
        TaskId.parse(str(decoded["id"]))
        return RunningRecord.from_json(decoded)
    except (ValueError, TypeError):
        return None

"""The fire ledger: a job's last accounted cron fire and its pending runs, changed together.

`layout.LAST_FIRE/{job}` holds the epoch time of the newest fire the leader accounted for, and
`layout.READY/{job}` the job's pending runs (a decimal count, as the original wrote it). Each
accounting reads both with their versions and writes both in one fenced transaction that fails
if either changed meanwhile (then it is done again): a fire is accounted exactly once, by one
leader, and the runs it adds exist exactly when its record does. A leader that dies between two
fires leaves a record from which the next one carries on. The jobs of one fire (thousands may
share a cron) are accounted together: pipelined reads and batched transactions, not a round
trip per node.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from scheduler.model.errors import Conflict, NotFound
from scheduler.storage.layout import (
    LAST_FIRE,
    READY,
    decode_count,
    decode_fire_time,
    encode_count,
    encode_fire_time,
    last_fire_path,
    ready_path,
    running_folder,
)
from scheduler.storage.queue_cache import QueueCache
from scheduler.storage.registry import Registry
from scheduler.storage.transactions import Fence, FencedWriter, Op

__all__ = ["FireLedger", "LedgerState", "LedgerWrite"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")
_MAX_TRIES = 50
# Bytes of paths and data per transaction: half of ZooKeeper's default 1 MB request limit.
_BUDGET = 512 * 1024
_PIPELINED_JOBS = 16
"""A fire of at most this many jobs is written pipelined (`FireLedger._commit_pipelined`): the
latency of one job's fire matters, a big fire's batches do not gain from it."""


@dataclass(frozen=True)
class LedgerState:
    """What an accounting decides on, read at one moment."""

    last: float | None
    """The newest fire accounted for (None: none recorded, a job scheduled for the first time
    or again after being disabled)."""
    pending: int
    running: bool
    """Tasks of the job are running."""
    queue_full: bool
    """The job has no pending runs and the ready queue already holds `cap` jobs."""


@dataclass(frozen=True)
class LedgerWrite:
    record: float
    """The newest fire accounted for after this accounting."""
    pending: int


@dataclass(frozen=True)
class _JobWrite:
    """One job's ledger write: its ops and what its nodes hold once it is applied."""

    name: str
    ops: list[Op]
    record: tuple[float, int]
    """(last fire, version) of the record after the write."""
    ready: tuple[int, int] | None
    """(pending, version) of the ready node after the write, (0, -1) deleted; None: untouched."""


def _version_after(current: tuple[Any, int] | None) -> int:
    """The version a node has after a create (None) or a set of `current`."""
    return 0 if current is None else current[1] + 1


class FireLedger:
    """Accounts jobs' fires with fenced, versioned writes (any thread; one at a time).

    From `queues` (the term's `QueueCache`), the pending runs, the running tasks and the size of
    the ready queue come from it, and what the ledger writes is noted in it; the record of each
    job's last fire is remembered from the ledger's own reads and writes (only the leader's
    ledger writes it, fenced). Every write stays versioned, so whatever was stale in them fails
    the write and is read again from ZooKeeper.
    """

    def __init__(
        self,
        registry: Registry,
        fence: Fence | None,
        cap: int,
        queues: QueueCache,
        budget_bytes: int = _BUDGET,
    ) -> None:
        self._registry = registry
        self._fence = fence
        self._cap = cap
        self._budget = budget_bytes
        self._queues = queues
        self._lock = threading.RLock()
        # Job -> (last fire, version) of its record; None: no record.
        self._records: dict[str, tuple[float | None, int] | None] = {}
        self._folders_ensured = False
        # Jobs whose written count the view was told before the write's answer (confirmed,
        # not noted again, once written).
        self._noted_early: set[str] = set()
        self.transactions = 0
        """Transactions sent so far (written or refused)."""
        self.reads = 0
        """Nodes read so far."""

    def prefetch(self, names: list[str]) -> dict[str, float]:
        """Read the records of `names` (pipelined) and remember them; returns the last fires
        recorded (jobs without a record left out)."""
        with self._lock:
            paths = {name: last_fire_path(name) for name in names}
            if self._registry.multi_read is not True and names:
                # Without multiRead each missing record would cost a request of its own: list
                # them first (with multiRead a missing one is a few bytes of the same answer,
                # and the listing of 100,000 names cost more than the reads it saved).
                recorded = set(self._registry.children(LAST_FIRE))
                self.reads += 1
                paths = {name: path for name, path in paths.items() if name in recorded}
            got = self._registry.get_many(list(paths.values()))
            self.reads += len(got)
            out: dict[str, float] = {}
            for name in names:
                found = got.get(paths.get(name, ""))
                when = None if found is None else decode_fire_time(found[0])
                self._records[name] = None if found is None else (when, found[1])
                if when is not None:
                    out[name] = when
            return out

    def account(
        self, job_name: str, decide: Callable[[LedgerState], tuple[LedgerWrite, _T] | None]
    ) -> _T | None:
        """Read the job's ledger, let `decide` say what to write, and write it atomically.

        `decide` may be called more than once (when another writer changed the nodes between
        the read and the write: a launch taking a run, a trigger); the value of the call whose
        write succeeded is returned, None when it wrote nothing. Raises NotLeader when the term
        no longer acts, Conflict after many lost races, RegistryError from ZooKeeper.
        """
        return self.account_many([(job_name, decide)])[job_name]

    def account_many(
        self, jobs: list[tuple[str, Callable[[LedgerState], tuple[LedgerWrite, _T] | None]]]
    ) -> dict[str, _T | None]:
        """`account` for many jobs at once (the jobs of one cron fire): what is not known
        read with pipelined requests, the writes packed into as few fenced transactions as
        ZooKeeper's request limit allows (one job's write stays in one transaction). A
        transaction refused because a job's nodes changed meanwhile is split in halves and
        tried again, and the jobs refused are read from ZooKeeper and decided again, so one
        race costs a few transactions, never the others' writes. Raises as `account`; the
        jobs written before a NotLeader stay written."""
        if self._fence is None:
            raise RuntimeError("the fire ledger was built read-only (no fence)")
        with self._lock:
            results: dict[str, _T | None] = {name: None for name, _ in jobs}
            todo = dict(jobs)
            fresh = False
            for _ in range(_MAX_TRIES):
                if not todo:
                    return results
                names = list(todo)
                decided = self._decide(names, todo, fresh)
                done = self._commit_noted([w for w, _result in decided], pipelined=not fresh)
                for write, result in decided:
                    if write.name in done:
                        results[write.name] = result
                        del todo[write.name]
                        self._written(write)
                    else:
                        self._records.pop(write.name, None)
                        self._queues.invalidate([ready_path(write.name)])
                for name in set(names) - {w.name for w, _r in decided}:
                    del todo[name]  # nothing to write
                fresh = True  # what failed is read from ZooKeeper, not from the view
            raise Conflict(
                f"account fires of {', '.join(sorted(todo)[:5])}: too many concurrent changes"
            )

    def _commit_noted(self, writes: list[_JobWrite], pipelined: bool = False) -> set[str]:
        """`_commit`, with the view told which ready nodes are being written (so that it does
        not read them back when their watches fire) and, if the writes fail, to read them.
        With `pipelined` (a first attempt), a fire of a few jobs goes as in
        `_commit_pipelined`."""
        queues = self._queues
        touched = [w.name for w in writes if w.ready is not None]
        queues.expect_ready(touched)
        units = [(w.name, w.ops) for w in writes]
        try:
            if (
                pipelined
                and 0 < len(writes) <= _PIPELINED_JOBS
                and _bytes_of(units) <= self._budget
            ):
                done = self._commit_pipelined(writes)
                if done is not None:
                    return done
                if len(writes) == 1:
                    return set()  # refused alone: decided again from ZooKeeper
                queues.expect_ready(touched)
            return self._commit(units)
        except BaseException:
            queues.invalidate([ready_path(name) for name in touched])
            raise

    def _commit_pipelined(self, writes: list[_JobWrite]) -> set[str] | None:
        """Write `writes` in one transaction, and note the pending runs they add in the view
        as soon as it is sent, before its answer: the launcher, woken by the note, takes a
        run in a transaction of its own that reaches ZooKeeper after this one (one session,
        applied in order) and requires the job's record at the version this write gives it,
        so that the take is applied if and only if this write was. The fire's launch does
        not wait for this write's round trip. Returns the jobs written; None when the
        transaction was refused (something changed meanwhile: nothing was written, the
        notes are withdrawn and the caller writes them again, split)."""
        what = _transaction_name([w.name for w in writes])
        self.transactions += 1
        assert self._fence is not None
        answer = FencedWriter(self._registry, self._fence).send(
            what, [op for w in writes for op in w.ops]
        )
        noted = [(w.name, w.ready, w.record[1]) for w in writes if w.ready and w.ready[0] > 0]
        for name, (count, version), record_version in noted:
            self._queues.note_pending(name, count, version, (last_fire_path(name), record_version))
        try:
            answer()
        except (Conflict, NotFound):
            self._queues.invalidate([ready_path(w.name) for w in writes if w.ready is not None])
            return None
        self._noted_early.update(name for name, _ready, _version in noted)
        return {w.name for w in writes}

    def _written(self, write: _JobWrite) -> None:
        self._records[write.name] = write.record
        if write.ready is None:
            return
        if write.name in self._noted_early:
            self._noted_early.discard(write.name)
            # The view has the count already, and the launcher may have taken a run of it.
            self._queues.confirm(write.name, (last_fire_path(write.name), write.record[1]))
        else:
            self._queues.note_ready(write.name, *write.ready)

    def _decide(
        self,
        names: list[str],
        todo: dict[str, Callable[[LedgerState], tuple[LedgerWrite, _T] | None]],
        fresh: bool,
    ) -> list[tuple[_JobWrite, _T]]:
        """Find the ledgers of `names` (the view and memory, else ZooKeeper) and decide."""
        registry, queues = self._registry, self._queues
        from_queues = not fresh
        if from_queues:
            queues.sync()
        unknown = [n for n in names if fresh or n not in self._records]
        paths = [last_fire_path(n) for n in unknown]
        if not from_queues:
            paths += [ready_path(n) for n in names]
        reads = registry.send_reads(paths)
        running = (
            None if from_queues else registry.children_many([running_folder(n) for n in names])
        )
        got = reads.wait()
        self.reads += len(paths) + (0 if running is None else len(names))
        if from_queues:
            queued = queues.queued()
        else:
            queued = len(registry.children(READY))  # jobs with pending runs, for the cap
            self.reads += 1
        for name in unknown:
            found = got[last_fire_path(name)]
            self._records[name] = None if found is None else (decode_fire_time(found[0]), found[1])
        out: list[tuple[_JobWrite, _T]] = []
        ensured = False
        for name in names:
            record = self._records.get(name)
            if from_queues:
                ready = queues.ready_of(name)
                is_running = bool(queues.running_tasks(name))
            else:
                raw = got[ready_path(name)]
                ready = None if raw is None else (decode_count(raw[0]), raw[1])
                is_running = bool(running and running[running_folder(name)])
            pending = 0 if ready is None else ready[0]
            state = LedgerState(
                last=None if record is None else record[0],
                pending=pending,
                running=is_running,
                queue_full=pending == 0 and queued >= self._cap,
            )
            decided = todo[name](state)
            if decided is None:
                continue
            write, result = decided
            if not ensured and (record is None or ready is None):
                # Once per ledger (two round trips each fire otherwise); a write that fails
                # because a folder is gone is decided again fresh, which ensures them again.
                if fresh or not self._folders_ensured:
                    registry.ensure(LAST_FIRE)
                    registry.ensure(READY)
                    self._folders_ensured = True
                ensured = True
            data = encode_fire_time(write.record)
            ops = [_write_node(last_fire_path(name), record, data)]
            record_version = _version_after(record)
            if fresh:
                # Written again after a refused attempt: the record's version moves by two, so
                # that no version this write gives it is one an earlier attempt's noted count
                # was taken against (`_commit_pipelined`).
                ops.append(Op.set(last_fire_path(name), data, record_version))
                record_version += 1
            after: tuple[int, int] | None = None
            if write.pending > 0 and write.pending != pending:
                ops.append(_write_node(ready_path(name), ready, encode_count(write.pending)))
                after = (write.pending, _version_after(ready))
                if pending == 0:
                    queued += 1
            elif write.pending == 0 and ready is not None:
                ops.append(Op.delete(ready_path(name), version=ready[1]))
                after = (0, -1)
            out.append((_JobWrite(name, ops, (write.record, record_version), after), result))
        return out

    def _commit(self, units: list[tuple[str, list[Op]]]) -> set[str]:
        """Write each unit's ops, packed into transactions; returns the units written."""
        done: set[str] = set()
        batch: list[tuple[str, list[Op]]] = []
        size = 0
        for unit in units:
            unit_size = _bytes_of([unit])
            if batch and size + unit_size > self._budget:
                done |= self._commit_batch(batch)
                batch, size = [], 0
            batch.append(unit)
            size += unit_size
        if batch:
            done |= self._commit_batch(batch)
        return done

    def _commit_batch(self, batch: list[tuple[str, list[Op]]]) -> set[str]:
        assert self._fence is not None
        ops = [op for _name, unit in batch for op in unit]
        what = _transaction_name([name for name, _unit in batch])
        self.transactions += 1
        try:
            FencedWriter(self._registry, self._fence).commit(what, ops)
        except (Conflict, NotFound):
            if len(batch) == 1:
                return set()  # changed meanwhile: read and decide again
            half = len(batch) // 2
            return self._commit_batch(batch[:half]) | self._commit_batch(batch[half:])
        return {name for name, _unit in batch}


def _transaction_name(names: list[str]) -> str:
    """How a transaction accounting the fires of `names` is named in errors."""
    more = f" and {len(names) - 1} more job(s)" if len(names) > 1 else ""
    return f"account fires of {names[0]}{more}"


def _bytes_of(units: list[tuple[str, list[Op]]]) -> int:
    """Bytes of the units' paths and data, with each op's framing."""
    return sum(len(op.path) + len(op.data) + 64 for _name, unit in units for op in unit)


def _write_node(path: str, current: tuple[Any, int] | None, data: bytes) -> Op:
    """Create `path` with `data` (`current` None: it does not exist), else set it at the
    version `current` was read at."""
    if current is None:
        return Op.create(path, data)
    return Op.set(path, data, current[1])

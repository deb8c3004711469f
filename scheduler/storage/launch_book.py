"""A launch round's bookkeeping, written in as few fenced transactions as ZooKeeper allows.

Before the launcher asks Mesos to run a task, the task's running node must exist, the pending
run it comes from must be taken (the job's ready node one less, deleted at zero) and the failover
entries it relaunches must be gone; all of that for one unit (a READY run with all its shards,
or the failover shards of one job) together or not at all. One synchronous write is ~1.7 ms
here, so per-task writes cannot launch hundreds of tasks a second: the units of a round are
packed into transactions of up to `TXN_BUDGET_BYTES` (ZooKeeper refuses a request larger than
`jute.maxbuffer`, 1 MB by default), each fenced like every leader write (it also checks the
leader's election node, so a deposed leader writes nothing).

Each write is versioned by what the launcher's view (`QueueCache`) read: a stale view fails its
transaction instead of overwriting a newer count. A transaction that fails is split in halves
and the halves are tried again, so one stale unit costs a few extra transactions and never
holds back the others. A unit too big for one transaction (thousands of shards) gets
transactions of its own; when one of them fails, those already written are undone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from scheduler.model.errors import Conflict, NotFound, RegistryError, SchedulerError
from scheduler.storage.layout import (
    READY,
    decode_count,
    encode_count,
    failover_folder,
    failover_key,
    ready_path,
    running_folder,
    running_path,
)
from scheduler.storage.queue_cache import FailoverEntry, QueueCache
from scheduler.storage.registry import Registry
from scheduler.storage.state import RunningTask
from scheduler.storage.transactions import Fence, FencedWriter, Op, OpKind

__all__ = ["TXN_BUDGET_BYTES", "Launch", "LaunchBook"]

log = logging.getLogger(__name__)

TXN_BUDGET_BYTES = 512 * 1024
"""Bytes of paths and data per transaction: half of ZooKeeper's default request limit, leaving
room for the framing of each op (counted as `_OP_OVERHEAD`)."""
_OP_OVERHEAD = 64


@dataclass(frozen=True)
class Launch:
    """The bookkeeping of one unit of a round, written whole or not at all."""

    job_name: str
    tasks: tuple[RunningTask, ...]
    ready: tuple[int, int] | None = None
    """(pending runs, node version) of the job as read, when the unit takes one pending run."""
    failover: tuple[FailoverEntry, ...] = ()
    """The failover entries the unit relaunches (removed)."""
    creates_folder: bool = False
    """The job's running folder does not exist yet (as read) and is created first."""
    requires: tuple[str, int] | None = None
    """(path, version) a node must be at for the take to be written: the pending run was noted
    by a fire whose own write may not be applied yet (`QueueCache.note_pending`)."""
    also: tuple[Op, ...] = ()
    """More ops written with the unit: a workflow node fire's take from its queue, its fire
    record and its tasks' index entries (issue 27)."""
    requeue: tuple[str, bytes] | None = None
    """(path, data) of the workflow queue entry the unit took, put back by `undo` when none of
    its tasks was launched."""

    @property
    def ready_after(self) -> tuple[int, int] | None:
        """(pending runs, version) of the job's ready node once written; None: untouched."""
        if self.ready is None:
            return None
        count, version = self.ready
        return (count - 1, version + 1) if count > 1 else (0, -1)

    def ops(self) -> list[Op]:
        out: list[Op] = []
        if self.creates_folder:
            out.append(Op.create(running_folder(self.job_name)))
        for task in self.tasks:
            path = running_path(self.job_name, task.task_id)
            out.append(Op.create(path, task.to_bytes()))
        for entry in self.failover:
            out.append(Op.delete(entry.path, version=entry.version))
        if self.ready is not None:
            count, version = self.ready
            if self.requires is not None:
                out.append(Op.check(self.requires[0], version=self.requires[1]))
            path = ready_path(self.job_name)
            if count > 1:
                out.append(Op.set(path, encode_count(count - 1), version))
            else:
                out.append(Op.delete(path, version=version))
        out.extend(self.also)
        return out

    def paths(self) -> list[str]:
        """Every node the unit writes (to read again when its outcome is unknown)."""
        return [op.path for op in self.ops() if op.writes]


def _probe(launch: Launch) -> str:
    """A node the unit's transaction creates: whether it exists tells if a transaction whose
    answer was lost was applied."""
    return running_path(launch.job_name, launch.tasks[0].task_id)


def _size(ops: Iterable[Op]) -> int:
    return sum(len(op.path.encode()) + len(op.data) + _OP_OVERHEAD for op in ops)


class LaunchBook:
    """Writes (and undoes) launch rounds' bookkeeping; called by the launcher thread only."""

    def __init__(
        self,
        registry: Registry,
        fence: Fence,
        queues: QueueCache,
        budget_bytes: int = TXN_BUDGET_BYTES,
    ) -> None:
        self._registry = registry
        self._fence = fence
        self._queues = queues
        self._budget = budget_bytes
        self.transactions = 0
        """Transactions sent so far (committed or not)."""

    def commit(self, launches: list[Launch]) -> list[Launch]:
        """Write the bookkeeping of `launches`; returns those written, each whole, in order.

        The round's transactions go pipelined: all are sent, then their answers are read in
        order (ZooKeeper applies one session's requests in the order sent; each unit's writes
        are its own, so none depends on another's transaction). A unit whose write fails (its
        view was stale, or it raced another writer) is left out and its nodes are read again
        at the cache's next sync. Raises NotLeader when the fence fails (what was committed
        before stays; the transactions after fail the same fence) and RegistryError when
        ZooKeeper cannot say whether a write was applied.
        """
        ops_of = [launch.ops() for launch in launches]
        done: set[int] = set()
        sent: list[tuple[list[int], Callable[[], None]]] = []
        batch: list[int] = []
        batch_size = 0
        for index, ops in enumerate(ops_of):
            size = _size(ops)
            if size > self._budget:
                if self._commit_alone(launches[index]):
                    done.add(index)
                continue
            if batch and batch_size + size > self._budget:
                sent.append((batch, self._send_batch(ops_of, batch)))
                batch, batch_size = [], 0
            batch.append(index)
            batch_size += size
        if batch:
            sent.append((batch, self._send_batch(ops_of, batch)))
        for batch, answer in sent:
            done |= self._settle(launches, ops_of, batch, answer)
        written = [launch for index, launch in enumerate(launches) if index in done]
        for launch in written:
            self._queues.launched(
                launch.job_name,
                (t.task_id for t in launch.tasks),
                launch.ready_after,
                (e.path for e in launch.failover),
            )
        return written

    def _send_batch(self, ops_of: list[list[Op]], batch: list[int]) -> Callable[[], None]:
        """Send one transaction of the units `batch`; the call that waits for its answer."""
        self.transactions += 1
        ops = [op for index in batch for op in ops_of[index]]
        return FencedWriter(self._registry, self._fence).send(
            f"launch bookkeeping of {len(batch)} unit(s)", ops
        )

    def _settle(
        self,
        launches: list[Launch],
        ops_of: list[list[Op]],
        batch: list[int],
        answer: Callable[[], None],
    ) -> set[int]:
        """The units of a sent transaction that are written: all when it was applied, else
        those of its halves tried again (`_commit_batch`)."""
        try:
            answer()
        except (Conflict, NotFound):
            return self._after_refusal(launches, ops_of, batch)
        except RegistryError:
            self._queues.invalidate()
            first = launches[batch[0]]
            return set(batch) if self._registry.exists(_probe(first)) else set()
        return set(batch)

    def _transact(self, what: str, ops: list[Op], probe: str) -> bool:
        """One fenced transaction: True when applied, False when refused (Conflict/NotFound).

        When the answer is lost, whether `probe` (a node the transaction creates) exists says
        if it was applied; RegistryError when that cannot be read either.
        """
        self.transactions += 1
        try:
            FencedWriter(self._registry, self._fence).commit(what, ops)
        except (Conflict, NotFound):
            return False
        except RegistryError:
            self._queues.invalidate()
            return self._registry.exists(probe)
        return True

    def _commit_batch(
        self, launches: list[Launch], ops_of: list[list[Op]], batch: list[int]
    ) -> set[int]:
        return self._settle(launches, ops_of, batch, self._send_batch(ops_of, batch))

    def _after_refusal(
        self, launches: list[Launch], ops_of: list[list[Op]], batch: list[int]
    ) -> set[int]:
        """A transaction of `batch` was refused: its halves are tried again, down to the one
        unit whose view was stale (left for the next round)."""
        if len(batch) == 1:
            first = launches[batch[0]]
            log.info(
                "launch book: bookkeeping of job %s not written (changed meanwhile); "
                "retried next round",
                first.job_name,
            )
            self._queues.invalidate(first.paths())
            return set()
        half = len(batch) // 2
        return self._commit_batch(launches, ops_of, batch[:half]) | self._commit_batch(
            launches, ops_of, batch[half:]
        )

    def _commit_alone(self, launch: Launch) -> bool:
        """A unit bigger than one transaction: its running nodes first, in transactions of
        their own, then its failover removals and its take (the take in the last one); what
        was written is undone when one of them fails."""
        ops = launch.ops()
        ordered = [op for op in ops if op.kind is OpKind.CREATE]
        last = [op for op in ops if op.path.startswith(READY) or op.kind is OpKind.CHECK]
        ordered += [op for op in ops if op.kind is not OpKind.CREATE and op not in last]
        ordered += last  # the take, with what it requires
        chunks: list[list[Op]] = [[]]
        for op in ordered:
            if chunks[-1] and _size(chunks[-1]) + _size([op]) > self._budget:
                chunks.append([])
            chunks[-1].append(op)
        probe = running_path(launch.job_name, launch.tasks[0].task_id)
        written: list[Op] = []
        for number, chunk in enumerate(chunks, 1):
            what = f"launch bookkeeping of job {launch.job_name} ({number}/{len(chunks)})"
            # The chunk's own effect tells whether a lost answer hid an applied write.
            check = next((op.path for op in chunk if op.kind is OpKind.CREATE and op.data), probe)
            if self._transact(what, chunk, check):
                written += chunk
                continue
            self._queues.invalidate(launch.paths())
            if written:
                self._compensate(launch, written)
            return False
        return True

    def _compensate(self, launch: Launch, written: list[Op]) -> None:
        """Undo the first transactions of a unit whose later one failed (best effort: what is
        left is found by reconciliation, as Mesos does not know those tasks)."""
        originals = {e.path: e.original for e in launch.failover}
        undo = [
            Op.create(op.path, originals[op.path].encode())
            for op in written
            if op.path in originals
        ]
        undo += [Op.delete(op.path) for op in written if op.kind is OpKind.CREATE and op.data]
        undo += [Op.delete(op.path) for op in written if op.kind is OpKind.CREATE and not op.data]
        chunks: list[list[Op]] = [[]]
        for op in undo:
            if chunks[-1] and _size(chunks[-1]) + _size([op]) > self._budget:
                chunks.append([])
            chunks[-1].append(op)
        for chunk in chunks:
            try:
                FencedWriter(self._registry, self._fence).commit(
                    f"undo launch bookkeeping of job {launch.job_name}", chunk
                )
            except SchedulerError as exc:
                log.error(
                    "launch book: job %s: half-written bookkeeping not undone: %s",
                    launch.job_name,
                    exc.message,
                )
                return

    def undo(self, launch: Launch, task_ids: set[str], others_launched: bool) -> None:
        """Undo the bookkeeping of the tasks `task_ids` of a committed `launch` whose ACCEPT
        failed, keeping that of its tasks Mesos took.

        Their running nodes go; failover shards go back to the failover queue; a READY run's
        pending run is given back when none of its tasks was launched (`others_launched`
        False), otherwise its shards that were not launched are queued as failover shards so
        that the run completes without launching a shard twice. Raises NotLeader and
        RegistryError; what is not undone then is found by reconciliation (Mesos does not know
        those tasks).
        """
        tasks = [t for t in launch.tasks if t.task_id in task_ids]
        if not tasks:
            return
        job = launch.job_name
        registry = self._registry
        present = set(registry.children(running_folder(job)))
        ops = [Op.delete(running_path(job, t.task_id)) for t in tasks if t.task_id in present]
        requeue: dict[int, str] = {}
        originals = {e.item: e.original for e in launch.failover}
        for task in tasks:
            item = task.parsed.item
            if launch.failover:
                requeue[item] = originals.get(item, "") or task.task_id
            elif others_launched:
                requeue[item] = task.task_id
        if launch.requeue is not None and not others_launched:
            ops.append(Op.create(*launch.requeue))  # the node fire waits for a launch again
        if requeue:
            registry.ensure(failover_folder(job))
            queued = set(registry.children(failover_folder(job)))
            for item, original in sorted(requeue.items()):
                key = failover_key(job, item)
                if key not in queued:
                    ops.append(Op.create(f"{failover_folder(job)}/{key}", original.encode()))
        writer = FencedWriter(registry, self._fence)
        if ops:
            self.transactions += 1
            writer.commit(f"undo launch bookkeeping of job {job}", ops)
        if launch.ready is not None and not others_launched:
            writer.compare_and_set(ready_path(job), lambda old: encode_count(decode_count(old) + 1))
        self._queues.invalidate(
            [op.path for op in ops] + ([ready_path(job)] if launch.ready else [])
        )
        log.warning(
            "launch book: job %s: bookkeeping of %s task(s) Mesos did not take undone%s",
            job,
            len(tasks),
            "; their shards queued for failover" if requeue else "",
        )

"""The fire ledger over the term's queue queues: a fire of thousands of jobs in a few batched
transactions without a read per job, and never a stale count written."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from scheduler.model.task_id import TaskId, TaskType
from scheduler.storage.fire_ledger import FireLedger, LedgerState, LedgerWrite
from scheduler.storage.launch_book import Launch, LaunchBook
from scheduler.storage.layout import LAST_FIRE
from scheduler.storage.queue_cache import QueueCache
from scheduler.storage.registry import Registry
from scheduler.storage.state import RunningTask
from scheduler.storage.term_stores import TermStores
from scheduler.storage.transactions import Fence
from tests.support.waiting import wait_for


def _one_more_run(fire: float) -> Callable[[LedgerState], tuple[LedgerWrite, int]]:
    """A decision as a fire with misfire on makes it: one more pending run, recorded."""

    def decide(state: LedgerState) -> tuple[LedgerWrite, int]:
        return LedgerWrite(fire, state.pending + 1), state.pending + 1

    return decide


def test_a_fire_of_a_thousand_jobs_costs_a_few_transactions_and_no_read_per_job(
    registry: Registry, fence: Fence, queues: QueueCache
) -> None:
    names = [f"job{i:04d}" for i in range(1000)]
    ledger = FireLedger(registry, fence, 10_000, queues)
    ledger.prefetch(names)  # term start: one pipelined read for all the records
    queues.sync()
    reads = ledger.reads
    ledger.account_many([(n, _one_more_run(100.0)) for n in names])
    assert ledger.reads == reads  # the first records (creates) and the queue came from memory
    assert ledger.transactions <= 2
    transactions = ledger.transactions
    ledger.account_many([(n, _one_more_run(102.0)) for n in names])
    assert ledger.reads == reads  # the second fire: records and counts as written
    assert ledger.transactions - transactions <= 2
    stores = TermStores.build(registry, fence, "UTC", 10_000)
    assert stores.ready.counts() == dict.fromkeys(names, 2)
    records = registry.get_many([f"{LAST_FIRE}/{n}" for n in names])
    assert {p.rsplit("/", 1)[1]: float(got[0]) for p, got in records.items() if got} == (
        dict.fromkeys(names, 102.0)
    )
    # The queues knows the counts it was told about, without reading them.
    view_reads = queues.reads
    queues.sync()
    assert {n: c for n, (c, _v) in queues.ready().items()} == dict.fromkeys(names, 2)
    assert queues.reads - view_reads <= 1  # the list of /state/ready, not 1000 nodes


def test_a_count_changed_behind_the_views_back_is_read_again_not_overwritten(
    registry: Registry, fence: Fence, queues: QueueCache
) -> None:
    ledger = FireLedger(registry, fence, 10_000, queues)
    ledger.prefetch(["job"])
    queues.sync()
    ledger.account("job", _one_more_run(100.0))
    queues.sync()
    assert queues.ready_of("job") == (1, 0)
    # A trigger through the API adds a run: the queues (told of the ledger's write, not
    # watching the node) still says 1.
    TermStores.build(registry, fence, "UTC", 10_000).ready.add_transient("job", misfire=True)
    queues.sync()
    assert queues.ready_of("job") == (1, 0)
    assert ledger.account("job", _one_more_run(102.0)) == 3
    assert registry.get("/state/ready/job") == b"3"  # not the stale 1 + 1
    queues.sync()
    assert queues.ready_of("job") == (3, 2)


def test_the_folders_are_ensured_once_and_again_when_one_was_deleted(
    registry: Registry, fence: Fence, queues: QueueCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = FireLedger(registry, fence, 10_000, queues)
    queues.sync()  # the queues ensures its own folders when it loads
    ensured: list[str] = []
    real_ensure = registry.ensure

    def counting(path: str) -> None:
        ensured.append(path)
        real_ensure(path)

    monkeypatch.setattr(registry, "ensure", counting)
    ledger.account("a", _one_more_run(100.0))
    assert ensured == ["/state/last_fire", "/state/ready"]
    # Each later fire of a job without a pending run (the common case) costs no ensure.
    registry.delete("/state/ready/a")
    _sync_until_gone(queues, "a")
    ledger.account("a", _one_more_run(102.0))
    ledger.account("b", _one_more_run(102.0))
    assert ensured == ["/state/last_fire", "/state/ready"]
    # A folder deleted behind the ledger's back (a wiped namespace): the write fails, is
    # decided again from ZooKeeper, and the folders are ensured again.
    registry.delete("/state/ready")
    registry.delete("/state/last_fire")
    queues.sync()
    assert ledger.account("c", _one_more_run(104.0)) == 1
    assert ensured[2:] == ["/state/last_fire", "/state/ready"]
    assert registry.get("/state/ready/c") == b"1"
    assert registry.get(f"{LAST_FIRE}/c") == b"104.000"


def _sync_until_gone(queues: QueueCache, job: str) -> None:
    """Sync the view until it has seen `job`'s ready node deleted: sync applies the watch events
    that have arrived, and under load the deletion's may come a moment after the delete."""

    def gone() -> bool:
        queues.sync()
        return queues.ready_of(job) is None

    wait_for(gone, 10, message=f"the view saw /state/ready/{job} deleted")


def _take(queues: QueueCache, job: str) -> Launch:
    """The launcher's take of one pending run of `job` (one shard), from the queues as it is."""
    count, version, requires = queues.ready_entries()[job]
    task = RunningTask(str(TaskId.new(job, 0, TaskType.READY, "agent")), "agent")
    return Launch(job, (task,), ready=(count, version), requires=requires, creates_folder=True)


def test_a_fire_of_one_job_is_noted_before_its_answer_and_the_take_rides_behind_it(
    registry: Registry, fence: Fence, queues: QueueCache
) -> None:
    ledger = FireLedger(registry, fence, 10_000, queues)
    ledger.account("job", _one_more_run(100.0))  # the job's first record (no run noted early)
    registry.delete("/state/ready/job")
    _sync_until_gone(queues, "job")
    book = LaunchBook(registry, fence, queues)
    taken: list[list[Launch]] = []

    def launcher_woken() -> None:
        # The launcher's round, woken by the note, before the fire's write has answered
        # (watches call it too, on kazoo's thread: not the launcher's round wanted here).
        if threading.current_thread() is not threading.main_thread():
            return
        queues.sync()
        count, version, requires = queues.ready_entries()["job"]
        assert (count, version) == (1, 0)
        assert requires == (f"{LAST_FIRE}/job", 1)  # the record as the fire's write sets it
        taken.append(book.commit([_take(queues, "job")]))

    queues.on_change = launcher_woken
    assert ledger.account("job", _one_more_run(102.0)) == 1
    queues.on_change = None
    assert len(taken) == 1 and len(taken[0]) == 1  # the take was written, behind the fire
    assert registry.get("/state/ready/job") is None  # the run was taken
    assert registry.get(f"{LAST_FIRE}/job") == b"102.000"
    assert registry.children("/state/running/job") == [taken[0][0].tasks[0].task_id]
    queues.sync()
    assert queues.ready_entries() == {}


def test_a_take_noted_from_a_refused_fire_write_is_never_applied(
    registry: Registry, fence: Fence, queues: QueueCache
) -> None:
    ledger = FireLedger(registry, fence, 10_000, queues)
    ledger.account("job", _one_more_run(100.0))
    queues.sync()
    assert queues.ready_of("job") == (1, 0)
    # A trigger through the API adds a run behind the queues's back: the fire's first write,
    # built on the count 1 it still holds, is refused.
    TermStores.build(registry, fence, "UTC", 10_000).ready.add_transient("job", misfire=True)
    book = LaunchBook(registry, fence, queues)
    early: list[Launch] = []

    def launcher_woken() -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        queues.sync()
        if not early and queues.ready_entries().get("job", (0, 0, None))[2] is not None:
            early.append(_take(queues, "job"))  # built on the count the refused write noted
            assert book.commit([early[0]]) == []  # reaches ZooKeeper after it: refused too

    queues.on_change = launcher_woken
    assert ledger.account("job", _one_more_run(102.0)) == 3
    queues.on_change = None
    assert len(early) == 1
    assert early[0].ready == (2, 1) and early[0].requires == (f"{LAST_FIRE}/job", 1)
    # The fire was written again, fresh (3 runs); its record moved by two versions, so the
    # take noted from the refused attempt can never be applied, whenever it comes.
    assert registry.get("/state/ready/job") == b"3"
    assert registry.get_versioned(f"{LAST_FIRE}/job") == (b"102.000", 2)
    assert book.commit([early[0]]) == []
    assert registry.get("/state/ready/job") == b"3"
    assert registry.children("/state/running/job") == []

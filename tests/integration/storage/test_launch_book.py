"""A launch round's bookkeeping in batched, fenced, versioned transactions, on a real ZooKeeper."""

from __future__ import annotations

import json
import time

import pytest
from kazoo.client import KazooClient

from scheduler.model.errors import NotLeader
from scheduler.model.task_id import TaskId, TaskType
from scheduler.storage.launch_book import Launch, LaunchBook
from scheduler.storage.queue_cache import QueueCache
from scheduler.storage.registry import Registry
from scheduler.storage.state import RunningTask
from scheduler.storage.term_stores import TermStores
from scheduler.storage.transactions import Fence
from tests.support.waiting import wait_for


def _ready_launch(queues: QueueCache, job: str, shards: int, agents: tuple[str, ...]) -> Launch:
    """What the launcher writes for one READY run of `job`, spread over `agents`."""
    tasks = tuple(
        RunningTask(
            str(TaskId.new(job, item, TaskType.READY, agents[item % len(agents)])),
            agents[item % len(agents)],
            launched_at=time.time(),
        )
        for item in range(shards)
    )
    return Launch(
        job, tasks, ready=queues.ready()[job], creates_folder=not queues.has_running_folder(job)
    )


def _failover_launch(queues: QueueCache, job: str, agent: str) -> Launch:
    entries = tuple(e for e in queues.failover() if e.job_name == job)
    tasks = tuple(
        RunningTask(str(TaskId.new(job, e.item, TaskType.FAILOVER, agent)), agent) for e in entries
    )
    return Launch(job, tasks, failover=entries, creates_folder=not queues.has_running_folder(job))


def test_a_round_of_hundreds_of_runs_is_written_in_one_transaction(
    registry: Registry, fence: Fence, stores: TermStores, queues: QueueCache
) -> None:
    for i in range(300):
        stores.ready.add_transient(f"job{i:03d}", misfire=True)
    stores.ready.add_transient("job000", misfire=True)  # two pending runs: one is left
    stores.failover.add(str(TaskId.new("fo", 1, TaskType.READY, "a1")))
    queues.sync()
    launches = [_ready_launch(queues, f"job{i:03d}", 1, ("a1",)) for i in range(300)]
    launches.append(_failover_launch(queues, "fo", "a2"))
    book = LaunchBook(registry, fence, queues)
    written = book.commit(launches)
    assert written == launches
    assert book.transactions == 1
    assert stores.ready.counts() == {"job000": 1}
    assert stores.failover.entries() == []
    running = {t.task_id for t in stores.running.tasks()}
    assert running == {t.task_id for launch in launches for t in launch.tasks}
    stored = json.loads(registry.get(f"/state/running/fo/{launches[-1].tasks[0].task_id}") or b"")
    assert stored["slaveId"] == "a2" and stored["type"] == "FAILOVER"
    # The queues has the round's own writes at once, before their watches fire.
    assert queues.ready() == {"job000": (1, 2)}
    assert queues.failover() == []
    assert len(queues.running()) == 301


def _forty_runs(stores: TermStores, queues: QueueCache) -> list[Launch]:
    """One pending run each of job00..job39, read by the view, and its launch of 3 shards on
    two agents (about 1.5 kB of bookkeeping each)."""
    for i in range(40):
        stores.ready.add_transient(f"job{i:02d}", misfire=True)
    queues.sync()
    return [_ready_launch(queues, f"job{i:02d}", 3, ("a1", "a2")) for i in range(40)]


def test_transactions_stay_within_the_request_limit(
    registry: Registry, fence: Fence, stores: TermStores, queues: QueueCache
) -> None:
    launches = _forty_runs(stores, queues)
    book = LaunchBook(registry, fence, queues, budget_bytes=8 * 1024)
    assert book.commit(launches) == launches
    assert 4 <= book.transactions <= 10  # about 1.5 kB a run, 8 kB a transaction
    assert stores.ready.counts() == {}
    assert len(stores.running.tasks()) == 120


def test_a_stale_run_is_left_out_and_the_others_are_written(
    registry: Registry, fence: Fence, stores: TermStores, queues: QueueCache
) -> None:
    for i in range(8):
        stores.ready.add_transient(f"job{i}", misfire=True)
    queues.sync()
    launches = [_ready_launch(queues, f"job{i}", 1, ("a1",)) for i in range(8)]
    # Another writer (a fire) changes job5's count after the queues read it.
    stores.ready.add_transient("job5", misfire=True)
    book = LaunchBook(registry, fence, queues)
    written = book.commit(launches)
    assert [launch.job_name for launch in written] == [f"job{i}" for i in range(8) if i != 5]
    assert stores.ready.counts() == {"job5": 2}  # not overwritten with a stale count
    assert [t.parsed.job_name for t in stores.running.tasks("job5")] == []
    queues.sync()
    assert queues.ready()["job5"][0] == 2  # read again: the next round takes it


def test_a_stale_run_in_one_of_the_pipelined_transactions_is_left_out_alone(
    registry: Registry, fence: Fence, stores: TermStores, queues: QueueCache
) -> None:
    # Several transactions go at once; the one holding the stale run fails, is tried again in
    # halves after the others were answered, and only the stale run is left out.
    launches = _forty_runs(stores, queues)
    stores.ready.add_transient("job17", misfire=True)
    book = LaunchBook(registry, fence, queues, budget_bytes=8 * 1024)
    written = book.commit(launches)
    assert [launch.job_name for launch in written] == [f"job{i:02d}" for i in range(40) if i != 17]
    assert book.transactions > 6  # the first sends, then the failed one's halves
    assert stores.ready.counts() == {"job17": 2}
    assert len(stores.running.tasks()) == 39 * 3
    assert stores.running.tasks("job17") == []


def test_a_run_bigger_than_a_transaction_is_written_whole_or_not_at_all(
    registry: Registry, fence: Fence, stores: TermStores, queues: QueueCache
) -> None:
    stores.ready.add_transient("big", misfire=True)
    stores.ready.add_transient("stale", misfire=True)
    queues.sync()
    big = _ready_launch(queues, "big", 50, ("a1",))
    stale = _ready_launch(queues, "stale", 50, ("a1",))
    stores.ready.add_transient("stale", misfire=True)  # its take will fail, in the last part
    book = LaunchBook(registry, fence, queues, budget_bytes=4 * 1024)
    assert book.commit([big, stale]) == [big]
    assert len(stores.running.tasks("big")) == 50
    assert stores.running.tasks("stale") == []  # the parts written first were undone
    assert stores.ready.counts() == {"stale": 2}


def test_a_deposed_leader_writes_nothing(
    registry: Registry, fence: Fence, stores: TermStores, queues: QueueCache, zk_client: KazooClient
) -> None:
    stores.ready.add_transient("j", misfire=True)
    queues.sync()
    launch = _ready_launch(queues, "j", 2, ("a1",))
    zk_client.delete(fence.node_path)  # the election node is gone: the term is over
    with pytest.raises(NotLeader):
        LaunchBook(registry, fence, queues).commit([launch])
    assert stores.ready.counts() == {"j": 1}
    assert stores.running.tasks() == []


def test_undo_keeps_what_mesos_took_and_queues_the_rest_of_the_run(
    registry: Registry, fence: Fence, stores: TermStores, queues: QueueCache
) -> None:
    stores.ready.add_transient("run", misfire=True)
    queues.sync()
    launch = _ready_launch(queues, "run", 4, ("a1", "a2"))
    book = LaunchBook(registry, fence, queues)
    assert book.commit([launch]) == [launch]
    on_a2 = {t.task_id for t in launch.tasks if t.agent_id == "a2"}
    book.undo(launch, on_a2, others_launched=True)
    assert {t.task_id for t in stores.running.tasks()} == {
        t.task_id for t in launch.tasks if t.agent_id == "a1"
    }
    queued = {(job, item): original for job, item, original in stores.failover.entries()}
    assert set(queued) == {("run", 1), ("run", 3)}  # the shards Mesos did not take
    assert stores.ready.counts() == {}  # the run is not given back: its other shards run


def test_undo_of_a_run_mesos_took_nothing_of_gives_the_run_back(
    registry: Registry, fence: Fence, stores: TermStores, queues: QueueCache
) -> None:
    stores.ready.add_transient("run", misfire=True)
    original = str(TaskId.new("fo", 0, TaskType.READY, "a1"))
    stores.failover.add(original)
    queues.sync()
    run = _ready_launch(queues, "run", 2, ("a1",))
    failover = _failover_launch(queues, "fo", "a1")
    book = LaunchBook(registry, fence, queues)
    assert book.commit([run, failover]) == [run, failover]
    book.undo(run, {t.task_id for t in run.tasks}, others_launched=False)
    book.undo(failover, {t.task_id for t in failover.tasks}, others_launched=False)
    assert stores.running.tasks() == []
    assert stores.ready.counts() == {"run": 1}
    assert stores.failover.entries() == [("fo", 0, original)]  # with its original task id


def test_the_view_sees_the_end_of_a_task_whose_folder_the_launch_created(
    registry: Registry, fence: Fence, stores: TermStores, queues: QueueCache
) -> None:
    # The launch creates /state/running/{job}: the queues must watch it from then on, or it
    # would take the task for running forever (and never fail its shard over).
    stores.ready.add_transient("j", misfire=True)
    queues.sync()
    launch = _ready_launch(queues, "j", 2, ("a1",))
    assert launch.creates_folder
    LaunchBook(registry, fence, queues).commit([launch])
    queues.sync()
    stores.running.remove(launch.tasks[0].task_id)

    def ended() -> bool:
        queues.sync()
        return queues.running_tasks("j") == [launch.tasks[1].task_id]

    wait_for(ended, 10, message="the end of the first task")

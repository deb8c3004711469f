"""Status updates that came together (`StatusHandler.handle_many`), on a real ZooKeeper: the
common ones written in one fenced transaction, the rest one by one, and a refused transaction
handled as if the updates had come one at a time."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from typing import Any

import pytest

from scheduler.leader.backfill import BackfillEngine
from scheduler.leader.mesos.status import StatusHandler
from scheduler.leader.workflows import WorkflowEngine
from scheduler.model.errors import RegistryError
from scheduler.model.runs import FIRE_TASK_KEY
from scheduler.model.task_id import TaskId, TaskType
from scheduler.storage.backfill_store import BackfillStore
from scheduler.storage.layout import running_folder, running_path
from scheduler.storage.registry import Registry
from scheduler.storage.result_journal import ResultJournal
from scheduler.storage.state import KILLED_BY_USER, RunningTask
from scheduler.storage.term_stores import TermStores
from scheduler.storage.transactions import Fence
from scheduler.storage.workflow_store import WorkflowQueue, WorkflowStore
from tests.integration.leader.mesos.helpers import Acting
from tests.integration.leader.mesos.helpers import status_update as _update
from tests.support.bodies import job_config


class _Seen:
    def __init__(self) -> None:
        self.wakes = 0
        self.states: list[tuple[str, str]] = []

    def wake(self) -> None:
        self.wakes += 1


@pytest.fixture
def seen() -> _Seen:
    return _Seen()


@pytest.fixture
def journal(registry: Registry) -> ResultJournal:
    return ResultJournal(registry)


def _handler(stores: TermStores, seen: _Seen, journal: ResultJournal | None) -> StatusHandler:
    handler = StatusHandler(
        stores,
        lambda task_id: True,
        seen.wake,
        journal,
        running_of=lambda job: [t.task_id for t in stores.running.tasks(job)],
    )
    handler.listeners.append(
        lambda status, _parsed: seen.states.append((status["task_id"]["value"], status["state"]))
    )
    return handler


@pytest.fixture
def handler(stores: TermStores, seen: _Seen, journal: ResultJournal) -> StatusHandler:
    return _handler(stores, seen, journal)


def _job(stores: TermStores, name: str, daemon: bool = False) -> None:
    job = job_config(
        name,
        strict=False,
        jobExecutionType="DAEMON" if daemon else "TRANSIENT",
        cron="0/5 * * * * ?",
        shardingTotalCount=2,
    )
    stores.registry.create(f"/config/job/{name}", job.to_bytes())


def _launched(stores: TermStores, handler: StatusHandler, job: str, item: int = 0) -> str:
    """A task as a launch round leaves it: its node written (version 0), noted launched."""
    task = RunningTask(str(TaskId.new(job, item, TaskType.READY, "agent-1")), "agent-1")
    stores.running.add(task)
    handler.note_launched([replace(task)])
    return task.task_id


def _node(registry: Registry, task_id: str) -> tuple[dict[str, Any], Any] | None:
    job = TaskId.parse(task_id).job_name
    path = registry.abs(running_path(job, task_id))
    if registry.client.exists(path) is None:
        return None
    data, stat = registry.client.get(path)
    return json.loads(data), stat


def _results(registry: Registry) -> list[str]:
    names = []
    for bucket in registry.children("/statistics/results"):
        names += registry.children(f"/statistics/results/{bucket}")
    return names


def test_updates_that_came_together_are_written_in_one_transaction(
    stores: TermStores,
    registry: Registry,
    handler: StatusHandler,
    seen: _Seen,
    caplog: pytest.LogCaptureFixture,
) -> None:
    for name in ("a", "b", "c"):
        _job(stores, name)
    tasks = [_launched(stores, handler, name) for name in ("a", "b", "c")]

    # TASK_STARTING is kept in memory: no transaction, the nodes stay as the launch wrote them.
    assert handler.handle_many([_update(t, "TASK_STARTING") for t in tasks]) == [True] * 3
    assert (handler.batches, handler.batched) == (0, 0)
    staged = [_node(registry, t) for t in tasks]
    assert all(n is not None and n[1].version == 0 for n in staged)

    assert handler.handle_many([_update(t, "TASK_RUNNING") for t in tasks]) == [True] * 3
    assert (handler.batches, handler.batched, handler.batch_fallbacks) == (1, 3, 0)
    nodes = [_node(registry, t) for t in tasks]
    assert all(n is not None and n[0]["state"] == "TASK_RUNNING" for n in nodes)
    # One transaction: ZooKeeper gave all three changes the same transaction id.
    assert len({n[1].mzxid for n in nodes if n is not None}) == 1

    finished = [_update(t, "TASK_FINISHED") for t in tasks]
    with caplog.at_level(logging.INFO, logger="scheduler.leader.mesos.status"):
        assert handler.handle_many(finished) == [True] * 3
    # One log line names the three tasks (the live view of `./dev.sh run` reads it).
    [line] = [r.getMessage() for r in caplog.records if "finished" in r.getMessage()]
    assert line == "status: " + ", ".join(f"{t} finished" for t in tasks)
    assert (handler.batches, handler.batched) == (2, 6)
    assert all(_node(registry, t) is None for t in tasks)
    # The jobs' folders went with their last task, and each success was journaled once.
    assert not any(registry.exists(running_folder(name)) for name in ("a", "b", "c"))
    assert len([r for r in _results(registry) if r.endswith("-s")]) == 3
    assert seen.states == [
        (t, state) for state in ("TASK_STARTING", "TASK_RUNNING", "TASK_FINISHED") for t in tasks
    ]
    assert seen.wakes >= 1
    assert handler.counts == {"TASK_STARTING": 3, "TASK_RUNNING": 3, "TASK_FINISHED": 3}


def test_a_job_folder_with_another_task_is_kept(
    stores: TermStores, registry: Registry, handler: StatusHandler
) -> None:
    _job(stores, "two")
    _job(stores, "other")
    first = _launched(stores, handler, "two", 0)
    second = _launched(stores, handler, "two", 1)
    other = _launched(stores, handler, "other")

    answers = handler.handle_many([_update(first, "TASK_FINISHED"), _update(other, "TASK_RUNNING")])
    assert answers == [True, True]
    assert handler.batches == 1
    assert _node(registry, first) is None
    assert registry.children(running_folder("two")) == [second]

    answers = handler.handle_many(
        [_update(second, "TASK_FINISHED"), _update(other, "TASK_FINISHED")]
    )
    assert answers == [True, True]
    assert handler.batches == 2
    assert not registry.exists(running_folder("two"))
    assert not registry.exists(running_folder("other"))


def test_a_refused_transaction_is_handled_one_update_at_a_time(
    stores: TermStores, registry: Registry, handler: StatusHandler, journal: ResultJournal
) -> None:
    for name in ("k", "f", "r"):
        _job(stores, name)
    killed = _launched(stores, handler, "k")
    finishing = _launched(stores, handler, "f")
    running = _launched(stores, handler, "r")
    # A user's kill is recorded after the handler wrote the node: its version changed.
    assert stores.running.mark_killed(killed, KILLED_BY_USER)

    answers = handler.handle_many(
        [
            _update(killed, "TASK_RUNNING"),
            _update(finishing, "TASK_FINISHED"),
            _update(running, "TASK_RUNNING"),
        ]
    )

    assert answers == [True, True, True]
    assert (handler.batches, handler.batch_fallbacks) == (0, 1)
    node = _node(registry, killed)
    assert node is not None
    assert node[0]["state"] == "TASK_RUNNING"
    assert node[0]["killReason"] == KILLED_BY_USER  # not written over
    assert _node(registry, finishing) is None
    running_node = _node(registry, running)
    assert running_node is not None and running_node[0]["state"] == "TASK_RUNNING"
    # The refused transaction's journal op was uncounted: one success journaled, one counted.
    assert len(_results(registry)) == 1
    assert journal.pending == 1


def test_a_task_twice_in_one_batch_keeps_its_order(
    stores: TermStores, registry: Registry, handler: StatusHandler, seen: _Seen
) -> None:
    _job(stores, "twice")
    _job(stores, "beside")
    task = _launched(stores, handler, "twice")
    beside = _launched(stores, handler, "beside")

    answers = handler.handle_many(
        [
            _update(task, "TASK_RUNNING"),
            _update(beside, "TASK_RUNNING"),
            _update(task, "TASK_FINISHED"),
        ]
    )

    assert answers == [True, True, True]
    assert handler.batched == 2  # the task's second update came after the transaction
    assert _node(registry, task) is None
    assert [state for tid, state in seen.states if tid == task] == [
        "TASK_RUNNING",
        "TASK_FINISHED",
    ]


def test_updates_it_does_not_batch_are_handled_one_by_one(
    stores: TermStores, registry: Registry, handler: StatusHandler
) -> None:
    _job(stores, "plain")
    _job(stores, "daemon", daemon=True)
    starting = _launched(stores, handler, "plain", 0)
    daemon = _launched(stores, handler, "daemon")
    # A task this handler never wrote (launched by a leader before it): its node is read.
    unknown = str(TaskId.new("plain", 1, TaskType.READY, "agent-1"))
    stores.running.add(RunningTask(unknown, "agent-1"))

    answers = handler.handle_many(
        [
            _update(starting, "TASK_STARTING"),
            _update(daemon, "TASK_RUNNING", source="SOURCE_EXECUTOR"),
            _update(unknown, "TASK_RUNNING"),
        ]
    )

    assert answers == [True, True, True]
    assert handler.batches == 0 and handler.batched == 0
    unknown_node = _node(registry, unknown)
    assert unknown_node is not None and unknown_node[0]["state"] == "TASK_RUNNING"
    daemon_node = _node(registry, daemon)
    assert daemon_node is not None and daemon_node[0]["state"] == "TASK_RUNNING"
    assert daemon_node[0]["idle"] is True  # its first TASK_RUNNING: waiting for its first run


def test_a_lost_fence_leaves_the_whole_batch_unacknowledged(
    stores: TermStores, registry: Registry, fence: Fence, seen: _Seen, journal: ResultJournal
) -> None:
    acting = [True]
    fenced = TermStores.build(registry, Fence(fence.node_path, lambda: acting[0]), "UTC", 10_000)
    handler = _handler(fenced, seen, journal)
    for name in ("x", "y"):
        _job(fenced, name)
    tasks = [_launched(fenced, handler, name) for name in ("x", "y")]
    acting[0] = False

    answers = handler.handle_many([_update(t, "TASK_FINISHED") for t in tasks])

    assert answers == [False, False]
    assert all(_node(registry, t) is not None for t in tasks)
    assert _results(registry) == []
    assert journal.pending == 0
    assert seen.states == []


def test_only_a_task_that_runs_a_fire_wakes_the_workflow_and_backfill_engines(
    stores: TermStores, seen: _Seen, journal: ResultJournal
) -> None:
    """The handler marks the updates of a task that runs a recorded fire with the fire's key;
    the engines wake for such a task's end alone (not for each of the plain jobs' tasks)."""
    handler = _handler(stores, seen, journal)
    marks: list[object] = []
    handler.listeners.append(lambda status, _parsed: marks.append(status.get(FIRE_TASK_KEY)))
    _job(stores, "node")
    _job(stores, "plain")
    fire = "wf-run~a~0"
    node_task = str(TaskId.new("node", 0, TaskType.READY, "agent-1"))
    stores.running.add(RunningTask(node_task, "agent-1", workflow_fire=fire))
    plain_task = _launched(stores, handler, "plain")
    workflows = WorkflowEngine(
        WorkflowStore(stores.registry, stores.fence, "UTC", 200),
        stores,
        Acting(),
        WorkflowQueue(),
        lambda _task_id: True,
    )
    backfills = BackfillEngine(
        BackfillStore(stores.registry, stores.fence, 10),
        stores,
        Acting(),
        WorkflowQueue(),
        lambda _task_id: True,
    )
    for engine in (workflows, backfills):
        handler.listeners.append(engine.on_status)

    assert handler.handle(_update(plain_task, "TASK_FINISHED"))
    assert marks == [None]
    assert not workflows._wake.is_set() and not backfills._wake.is_set()
    assert handler.handle(_update(node_task, "TASK_RUNNING"))
    assert marks == [None, fire]
    assert not workflows._wake.is_set() and not backfills._wake.is_set()  # not an end
    assert handler.handle(_update(node_task, "TASK_FINISHED"))
    assert marks == [None, fire, fire]
    assert workflows._wake.is_set() and backfills._wake.is_set()


def test_a_failing_read_while_deciding_leaves_the_updates_to_the_one_by_one_path(
    stores: TermStores, registry: Registry, seen: _Seen, journal: ResultJournal
) -> None:
    """The queue view failing to list a job's tasks (ZooKeeper failing) writes nothing of the
    batch and uncounts its journal ops; each update is then handled on its own, as `handle`
    does, and none is lost."""
    failing = [True]

    def running_of(job: str) -> list[str]:
        if failing[0]:
            raise RegistryError(f"children {job}: ZooKeeper did not answer")
        return [t.task_id for t in stores.running.tasks(job)]

    handler = StatusHandler(stores, lambda task_id: True, seen.wake, journal, running_of=running_of)
    for name in ("p", "q"):
        _job(stores, name)
    tasks = [_launched(stores, handler, name) for name in ("p", "q")]

    answers = handler.handle_many([_update(t, "TASK_FINISHED") for t in tasks])

    assert answers == [True, True]
    assert (handler.batches, handler.batch_fallbacks) == (0, 1)
    assert all(_node(registry, t) is None for t in tasks)
    assert not registry.exists(running_folder("p"))
    assert len(_results(registry)) == 2
    assert journal.pending == 2  # the batch's two uncounted, the two written counted

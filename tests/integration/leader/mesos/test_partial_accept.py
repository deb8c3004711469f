"""The launcher against a real ZooKeeper and the Mesos stand-in, through the real driver."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scheduler.leader.lifecycle import WakeSignal
from scheduler.leader.mesos.driver import MesosDriver
from scheduler.leader.mesos.launcher import Launcher
from scheduler.leader.mesos.offers import AcceptOutcome
from scheduler.model.task_id import TaskId, TaskType
from scheduler.storage.layout import WORKFLOW_FIRES, WORKFLOW_TASKS, workflow_queue_folder
from scheduler.storage.queue_cache import QueueCache
from scheduler.storage.term_stores import TermStores
from scheduler.storage.workflow_store import FireRecord, NodeFire, WorkflowQueue
from tests.integration.leader.mesos.helpers import (
    Acting,
    FrameworkIds,
    settings_for,
    store_script_job,
    wire_launcher,
)
from tests.support.mesosfw import StandIn
from tests.support.waiting import wait_for


class _SecondAcceptFails(MesosDriver):
    """The real driver, except that the first ACCEPT after one that went through fails once,
    as when the connection to the master breaks between the two (nothing reaches Mesos)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.accepted: list[list[str]] = []
        self.refused: list[list[str]] = []

    def accept(
        self, offer_ids: list[str], tasks: list[dict[str, Any]], refuse_s: float
    ) -> AcceptOutcome:
        ids = [str(t["task_id"]["value"]) for t in tasks]
        if self.accepted and not self.refused:
            self.refused.append(ids)
            return AcceptOutcome.REFUSED
        ok = super().accept(offer_ids, tasks, refuse_s)
        if ok is AcceptOutcome.LAUNCHED:
            self.accepted.append(ids)
        return ok


def test_a_failed_accept_undoes_only_its_own_agents_tasks(
    standin: StandIn,
    stores: TermStores,
    queues: QueueCache,
    wake: WakeSignal,
    zk_namespace: str,
    tmp_path: Path,
) -> None:
    store_script_job(stores, tmp_path, "split", "sleep 120", shardingTotalCount=4)
    driver = _SecondAcceptFails(settings_for(standin, zk_namespace), FrameworkIds())
    # Wired as the term wires them: the status handler wakes the signal the launcher waits on.
    launcher = Launcher(stores, Acting(), driver, queues, wake=wake)
    wire_launcher(launcher, driver, stores)
    launcher.start()
    driver.start()
    try:
        stores.ready.add_transient("split", misfire=True)
        wake.wake()

        def in_master() -> list[TaskId]:
            tasks = [t for f in standin.state()["frameworks"] for t in f["tasks"]]
            return [TaskId.parse(t["id"]) for t in tasks if t["state"] == "TASK_RUNNING"]

        # The run completes: each shard once in Mesos, and recorded as running exactly then.
        def complete() -> list[TaskId] | None:
            found = in_master()
            return found if len(found) == 4 else None

        running = wait_for(complete, 60, message="4 tasks")
        assert sorted(t.item for t in running) == [0, 1, 2, 3]
        [first], [refused] = driver.accepted[:1], driver.refused
        took = {TaskId.parse(t).item for t in first}
        lost = {TaskId.parse(t).item for t in refused}
        assert len(took) == len(lost) == 2 and not took & lost
        # The shards Mesos took kept their bookkeeping: they were never launched again.
        assert {t.item for t in running if t.type is TaskType.READY} == took
        assert {t.item for t in running if t.type is TaskType.FAILOVER} == lost
        assert sorted(str(t) for t in running) == sorted(
            task.task_id for task in stores.running.tasks("split")
        )
        assert stores.ready.counts() == {}
        assert stores.failover.entries() == []
        later = [TaskId.parse(t).item for ids in driver.accepted[1:] for t in ids]
        assert not took & set(later)
    finally:
        driver.stop()
        launcher.stop()


class _FirstAcceptFails(MesosDriver):
    """The real driver, except that its first ACCEPT fails (nothing reaches Mesos)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.refused: list[list[str]] = []

    def accept(
        self, offer_ids: list[str], tasks: list[dict[str, Any]], refuse_s: float
    ) -> AcceptOutcome:
        if not self.refused:
            self.refused.append([str(t["task_id"]["value"]) for t in tasks])
            return AcceptOutcome.REFUSED
        return super().accept(offer_ids, tasks, refuse_s)


def test_a_node_fire_whose_accept_failed_is_launched_again_when_it_was_the_only_one_queued(
    standin: StandIn,
    stores: TermStores,
    queues: QueueCache,
    wake: WakeSignal,
    zk_namespace: str,
    tmp_path: Path,
) -> None:
    """The term's node-fire queue was empty once the fire was taken at the commit; the undo of
    the failed ACCEPT puts the fire back in ZooKeeper and in the queue, which must not be
    skipped for being empty (a workflow chaos run found its run stuck for ever)."""
    store_script_job(stores, tmp_path, "node_job", "sleep 120")
    fire = NodeFire("wf", "wf@0000000000001", "a", 0, "node_job", 1.0)
    stores.registry.ensure(workflow_queue_folder("node_job"))
    stores.registry.ensure(WORKFLOW_FIRES)
    stores.registry.ensure(WORKFLOW_TASKS)
    stores.registry.create(fire.queue_path, fire.encode())
    stores.registry.create(fire.record_path, FireRecord().encode())
    node_fires = WorkflowQueue(on_change=wake.wake)
    node_fires.load([(fire, 0)])
    driver = _FirstAcceptFails(settings_for(standin, zk_namespace), FrameworkIds())
    launcher = Launcher(stores, Acting(), driver, queues, wake=wake, workflows=node_fires)
    wire_launcher(launcher, driver, stores)
    launcher.start()
    driver.start()
    try:

        def in_master() -> list[str] | None:
            tasks = [t for f in standin.state()["frameworks"] for t in f["tasks"]]
            found = [t["id"] for t in tasks if t["state"] == "TASK_RUNNING"]
            return found or None

        (launched,) = wait_for(in_master, 60, message="the node fire launched after all")
        assert driver.refused and launched not in driver.refused[0]
        assert TaskId.parse(launched).job_name == "node_job"
        assert stores.registry.get(fire.queue_path) is None  # taken by the second launch
        record = FireRecord.decode(stores.registry.get(fire.record_path) or b"")
        assert record.task_ids == [launched]
    finally:
        driver.stop()
        launcher.stop()

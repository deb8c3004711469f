"""The launcher against a real ZooKeeper and the Mesos stand-in, through the real driver."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scheduler.leader.lifecycle import WakeSignal
from scheduler.leader.mesos.driver import MesosDriver
from scheduler.leader.mesos.launcher import Launcher
from scheduler.model.task_id import TaskId, TaskType
from scheduler.storage.queue_cache import QueueCache
from scheduler.storage.term_stores import TermStores
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

    def accept(self, offer_ids: list[str], tasks: list[dict[str, Any]], refuse_s: float) -> bool:
        ids = [str(t["task_id"]["value"]) for t in tasks]
        if self.accepted and not self.refused:
            self.refused.append(ids)
            return False
        ok = super().accept(offer_ids, tasks, refuse_s)
        if ok:
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
    wire_launcher(launcher, driver, stores, wake)
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

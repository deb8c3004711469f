"""A lost agent makes the leader reconcile at once the tasks it holds there, and explicit
reconciliation is asked again until Mesos answered for every task (issue 24): the real driver
against the stand-in in process, the real reconciler and status handler on a real ZooKeeper."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy.localmesos import LocalMesos
from scheduler.leader.mesos.driver import DriverHandlers, MesosDriver
from scheduler.leader.mesos.reconcile import Reconciler
from scheduler.leader.mesos.status import StatusHandler
from scheduler.model.settings import load_settings
from scheduler.model.task_id import TaskId, TaskType
from scheduler.storage.state import RunningTask
from scheduler.storage.term_stores import TermStores
from tests.support.bodies import job_config
from tests.support.waiting import wait_for


class _Ids:
    framework_id: str | None = None

    def save(self, framework_id: str) -> None:
        self.framework_id = framework_id

    def clear(self) -> None:
        self.framework_id = None


@pytest.fixture
def mesos(tmp_path: Path) -> Iterator[LocalMesos]:
    local = LocalMesos(agents=2, work_dir=tmp_path / "mesos", allocation_interval_s=0.2).start()
    yield local
    local.stop()


@pytest.fixture
def driver(mesos: LocalMesos, stores: TermStores) -> Iterator[tuple[MesosDriver, Reconciler]]:
    flags = {"mesos_url": mesos.address, "reconcile_interval_minutes": "0"}
    settings = load_settings({}, {}, flags)
    driver = MesosDriver(settings, _Ids())
    reconciler = Reconciler(stores, driver, 0)
    status = StatusHandler(stores, driver.kill, lambda: None)
    status.listeners.append(reconciler.on_status)

    def decline(offers: list[dict[str, Any]]) -> None:
        driver.decline([o["id"]["value"] for o in offers], 60)

    driver.bind(
        DriverHandlers(
            on_offers=decline,
            on_rescind=lambda _offer: None,
            on_status=status.handle,
            on_connected=reconciler.on_connected,
            on_disconnected=lambda: None,
            on_agent_lost=reconciler.reconcile_agent,
        )
    )
    driver.start()
    reconciler.start()
    try:
        wait_for(driver.connected.is_set, 15, message="the driver subscribed")
        yield driver, reconciler
    finally:
        reconciler.stop()
        driver.stop()


def _job(stores: TermStores, name: str) -> None:
    job = job_config(name, cron="0/5 * * * * ?", failover=True, strict=False)
    stores.registry.create(f"/config/job/{name}", job.to_bytes())


def test_a_lost_agents_tasks_that_mesos_no_longer_knows_end_and_fail_over(
    mesos: LocalMesos, stores: TermStores, driver: tuple[MesosDriver, Reconciler]
) -> None:
    # Given a task the leader holds as running on each agent, which Mesos never reported ended
    # (the leader missed its end), after the subscription's own reconciliation
    _, reconciler = driver
    wait_for(lambda: reconciler.runs >= 2, 10, message="the subscription's reconciliation")
    lost_agent, kept_agent = mesos.agent_ids
    _job(stores, "phantom")
    on_lost = str(TaskId.new("phantom", 0, TaskType.READY, lost_agent))
    _job(stores, "other")
    on_kept = str(TaskId.new("other", 0, TaskType.READY, kept_agent))
    stores.running.add(RunningTask(on_lost, lost_agent, state="TASK_RUNNING"))
    stores.running.add(RunningTask(on_kept, kept_agent, state="TASK_RUNNING"))
    runs_before = reconciler.runs

    # When Mesos says the first agent is lost
    assert mesos.remove_agent(lost_agent)

    # Then the leader reconciles that agent's tasks at once: the one Mesos no longer knows
    # ends and its shard goes to failover; the other agent's task is not asked about.
    wait_for(
        lambda: on_lost not in {t.task_id for t in stores.running.tasks("phantom")},
        10,
        message="the lost agent's task no longer running",
    )
    wait_for(
        lambda: stores.failover.entries() == [("phantom", 0, on_lost)],
        10,
        message="the shard queued for failover",
    )
    assert reconciler.runs == runs_before + 1
    assert [t.task_id for t in stores.running.tasks("other")] == [on_kept]
    wait_for(lambda: reconciler.unanswered == 0, 5, message="every task answered")
    assert reconciler.retries == 0


def test_reconciliation_is_asked_again_until_a_master_that_failed_over_answers(
    mesos: LocalMesos, stores: TermStores, driver: tuple[MesosDriver, Reconciler]
) -> None:
    # Given a task the leader holds as running that Mesos never knew (its launch was lost)
    mesos_driver, reconciler = driver
    wait_for(lambda: reconciler.runs >= 2, 10, message="the subscription's reconciliation")
    agent = mesos.agent_ids[0]
    _job(stores, "phantom")
    task_id = str(TaskId.new("phantom", 0, TaskType.READY, agent))
    stores.running.add(RunningTask(task_id, agent, state="TASK_RUNNING"))

    # When the master fails over, the agents re-registering 1 s later: the leader subscribes
    # again and reconciles while the new master cannot answer for the task yet
    runs_before = reconciler.runs
    mesos.fail_over_master(agent_reregister_delay_s=1.0)
    wait_for(lambda: reconciler.runs >= runs_before + 2, 10, message="the re-subscription's")
    assert reconciler.unanswered == 1

    # Then it asks again until the master answers (TASK_UNKNOWN), and the task ends
    wait_for(lambda: not stores.running.tasks("phantom"), 15, message="the unknown task ended")
    assert reconciler.retries >= 1
    wait_for(lambda: reconciler.unanswered == 0, 5, message="every task answered")
    wait_for(
        lambda: stores.failover.entries() == [("phantom", 0, task_id)],
        10,
        message="the shard queued for failover",
    )
    assert mesos_driver.connected.is_set()

"""The master answers an ACCEPT once it has the call and applies its launch after, as Mesos does
(its launch waits for authorization, asynchronously): a framework's ACCEPT of thousands of tasks
is not held for their launch, and its caller cannot time out on a launch that went through."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy.localmesos import LocalMesos, launch, scheduler_api
from tests.support.mesosfw import (
    Framework,
    RecordingScheduler,
    command_task,
    executor_info,
    executor_task,
)
from tests.support.waiting import wait_for


@pytest.fixture
def mesos(tmp_path: Path) -> Iterator[LocalMesos]:
    local = LocalMesos(agents=1, work_dir=tmp_path / "mesos", allocation_interval_s=0.1).start()
    yield local
    local.stop()


def _tasks(mesos: LocalMesos) -> list[str]:
    with mesos.master.lock:
        return [t for f in mesos.master.frameworks.values() for t in f.tasks]


def _tasks_unlocked(mesos: LocalMesos) -> list[str]:
    """While the held launch holds the master's lock (nothing else changes the tasks then)."""
    return [t for f in list(mesos.master.frameworks.values()) for t in list(f.tasks)]


def test_an_accept_is_answered_before_its_launch_is_applied(
    mesos: LocalMesos, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    applying = threading.Event()
    real_accept = launch.accept

    def held_accept(*args: Any) -> None:
        applying.set()
        assert release.wait(30), "the test never released the launch"
        real_accept(*args)

    monkeypatch.setattr(scheduler_api, "accept", held_accept)
    scheduler = RecordingScheduler(hold_offers=True)
    framework = Framework(mesos.address, scheduler).start()
    try:
        offer: dict[str, Any] = wait_for(
            lambda: scheduler.offers[0] if scheduler.offers else None, 15, message="an offer"
        )
        task = command_task("answered-first", "sleep 30")
        task["agent_id"] = offer["agent_id"]
        # pymesos's launchTasks returns once the master answered (it raises on an error).
        framework.driver.launchTasks(offer["id"], [task], {"refuse_seconds": 5})
        assert applying.wait(15)
        assert _tasks_unlocked(mesos) == []  # answered while its launch is not applied yet
        release.set()
        wait_for(lambda: _tasks(mesos) == ["answered-first"], 15, message="the launch applied")
        scheduler.wait_state("answered-first", "TASK_RUNNING")
    finally:
        release.set()
        framework.stop()


def test_tasks_of_one_accept_share_the_executor_the_first_one_starts(tmp_path: Path) -> None:
    """The agent is handed an ACCEPT's tasks once all are accounted: a later task of the same
    ACCEPT still finds the executor an earlier one starts, whose resources count once (room
    for two tasks and one executor, not two)."""
    local = LocalMesos(
        agents=1,
        resources="cpus:0.3;mem:96;disk:64",
        work_dir=tmp_path / "mesos",
        allocation_interval_s=0.1,
    ).start()
    scheduler = RecordingScheduler()
    framework = Framework(local.address, scheduler).start()
    try:
        executor = executor_info("shared", cpus=0.1, mem=32)
        scheduler.launch(
            *(
                executor_task(f"t{i}", executor, mode="run", finish_file=str(tmp_path / "never"))
                for i in range(2)
            )
        )
        for i in range(2):
            scheduler.wait_state(f"t{i}", "TASK_RUNNING")
        assert "TASK_ERROR" not in scheduler.states("t0") + scheduler.states("t1")
        with local.master.lock:
            [agent] = local.master.agents.values()
            live = [e for e in agent.executors.values() if e.framework_id == framework.id]
        assert [e.executor_id for e in live] == ["shared"]
        assert sorted(live[0].tasks) == ["t0", "t1"]
    finally:
        framework.stop()
        local.stop()

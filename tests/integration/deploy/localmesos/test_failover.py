"""Framework failover, failover-timeout expiry, TEARDOWN and reconciliation."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy import children
from tests.support.mesosfw import (
    Framework,
    RawSubscription,
    RecordingScheduler,
    StandIn,
    command_task,
    executor_info,
    executor_task,
    wait_for,
)
from tests.support.processes import pid_alive, wait_reaped

FIXTURE_FRAMEWORK = Path(__file__).with_name("fixture_framework.py")


class FrameworkProcess:
    def __init__(self, master: str, events: Path, *args: str) -> None:
        self.events = events
        self._log = open(events.with_suffix(".log"), "ab")  # closed in stop()
        self.process = children.start(
            [sys.executable, str(FIXTURE_FRAMEWORK), master, str(events), *args],
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )

    def read(self) -> list[dict[str, Any]]:
        if not self.events.exists():
            return []
        return [json.loads(line) for line in self.events.read_text().splitlines() if line]

    def find(self, **fields: Any) -> dict[str, Any] | None:
        for event in self.read():
            if all(event.get(k) == v for k, v in fields.items()):
                return event
        return None

    def wait(self, timeout_s: float = 20.0, **fields: Any) -> dict[str, Any]:
        return wait_for(lambda: self.find(**fields), timeout_s, message=f"event {fields}")

    def kill(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        children.stop(self.process, signal.SIGTERM, 15)
        self._log.close()


@pytest.fixture
def framework_processes() -> Iterator[list[FrameworkProcess]]:
    started: list[FrameworkProcess] = []
    yield started
    for process in started:
        process.stop()


def test_a_restarted_scheduler_keeps_its_tasks_and_receives_missed_updates(
    standin: StandIn, framework_processes: list[FrameworkProcess], tmp_path: Path
) -> None:
    finish_file = tmp_path / "finish-done"
    executor = executor_info("app@-@failover")
    tasks = [
        executor_task("keep", executor, mode="run"),
        executor_task("done", executor, mode="run", finish_file=str(finish_file)),
    ]
    launch = [arg for task in tasks for arg in ("--launch", json.dumps(task))]
    first = FrameworkProcess(standin.address, tmp_path / "first.jsonl", *launch)
    framework_processes.append(first)
    framework_id = first.wait(event="registered")["framework_id"]
    first.wait(event="update", task_id="keep", state="TASK_RUNNING")
    first.wait(event="update", task_id="done", state="TASK_RUNNING")

    first.kill()
    wait_for(
        lambda: not standin.framework_state(framework_id)["connected"],  # type: ignore[index]
        10,
        message="the framework to be seen disconnected",
    )
    executor_id = standin.framework_state(framework_id)["executors"][0]["executor_id"]  # type: ignore[index]
    directory = standin.sandboxes(framework_id)[executor_id]
    executor_pid = int((directory / "executor.pid").read_text())
    assert pid_alive(executor_pid)

    # This update happens while no scheduler is connected: the agent must hold it.
    finish_file.touch()

    def task_state(task_id: str) -> str | None:
        framework = standin.framework_state(framework_id)
        assert framework is not None
        states = {t["id"]: t["state"] for t in framework["tasks"]}
        return states.get(task_id)

    wait_for(lambda: task_state("done") == "TASK_FINISHED", 10, message="done finished")
    assert task_state("keep") == "TASK_RUNNING"

    second = FrameworkProcess(
        standin.address, tmp_path / "second.jsonl", "--framework-id", framework_id
    )
    framework_processes.append(second)
    second.wait(event="reregistered", framework_id=framework_id)
    # The agent's own update (with its uuid) comes again. The answer to the implicit
    # reconciliation the framework sends on re-registering may come first: it names the same
    # state, without a uuid (the master still holds the task until that update is acknowledged).
    second.wait(event="update", task_id="done", state="TASK_FINISHED", has_uuid=True)
    reconciled = second.wait(event="update", task_id="keep", state="TASK_RUNNING")
    assert reconciled["reason"] == "REASON_RECONCILIATION"

    def acked() -> bool:
        framework = standin.framework_state(framework_id)
        assert framework is not None
        return [t["id"] for t in framework["completed_tasks"]] == ["done"]

    wait_for(acked, 10, message="the replayed update acknowledged")
    framework = standin.framework_state(framework_id)
    assert framework is not None and framework["connected"]
    assert [t["id"] for t in framework["tasks"]] == ["keep"]
    assert int((directory / "executor.pid").read_text()) == executor_pid
    assert pid_alive(executor_pid)


def test_failover_timeout_expiry_kills_tasks_and_removes_the_framework(
    standin: StandIn, make_framework: Callable[..., Framework]
) -> None:
    scheduler = RecordingScheduler()
    framework = make_framework(scheduler, failover_timeout=1.0)
    scheduler.launch(
        executor_task("runner", executor_info("app@-@expire"), mode="run"),
        command_task("sleeper", "exec sleep 60"),
    )
    scheduler.wait_state("runner", "TASK_RUNNING")
    scheduler.wait_state("sleeper", "TASK_RUNNING")
    directory = standin.sandboxes(framework.id)["app@-@expire"]
    executor_pid = int((directory / "executor.pid").read_text())

    framework.stop(failover=True)  # the stream closes without TEARDOWN

    def removed() -> dict[str, Any] | None:
        state = standin.state()
        return next((f for f in state["completed_frameworks"] if f["id"] == framework.id), None)

    gone = wait_for(removed, 15, message="the framework removed after its failover timeout")
    assert {t["id"]: t["state"] for t in gone["completed_tasks"]} == {
        "runner": "TASK_KILLED",
        "sleeper": "TASK_KILLED",
    }
    wait_reaped(executor_pid)

    subscribe = {
        "type": "SUBSCRIBE",
        "framework_id": {"value": framework.id},
        "subscribe": {
            "framework_info": {"user": "u", "name": "again", "id": {"value": framework.id}}
        },
    }
    sub = RawSubscription(standin.address, subscribe)
    try:
        assert sub.status == 200
        assert sub.next_event() == {
            "type": "ERROR",
            "error": {"message": "Framework has been removed"},
        }
        with pytest.raises(EOFError):
            sub.next_event()
    finally:
        sub.close()


def test_teardown_shuts_the_executors_down_at_once(
    standin: StandIn, make_framework: Callable[..., Framework]
) -> None:
    scheduler = RecordingScheduler()
    framework = make_framework(scheduler, failover_timeout=3600.0)
    scheduler.launch(executor_task("runner", executor_info("app@-@teardown"), mode="run"))
    scheduler.wait_state("runner", "TASK_RUNNING")
    directory = standin.sandboxes(framework.id)["app@-@teardown"]
    executor_pid = int((directory / "executor.pid").read_text())

    framework.stop()  # pymesos sends TEARDOWN

    wait_reaped(executor_pid)
    state = standin.state()
    assert [f["id"] for f in state["completed_frameworks"]] == [framework.id]
    assert state["frameworks"] == []


@pytest.mark.parametrize("partition_aware", [False, True])
def test_reconciliation_answers_latest_states_and_unknown_tasks(
    make_framework: Callable[..., Framework], partition_aware: bool
) -> None:
    capabilities = [{"type": "PARTITION_AWARE"}] if partition_aware else []
    scheduler = RecordingScheduler()
    framework = make_framework(scheduler, capabilities=capabilities)
    scheduler.launch(command_task("live", "exec sleep 60"))
    scheduler.wait_state("live", "TASK_RUNNING")

    def reconciled(task_id: str, count: int) -> list[Any]:
        with scheduler.cond:
            return [
                u
                for u in scheduler.updates
                if u.task_id == task_id and u.status.get("reason") == "REASON_RECONCILIATION"
            ][count - 1 : count]

    framework.driver.reconcileTasks([])  # implicit
    (implicit,) = wait_for(lambda: reconciled("live", 1), 10, message="implicit answer")
    assert implicit.state == "TASK_RUNNING"
    assert implicit.status["message"] == "Reconciliation: Latest task state"
    assert "uuid" not in implicit.status and implicit.status["source"] == "SOURCE_MASTER"

    framework.driver.reconcileTasks([{"task_id": {"value": "live"}}, {"task_id": {"value": "x"}}])
    (explicit,) = wait_for(lambda: reconciled("live", 2), 10, message="explicit answer")
    assert explicit.state == "TASK_RUNNING"
    (unknown,) = wait_for(lambda: reconciled("x", 1), 10, message="unknown task answer")
    assert unknown.state == ("TASK_UNKNOWN" if partition_aware else "TASK_LOST")
    assert unknown.status["message"] == "Reconciliation: Task is unknown"


def test_a_failover_while_the_old_instance_is_still_subscribed_recovers_its_offers(
    standin: StandIn,
) -> None:
    """A frozen scheduler keeps its stream open and its offers outstanding. When its successor
    subscribes with the same framework id, Mesos removes the old instance's offers and
    recovers their resources (`Master::failoverFramework`), so the successor is offered
    them; it is not left waiting for offers nobody can use."""
    info = {"user": "u", "name": "frozen", "failover_timeout": 3600.0}
    old = RawSubscription(
        standin.address, {"type": "SUBSCRIBE", "subscribe": {"framework_info": info}}
    )
    new = None
    try:
        framework_id = old.next_of("SUBSCRIBED")["subscribed"]["framework_id"]["value"]
        held = old.next_of("OFFERS")["offers"]["offers"]
        assert held  # the old instance holds every agent's resources, then freezes
        info_again = {**info, "id": {"value": framework_id}}
        new = RawSubscription(
            standin.address,
            {
                "type": "SUBSCRIBE",
                "framework_id": {"value": framework_id},
                "subscribe": {"framework_info": info_again},
            },
        )
        assert new.next_of("SUBSCRIBED")["subscribed"]["framework_id"]["value"] == framework_id
        offered = new.next_of("OFFERS")["offers"]["offers"]
        assert {o["agent_id"]["value"] for o in offered} == {o["agent_id"]["value"] for o in held}
        assert not {o["id"]["value"] for o in offered} & {o["id"]["value"] for o in held}
    finally:
        for sub in (old, new):
            if sub is not None:
                sub.close()

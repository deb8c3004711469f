"""Tasks end to end: command tasks, a custom pymesos executor, acks, kills, crashes, validation."""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path

from pymesos import encode_data

from tests.support.mesosfw import (
    Framework,
    RecordingScheduler,
    StandIn,
    command_task,
    executor_info,
    executor_task,
    wait_for,
)
from tests.support.processes import pid_alive, wait_reaped


def _assert_agent_update(status: dict[str, object]) -> None:
    assert isinstance(status["uuid"], str)
    assert len(base64.b64decode(status["uuid"])) == 16
    assert isinstance(status["agent_id"], dict)


def _executor_directory(standin: StandIn, framework_id: str, executor_id: str) -> Path:
    found = standin.sandboxes(framework_id)
    assert executor_id in found, f"executor {executor_id} not in the agents' /state"
    return found[executor_id]


def test_command_tasks_finish_and_fail_like_the_command_executor(
    make_framework: Callable[..., Framework],
) -> None:
    scheduler = RecordingScheduler()
    make_framework(scheduler)
    scheduler.launch(command_task("ok", "true"), command_task("bad", "echo oops >&2; exit 3"))

    finished = scheduler.wait_state("ok", "TASK_FINISHED")
    failed = scheduler.wait_state("bad", "TASK_FAILED")
    assert scheduler.states("ok") == ["TASK_STARTING", "TASK_RUNNING", "TASK_FINISHED"]
    assert scheduler.states("bad") == ["TASK_STARTING", "TASK_RUNNING", "TASK_FAILED"]
    assert failed.status["message"] == "Command exited with status 3"
    for update in (finished, failed):
        _assert_agent_update(update.status)


def test_a_custom_executor_runs_several_tasks_and_acknowledgements_complete_them(
    standin: StandIn, make_framework: Callable[..., Framework]
) -> None:
    scheduler = RecordingScheduler()
    framework = make_framework(scheduler)
    executor = executor_info("app@-@one")
    scheduler.launch(*(executor_task(f"t{i}", executor) for i in range(3)))

    for i in range(3):
        update = scheduler.wait_state(f"t{i}", "TASK_FINISHED")
        assert scheduler.states(f"t{i}") == ["TASK_RUNNING", "TASK_FINISHED"]
        _assert_agent_update(update.status)
        assert update.status["executor_id"] == {"value": "app@-@one"}
        assert update.status["source"] == "SOURCE_EXECUTOR"

    def completed() -> bool:
        state = standin.framework_state(framework.id)
        assert state is not None
        return not state["tasks"] and len(state["completed_tasks"]) == 3

    wait_for(completed, 10, message="acknowledged tasks to move to completed_tasks")
    state = standin.framework_state(framework.id)
    assert state is not None
    assert [e["executor_id"] for e in state["executors"]] == ["app@-@one"]  # one process for all
    directory = _executor_directory(standin, framework.id, "app@-@one")
    assert pid_alive(int((directory / "executor.pid").read_text()))

    agent_id = scheduler.offers[0]["agent_id"]
    framework.driver.sendFrameworkMessage({"value": "app@-@one"}, agent_id, encode_data(b"ping"))
    wait_for(lambda: b"echo:ping" in scheduler.messages, 10, message="the echoed message")


def test_only_one_update_per_task_is_in_flight_until_acknowledged(
    standin: StandIn, make_framework: Callable[..., Framework]
) -> None:
    scheduler = RecordingScheduler()
    framework = make_framework(scheduler, implicit_acknowledgements=False)
    scheduler.launch(command_task("held", "true"))
    running = scheduler.wait_state("held", "TASK_STARTING")

    def latest_state() -> str:
        state = standin.framework_state(framework.id)
        assert state is not None
        return str(state["tasks"][0]["state"])

    # The agent has FINISHED (shown in /state) but forwards nothing until STARTING is acked.
    wait_for(lambda: latest_state() == "TASK_FINISHED", 10, message="task finished")
    assert scheduler.states("held") == ["TASK_STARTING"]
    framework.driver.acknowledgeStatusUpdate(running.status)
    running = scheduler.wait_state("held", "TASK_RUNNING")
    framework.driver.acknowledgeStatusUpdate(running.status)
    finished = scheduler.wait_state("held", "TASK_FINISHED")
    framework.driver.acknowledgeStatusUpdate(finished.status)

    def completed() -> bool:
        state = standin.framework_state(framework.id)
        assert state is not None
        return [t["id"] for t in state["completed_tasks"]] == ["held"]

    wait_for(completed, 10, message="the acked task completed")


def test_kill_reaches_executor_tasks_and_command_tasks(
    standin: StandIn, make_framework: Callable[..., Framework], tmp_path: Path
) -> None:
    scheduler = RecordingScheduler()
    framework = make_framework(scheduler, capabilities=[{"type": "TASK_KILLING_STATE"}])
    executor = executor_info("app@-@kill")
    scheduler.launch(
        executor_task("runner", executor, mode="run"),
        command_task("sleeper", "echo $$ > sleeper.pid; exec sleep 60"),
    )
    scheduler.wait_state("runner", "TASK_RUNNING")
    scheduler.wait_state("sleeper", "TASK_RUNNING")
    agent_state = standin.get_json("/state", standin.agent_endpoint())
    sleeper_dir = next(
        Path(e["directory"])
        for f in agent_state["frameworks"]
        for e in f["executors"]
        if e["id"] == "sleeper"
    )
    sleeper_pid = int(wait_for(lambda: (sleeper_dir / "sleeper.pid").read_text(), 5))

    framework.driver.killTask({"value": "runner"})
    framework.driver.killTask({"value": "sleeper"})
    killed = scheduler.wait_state("runner", "TASK_KILLED")
    assert killed.status["source"] == "SOURCE_EXECUTOR"
    scheduler.wait_state("sleeper", "TASK_KILLED")
    assert "TASK_KILLING" in scheduler.states("sleeper")
    wait_reaped(sleeper_pid)

    # Killing an unknown task answers like reconciliation.
    framework.driver.killTask({"value": "ghost"})
    ghost = scheduler.wait_state("ghost", "TASK_LOST")
    assert ghost.status["reason"] == "REASON_RECONCILIATION"


def test_an_executor_that_exits_fails_its_tasks_and_reports_failure(
    standin: StandIn, make_framework: Callable[..., Framework]
) -> None:
    scheduler = RecordingScheduler()
    framework = make_framework(scheduler)
    scheduler.launch(executor_task("crash", executor_info("app@-@crash"), mode="exit", code=3))

    failed = scheduler.wait_state("crash", "TASK_FAILED")
    assert failed.status["reason"] == "REASON_EXECUTOR_TERMINATED"
    assert failed.status["source"] == "SOURCE_AGENT"
    _assert_agent_update(failed.status)
    wait_for(lambda: scheduler.failures, 10, message="FAILURE event")
    executor_id, _, status = scheduler.failures[0]
    assert (executor_id, status) == ("app@-@crash", 3 << 8)  # the raw waitpid status

    # Fault injection: SIGKILL a healthy executor.
    scheduler.launch(executor_task("victim", executor_info("app@-@victim"), mode="run"))
    scheduler.wait_state("victim", "TASK_RUNNING")
    directory = _executor_directory(standin, framework.id, "app@-@victim")
    pid = int((directory / "executor.pid").read_text())
    status_code, body = standin.post_json(
        "/faults/kill_executor",
        {"framework_id": framework.id, "executor_id": "app@-@victim"},
    )
    assert (status_code, body) == (200, {"killed": "app@-@victim"})
    scheduler.wait_state("victim", "TASK_FAILED")
    wait_for(lambda: len(scheduler.failures) == 2, 10, message="second FAILURE")
    assert scheduler.failures[1][0] == "app@-@victim" and scheduler.failures[1][2] == 9
    wait_reaped(pid)
    assert (
        standin.post_json(
            "/faults/kill_executor", {"framework_id": framework.id, "executor_id": "nope"}
        )[0]
        == 404
    )


def test_invalid_launches_get_task_error_and_stale_offers_task_lost(
    make_framework: Callable[..., Framework],
) -> None:
    scheduler = RecordingScheduler(hold_offers=True)
    framework = make_framework(scheduler)
    wait_for(lambda: scheduler.offers, 10, message="an offer")
    offer = scheduler.offers[0]
    agent_id = offer["agent_id"]
    too_big = {**command_task("huge", "true", cpus=64), "agent_id": agent_id}
    no_resources = {**command_task("empty", "true"), "agent_id": agent_id, "resources": []}
    both = {**command_task("both", "true"), "agent_id": agent_id}
    both["executor"] = executor_info("x")
    framework.driver.launchTasks(offer["id"], [too_big, no_resources, both])
    for task_id in ("huge", "empty", "both"):
        update = scheduler.wait_state(task_id, "TASK_ERROR")
        assert update.status["reason"] == "REASON_TASK_INVALID"
        assert "uuid" not in update.status and update.status["source"] == "SOURCE_MASTER"

    # The offer was used by that ACCEPT: launching on it again is an invalid offer.
    framework.driver.launchTasks(
        offer["id"], [{**command_task("late", "true"), "agent_id": agent_id}]
    )
    lost = scheduler.wait_state("late", "TASK_LOST")
    assert lost.status["reason"] == "REASON_INVALID_OFFERS"


def test_launch_group_runs_its_tasks_on_one_executor(
    make_framework: Callable[..., Framework],
) -> None:
    scheduler = RecordingScheduler(hold_offers=True)
    framework = make_framework(scheduler)
    wait_for(lambda: scheduler.offers, 10, message="an offer")
    offer = scheduler.offers[0]
    executor = {**executor_info("app@-@group"), "type": "CUSTOM"}
    tasks = []
    for name in ("g1", "g2"):
        task = executor_task(name, executor)
        del task["executor"]
        tasks.append({**task, "agent_id": offer["agent_id"]})
    operation = {
        "type": "LAUNCH_GROUP",
        "launch_group": {"executor": executor, "task_group": {"tasks": tasks}},
    }
    framework.driver.acceptOffers([offer["id"]], [operation])
    for name in ("g1", "g2"):
        update = scheduler.wait_state(name, "TASK_FINISHED")
        assert update.status["executor_id"] == {"value": "app@-@group"}


def test_an_executor_that_never_subscribes_times_out_and_fails_its_tasks(
    make_standin: Callable[..., StandIn],
) -> None:
    standin = make_standin("--executor-registration-timeout-seconds", "1")
    scheduler = RecordingScheduler()
    framework = Framework(standin.address, scheduler).start()
    try:
        silent = executor_info("app@-@silent", "exec sleep 60")
        scheduler.launch(executor_task("waiting", silent))
        failed = scheduler.wait_state("waiting", "TASK_FAILED")
        assert failed.status["reason"] == "REASON_EXECUTOR_REGISTRATION_TIMEOUT"
        wait_for(lambda: scheduler.failures, 10, message="FAILURE of the killed executor")
        assert scheduler.failures[0][0] == "app@-@silent"
    finally:
        framework.stop()


def test_a_command_task_over_its_max_completion_time_fails(
    make_framework: Callable[..., Framework],
) -> None:
    scheduler = RecordingScheduler()
    make_framework(scheduler)
    task = command_task("slow", "exec sleep 60")
    task["max_completion_time"] = {"nanoseconds": 300_000_000}
    scheduler.launch(task)
    failed = scheduler.wait_state("slow", "TASK_FAILED")
    assert failed.status["reason"] == "REASON_MAX_COMPLETION_TIME_REACHED"


def test_a_shutdown_call_stops_the_executor_and_fails_its_tasks(
    standin: StandIn, make_framework: Callable[..., Framework]
) -> None:
    scheduler = RecordingScheduler()
    framework = make_framework(scheduler)
    scheduler.launch(executor_task("held", executor_info("app@-@shutdown"), mode="run"))
    running = scheduler.wait_state("held", "TASK_RUNNING")
    directory = _executor_directory(standin, framework.id, "app@-@shutdown")
    pid = int((directory / "executor.pid").read_text())

    # pymesos has no method for SHUTDOWN; send it on the driver's own stream.
    shutdown = {
        "type": "SHUTDOWN",
        "framework_id": {"value": framework.id},
        "shutdown": {
            "executor_id": {"value": "app@-@shutdown"},
            "agent_id": running.status["agent_id"],
        },
    }
    status, body, _ = standin.request(
        "POST", "/api/v1/scheduler", shutdown, {"Mesos-Stream-Id": framework.driver.stream_id}
    )
    assert (status, body) == (202, b"")
    wait_reaped(pid)
    failed = scheduler.wait_state("held", "TASK_FAILED")
    assert failed.status["reason"] == "REASON_EXECUTOR_TERMINATED"

"""The stand-in as real Mesos shows itself to the scheduler: the agent's `/files/read` and
`/files/browse`, sandbox directories only in the agent's `/state`, and statuses kept whole in
`GET_TASKS`.

The field lists below are what Mesos 1.x writes (src/master/readonly_handler.cpp and
src/common/http.cpp for the master, src/slave/http.cpp `ExecutorWriter` for the agent), for the
parts of the documents the scheduler reads.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from scheduler.leader.mesos import sandbox
from tests.support.mesosfw import (
    Framework,
    RecordingScheduler,
    StandIn,
    command_task,
    executor_info,
    executor_task,
)

# What a real master's /state shows of a framework's executor: its ExecutorInfo and agent.
MASTER_EXECUTOR_FIELDS = {
    "executor_id",
    "name",
    "framework_id",
    "command",
    "resources",
    "role",
    "labels",
    "type",
    "slave_id",
}
# What a real agent's /state shows of an executor.
AGENT_EXECUTOR_FIELDS = {
    "id",
    "name",
    "source",
    "container",
    "directory",
    "resources",
    "role",
    "labels",
    "type",
    "tasks",
    "queued_tasks",
    "completed_tasks",
}
# A status in the master's v0 /state.
V0_STATUS_FIELDS = {"state", "timestamp", "labels", "container_status", "healthy"}

# Bytes that are not UTF-8 in the middle of text that is: the agent gives them back as they are.
CONTENT = "héllo\nwörld\n".encode() + b"\xff\xfe raw\n" + b"x" * 70_000


@pytest.fixture
def running(
    standin: StandIn, make_framework: Callable[..., Framework], tmp_path: Path
) -> tuple[RecordingScheduler, Framework]:
    content = tmp_path / "content.bin"
    content.write_bytes(CONTENT)
    scheduler = RecordingScheduler()
    framework = make_framework(scheduler)
    scheduler.launch(
        command_task("writer", f"cat {content}; echo to-stderr >&2; mkdir sub; exec sleep 60"),
        command_task("failing", "echo bye; exit 3"),
        executor_task("exec-run", executor_info("app@-@files"), mode="run"),
        executor_task("exec-fail", executor_info("app@-@files"), mode="fail"),
    )
    scheduler.wait_state("writer", "TASK_RUNNING")
    scheduler.wait_state("failing", "TASK_FAILED")
    scheduler.wait_state("exec-run", "TASK_RUNNING")
    scheduler.wait_state("exec-fail", "TASK_FAILED")
    return scheduler, framework


def _read(standin: StandIn, path: str, **params: Any) -> tuple[int, Any]:
    query = "&".join([f"path={quote(path)}", *(f"{k}={quote(str(v))}" for k, v in params.items())])
    status, body, _ = standin.request(
        "GET", f"/files/read?{query}", address=standin.agent_endpoint()
    )
    if status != 200:
        return status, body.decode("utf-8", "replace")
    return status, json.loads(body.decode("utf-8", "surrogateescape"))


def _bytes(answer: dict[str, Any]) -> bytes:
    data: str = answer["data"]
    return data.encode("utf-8", "surrogateescape")


def test_files_read_serves_a_sandbox_file_by_offset_and_length_as_mesos_does(
    standin: StandIn, running: tuple[RecordingScheduler, Framework]
) -> None:
    _, framework = running
    sandbox = standin.sandboxes(framework.id)["writer"]
    stdout = f"{sandbox}/stdout"
    # offset=-1: the size, no data.
    assert _read(standin, stdout, offset=-1) == (200, {"data": "", "offset": len(CONTENT)})
    status, first = _read(standin, stdout, offset=0, length=6)
    assert status == 200 and first["offset"] == 0 and _bytes(first) == CONTENT[:6]
    # An offset in the middle of a character and bytes that are not UTF-8 come back raw.
    status, middle = _read(standin, stdout, offset=2, length=20)
    assert status == 200 and middle["offset"] == 2 and _bytes(middle) == CONTENT[2:22]
    # No length (or -1): the rest, at most 16 pages a read.
    status, rest = _read(standin, stdout, offset=10)
    assert status == 200 and _bytes(rest) == CONTENT[10 : 10 + 65536]
    assert _read(standin, stdout, offset=10, length=-1)[1] == rest
    # Past the end: nothing, at the offset asked.
    assert _read(standin, stdout, offset=10**9) == (200, {"data": "", "offset": 10**9})
    assert _read(standin, stdout, offset=3, length=0) == (200, {"data": "", "offset": 3})
    assert _bytes(_read(standin, f"{sandbox}/stderr", offset=0)[1]) == b"to-stderr\n"


def test_files_read_finds_sandboxes_by_their_virtual_and_latest_paths(
    standin: StandIn, running: tuple[RecordingScheduler, Framework]
) -> None:
    _, framework = running
    sandbox = standin.sandboxes(framework.id)["writer"]
    virtual = f"/frameworks/{framework.id}/executors/writer/runs/latest/stdout"
    latest = f"{sandbox.parent}/latest/stdout"
    for path in (virtual, latest):
        status, answer = _read(standin, path, offset=0, length=5)
        assert status == 200 and _bytes(answer) == CONTENT[:5], path


@pytest.mark.parametrize(
    ("params", "status", "text"),
    [
        ({}, 400, "Expecting 'path=value' in query"),
        ({"offset": "x"}, 400, "Failed to parse offset"),
        ({"offset": "-2"}, 400, "Negative offset provided: -2"),
        ({"offset": "0", "length": "ten"}, 400, "Failed to parse length"),
        ({"offset": "0", "length": "-5"}, 400, "Negative length provided: -5"),
    ],
)
def test_files_read_refuses_bad_parameters_with_400(
    standin: StandIn,
    running: tuple[RecordingScheduler, Framework],
    params: dict[str, str],
    status: int,
    text: str,
) -> None:
    _, framework = running
    sandbox = standin.sandboxes(framework.id)["writer"]
    query = "&".join(f"{k}={v}" for k, v in params.items())
    path = "" if not params else f"path={quote(str(sandbox / 'stdout'))}&"
    got, body, _ = standin.request(
        "GET", f"/files/read?{path}{query}", address=standin.agent_endpoint()
    )
    assert got == status and text in body.decode()


def test_files_read_serves_nothing_outside_the_sandboxes(
    standin: StandIn, running: tuple[RecordingScheduler, Framework], tmp_path: Path
) -> None:
    _, framework = running
    sandbox = standin.sandboxes(framework.id)["writer"]
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours")
    os.symlink(secret, sandbox / "link")
    assert _read(standin, f"{sandbox}/nosuch", offset=0)[0] == 404
    assert _read(standin, str(secret), offset=0)[0] == 404
    assert _read(standin, "/etc/passwd", offset=0)[0] == 404
    status, text = _read(standin, f"{sandbox}{'/..' * 40}/etc/passwd", offset=0)
    assert status == 400 and "is inaccessible" in text
    status, text = _read(standin, f"{sandbox}/link", offset=0)
    assert status == 400 and "is inaccessible" in text
    status, text = _read(standin, f"{sandbox}/sub", offset=0)
    assert status == 400 and "Cannot read a directory" in text


def test_files_browse_lists_a_sandbox(
    standin: StandIn, running: tuple[RecordingScheduler, Framework]
) -> None:
    _, framework = running
    sandbox = standin.sandboxes(framework.id)["writer"]
    status, body, _ = standin.request(
        "GET", f"/files/browse?path={quote(str(sandbox))}", address=standin.agent_endpoint()
    )
    assert status == 200
    listing = {entry["path"]: entry for entry in json.loads(body)}
    stdout = listing[f"{sandbox}/stdout"]
    assert stdout["size"] == len(CONTENT) and stdout["mode"].startswith("-")
    assert set(stdout) == {"path", "mode", "nlink", "uid", "gid", "size", "mtime"}
    assert listing[f"{sandbox}/sub"]["mode"].startswith("d")
    for bad, code in ((f"{sandbox}/nosuch", 404), ("", 400)):
        status, _, _ = standin.request(
            "GET", f"/files/browse?path={quote(bad)}", address=standin.agent_endpoint()
        )
        assert status == code


def test_sandbox_directories_are_only_in_the_agents_state(
    standin: StandIn, running: tuple[RecordingScheduler, Framework]
) -> None:
    _, framework = running
    master = standin.framework_state(framework.id)
    assert master is not None
    for executor in master["executors"]:
        assert set(executor) <= MASTER_EXECUTOR_FIELDS, set(executor) - MASTER_EXECUTOR_FIELDS
        assert "directory" not in executor
    # The master lists custom executors only: a command task's is the agent's business.
    assert [e["executor_id"] for e in master["executors"]] == ["app@-@files"]
    for task in master["tasks"] + master["completed_tasks"]:
        for status in task["statuses"]:
            assert set(status) <= V0_STATUS_FIELDS, status

    agent_state = standin.get_json("/state", standin.agent_endpoint())
    work_dir = agent_state["flags"]["work_dir"]
    (framework_json,) = agent_state["frameworks"]
    executors = {e["id"]: e for e in framework_json["executors"]}
    completed = {e["id"]: e for e in framework_json["completed_executors"]}
    for executor in [*executors.values(), *completed.values()]:
        assert set(executor) <= AGENT_EXECUTOR_FIELDS, set(executor) - AGENT_EXECUTOR_FIELDS
        assert executor["directory"].startswith(f"{work_dir}/slaves/{agent_state['id']}/")
    custom = executors["app@-@files"]
    assert [t["id"] for t in custom["tasks"]] == ["exec-run"]
    assert [t["id"] for t in custom["completed_tasks"]] == ["exec-fail"]
    assert [t["id"] for t in executors["writer"]["tasks"]] == ["writer"]
    # An ended command task's executor is a completed one, its task among completed tasks.
    assert [t["id"] for t in completed["failing"]["completed_tasks"]] == ["failing"]


def test_get_tasks_keeps_each_status_message_reason_and_source(
    standin: StandIn, running: tuple[RecordingScheduler, Framework]
) -> None:
    scheduler, _ = running
    status, body = standin.post_json("/api/v1", {"type": "GET_TASKS"})
    assert status == 200
    tasks = {
        t["task_id"]["value"]: t
        for t in body["get_tasks"]["tasks"] + body["get_tasks"]["completed_tasks"]
    }
    failing = tasks["failing"]["statuses"]
    # One status per state (a repeated state replaces the one before), as the master keeps.
    assert [s["state"] for s in failing] == ["TASK_STARTING", "TASK_RUNNING", "TASK_FAILED"]
    last = failing[-1]
    assert last["message"] == "Command exited with status 3"
    assert last["source"] == "SOURCE_EXECUTOR"
    assert "reason" not in last and "data" not in last
    # The command executor's updates name it: its id is the task's.
    assert last["executor_id"] == {"value": "failing"}
    update = scheduler.last("failing")
    assert update is not None
    assert update.status["executor_id"] == {"value": "failing"}
    assert tasks["exec-fail"]["statuses"][-1]["message"] == "fixture failure"
    assert tasks["exec-fail"]["statuses"][-1]["source"] == "SOURCE_EXECUTOR"
    assert tasks["exec-run"]["statuses"][-1]["state"] == "TASK_RUNNING"


def test_the_schedulers_sandbox_client_finds_and_reads_a_runs_files(
    standin: StandIn, running: tuple[RecordingScheduler, Framework]
) -> None:
    """What the scheduler reads of these documents, with its own client (scheduler.leader.
    mesos.sandbox): the agent from the master's GET_AGENTS, the sandbox from the agent's
    /state, bytes through /files/read; an agent that does not answer is a 502."""
    _, framework = running
    agents = sandbox.get_agents(standin.address)
    assert sorted(agents.values()) == sorted(
        s["pid"].split("@", 1)[1] for s in standin.state()["slaves"]
    )
    address = standin.agent_endpoint()
    state = sandbox.agent_state(address)
    writer_dir = sandbox.task_directory(state, "writer")
    assert writer_dir == str(standin.sandboxes(framework.id)["writer"])
    # A custom executor's sandbox holds its running and its ended tasks alike.
    custom = sandbox.task_directory(state, "exec-run")
    assert custom is not None and custom == sandbox.task_directory(state, "exec-fail")
    assert sandbox.task_directory(state, "nosuch") is None
    assert sandbox.relative_to_work_dir(custom, state).startswith("/slaves/")
    chunk = sandbox.read_file(address, f"{writer_dir}/stdout", 0, 20)
    assert chunk == sandbox.FileChunk(CONTENT[:20], 0)
    assert sandbox.read_file(address, f"{writer_dir}/stdout", -1, 0).offset == len(CONTENT)
    with pytest.raises(sandbox.SandboxNotFound):
        sandbox.read_file(address, f"{writer_dir}/nosuch", 0, 10)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(sandbox.AgentUnreachable) as caught:
        sandbox.read_file(f"127.0.0.1:{port}", f"{writer_dir}/stdout", 0, 10)
    assert caught.value.http_status == 502

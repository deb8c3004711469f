"""Sandboxes and their files, found the way real Mesos offers them.

A Mesos master knows which agent runs an executor or task, not where its sandbox is: the agent
is found by its id in the master's agent list (`pid` `slave(1)@host:port`, else `hostname` and
`port`), and the sandbox in the agent's own `/state` (frameworks and completed frameworks ->
executors and completed executors -> `directory`, the executor that holds the task among its
`tasks`, `queued_tasks` or `completed_tasks`; a command task's executor has the task's id). The
agent serves the files under that directory through `/files/read?path=&offset=&length=`, which
answers `{"data": ..., "offset": N}` with the file's bytes as they are (not necessarily UTF-8)
and with `offset=-1` the file's size.

Each request (`scheduler/leader/outbound.py`) has one deadline, `TIMEOUT_S`, for all of it
(connect, send, the whole answer: an agent that answers a byte at a time cannot hold the API
worker longer), follows no redirect (a 3xx is an answer the agent should not give) and reads at
most `_MAX_ANSWER_BYTES`; it runs on the caller's thread (an API worker). Errors:
`AgentUnreachable` (502) when the agent does not answer or answers nonsense,
`SandboxNotFound` (404) when the agent does not know the task or the file.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from scheduler.leader.outbound import request
from scheduler.model.errors import SchedulerError

__all__ = [
    "TIMEOUT_S",
    "AgentUnreachable",
    "FileChunk",
    "SandboxNotFound",
    "address_of",
    "agent_state",
    "executor_directories",
    "get_agents",
    "read_file",
    "relative_to_work_dir",
    "task_directory",
]

TIMEOUT_S = 5.0
# Far more than any agent answers to one read (Mesos: 16 pages), and still a bound.
_MAX_ANSWER_BYTES = 16 * 1024 * 1024


class AgentUnreachable(SchedulerError):
    """The Mesos agent (or master) did not answer, or not as Mesos does."""

    http_status = 502


class SandboxNotFound(SchedulerError):
    """The agent does not know the task, or the file is not in its sandbox."""

    http_status = 404


@dataclass(frozen=True)
class FileChunk:
    """Bytes of a sandbox file from `offset` (with `offset=-1` asked: no data, the size)."""

    data: bytes
    offset: int


def address_of(agent: Mapping[str, Any]) -> str | None:
    """`host:port` of an agent as the master lists it (v0 `slaves` entry or v1 `GET_AGENTS`
    entry): its pid's address, else its hostname and port."""
    pid = agent.get("pid")
    if isinstance(pid, str) and "@" in pid:
        address = pid.rpartition("@")[2]
        if address:
            return address
    nested = agent.get("agent_info")
    info: Mapping[str, Any] = nested if isinstance(nested, Mapping) else agent
    hostname, port = info.get("hostname"), info.get("port")
    if isinstance(hostname, str) and hostname and isinstance(port, int):
        return f"{hostname}:{port}"
    return None


def _get(url: str, what: str) -> bytes:
    try:
        answer = request(
            "GET",
            url,
            deadline_s=TIMEOUT_S,
            headers={"Accept": "application/json"},
            max_answer_bytes=_MAX_ANSWER_BYTES,
        )
    except TimeoutError as exc:
        raise AgentUnreachable(f"{what}: no whole answer within {TIMEOUT_S:g} s") from exc
    except OSError as exc:
        raise AgentUnreachable(f"{what}: cannot reach it ({exc})") from exc
    if answer.status == 404:
        raise SandboxNotFound(f"{what}: not found")
    if answer.status != 200:
        raise AgentUnreachable(f"{what}: the agent answered HTTP {answer.status}")
    return answer.body


def get_agents(master: str) -> dict[str, str]:
    """Agent id -> `host:port` of every agent the master at `master` knows (v1 `GET_AGENTS`).

    Raises OSError/ValueError when the master cannot be read.
    """
    reply = request(
        "POST",
        f"http://{master}/api/v1",
        deadline_s=TIMEOUT_S,
        body=b'{"type": "GET_AGENTS"}',
        headers={"Content-Type": "application/json", "Accept": "application/json"},
        max_answer_bytes=_MAX_ANSWER_BYTES,
    )
    if reply.status != 200:
        raise OSError(f"the Mesos master answered HTTP {reply.status} to GET_AGENTS")
    answer = json.loads(reply.body)
    try:
        agents = answer["get_agents"].get("agents", [])
        out: dict[str, str] = {}
        for agent in agents:
            address = address_of(agent)
            if address is not None:
                out[str(agent["agent_info"]["id"]["value"])] = address
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"unexpected GET_AGENTS answer: {exc!r}") from exc
    return out


def agent_state(address: str) -> dict[str, Any]:
    """The agent's own `/state`. Raises AgentUnreachable."""
    what = f"the Mesos agent at {address}"
    raw = _get(f"http://{address}/state", what)
    try:
        state = json.loads(raw)
    except ValueError as exc:
        raise AgentUnreachable(f"{what}: its /state is not JSON") from exc
    if not isinstance(state, dict):
        raise AgentUnreachable(f"{what}: its /state is not a JSON object")
    return state


def _executors(state: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(framework id, executor) of every executor in an agent's state, live ones first."""
    for key in ("frameworks", "completed_frameworks"):
        for framework in state.get(key) or []:
            if not isinstance(framework, Mapping):
                continue
            for kind in ("executors", "completed_executors"):
                for executor in framework.get(kind) or []:
                    if isinstance(executor, Mapping):
                        yield str(framework.get("id", "")), executor


def task_directory(state: Mapping[str, Any], task_id: str) -> str | None:
    """The sandbox directory of the executor that holds (or held) `task_id`, or None."""
    for _framework, executor in _executors(state):
        directory = executor.get("directory")
        if not isinstance(directory, str):
            continue
        if executor.get("id") == task_id:
            return directory  # a command task: its executor has the task's id
        for kind in ("tasks", "queued_tasks", "completed_tasks"):
            for task in executor.get(kind) or []:
                if isinstance(task, Mapping) and task.get("id") == task_id:
                    return directory
    return None


def executor_directories(
    state: Mapping[str, Any], framework_id: str, executor_ids: set[str]
) -> dict[str, str]:
    """Executor id -> sandbox directory, for the live executors of `framework_id` named."""
    out: dict[str, str] = {}
    for framework in state.get("frameworks") or []:
        if not isinstance(framework, Mapping) or framework.get("id") != framework_id:
            continue
        for executor in framework.get("executors") or []:
            if not isinstance(executor, Mapping):
                continue
            executor_id, directory = executor.get("id"), executor.get("directory")
            if executor_id in executor_ids and isinstance(directory, str):
                out[str(executor_id)] = directory
    return out


def relative_to_work_dir(directory: str, state: Mapping[str, Any]) -> str:
    """The directory below the agent's `work_dir` (`/slaves/...`), as Elastic-Job-Cloud showed
    it; the whole directory when it is not below it."""
    flags = state.get("flags")
    work_dir = flags.get("work_dir") if isinstance(flags, Mapping) else None
    if isinstance(work_dir, str) and work_dir:
        root = work_dir.rstrip("/")
        if directory.startswith(root + "/"):
            return directory[len(root) :]
    return directory


def read_file(address: str, path: str, offset: int, length: int) -> FileChunk:
    """`length` bytes (at most; the agent may give fewer) of the sandbox file `path` on the
    agent at `address` from `offset`; `offset=-1`: the file's size in `offset`.

    Raises SandboxNotFound (no such file) and AgentUnreachable.
    """
    query = urlencode({"path": path, "offset": offset, "length": length})
    raw = _get(f"http://{address}/files/read?{query}", f"the Mesos agent at {address}")
    try:
        # A real agent writes the file's bytes into the JSON string as they are.
        answer = json.loads(raw.decode("utf-8", "surrogateescape"))
        data, at = answer["data"], answer["offset"]
    except (ValueError, TypeError, KeyError) as exc:
        raise AgentUnreachable(
            f"the Mesos agent at {address}: /files/read did not answer {{data, offset}}"
        ) from exc
    if not isinstance(data, str) or not isinstance(at, int) or isinstance(at, bool) or at < 0:
        raise AgentUnreachable(
            f"the Mesos agent at {address}: /files/read did not answer {{data, offset}}"
        )
    return FileChunk(data.encode("utf-8", "surrogateescape"), at)

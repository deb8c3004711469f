"""Read-only views: the master's `/master/state`, an agent's `/state` and the v1 operator API
(`GET_STATE`, `GET_TASKS`, `GET_FRAMEWORKS`, `GET_AGENTS`, `GET_EXECUTORS`, `GET_HEALTH`,
`GET_VERSION`, `GET_FLAGS`). Callers hold the state lock.

The v0 `/state` documents use plain string ids and resource maps; the v1 API uses wrapped ids
and `[Resource]` lists, as Mesos's own do. Each shows what the real one shows, and no more:
- the master's executors are ExecutorInfos with their `slave_id` (`executor_id`, `name`,
  `framework_id`, `command`, `resources`, `role`, `type`); their sandbox `directory` (and `id`,
  `container`) are only in the agent's `/state`, whose executors list their running `tasks`,
  `queued_tasks` and `completed_tasks`;
- a task's v0 `statuses` are `{state, timestamp}`; v1 `GET_TASKS` keeps each status whole
  (`message`, `reason`, `source`, ids, `uuid`, `timestamp`) except its `data`, a repeated
  state replacing the one before.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .agent import Agent
from .executors import Executor, ExecutorState
from .master import Framework, Master, Task
from .protocol import MESOS_VERSION, TERMINAL_STATES, CallError, Json, wrap
from .resources import Resources

BUILD = {
    "build_date": "2024-08-23 00:00:00",
    "build_time": 1724371200.0,
    "build_user": "localmesos",
}


def version_json() -> Json:
    return {"version": MESOS_VERSION, **BUILD}


def flags(master: Master) -> Json:
    return {
        "work_dir": master.work_dir,
        "allocation_interval": f"{master.allocation_interval_s:g}secs",
        "hostname": "localhost",
        "ip": master.host,
        "port": str(master.port),
    }


# -- v0 documents --------------------------------------------------------------------------


def master_state(master: Master) -> Json:
    agents = list(master.agents.values())
    pid = f"master@{master.host}:{master.port}"
    return {
        **version_json(),
        "id": master.id,
        "pid": pid,
        "hostname": "localhost",
        "port": master.port,
        "leader": pid,
        "leader_info": master.master_info(),
        "start_time": master.start_time,
        "elected_time": master.elected_time,
        "activated_slaves": len(agents),
        "deactivated_slaves": 0,
        "unreachable_slaves": 0,
        "flags": flags(master),
        "slaves": [_agent_v0(master, a) for a in agents],
        "recovered_slaves": [],
        "frameworks": [_framework_v0(master, f) for f in master.frameworks.values()],
        "completed_frameworks": [_framework_v0(master, f) for f in master.completed_frameworks],
        "orphan_tasks": [],
        "unregistered_frameworks": [],
    }


def _agent_v0(master: Master, agent: Agent) -> Json:
    port = int(agent.endpoint.rpartition(":")[2] or 0)
    return {
        "id": agent.id,
        "pid": f"slave(1)@{agent.endpoint}",
        "hostname": agent.hostname,
        "port": port,
        "registered_time": agent.registered_time,
        "resources": agent.total.to_map(),
        "used_resources": agent.used.to_map(),
        "offered_resources": master.offers.offered_on(agent.id).to_map(),
        "reserved_resources": {},
        "unreserved_resources": agent.total.to_map(),
        "attributes": {},
        "active": agent.active,
        "version": MESOS_VERSION,
        "capabilities": ["MULTI_ROLE", "HIERARCHICAL_ROLE", "RESERVATION_REFINEMENT"],
    }


def _framework_v0(master: Master, framework: Framework) -> Json:
    info = framework.info
    used = Resources()
    for task in framework.tasks.values():
        if not task.released:
            used = used + task.resources
    executors = [
        e
        for agent in master.agents.values()
        for e in agent.executors.values()
        if e.framework_id == framework.id and e.custom
    ]
    for executor in executors:
        used = used + executor.resources
    offered = Resources()
    for offer in master.offers.of_framework(framework.id):
        offered = offered + offer.resources
    out = {
        "id": framework.id,
        "name": info.get("name", ""),
        "user": info.get("user", ""),
        "hostname": info.get("hostname", ""),
        "webui_url": info.get("webui_url", ""),
        "role": framework.role,
        "roles": info.get("roles") or [framework.role],
        "active": framework.active,
        "connected": framework.connected,
        "recovered": False,
        "failover_timeout": float(info.get("failover_timeout") or 0.0),
        "checkpoint": bool(info.get("checkpoint", False)),
        "capabilities": [c.get("type") for c in info.get("capabilities") or []],
        "registered_time": framework.registered_time,
        "unregistered_time": framework.unregistered_time or 0,
        "resources": used.to_map(),
        "allocated_resources": used.to_map(),
        "used_resources": used.to_map(),
        "offered_resources": offered.to_map(),
        "tasks": [_task_v0(t) for t in framework.tasks.values()],
        "unreachable_tasks": [],
        "completed_tasks": [_task_v0(t) for t in framework.completed_tasks],
        "offers": [
            {
                "id": o.id,
                "framework_id": o.framework_id,
                "slave_id": o.agent_id,
                "resources": o.resources.to_map(),
            }
            for o in master.offers.of_framework(framework.id)
        ],
        "executors": [
            _master_executor(e, agent_id) for agent_id, e in _with_agent(master, executors)
        ],
    }
    if framework.reregistered_time is not None:
        out["reregistered_time"] = framework.reregistered_time
    if info.get("principal"):
        out["principal"] = info["principal"]
    return out


def _with_agent(master: Master, executors: list[Executor]) -> list[tuple[str, Executor]]:
    out = []
    for agent in master.agents.values():
        out += [(agent.id, e) for e in executors if agent.executors.get(e.key) is e]
    return out


def _task_v0(task: Task) -> Json:
    out = {
        "id": task.id,
        "name": task.name,
        "framework_id": task.framework_id,
        "executor_id": task.executor_id or "",
        "slave_id": task.agent_id,
        "state": task.state,
        "resources": task.resources.to_map(),
        "role": "*",
        "statuses": [{"state": st["state"], "timestamp": st["timestamp"]} for st in task.statuses],
    }
    for key in ("labels", "discovery"):
        if key in task.info:
            out[key] = task.info[key]
    return out


def _master_executor(executor: Executor, agent_id: str) -> Json:
    """An executor as the master's `/state` shows it: its ExecutorInfo and agent, no sandbox."""
    info = executor.info
    out: Json = {
        "executor_id": executor.executor_id,
        "name": info.get("name", ""),
        "framework_id": executor.framework_id,
        "command": info.get("command", {}),
        "resources": executor.resources.to_map(),
    }
    if executor.resources.to_map():
        out["role"] = "*"
    if "type" in info:
        out["type"] = info["type"]
    out["slave_id"] = agent_id
    return out


def _agent_executor(executor: Executor) -> Json:
    """An executor as the agent's own `/state` shows it, sandbox directory included."""
    info = executor.info
    out: Json = {
        "id": executor.executor_id,
        "name": info.get("name", ""),
        "source": info.get("source", ""),
        "container": executor.container_id,
        "directory": str(executor.directory),
        "resources": executor.resources.to_map(),
    }
    if "type" in info:
        out["type"] = info["type"]
    return out


def agent_state(master: Master, agent: Agent) -> Json:
    """An agent's own `/state` (the original reads `flags.work_dir` and directories here)."""
    frameworks: dict[str, list[Executor]] = {}
    completed: dict[str, list[Executor]] = {}
    for executor in agent.executors.values():
        frameworks.setdefault(executor.framework_id, []).append(executor)
    for executor in agent.completed_executors:
        completed.setdefault(executor.framework_id, []).append(executor)
    framework_ids = sorted(set(frameworks) | set(completed) | set(agent.frameworks))

    def executor_json(executor: Executor) -> Json:
        ended = executor.state is ExecutorState.TERMINATED
        all_tasks = list(executor.tasks.values())
        done = [t for t in all_tasks if ended or t.state in TERMINAL_STATES]
        return {
            **_agent_executor(executor),
            "tasks": [
                _agent_task(agent, executor, t) for t in all_tasks if t.launched and t not in done
            ],
            "queued_tasks": [
                _agent_task(agent, executor, t)
                for t in all_tasks
                if not t.launched and t not in done
            ],
            "completed_tasks": [_agent_task(agent, executor, t) for t in done],
        }

    def framework_json(framework_id: str) -> Json:
        info = agent.frameworks.get(framework_id, {})
        return {
            "id": framework_id,
            "name": info.get("name", ""),
            "user": info.get("user", ""),
            "checkpoint": bool(info.get("checkpoint", False)),
            "failover_timeout": float(info.get("failover_timeout") or 0.0),
            "role": "*",
            "executors": [executor_json(e) for e in frameworks.get(framework_id, [])],
            "completed_executors": [executor_json(e) for e in completed.get(framework_id, [])],
        }

    return {
        **version_json(),
        "id": agent.id,
        "pid": f"slave(1)@{agent.endpoint}",
        "hostname": agent.hostname,
        "resources": agent.total.to_map(),
        "attributes": {},
        "start_time": master.start_time,
        "master_hostname": "localhost",
        "flags": {**flags(master), "port": agent.endpoint.rpartition(":")[2]},
        "frameworks": [framework_json(f) for f in framework_ids if f in frameworks],
        "completed_frameworks": [framework_json(f) for f in framework_ids if f not in frameworks],
    }


def _agent_task(agent: Agent, executor: Executor, task: Any) -> Json:
    info = task.info
    return {
        "id": info["task_id"]["value"],
        "name": info.get("name", ""),
        "framework_id": executor.framework_id,
        "executor_id": executor.executor_id if executor.custom else "",
        "slave_id": agent.id,
        "state": task.state,
        "resources": Resources.from_json(info.get("resources")).to_map(),
    }


# -- v1 operator API -----------------------------------------------------------------------


def operator_call(master: Master, call: Json) -> Json:
    """Answer a v1 operator call. Raises CallError(400) for unsupported types."""
    kind = call.get("type")
    builders: dict[str, Callable[[], Json]] = {
        "GET_TASKS": lambda: _get_tasks(master),
        "GET_FRAMEWORKS": lambda: _get_frameworks(master),
        "GET_AGENTS": lambda: _get_agents(master),
        "GET_EXECUTORS": lambda: _get_executors(master),
        "GET_HEALTH": lambda: {"healthy": True},
        "GET_VERSION": lambda: {"version_info": version_json()},
        "GET_FLAGS": lambda: {"flags": [{"name": k, "value": v} for k, v in flags(master).items()]},
        "GET_MASTER": lambda: {
            "master_info": master.master_info(),
            "start_time": master.start_time,
            "elected_time": master.elected_time,
        },
        "GET_STATE": lambda: {
            "get_tasks": _get_tasks(master),
            "get_executors": _get_executors(master),
            "get_frameworks": _get_frameworks(master),
            "get_agents": _get_agents(master),
        },
    }
    if not isinstance(kind, str) or kind not in builders:
        raise CallError(400, f"Unsupported operator call type {kind!r}")
    return {"type": kind, kind.lower(): builders[kind]()}


def _nanos(seconds: float | None) -> Json:
    return {"nanoseconds": int((seconds or time.time()) * 1e9)}


def _task_v1(task: Task) -> Json:
    out: Json = {
        "name": task.name,
        "task_id": wrap(task.id),
        "framework_id": wrap(task.framework_id),
        "agent_id": wrap(task.agent_id),
        "state": task.state,
        "resources": task.resources.to_json(),
        "statuses": [{"task_id": wrap(task.id), **st} for st in task.statuses],
    }
    if task.executor_id:
        out["executor_id"] = wrap(task.executor_id)
    if task.update_state:
        out["status_update_state"] = task.update_state
        out["status_update_uuid"] = task.update_uuid
    return out


def _get_tasks(master: Master) -> Json:
    frameworks = [*master.frameworks.values(), *master.completed_frameworks]
    return {
        "tasks": [_task_v1(t) for f in master.frameworks.values() for t in f.tasks.values()],
        "unreachable_tasks": [],
        "completed_tasks": [_task_v1(t) for f in frameworks for t in f.completed_tasks],
    }


def _get_frameworks(master: Master) -> Json:
    def one(framework: Framework) -> Json:
        return {
            "framework_info": framework.info,
            "active": framework.active,
            "connected": framework.connected,
            "recovered": False,
            "registered_time": _nanos(framework.registered_time),
        }

    return {
        "frameworks": [one(f) for f in master.frameworks.values()],
        "completed_frameworks": [one(f) for f in master.completed_frameworks],
        "recovered_frameworks": [],
    }


def _get_agents(master: Master) -> Json:
    return {
        "agents": [
            {
                "agent_info": a.agent_info(),
                "active": a.active,
                "version": MESOS_VERSION,
                "pid": f"slave(1)@{a.endpoint}",
                "registered_time": _nanos(a.registered_time),
                "total_resources": a.total.to_json(),
                "allocated_resources": a.used.to_json(),
                "offered_resources": master.offers.offered_on(a.id).to_json(),
            }
            for a in master.agents.values()
        ],
        "recovered_agents": [],
    }


def _get_executors(master: Master) -> Json:
    return {
        "executors": [
            {"executor_info": e.info, "agent_id": wrap(a.id)}
            for a in master.agents.values()
            for e in a.executors.values()
            if e.custom
        ],
        "completed_executors": [],
    }

"""The agent side of `POST /api/v1/executor` (SUBSCRIBE, UPDATE, MESSAGE as pymesos's
MesosExecutorDriver sends them), under the state lock."""

from __future__ import annotations

import logging
from typing import Any

from .agent import Agent
from .executors import Executor, ExecutorState
from .protocol import KNOWN_STATES, TERMINAL_STATES, CallError, Json, decode_uuid, event, id_value
from .streams import EventStream

log = logging.getLogger(__name__)


def subscribe(agent: Agent, call: Json) -> EventStream:
    """An executor (re)subscribes: SUBSCRIBED, then LAUNCH for its queued tasks only.

    An unknown or terminating executor gets SHUTDOWN and the stream closes, as on a real
    agent. Raises CallError(400) for a malformed call.
    """
    framework_id, executor_id = _ids(call)
    payload = call.get("subscribe")
    if not isinstance(payload, dict):
        raise CallError(400, "Expecting 'subscribe' to be present")
    executor = agent.live_executor(framework_id, executor_id)
    name = f"executor {executor_id} of {framework_id}"
    if (
        executor is None
        or executor.state is ExecutorState.TERMINATING
        or framework_id not in agent.frameworks
        or not executor.custom
    ):
        log.warning("%s: unknown or terminating, sending SHUTDOWN", name)
        stream = EventStream(name)
        stream.send(event("SHUTDOWN"))
        stream.close()
        return stream
    if executor.stream is not None:
        executor.stream.close()
    stream = EventStream(name, on_closed=lambda s: _stream_closed(agent, executor, s))
    executor.stream = stream

    for status in payload.get("unacknowledged_updates") or []:
        if isinstance(status, dict) and isinstance(status.get("status"), dict):
            agent.status_update(framework_id, status["status"])
    unacked = {id_value(task, "task_id") for task in payload.get("unacknowledged_tasks") or []}
    for task_id, task in executor.tasks.items():
        if task.launched and task.state == "TASK_STAGING" and task_id not in unacked:
            agent.agent_update(
                framework_id,
                task.info,
                agent.lost_state(framework_id),
                "REASON_AGENT_RESTARTED",
                "Task was not received by the executor",
                executor_id,
            )

    framework_info = dict(agent.frameworks[framework_id])
    framework_info["id"] = {"value": framework_id}
    stream.send(
        event(
            "SUBSCRIBED",
            {
                "executor_info": executor.info,
                "framework_info": framework_info,
                "agent_info": agent.agent_info(),
                "container_id": {"value": executor.container_id},
            },
        )
    )
    reregistered = executor.subscribed_once
    executor.subscribed_once = True
    if executor.state is ExecutorState.REGISTERING or executor.state is ExecutorState.LAUNCHING:
        executor.state = ExecutorState.RUNNING
    agent.flush_queue(executor)
    log.info("%s: %s", name, "re-subscribed" if reregistered else "subscribed")
    return stream


def handle_call(agent: Agent, call: Json) -> None:
    """UPDATE, MESSAGE or HEARTBEAT from a subscribed executor. Raises CallError."""
    kind = call.get("type")
    framework_id, executor_id = _ids(call)
    executor = agent.live_executor(framework_id, executor_id)
    if executor is None or not executor.custom:
        raise CallError(400, f"Executor '{executor_id}' of framework '{framework_id}' not found")
    if not executor.subscribed_once:
        raise CallError(403, "Executor is not subscribed")
    if kind == "HEARTBEAT":
        return
    if kind == "UPDATE":
        _update(agent, executor, call)
    elif kind == "MESSAGE":
        message = call.get("message")
        if not isinstance(message, dict) or not isinstance(message.get("data"), str):
            raise CallError(400, "Expecting 'message' to be present")
        agent.master.executor_message(
            agent, executor.framework_id, executor.executor_id, message["data"]
        )
    else:
        raise CallError(400, f"Unsupported executor call type {kind!r}")


def _update(agent: Agent, executor: Executor, call: Json) -> None:
    update = call.get("update")
    status: Any = update.get("status") if isinstance(update, dict) else None
    if not isinstance(status, dict):
        raise CallError(400, "Expecting 'update' to be present")
    task_id = id_value(status, "task_id")
    state = status.get("state")
    if task_id is None or state not in KNOWN_STATES:
        raise CallError(400, "Status update needs a task_id and a known state")
    decode_uuid(status.get("uuid"), "status.uuid")
    if status.get("source", "SOURCE_EXECUTOR") != "SOURCE_EXECUTOR":
        raise CallError(400, "Received status update with an invalid source")
    if state == "TASK_STAGING":
        raise CallError(400, "Received TASK_STAGING from executor")
    sent_executor = id_value(status, "executor_id")
    if sent_executor is not None and sent_executor != executor.executor_id:
        raise CallError(400, "ExecutorID in Call and TaskStatus differ")
    status["source"] = "SOURCE_EXECUTOR"
    status["executor_id"] = {"value": executor.executor_id}
    ack_uuid = status["uuid"]
    agent.status_update(executor.framework_id, status)
    if executor.stream is not None:
        # The agent acknowledges receipt at once; the scheduler's ack is a separate matter.
        executor.stream.send(
            event("ACKNOWLEDGED", {"task_id": {"value": task_id}, "uuid": ack_uuid})
        )
    if state in TERMINAL_STATES:
        log.info("task %s: %s from executor %s", task_id, state, executor.executor_id)


def _stream_closed(agent: Agent, executor: Executor, stream: EventStream) -> None:
    with agent.lock:
        if executor.stream is stream:
            executor.stream = None
            log.info("executor %s: disconnected", executor.executor_id)


def _ids(call: Json) -> tuple[str, str]:
    framework_id = id_value(call, "framework_id")
    executor_id = id_value(call, "executor_id")
    if framework_id is None:
        raise CallError(400, "Expecting 'framework_id' to be present")
    if executor_id is None:
        raise CallError(400, "Expecting 'executor_id' to be present")
    return framework_id, executor_id

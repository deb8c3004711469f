"""Command tasks (a TaskInfo with a CommandInfo and no executor), run the way Mesos's command
executor runs them.

The stand-in is the command executor itself: the task's command runs in its own session with
the task id as executor id (which its updates carry, as the real command executor's do);
STARTING and RUNNING follow the spawn, and the exit becomes FINISHED, FAILED ("Command exited
with status N", no reason) or KILLED. Kills send SIGTERM, then SIGKILL
after the kill policy's grace period (3 s by default); `max_completion_time` kills and fails
the task with REASON_MAX_COMPLETION_TIME_REACHED. Everything here runs under the state lock.
"""

from __future__ import annotations

import os
import signal
from typing import TYPE_CHECKING

from .executors import Executor, ExecutorState
from .protocol import TERMINAL_STATES, Json, duration_s, has_capability

if TYPE_CHECKING:
    from .agent import Agent

_KILL_GRACE_S = 3.0  # the command executor's default kill grace period


def command_executor_info(framework_id: str, task: Json) -> Json:
    """The ExecutorInfo Mesos makes up for a command task (shown in the agent's /state)."""
    task_id = task["task_id"]["value"]
    command = task.get("command") or {}
    return {
        "executor_id": {"value": task_id},
        "framework_id": {"value": framework_id},
        "name": f"Command Executor (Task: {task_id}) (Command: sh -c '{command.get('value')}')",
        "source": task_id,
        "command": command,
        "type": "DEFAULT",
    }


def command_started(agent: Agent, executor: Executor) -> None:
    executor.state = ExecutorState.RUNNING
    task = executor.command_task
    assert task is not None
    for state in ("TASK_STARTING", "TASK_RUNNING"):
        agent.agent_update(
            executor.framework_id, task, state, None, None, executor.executor_id, "EXECUTOR"
        )
    limit_s = duration_s(task.get("max_completion_time"), -1.0)
    if limit_s >= 0:
        executor.timers.append(
            agent.clock.call_later(
                limit_s,
                lambda: kill_command(agent, executor, "REASON_MAX_COMPLETION_TIME_REACHED"),
            )
        )


def kill_command(agent: Agent, executor: Executor, reason: str, grace_s: float = -1.0) -> None:
    with agent.lock:
        if executor.state is not ExecutorState.RUNNING or executor.handle is None:
            return
        task = executor.command_task
        assert task is not None
        executor.kill_reason = reason
        executor.state = ExecutorState.TERMINATING
        framework = agent.frameworks.get(executor.framework_id, {})
        if reason == "KILL" and has_capability(framework, "TASK_KILLING_STATE"):
            agent.agent_update(
                executor.framework_id,
                task,
                "TASK_KILLING",
                None,
                None,
                executor.executor_id,
                "EXECUTOR",
            )
        agent.containers.kill(executor, signal.SIGTERM)
        if grace_s < 0:
            grace_s = duration_s((task.get("kill_policy") or {}).get("grace_period"), _KILL_GRACE_S)
        agent.containers.kill_later(executor, grace_s)


def command_exited(agent: Agent, executor: Executor, wait_status: int) -> None:
    task = executor.command_task
    assert task is not None
    if executor.tasks[task["task_id"]["value"]].state not in TERMINAL_STATES:
        state, reason, message = _outcome(executor, wait_status)
        agent.agent_update(
            executor.framework_id, task, state, reason, message, executor.executor_id, "EXECUTOR"
        )


def _outcome(executor: Executor, wait_status: int) -> tuple[str, str | None, str]:
    """(state, reason, message) of a finished command task, as the command executor says it."""
    if executor.kill_reason == "KILL":
        state, reason = "TASK_KILLED", None
    elif executor.kill_reason is not None:
        state, reason = "TASK_FAILED", executor.kill_reason
    elif wait_status == 0:
        state, reason = "TASK_FINISHED", None
    else:
        state, reason = "TASK_FAILED", None
    return state, reason, _describe_exit(wait_status)


def _describe_exit(wait_status: int) -> str:
    try:
        code = os.waitstatus_to_exitcode(wait_status)
    except ValueError:
        return f"Command exited with wait status {wait_status}"
    if code >= 0:
        return f"Command exited with status {code}"
    try:
        name = signal.strsignal(-code) or str(-code)
    except ValueError:
        name = str(-code)
    return f"Command terminated with signal {name}"

"""What an agent keeps per executor, and how it builds an executor's command line and env.

A command task (TaskInfo with `command`) is run the way Mesos's command executor runs it, but
directly: the stand-in itself is its executor, so it is an `Executor` with `command_task` set
and the task id as executor id.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .clock import Timer
from .processes import ProcessHandle
from .protocol import Json, format_duration
from .resources import Resources
from .streams import EventStream


class ExecutorState(enum.Enum):
    LAUNCHING = "LAUNCHING"  # fetching URIs, not yet a process
    REGISTERING = "REGISTERING"  # running, has not subscribed yet
    RUNNING = "RUNNING"  # subscribed (a command task: its process runs)
    TERMINATING = "TERMINATING"  # shut down or killed, waiting for the exit
    TERMINATED = "TERMINATED"


@dataclass(slots=True)
class AgentTask:
    info: Json
    state: str = "TASK_STAGING"
    launched: bool = False  # sent to the executor in LAUNCH / LAUNCH_GROUP


@dataclass(slots=True)
class Executor:
    framework_id: str
    executor_id: str
    info: Json  # ExecutorInfo with framework_id filled in
    container_id: str
    directory: Path
    resources: Resources  # the executor's own, freed when it exits
    command_task: Json | None = None
    state: ExecutorState = ExecutorState.LAUNCHING
    handle: ProcessHandle | None = None
    pending_exit: int | None = None  # exit seen before the launcher recorded the process
    stream: EventStream | None = None
    subscribed_once: bool = False
    tasks: dict[str, AgentTask] = field(default_factory=dict)
    queue: list[tuple[str, list[str]]] = field(default_factory=list)  # (LAUNCH[_GROUP], ids)
    timers: list[Timer] = field(default_factory=list)
    framework_removed: bool = False  # no updates any more: the framework is gone
    kill_reason: str | None = None  # command task: REASON_* it was killed for, or "KILL"
    exit_status: int | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.framework_id, self.executor_id)

    @property
    def custom(self) -> bool:
        return self.command_task is None

    def cancel_timers(self) -> None:
        for timer in self.timers:
            timer.cancel()
        self.timers.clear()


def command_argv(command: Mapping[str, Any]) -> list[str]:
    """`sh -c value` for shell commands (the default), else `value` run with `arguments`.

    As in Mesos, `arguments` is the whole argv (argv[0] included) when shell is false.

    Raises ValueError if there is nothing to run.
    """
    value = command.get("value")
    if not isinstance(value, str) or not value:
        raise ValueError("CommandInfo has no value to run")
    if command.get("shell", True):
        return ["sh", "-c", value]
    arguments = [str(a) for a in command.get("arguments") or []]
    return [value, *arguments[1:]]


# What a Mesos agent puts on PATH when neither its --executor_environment_variables nor the
# command says otherwise (stout's os::host_default_path()).
HOST_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def executor_env(
    *,
    framework_id: str,
    executor_id: str,
    agent_id: str,
    agent_endpoint: str,
    directory: Path,
    checkpoint: bool,
    shutdown_grace_period_s: float,
    command: Mapping[str, Any],
    agent_environment: Mapping[str, str],
) -> dict[str, str]:
    """The environment a Mesos agent gives an executor, and nothing else: the operator's
    `agent_environment` (Mesos's --executor_environment_variables), the MESOS_* variables
    (those pymesos's MesosExecutorDriver reads to find the agent and identify itself),
    LIBPROCESS_PORT=0, PATH (the host default unless one of those set it) and, last, the
    command's own `environment` (VALUE variables). Never the stand-in's own environment: a
    secret exported to it (EJC_ZK_DIGEST, say) must not reach job code (issue 23).

    MESOS_CHECKPOINT is set only for checkpointing frameworks: pymesos treats any value as
    true and then never exits on its own when the agent goes away.
    """
    env = {
        k: v for k, v in agent_environment.items() if not k.startswith(("MESOS_", "LIBPROCESS_"))
    }
    env.update(
        {
            "MESOS_FRAMEWORK_ID": framework_id,
            "MESOS_EXECUTOR_ID": executor_id,
            "MESOS_DIRECTORY": str(directory),
            "MESOS_SANDBOX": str(directory),
            "MESOS_SLAVE_ID": agent_id,
            "MESOS_AGENT_ID": agent_id,
            "MESOS_SLAVE_PID": f"slave(1)@{agent_endpoint}",
            "MESOS_AGENT_ENDPOINT": agent_endpoint,
            "MESOS_HTTP_COMMAND_EXECUTOR": "0",
            "MESOS_EXECUTOR_SHUTDOWN_GRACE_PERIOD": format_duration(shutdown_grace_period_s),
            "LIBPROCESS_PORT": "0",
        }
    )
    env.setdefault("PATH", HOST_DEFAULT_PATH)
    if checkpoint:
        env["MESOS_CHECKPOINT"] = "1"
        env["MESOS_RECOVERY_TIMEOUT"] = "15mins"
        env["MESOS_SUBSCRIPTION_BACKOFF_MAX"] = "2secs"
    environment = command.get("environment") or {}
    for variable in environment.get("variables") or []:
        if (
            isinstance(variable, dict)
            and isinstance(variable.get("name"), str)
            and variable.get("type", "VALUE") == "VALUE"
        ):
            env[variable["name"]] = str(variable.get("value", ""))
    return env

"""One agent: runs executors and command tasks as local processes and relays their updates.

Launching (fetch + spawn) happens on the shared launcher pool, outside the state lock;
everything else runs under the state lock shared with the master. The executor HTTP API is in
`executor_api.py`; the status update manager in `updates.py`.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import deque
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from . import commands
from .checkpoint import AgentCheckpoint
from .clock import Clock
from .containers import Containers
from .executors import (
    AgentTask,
    Executor,
    ExecutorState,
    command_argv,
    executor_env,
)
from .files import SandboxFiles
from .processes import ProcessSupervisor
from .protocol import TERMINAL_STATES, Json, duration_s, event, has_capability, task_status, wrap
from .resources import Resources
from .updates import StatusUpdateManager

log = logging.getLogger(__name__)

_COMPLETED_EXECUTORS_KEPT = 200


class MasterLink(Protocol):
    """What an agent reports to the master (called under the state lock)."""

    def task_state_changed(self, agent: Agent, framework_id: str, status: Json) -> None: ...
    def forward_update(self, agent: Agent, framework_id: str, status: Json) -> None: ...
    def executor_terminated(self, agent: Agent, executor: Executor) -> None: ...
    def executor_message(
        self, agent: Agent, framework_id: str, executor_id: str, data: str
    ) -> None: ...


class Agent:
    """An agent's executors, sandboxes and update streams."""

    def __init__(
        self,
        *,
        agent_id: str,
        hostname: str,
        total: Resources,
        work_dir: Path,
        lock: threading.RLock,
        clock: Clock,
        supervisor: ProcessSupervisor,
        launcher: ThreadPoolExecutor,
        master: MasterLink,
        registration_timeout_s: float,
        shutdown_grace_period_s: float,
        executor_environment: Mapping[str, str],
        max_extracted_bytes: int,
        checkpoint: AgentCheckpoint | None = None,
    ) -> None:
        """`checkpoint`: where the agent records its executor runs (frameworks that ask for
        checkpointing) and recovers those of its earlier lives from (None: nothing kept)."""
        self.id = agent_id
        self.hostname = hostname
        self.total = total
        self.used = Resources()  # kept by the master: tasks plus executors
        self.work_dir = work_dir
        self.endpoint = ""  # "127.0.0.1:port" once its HTTP server listens
        self.active = True
        self.registered_time = 0.0
        self.frameworks: dict[str, Json] = {}  # framework id -> FrameworkInfo with id
        self.executors: dict[tuple[str, str], Executor] = {}
        self.completed_executors: deque[Executor] = deque(maxlen=_COMPLETED_EXECUTORS_KEPT)
        self.lock = lock
        self.clock = clock
        self.master = master
        self._registration_timeout_s = registration_timeout_s
        self._shutdown_grace_period_s = shutdown_grace_period_s
        self._executor_environment = dict(executor_environment)
        self.containers = Containers(
            agent_id=agent_id,
            work_dir=work_dir,
            lock=lock,
            clock=clock,
            supervisor=supervisor,
            launcher=launcher,
            hooks=self,
            max_extracted_bytes=max_extracted_bytes,
        )
        self.updates = StatusUpdateManager(clock, self._forward, lock)
        # `/files/read` and `/files/browse` over every sandbox this agent made.
        self.files = SandboxFiles()
        self._checkpoint = checkpoint
        if checkpoint is not None:
            self._recover(checkpoint)

    def _recover(self, checkpoint: AgentCheckpoint) -> None:
        """The executor runs of earlier lives, as completed executors with their sandboxes."""
        for run in checkpoint.recover():
            tasks = {
                task_id: AgentTask(info, state, launched=True)
                for task_id, (info, state) in run.tasks.items()
            }
            first = next(iter(tasks.values()), None)
            executor = Executor(
                framework_id=run.framework_id,
                executor_id=run.executor_id,
                info=run.info,
                container_id=run.container_id,
                directory=run.directory,
                resources=Resources(),
                command_task=(first.info if first is not None else {}) if run.command else None,
                state=ExecutorState.TERMINATED,
                tasks=tasks,
            )
            self.completed_executors.append(executor)
            self.files.attach(executor.directory, run.framework_id, run.executor_id)
        if self.completed_executors:
            log.info(
                "agent %s: recovered %d completed executors from its work dir",
                self.id,
                len(self.completed_executors),
            )

    @contextmanager
    def launching(self) -> Iterator[None]:
        """A master's ACCEPT hands its tasks over (under the state lock): the executors they
        need start, and their checkpoint files are written, once it ends."""
        checkpoint = self._checkpoint
        with self.containers.held():
            if checkpoint is None:
                yield
                return
            with checkpoint.held():
                yield

    def _checkpointed(self, framework_id: str) -> AgentCheckpoint | None:
        """The checkpoint, when the framework asked for checkpointing (FrameworkInfo)."""
        if self._checkpoint is None or not self.frameworks.get(framework_id, {}).get("checkpoint"):
            return None
        return self._checkpoint

    # -- info ------------------------------------------------------------------------------

    def agent_info(self) -> Json:
        port = int(self.endpoint.rpartition(":")[2] or 5051)
        return {
            "id": wrap(self.id),
            "hostname": self.hostname,
            "port": port,
            "resources": self.total.to_json(),
            "attributes": [],
        }

    def live_executor(self, framework_id: str, executor_id: str) -> Executor | None:
        executor = self.executors.get((framework_id, executor_id))
        if executor is None or executor.state is ExecutorState.TERMINATED:
            return None
        return executor

    def executor_of_task(self, framework_id: str, task_id: str) -> Executor | None:
        for executor in self.executors.values():
            if executor.framework_id == framework_id and task_id in executor.tasks:
                return executor
        return None

    # -- launching -------------------------------------------------------------------------

    def run_tasks(
        self, framework_info: Json, tasks: list[Json], executor_info: Json | None, group: bool
    ) -> None:
        """Start `tasks` (already validated and accounted by the master)."""
        framework_id = framework_info["id"]["value"]
        self.frameworks[framework_id] = framework_info
        if executor_info is None:
            for task in tasks:
                self._start_command_task(framework_id, task)
            return
        executor_id = executor_info["executor_id"]["value"]
        executor = self.live_executor(framework_id, executor_id)
        if executor is not None and executor.state is ExecutorState.TERMINATING:
            reason, state = "REASON_EXECUTOR_TERMINATED", self.lost_state(framework_id)
            for task in tasks:
                self.agent_update(
                    framework_id, task, state, reason, "Executor terminating", executor_id
                )
            return
        if executor is None:
            executor = self._new_executor(framework_id, executor_id, executor_info, None)
            executor.resources = Resources.from_json(executor_info.get("resources"))
            self._launch(executor)
        ids = [task["task_id"]["value"] for task in tasks]
        checkpoint = self._checkpointed(framework_id)
        for task in tasks:
            executor.tasks[task["task_id"]["value"]] = AgentTask(task)
            if checkpoint is not None:
                checkpoint.task_added(framework_id, executor_id, executor.container_id, task)
        executor.queue.append(("LAUNCH_GROUP" if group else "LAUNCH", ids))
        if executor.state is ExecutorState.RUNNING and executor.stream is not None:
            self.flush_queue(executor)

    def _new_executor(
        self, framework_id: str, executor_id: str, info: Json, command_task: Json | None
    ) -> Executor:
        container_id = str(uuid.uuid4())
        executor = Executor(
            framework_id=framework_id,
            executor_id=executor_id,
            info=info,
            container_id=container_id,
            directory=self.containers.sandbox(framework_id, executor_id, container_id),
            resources=Resources(),
            command_task=command_task,
        )
        self.executors[executor.key] = executor
        self.files.attach(executor.directory, framework_id, executor_id)
        checkpoint = self._checkpointed(framework_id)
        if checkpoint is not None:
            checkpoint.executor_started(
                framework_id,
                executor_id,
                container_id,
                executor.directory,
                info,
                command_task is not None,
            )
        return executor

    def _start_command_task(self, framework_id: str, task: Json) -> None:
        task_id = task["task_id"]["value"]
        info = commands.command_executor_info(framework_id, task)
        executor = self._new_executor(framework_id, task_id, info, task)
        executor.tasks[task_id] = AgentTask(task, launched=True)
        checkpoint = self._checkpointed(framework_id)
        if checkpoint is not None:
            checkpoint.task_added(framework_id, task_id, executor.container_id, task)
        self._launch(executor)

    def _launch(self, executor: Executor) -> None:
        command = executor.info.get("command") or {}
        try:
            argv = command_argv(command)
        except ValueError as exc:
            self.container_failed(executor, str(exc))
            return
        env = executor_env(
            framework_id=executor.framework_id,
            executor_id=executor.executor_id,
            agent_id=self.id,
            agent_endpoint=self.endpoint,
            directory=executor.directory,
            checkpoint=bool(self.frameworks[executor.framework_id].get("checkpoint")),
            shutdown_grace_period_s=self._grace_s(executor),
            command=command,
            agent_environment=self._executor_environment,
        )
        self.containers.launch(executor, argv, env)

    # -- container hooks (under the lock) ---------------------------------------------------

    def container_started(self, executor: Executor) -> None:
        if not executor.custom:
            commands.command_started(self, executor)
            return
        executor.state = ExecutorState.REGISTERING
        executor.timers.append(
            self.clock.call_later(
                self._registration_timeout_s, lambda: self._registration_timed_out(executor)
            )
        )

    def container_failed(self, executor: Executor, error: str) -> None:
        log.warning("executor %s: launch failed: %s", executor.executor_id, error)
        if executor.state is ExecutorState.LAUNCHING:
            message = f"Failed to launch container: {error}"
            self._fail_open_tasks(executor, "REASON_CONTAINER_LAUNCH_FAILED", message)
        executor.exit_status = -1
        self._terminated(executor)

    def container_exited(self, executor: Executor, wait_status: int) -> None:
        executor.exit_status = wait_status
        if not executor.framework_removed and self.active:
            if executor.custom:
                self._fail_open_tasks(executor, "REASON_EXECUTOR_TERMINATED", "Executor terminated")
            else:
                commands.command_exited(self, executor, wait_status)
        self._terminated(executor)

    def _registration_timed_out(self, executor: Executor) -> None:
        with self.lock:
            if executor.state is not ExecutorState.REGISTERING:
                return
            log.warning(
                "executor %s: did not register within %.1fs",
                executor.executor_id,
                self._registration_timeout_s,
            )
            message = f"Executor did not register within {self._registration_timeout_s:g}secs"
            self._fail_open_tasks(executor, "REASON_EXECUTOR_REGISTRATION_TIMEOUT", message)
            self._kill_now(executor)

    def _fail_open_tasks(self, executor: Executor, reason: str, message: str) -> None:
        """TASK_FAILED (an agent update, with uuid) for each of its unfinished tasks."""
        for task in executor.tasks.values():
            if task.state not in TERMINAL_STATES:
                self.agent_update(
                    executor.framework_id,
                    task.info,
                    "TASK_FAILED",
                    reason,
                    message,
                    executor.executor_id,
                )

    # -- stopping --------------------------------------------------------------------------

    def kill_task(self, framework_id: str, task_id: str, kill_policy: Any) -> None:
        executor = self.executor_of_task(framework_id, task_id)
        if executor is None or executor.state is ExecutorState.TERMINATED:
            log.info("task %s: kill ignored, no live executor holds it", task_id)
            return
        task = executor.tasks[task_id]
        if task.state in TERMINAL_STATES:
            return
        if not executor.custom:
            if executor.state is ExecutorState.LAUNCHING:
                self._killed_during_launch(executor, task)
                executor.state = ExecutorState.TERMINATING
            else:
                grace_s = duration_s((kill_policy or {}).get("grace_period"), -1.0)
                commands.kill_command(self, executor, "KILL", grace_s)
            return
        if not task.launched:
            executor.queue = [
                (kind, [i for i in ids if i != task_id]) for kind, ids in executor.queue
            ]
            executor.queue = [(kind, ids) for kind, ids in executor.queue if ids]
            self._killed_during_launch(executor, task)
            if executor.stream is None and all(
                t.state in TERMINAL_STATES for t in executor.tasks.values()
            ):
                self.shutdown_executor(framework_id, executor.executor_id)
            return
        if executor.stream is None:
            log.warning("task %s: executor %s is not connected", task_id, executor.executor_id)
            return
        kill: Json = {"task_id": wrap(task_id)}
        if kill_policy:
            kill["kill_policy"] = kill_policy
        executor.stream.send(event("KILL", kill))

    def _killed_during_launch(self, executor: Executor, task: AgentTask) -> None:
        self.agent_update(
            executor.framework_id,
            task.info,
            "TASK_KILLED",
            "REASON_TASK_KILLED_DURING_LAUNCH",
            "Killed before delivery to the executor",
            executor.executor_id,
        )

    def shutdown_executor(self, framework_id: str, executor_id: str) -> None:
        """SHUTDOWN to the executor, SIGKILL after its grace period (or now if unregistered)."""
        executor = self.live_executor(framework_id, executor_id)
        if executor is None or executor.state is ExecutorState.TERMINATING:
            return
        log.info("executor %s: shutting down", executor_id)
        if not executor.custom:
            if executor.state is ExecutorState.LAUNCHING:
                executor.state = ExecutorState.TERMINATING
            else:
                commands.kill_command(self, executor, "KILL")
            return
        previous = executor.state
        executor.state = ExecutorState.TERMINATING
        if previous is ExecutorState.RUNNING and executor.stream is not None:
            executor.stream.send(event("SHUTDOWN"))
            self.containers.kill_later(executor, self._grace_s(executor))
        else:
            self.containers.kill(executor)

    def remove_framework(self, framework_id: str) -> None:
        """Shut the framework's executors down; no more updates for it."""
        for executor in list(self.executors.values()):
            if executor.framework_id == framework_id:
                executor.framework_removed = True
                self.shutdown_executor(framework_id, executor.executor_id)
        self.updates.drop_framework(framework_id)
        self.frameworks.pop(framework_id, None)

    def kill_everything(self) -> None:
        """The agent goes away: SIGKILL every process now, report nothing more."""
        self.active = False
        for executor in list(self.executors.values()):
            executor.framework_removed = True
            self._kill_now(executor)
        self.updates.drop_all()

    def _kill_now(self, executor: Executor) -> None:
        if executor.state is not ExecutorState.TERMINATED:
            executor.state = ExecutorState.TERMINATING
        self.containers.kill(executor)

    def kill_executor_process(self, framework_id: str, executor_id: str) -> bool:
        """Fault injection: SIGKILL the executor's session as if it crashed."""
        executor = self.live_executor(framework_id, executor_id)
        return executor is not None and self.containers.kill(executor)

    def _grace_s(self, executor: Executor) -> float:
        return duration_s(executor.info.get("shutdown_grace_period"), self._shutdown_grace_period_s)

    # -- exits ---------------------------------------------------------------------------

    def _terminated(self, executor: Executor) -> None:
        if executor.state is ExecutorState.TERMINATED:
            return
        executor.state = ExecutorState.TERMINATED
        executor.cancel_timers()
        if executor.stream is not None:
            executor.stream.close()
            executor.stream = None
        if self.executors.get(executor.key) is executor:
            del self.executors[executor.key]
        self.completed_executors.append(executor)
        checkpoint = self._checkpointed(executor.framework_id)
        if checkpoint is not None:
            checkpoint.executor_ended(
                executor.framework_id, executor.executor_id, executor.container_id
            )
        self.master.executor_terminated(self, executor)

    # -- updates ---------------------------------------------------------------------------

    def agent_update(
        self,
        framework_id: str,
        task: Json,
        state: str,
        reason: str | None,
        message: str | None,
        executor_id: str | None,
        source: str = "AGENT",
    ) -> None:
        status = task_status(
            task["task_id"]["value"],
            state,
            source=f"SOURCE_{source}",
            reason=reason,
            message=message,
            agent_id=self.id,
            executor_id=executor_id,
            with_uuid=True,
        )
        self.status_update(framework_id, status)

    def status_update(self, framework_id: str, status: Json) -> None:
        """A new update for a task (it has a uuid): record it and queue it to the master."""
        if framework_id not in self.frameworks:
            return
        task_id = status["task_id"]["value"]
        executor = self.executor_of_task(framework_id, task_id)
        if executor is not None:
            task = executor.tasks[task_id]
            if task.state in TERMINAL_STATES:
                log.warning("task %s: %s after terminal", task_id, status.get("state"))
                return
            task.state = status["state"]
            checkpoint = self._checkpointed(framework_id)
            if checkpoint is not None:
                checkpoint.task_state(
                    framework_id, executor.executor_id, executor.container_id, task_id, task.state
                )
        status.setdefault("agent_id", wrap(self.id))
        self.master.task_state_changed(self, framework_id, status)
        self.updates.add(framework_id, status)

    def _forward(self, framework_id: str, status: Json) -> None:
        self.master.forward_update(self, framework_id, status)

    def lost_state(self, framework_id: str) -> str:
        framework = self.frameworks.get(framework_id, {})
        return "TASK_DROPPED" if has_capability(framework, "PARTITION_AWARE") else "TASK_LOST"

    def flush_queue(self, executor: Executor) -> None:
        """Deliver queued tasks to a subscribed executor, each exactly once."""
        assert executor.stream is not None
        for kind, ids in executor.queue:
            infos = [executor.tasks[i].info for i in ids]
            for task_id in ids:
                executor.tasks[task_id].launched = True
            if kind == "LAUNCH_GROUP":
                executor.stream.send(event("LAUNCH_GROUP", {"task_group": {"tasks": infos}}))
            else:
                for info in infos:
                    executor.stream.send(event("LAUNCH", {"task": info}))
        executor.queue.clear()

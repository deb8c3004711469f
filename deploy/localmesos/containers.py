"""An agent's containerizer: sandboxes, fetching and processes of its executors.

`launch()` is called under the state lock and returns at once; the sandbox is made, URIs are
fetched and the process is spawned on the launcher pool, outside the lock. The outcome comes
back, under the lock, through the agent's `container_started`, `container_failed` and
`container_exited` hooks. An executor that stopped being LAUNCHING meanwhile (killed, its
framework removed, the agent stopped) is not started, or is killed right after the fork.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from .clock import Clock
from .deferred import Deferred
from .executors import Executor, ExecutorState
from .fetcher import Fetcher, FetchError
from .processes import ProcessSupervisor

log = logging.getLogger(__name__)


class ContainerHooks(Protocol):
    """What the agent does with launch outcomes (called under the state lock)."""

    def container_started(self, executor: Executor) -> None: ...
    def container_failed(self, executor: Executor, error: str) -> None: ...
    def container_exited(self, executor: Executor, wait_status: int) -> None: ...


class Containers:
    """Runs one agent's executors as processes in per-run sandboxes."""

    def __init__(
        self,
        *,
        agent_id: str,
        work_dir: Path,
        lock: threading.RLock,
        clock: Clock,
        supervisor: ProcessSupervisor,
        launcher: ThreadPoolExecutor,
        hooks: ContainerHooks,
        max_extracted_bytes: int,
    ) -> None:
        self._agent_id = agent_id
        self._work_dir = work_dir
        self._lock = lock
        self._clock = clock
        self._supervisor = supervisor
        self._launcher = launcher
        self._hooks = hooks
        self._fetcher = Fetcher(work_dir / "cache" / agent_id, max_extracted_bytes)
        self._deferred = Deferred()

    def sandbox(self, framework_id: str, executor_id: str, container_id: str) -> Path:
        """`<work_dir>/slaves/<agent>/frameworks/<fw>/executors/<ex>/runs/<container>`."""
        return (
            self._work_dir
            / "slaves"
            / self._agent_id
            / "frameworks"
            / framework_id
            / "executors"
            / executor_id
            / "runs"
            / container_id
        )

    def launch(self, executor: Executor, argv: Sequence[str], env: Mapping[str, str]) -> None:
        """Fetch and spawn in the background; the outcome arrives through the hooks."""
        args, variables = list(argv), dict(env)

        def submit() -> None:
            self._launcher.submit(self._launch_blocking, executor, args, variables)

        if not self._deferred.later(submit):
            submit()

    def held(self) -> AbstractContextManager[None]:
        """Launches asked for inside (under the state lock) start when it ends (`deferred.py`:
        the agent starts an ACCEPT's tasks once the master accounted them all)."""
        return self._deferred.held()

    def _launch_blocking(self, executor: Executor, argv: list[str], env: dict[str, str]) -> None:
        command = executor.info.get("command") or {}
        try:
            executor.directory.mkdir(parents=True, exist_ok=True)
            latest = executor.directory.parent / "latest"
            latest.unlink(missing_ok=True)
            latest.symlink_to(executor.directory.name)
            self._fetcher.fetch_all(command.get("uris"), executor.directory)
            with self._lock:
                if executor.state is not ExecutorState.LAUNCHING:
                    self._hooks.container_exited(executor, -1)
                    return
            handle = self._supervisor.spawn(
                argv,
                cwd=executor.directory,
                env=env,
                tag=f"{executor.executor_id}@{self._agent_id}",
                on_exit=lambda h, status: self._on_exit(executor, status),
            )
        except (FetchError, OSError) as exc:
            with self._lock:
                self._hooks.container_failed(executor, str(exc))
            return
        with self._lock:
            executor.handle = handle
            if executor.state in (ExecutorState.TERMINATING, ExecutorState.TERMINATED):
                self._supervisor.signal_group(handle, signal.SIGKILL)  # killed while forking
            elif executor.state is ExecutorState.LAUNCHING:
                self._hooks.container_started(executor)
            # else: it subscribed before this thread got the lock back; nothing left to do
            status, executor.pending_exit = executor.pending_exit, None
            if status is not None:
                self._hooks.container_exited(executor, status)

    def _on_exit(self, executor: Executor, status: int) -> None:
        with self._lock:
            if executor.handle is None:  # the launcher has not recorded the process yet
                executor.pending_exit = status
                return
            self._hooks.container_exited(executor, status)

    def kill(self, executor: Executor, sig: signal.Signals = signal.SIGKILL) -> bool:
        """Signal the executor's whole session; False if it has no process (yet)."""
        if executor.handle is None:
            return False
        self._supervisor.signal_group(executor.handle, sig)
        return True

    def kill_later(self, executor: Executor, grace_s: float) -> None:
        """SIGKILL the session after `grace_s` unless it has exited by then."""

        def kill() -> None:
            with self._lock:
                self.kill(executor)

        executor.timers.append(self._clock.call_later(grace_s, kill))

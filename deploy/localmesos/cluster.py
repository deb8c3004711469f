"""`LocalMesos`: one master and N agents in this process, each agent on its own port.

Threads, all owned and joined here: the master HTTP server and one per agent (plus a thread
per connection), the clock (`localmesos-clock`), the process reaper (`localmesos-reaper`) and
the launcher pool (`localmesos-launch-*`).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .agent import Agent
from .checkpoint import AgentCheckpoint
from .clock import Clock
from .failover import fail_over
from .fetcher import DEFAULT_MAX_EXTRACTED_BYTES
from .httpserver import HttpServer
from .master import Master
from .processes import ProcessSupervisor
from .protocol import CallError, Json
from .resources import ResourceError, Resources
from .routes import agent_routes, master_routes
from .state import master_state

log = logging.getLogger(__name__)

DEFAULT_RESOURCES = "cpus:4;mem:4096;disk:10240;ports:[31000-32000]"


class LocalMesos:
    """A Mesos master plus agents speaking the v1 scheduler/executor HTTP APIs on 127.0.0.1.

    `start()` binds and returns at once; `stop(timeout_s)` kills every executor and command
    task (SIGKILL to their sessions) and joins all threads. Not restartable.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        agents: int = 1,
        resources: str | Resources = DEFAULT_RESOURCES,
        work_dir: str | Path | None = None,
        *,
        agent_resources: Sequence[str | Resources] | None = None,
        credentials: Mapping[str, str] | None = None,
        allocation_interval_s: float = 1.0,
        heartbeat_interval_s: float = 15.0,
        executor_registration_timeout_s: float = 60.0,
        executor_shutdown_grace_period_s: float = 5.0,
        launcher_threads: int = 4,
        executor_environment: Mapping[str, str] | None = None,
        max_extracted_bytes: int = DEFAULT_MAX_EXTRACTED_BYTES,
    ) -> None:
        if host != "127.0.0.1":
            raise ValueError("the stand-in listens on 127.0.0.1 only")
        self.credentials = dict(credentials or {})
        self._owns_work_dir = work_dir is None
        self.work_dir = Path(work_dir or tempfile.mkdtemp(prefix="localmesos-")).resolve()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._default_resources = _resources(resources)
        self._lock = threading.RLock()
        self._clock = Clock("localmesos-clock")
        self._supervisor = ProcessSupervisor("localmesos-reaper")
        self._launcher = ThreadPoolExecutor(launcher_threads, "localmesos-launch")
        self.master = Master(
            master_id=str(uuid.uuid4()),
            lock=self._lock,
            clock=self._clock,
            allocation_interval_s=allocation_interval_s,
            heartbeat_interval_s=heartbeat_interval_s,
            work_dir=str(self.work_dir),
        )
        self._registration_timeout_s = executor_registration_timeout_s
        self._shutdown_grace_period_s = executor_shutdown_grace_period_s
        # As Mesos's --executor_environment_variables: all an executor gets of the agent's
        # environment (executors.executor_env); never this process's own.
        self._executor_environment = dict(executor_environment or {})
        if max_extracted_bytes <= 0:
            raise ValueError("max_extracted_bytes must be > 0")
        self._max_extracted_bytes = max_extracted_bytes
        self._agent_seq = 0
        self._agent_servers: dict[str, HttpServer] = {}
        self._checkpoints: list[AgentCheckpoint] = []
        self._server = HttpServer("localmesos-http", host, port, master_routes(self))
        self.master.port = self._server.port
        specs = list(agent_resources or [self._default_resources] * agents)
        self._initial_agents = [_resources(spec) for spec in specs]
        self._started = False
        self._stopped = False
        # Called with the new MasterInfo after each master failover, outside the state lock
        # (`__main__` re-announces the master in ZooKeeper there).
        self.master_listeners: list[Callable[[Json], None]] = []

    @property
    def address(self) -> str:
        """`127.0.0.1:PORT` of the master (what pymesos takes as master URI)."""
        return self._server.address

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def agent_ids(self) -> list[str]:
        with self._lock:
            return list(self.master.agents)

    def agent_endpoint(self, agent_id: str) -> str:
        """`127.0.0.1:PORT` of an agent's own HTTP server (its /state, executor API)."""
        with self._lock:
            return self.master.agents[agent_id].endpoint

    def start(self) -> LocalMesos:
        if self._started:
            raise RuntimeError("LocalMesos already started")
        self._started = True
        self._clock.start()
        self._supervisor.start()
        for resources in self._initial_agents:
            self.add_agent(resources)
        self.master.start()
        self._server.start()
        log.info(
            "localmesos: master %s on %s with %d agent(s), work dir %s",
            self.master.id,
            self.address,
            len(self._initial_agents),
            self.work_dir,
        )
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Close streams, kill every process, stop servers and threads (reverse start order)."""
        if self._stopped:
            return
        self._stopped = True
        if not self._started:  # only the master port was bound
            self._server.stop(timeout_s)
            self._launcher.shutdown(wait=False)
            self._remove_work_dir()
            return
        deadline = time.monotonic() + timeout_s

        def left() -> float:
            return max(0.1, deadline - time.monotonic())

        # Streams first, so frameworks see the master go before their executors die.
        self.master.stop()
        with self._lock:
            for agent in self.master.agents.values():
                agent.kill_everything()
        self._launcher.shutdown(wait=True, cancel_futures=True)
        self._supervisor.stop(left())
        self._server.stop(left())
        for server in self._agent_servers.values():
            server.stop(left())
        self._clock.stop(left())
        for checkpoint in self._checkpoints:
            checkpoint.close(left())  # the last task states, written by the kills above
        self._remove_work_dir()
        log.info("localmesos: stopped")

    def _remove_work_dir(self) -> None:
        if self._owns_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> LocalMesos:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- agents and faults -----------------------------------------------------------------

    def add_agent(self, resources: str | Resources | None = None) -> str:
        """Start another agent (own id, hostname label, port); returns its id."""
        with self._lock:
            index = self._agent_seq
            self._agent_seq += 1
            agent_id = f"{self.master.id}-S{index}"
            checkpoint = None
            if not self._owns_work_dir:
                # A work dir of the caller's outlives this stand-in: as a Mesos agent restarted
                # on its work_dir, each agent keeps its id and its completed executors.
                agent_id = AgentCheckpoint.agent_id(self.work_dir, index, agent_id)
                checkpoint = AgentCheckpoint(self.work_dir, agent_id)
                self._checkpoints.append(checkpoint)
            agent = Agent(
                agent_id=agent_id,
                hostname=f"agent{index}.localmesos",
                total=_resources(resources) if resources is not None else self._default_resources,
                work_dir=self.work_dir,
                lock=self._lock,
                clock=self._clock,
                supervisor=self._supervisor,
                launcher=self._launcher,
                master=self.master,
                registration_timeout_s=self._registration_timeout_s,
                shutdown_grace_period_s=self._shutdown_grace_period_s,
                executor_environment=self._executor_environment,
                max_extracted_bytes=self._max_extracted_bytes,
                checkpoint=checkpoint,
            )
            server = HttpServer(
                f"localmesos-agent{index}-http", "127.0.0.1", 0, agent_routes(self, agent)
            )
            agent.endpoint = server.address
            agent.registered_time = time.time()
            self._agent_servers[agent.id] = server
            server.start()
            self.master.agents[agent.id] = agent
            log.info(
                "agent %s (%s): registered on %s with %s",
                agent.id,
                agent.hostname,
                agent.endpoint,
                agent.total,
            )
            self.master.request_allocation()
            return agent.id

    def remove_agent(self, agent_id: str) -> bool:
        """Fault: the agent disappears (tasks LOST/GONE, offers rescinded, processes killed)."""
        return self.master.remove_agent(agent_id)

    def kill_executor(self, framework_id: str, executor_id: str) -> bool:
        """Fault: SIGKILL an executor's process group, as a crash would."""
        return self.master.kill_executor(framework_id, executor_id)

    def fail_over_master(self, agent_reregister_delay_s: float = 0.0) -> str:
        """Fault: a Mesos master failover (`failover.py` says what it does and what a real one
        does that it does not). Every scheduler subscription ends, outstanding offers are void,
        the agents re-register with their tasks after `agent_reregister_delay_s` and then send
        their unacknowledged updates again. Returns the new master id; raises ValueError for a
        negative delay. Blocks only for the `master_listeners`."""
        master_id = fail_over(self.master, agent_reregister_delay_s)
        info = self.master.master_info()
        for listener in self.master_listeners:
            try:
                listener(info)
            except Exception:
                log.exception("localmesos: master listener failed")
        return master_id

    def inject_fault(self, name: str, args: Json) -> Json:
        """The `/faults/<name>` endpoints. Raises CallError(400/404)."""
        if name == "master_failover":
            delay = args.get("agent_reregister_delay_s", 0.0)
            if (
                isinstance(delay, bool)
                or not isinstance(delay, int | float)
                or not 0 <= delay <= 600
            ):
                raise CallError(400, "'agent_reregister_delay_s' must be a number in [0, 600]")
            previous = self.master.id
            return {
                "master_id": self.fail_over_master(float(delay)),
                "previous_master_id": previous,
            }
        if name == "remove_agent":
            agent_id = _string(args, "agent_id")
            if not self.remove_agent(agent_id):
                raise CallError(404, f"Unknown agent {agent_id}")
            return {"removed": agent_id}
        if name == "kill_executor":
            framework_id, executor_id = _string(args, "framework_id"), _string(args, "executor_id")
            if not self.kill_executor(framework_id, executor_id):
                raise CallError(404, f"No running executor {executor_id} of {framework_id}")
            return {"killed": executor_id}
        if name == "add_agent":
            spec = args.get("resources")
            try:
                agent_id = self.add_agent(spec if isinstance(spec, str) else None)
            except ResourceError as exc:
                raise CallError(400, str(exc)) from exc
            return {"agent_id": agent_id, "endpoint": self.agent_endpoint(agent_id)}
        raise CallError(404, f"Unknown fault {name}")

    def agent_of_executor(self, framework_id: str, executor_id: str) -> Agent | None:
        with self._lock:
            for agent in self.master.agents.values():
                if agent.live_executor(framework_id, executor_id) is not None:
                    return agent
            return None

    def state(self) -> Json:
        """The `/master/state` document."""
        with self._lock:
            return master_state(self.master)


def _resources(spec: str | Resources) -> Resources:
    return spec if isinstance(spec, Resources) else Resources.parse_spec(spec)


def _string(args: Mapping[str, Any], key: str) -> str:
    value = args.get(key)
    if isinstance(value, dict):
        value = value.get("value")
    if not isinstance(value, str) or not value:
        raise CallError(400, f"Expecting '{key}' to be present")
    return value

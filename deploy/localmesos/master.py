"""The master: frameworks and their streams, tasks, offers, failover and reconciliation.

All state is guarded by one re-entrant lock shared with the agents. HTTP handler threads call
`subscribe`/`handle_call` (in `scheduler_api.py`), the clock thread runs allocation and timers,
the reaper thread reports process exits through the agents; events only queue on streams, so
nothing blocks while the lock is held.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from .agent import Agent
from .clock import Clock, Timer
from .executors import Executor
from .offers import Offer, OfferBook
from .protocol import (
    MESOS_VERSION,
    TERMINAL_STATES,
    Json,
    event,
    framework_role,
    has_capability,
    id_value,
    task_status,
    wrap,
)
from .resources import Resources
from .streams import EventStream

log = logging.getLogger(__name__)

_COMPLETED_KEPT = 1000


@dataclass(slots=True)
class Task:
    id: str
    framework_id: str
    agent_id: str
    executor_id: str | None
    name: str
    resources: Resources
    info: Json
    state: str = "TASK_STAGING"
    statuses: list[Json] = field(default_factory=list)
    latest: Json | None = None
    update_state: str | None = None  # the head of the agent's update stream
    update_uuid: str | None = None
    released: bool = False


@dataclass(slots=True)
class Framework:
    id: str
    info: Json
    stream: EventStream | None = None
    connected: bool = False
    active: bool = False
    suppressed: bool = False
    registered_time: float = field(default_factory=time.time)
    reregistered_time: float | None = None
    unregistered_time: float | None = None
    failover_timer: Timer | None = None
    tasks: dict[str, Task] = field(default_factory=dict)
    completed_tasks: deque[Task] = field(default_factory=lambda: deque(maxlen=_COMPLETED_KEPT))

    @property
    def partition_aware(self) -> bool:
        return has_capability(self.info, "PARTITION_AWARE")

    @property
    def role(self) -> str:
        return framework_role(self.info)


class Master:
    """Frameworks, tasks and offers of one stand-in."""

    def __init__(
        self,
        *,
        master_id: str,
        lock: threading.RLock,
        clock: Clock,
        allocation_interval_s: float,
        heartbeat_interval_s: float,
        work_dir: str,
    ) -> None:
        self.id = master_id
        self.lock = lock
        self.clock = clock
        self.allocation_interval_s = allocation_interval_s
        self.heartbeat_interval_s = heartbeat_interval_s
        self.work_dir = work_dir
        self.host = "127.0.0.1"
        self.port = 0
        self.start_time = time.time()
        self.elected_time = self.start_time
        self.agents: dict[str, Agent] = {}
        self.removed_agents: dict[str, Agent] = {}
        self.frameworks: dict[str, Framework] = {}
        self.completed_frameworks: deque[Framework] = deque(maxlen=100)
        self.removed_framework_ids: set[str] = set()
        self.offers = OfferBook(master_id)
        # Agents not yet re-registered with the master elected by a failover (failover.py).
        self.reregistering: set[str] = set()
        self._framework_seq = 0
        self._allocation_pending = False
        self._stopping = False

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        self.clock.call_later(self.allocation_interval_s, self._allocation_tick)

    def stop(self) -> None:
        """Close every scheduler stream; no more events after this."""
        with self.lock:
            self._stopping = True
            for framework in self.frameworks.values():
                if framework.stream is not None:
                    framework.stream.close()
                    framework.stream = None

    def master_info(self) -> Json:
        ip = sum(int(octet) << (8 * i) for i, octet in enumerate(self.host.split(".")))
        return {
            "id": self.id,
            "ip": ip,  # network byte order read as a little-endian uint32, as Mesos stores it
            "port": self.port,
            "pid": f"master@{self.host}:{self.port}",
            "hostname": "localhost",
            "version": MESOS_VERSION,
            "address": {"hostname": "localhost", "ip": self.host, "port": self.port},
        }

    def new_framework_id(self) -> str:
        while True:
            candidate = f"{self.id}-{self._framework_seq:04d}"
            self._framework_seq += 1
            if candidate not in self.frameworks and candidate not in self.removed_framework_ids:
                return candidate

    # -- scheduler streams -----------------------------------------------------------------

    def send(self, framework: Framework, message: Json) -> None:
        if framework.stream is not None and framework.connected:
            framework.stream.send(message)

    def stream_closed(self, framework_id: str, stream: EventStream) -> None:
        """A subscription stream ended (peer left or we closed it): start the failover timer."""
        with self.lock:
            framework = self.frameworks.get(framework_id)
            if framework is None or framework.stream is not stream or self._stopping:
                return
            self.disconnect(framework)

    def disconnect(self, framework: Framework) -> None:
        """The framework has no subscription any more: inactive, its offers discarded (no
        RESCIND, as Mesos), and removed unless it re-subscribes within its failover timeout.
        The caller closes the stream, if any."""
        framework.stream = None
        framework.connected = False
        framework.active = False
        framework.unregistered_time = time.time()
        self.offers.remove_where(framework_id=framework.id)
        if framework.failover_timer is not None:
            framework.failover_timer.cancel()
        timeout_s = float(framework.info.get("failover_timeout") or 0.0)
        log.info("framework %s: disconnected, failover timeout %gs", framework.id, timeout_s)
        framework.failover_timer = self.clock.call_later(
            timeout_s, lambda: self._failover_expired(framework)
        )
        self.request_allocation()

    def _failover_expired(self, framework: Framework) -> None:
        with self.lock:
            if self.frameworks.get(framework.id) is framework and not framework.connected:
                log.info("framework %s: failover timeout expired", framework.id)
                self.remove_framework(framework, "failover timeout expired")

    def remove_framework(self, framework: Framework, why: str) -> None:
        """TEARDOWN or failover expiry: kill tasks (no updates), shut executors, close."""
        log.info("framework %s: removing (%s)", framework.id, why)
        if framework.failover_timer is not None:
            framework.failover_timer.cancel()
        if framework.stream is not None:
            stream, framework.stream = framework.stream, None
            stream.close()
        self.offers.remove_where(framework_id=framework.id)
        self.offers.forget([framework.id])
        for task in framework.tasks.values():
            if task.state not in TERMINAL_STATES:
                self._set_state(
                    task,
                    "TASK_KILLED",
                    "REASON_FRAMEWORK_REMOVED",
                    f"Framework {framework.id} removed",
                )
            framework.completed_tasks.append(task)
        framework.tasks.clear()
        for agent in self.agents.values():
            agent.remove_framework(framework.id)
        framework.connected = framework.active = False
        framework.unregistered_time = time.time()
        del self.frameworks[framework.id]
        self.completed_frameworks.append(framework)
        self.removed_framework_ids.add(framework.id)
        self.request_allocation()

    # -- tasks -----------------------------------------------------------------------------

    def _set_state(
        self,
        task: Task,
        state: str,
        reason: str | None = None,
        message: str | None = None,
        status: Json | None = None,
    ) -> None:
        """Move `task` to `state`, keeping the status as Mesos's master keeps it: whole but
        without its `data`, replacing the previous one when the state repeats. Without
        `status` (a change the master makes itself) the status is the master's own."""
        task.state = state
        if status is not None:
            entry = {k: v for k, v in status.items() if k not in ("data", "task_id")}
        else:
            entry = {"state": state, "source": "SOURCE_MASTER", "timestamp": time.time()}
            if reason:
                entry["reason"] = reason
            if message:
                entry["message"] = message
            entry["agent_id"] = wrap(task.agent_id)
        entry.setdefault("timestamp", time.time())
        if task.statuses and task.statuses[-1].get("state") == state:
            task.statuses[-1] = entry
        else:
            task.statuses.append(entry)
        if state in TERMINAL_STATES:
            self._release(task)

    def _release(self, task: Task) -> None:
        if task.released:
            return
        task.released = True
        agent = self.agents.get(task.agent_id)
        if agent is not None:
            agent.used = agent.used - task.resources
            self.request_allocation()

    def complete_task(self, framework: Framework, task: Task) -> None:
        framework.tasks.pop(task.id, None)
        framework.completed_tasks.append(task)

    def master_update(
        self,
        framework: Framework,
        task_id: str,
        state: str,
        reason: str,
        message: str,
        agent_id: str | None,
        executor_id: str | None = None,
    ) -> None:
        """An update the master makes up (no uuid, not acknowledged)."""
        status = task_status(
            task_id,
            state,
            source="SOURCE_MASTER",
            reason=reason,
            message=message,
            agent_id=agent_id,
            executor_id=executor_id,
        )
        self.send(framework, event("UPDATE", {"status": status}))

    # -- agent link (MasterLink) -----------------------------------------------------------

    def task_state_changed(self, agent: Agent, framework_id: str, status: Json) -> None:
        framework = self.frameworks.get(framework_id)
        task = framework.tasks.get(status["task_id"]["value"]) if framework else None
        if task is None:
            return
        task.latest = status
        self._set_state(task, status["state"], status=status)

    def forward_update(self, agent: Agent, framework_id: str, status: Json) -> None:
        framework = self.frameworks.get(framework_id)
        if framework is None or agent.id in self.reregistering:
            return  # a re-registering agent resends its pending updates once it is back
        forwarded = dict(status)
        forwarded.setdefault("agent_id", wrap(agent.id))
        task = framework.tasks.get(status["task_id"]["value"])
        if task is not None:
            task.update_state, task.update_uuid = status["state"], status.get("uuid")
            if task.executor_id is not None:
                forwarded.setdefault("executor_id", wrap(task.executor_id))
        forwarded.setdefault("timestamp", time.time())
        self.send(framework, event("UPDATE", {"status": forwarded}))

    def executor_terminated(self, agent: Agent, executor: Executor) -> None:
        agent.used = agent.used - executor.resources
        self.request_allocation()
        framework = self.frameworks.get(executor.framework_id)
        if framework is None or executor.framework_removed or not executor.custom:
            return
        if agent.active and not self._stopping:
            failure = {
                "agent_id": wrap(agent.id),
                "executor_id": wrap(executor.executor_id),
                "status": executor.exit_status if executor.exit_status is not None else -1,
            }
            self.send(framework, event("FAILURE", failure))

    def executor_message(
        self, agent: Agent, framework_id: str, executor_id: str, data: str
    ) -> None:
        framework = self.frameworks.get(framework_id)
        if framework is not None:
            message = {"agent_id": wrap(agent.id), "executor_id": wrap(executor_id), "data": data}
            self.send(framework, event("MESSAGE", message))

    # -- offers ----------------------------------------------------------------------------

    def request_allocation(self) -> None:
        """Allocate soon (coalesced): after REVIVE, freed resources, a new framework."""
        if not self._allocation_pending and not self._stopping:
            self._allocation_pending = True
            self.clock.call_later(0.0, self.allocate)

    def _allocation_tick(self) -> None:
        if self._stopping:
            return
        self.allocate()
        self.clock.call_later(self.allocation_interval_s, self._allocation_tick)

    def allocate(self) -> None:
        """Offer each agent's free resources to the neediest active, unsuppressed framework."""
        with self.lock:
            self._allocation_pending = False
            if self._stopping:
                return
            eligible = [
                f for f in self.frameworks.values() if f.connected and f.active and not f.suppressed
            ]
            if not eligible:
                return
            if len(eligible) > 1:  # summing every task's cpus is the costly part of a tick
                eligible.sort(key=self._cpu_share)
            batches: dict[str, list[Offer]] = {}
            for agent in self.agents.values():
                if agent.id in self.reregistering:
                    continue
                free = agent.total - agent.used - self.offers.offered_on(agent.id)
                if not free.allocatable():
                    continue
                for framework in eligible:
                    if self.offers.filtered(framework.id, agent.id, free):
                        continue
                    offer = self.offers.create(framework.id, agent.id, free, framework.role)
                    batches.setdefault(framework.id, []).append(offer)
                    break
            for framework_id, offers in batches.items():
                framework = self.frameworks[framework_id]
                payload = {"offers": [self.offer_json(o) for o in offers]}
                self.send(framework, event("OFFERS", payload))

    def _cpu_share(self, framework: Framework) -> float:
        used = sum(
            t.resources.scalars.get("cpus", 0.0) for t in framework.tasks.values() if not t.released
        )
        total = sum(a.total.scalars.get("cpus", 0.0) for a in self.agents.values()) or 1.0
        return used / total

    def offer_json(self, offer: Offer) -> Json:
        agent = self.agents[offer.agent_id]
        port = int(agent.endpoint.rpartition(":")[2] or 0)
        executor_ids = [
            wrap(e.executor_id)
            for e in agent.executors.values()
            if e.framework_id == offer.framework_id and e.custom
        ]
        return {
            "id": wrap(offer.id),
            "framework_id": wrap(offer.framework_id),
            "agent_id": wrap(offer.agent_id),
            "hostname": agent.hostname,
            "url": {
                "scheme": "http",
                "address": {"hostname": agent.hostname, "ip": self.host, "port": port},
                "path": "/slave(1)",
            },
            "resources": offer.resources.to_json(offer.role),
            "attributes": [],
            "executor_ids": executor_ids,
            "allocation_info": {"role": offer.role},
        }

    def rescind(self, offer: Offer) -> None:
        framework = self.frameworks.get(offer.framework_id)
        if framework is not None:
            self.send(framework, event("RESCIND", {"offer_id": wrap(offer.id)}))

    # -- faults ----------------------------------------------------------------------------

    def remove_agent(self, agent_id: str) -> bool:
        """The agent is gone: rescind its offers, every task the master still holds on it
        becomes LOST (GONE if partition aware), every framework gets FAILURE{agent_id}, and its
        processes are killed.

        As Mesos's `Master::__removeSlave`: the master holds a task until its terminal update is
        acknowledged, so a task that ended on the agent but whose end the framework has not
        acknowledged (or never received: only the head of a task's updates is in flight) is
        reported LOST/GONE too; its recorded state stays the terminal one, with the master's
        status appended. The agent's unacknowledged updates die with it."""
        with self.lock:
            agent = self.agents.pop(agent_id, None)
            if agent is None:
                return False
            self.reregistering.discard(agent_id)
            log.warning("agent %s: removed", agent_id)
            for offer in self.offers.remove_where(agent_id=agent_id):
                self.rescind(offer)
            agent.kill_everything()
            self.removed_agents[agent_id] = agent
            message = f"Agent {agent_id} removed"
            for framework in self.frameworks.values():
                state = "TASK_GONE" if framework.partition_aware else "TASK_LOST"
                for task in [t for t in framework.tasks.values() if t.agent_id == agent_id]:
                    if task.state not in TERMINAL_STATES:
                        self._set_state(task, state, "REASON_AGENT_REMOVED", message)
                    else:
                        self._append_status(task, state, "REASON_AGENT_REMOVED", message)
                    self.master_update(
                        framework,
                        task.id,
                        state,
                        "REASON_AGENT_REMOVED",
                        message,
                        agent_id,
                        task.executor_id,
                    )
                    self.complete_task(framework, task)
                self.send(framework, event("FAILURE", {"agent_id": wrap(agent_id)}))
            return True

    def _append_status(self, task: Task, state: str, reason: str, message: str) -> None:
        """A master status for a task already terminal: kept in its statuses, but its state
        stays (Mesos's `updateTask` never moves a terminal task's state)."""
        task.statuses.append(
            {
                "state": state,
                "source": "SOURCE_MASTER",
                "reason": reason,
                "message": message,
                "agent_id": wrap(task.agent_id),
                "timestamp": time.time(),
            }
        )

    def kill_executor(self, framework_id: str, executor_id: str) -> bool:
        """SIGKILL an executor's process group, as if it crashed."""
        with self.lock:
            return any(
                agent.kill_executor_process(framework_id, executor_id)
                for agent in self.agents.values()
            )

    # -- reconciliation --------------------------------------------------------------------

    def reconcile(self, framework: Framework, tasks: list[Json]) -> None:
        """Implicit (`tasks` empty) or explicit reconciliation, answered as a Mesos master does:
        an update without a uuid for each known task; for an asked task it does not know,
        TASK_LOST, or for PARTITION_AWARE frameworks TASK_GONE, TASK_GONE_BY_OPERATOR or
        TASK_UNKNOWN depending on what it knows of the agent.

        After a master failover, a task on an agent that has not re-registered yet is unknown
        to the master, and an unknown task is not answered while its agent (or, without an
        agent id, any agent) may still re-register with it: no reply, as Mesos."""
        if not tasks:
            for task in framework.tasks.values():
                if task.agent_id not in self.reregistering:
                    self._reconcile_known(framework, task)
            return
        for entry in tasks:
            task_id = id_value(entry, "task_id")
            if task_id is None:
                continue
            known = framework.tasks.get(task_id)
            if known is not None and known.agent_id not in self.reregistering:
                self._reconcile_known(framework, known)
                continue
            agent_id = id_value(entry, "agent_id")
            if known is not None or (
                self.reregistering if agent_id is None else agent_id in self.reregistering
            ):
                continue  # no reply until the agents re-registered
            if agent_id is not None and agent_id in self.agents:
                state = "TASK_GONE" if framework.partition_aware else "TASK_LOST"
                message = "Reconciliation: Task is unknown to the agent"
            elif agent_id is not None and agent_id in self.removed_agents:
                state = "TASK_GONE_BY_OPERATOR" if framework.partition_aware else "TASK_LOST"
                message = "Reconciliation: Task is unknown"
            else:
                state = "TASK_UNKNOWN" if framework.partition_aware else "TASK_LOST"
                message = "Reconciliation: Task is unknown"
            self.master_update(
                framework, task_id, state, "REASON_RECONCILIATION", message, agent_id
            )

    def _reconcile_known(self, framework: Framework, task: Task) -> None:
        self.master_update(
            framework,
            task.id,
            task.state,
            "REASON_RECONCILIATION",
            "Reconciliation: Latest task state",
            task.agent_id,
            task.executor_id,
        )

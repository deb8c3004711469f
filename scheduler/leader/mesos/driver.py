"""The leader's connection to Mesos: a pymesos `MesosSchedulerDriver` per connection.

pymesos calls the scheduler callbacks on its IO thread; they only queue events. The
`sched-mesos-events` thread handles them: it saves the framework id, hands offers to the
launcher, processes status updates and acknowledges each update only after it was processed
(explicit acknowledgements), so a crash never loses one. A paused leader (SUSPENDED session)
disconnects from Mesos instead of only idling: a new leader's subscription would otherwise
close this one's stream, and pymesos would re-subscribe at once, stealing the framework back.
"""

from __future__ import annotations

import base64
import json
import logging
import queue
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any, Protocol

from pymesos import MesosSchedulerDriver

from scheduler.leader.lifecycle import LeaderComponent
from scheduler.model.settings import Settings

log = logging.getLogger(__name__)

FRAMEWORK_REMOVED = "Framework has been removed"
# pymesos's IO thread reports its death by interrupting the main thread (SIGINT); the process's
# signal handler sets this instead of stopping the replica, and the driver reconnects.
DRIVER_CRASHED = threading.Event()
_RETRY_MAX_S = 30.0
FRAMEWORK_FAILED_OVER = "Framework failed over"


def _scalar_sum(resources: list[dict[str, Any]], name: str) -> float:
    """The sum of the scalar resources called `name` (every role) in a v1 resource list."""
    return sum(
        float(r.get("scalar", {}).get("value", 0.0))
        for r in resources
        if r.get("name") == name and r.get("type", "SCALAR") == "SCALAR"
    )


def _stop_driver(driver: Any, timeout_s: float = 3.0) -> None:
    """Stop a pymesos driver without TEARDOWN (failover=True: the framework and its tasks survive
    for the next leader). pymesos's stop can block while its zk:// detector is still connecting,
    so it runs in its own thread with a deadline."""
    detector = getattr(driver, "detector", None)

    def stop() -> None:
        driver.stop(failover=True)
        # pymesos stops its zk:// detector's client but never closes it (leaks its socket).
        zk = getattr(detector, "zk", None)
        if zk is not None:
            zk.close()

    thread = threading.Thread(target=stop, name="sched-mesos-stop", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        log.error("mesos: the pymesos driver did not stop within %ss (left to exit)", timeout_s)


class FrameworkIds(Protocol):
    """Where the term keeps the Mesos framework id (the replica's fenced `/ha/framework_id`)."""

    @property
    def framework_id(self) -> str | None:
        """The id this leader subscribes with; None: Mesos assigns one."""
        ...

    def save(self, framework_id: str) -> None:
        """Keep the id Mesos assigned. Raises NotLeader when the term is over."""

    def clear(self) -> None:
        """Forget the id after Mesos removed the framework."""


class _Callbacks:
    """pymesos's Scheduler interface: every callback only queues (never blocks the IO thread)."""

    def __init__(self, events: queue.Queue[tuple[str, Any]]) -> None:
        self._events = events

    def registered(self, driver: Any, framework_id: Any, master_info: Any) -> None:
        self._events.put(("registered", (framework_id["value"], master_info)))

    def reregistered(self, driver: Any, master_info: Any) -> None:
        self._events.put(("reregistered", master_info))

    def disconnected(self, driver: Any) -> None:
        self._events.put(("disconnected", None))

    def resourceOffers(self, driver: Any, offers: Any) -> None:
        self._events.put(("offers", offers))

    def offerRescinded(self, driver: Any, offer_id: Any) -> None:
        self._events.put(("rescind", offer_id["value"]))

    def statusUpdate(self, driver: Any, status: Any) -> None:
        self._events.put(("status", status))

    def frameworkMessage(self, driver: Any, executor_id: Any, agent_id: Any, data: Any) -> None:
        self._events.put(("message", (executor_id, agent_id, data)))

    def slaveLost(self, driver: Any, agent_id: Any) -> None:
        self._events.put(("agent_lost", agent_id["value"]))

    def executorLost(self, driver: Any, executor_id: Any, agent_id: Any, status: Any) -> None:
        self._events.put(("executor_lost", (executor_id["value"], agent_id["value"], status)))

    def error(self, driver: Any, message: str) -> None:
        self._events.put(("error", message))

    def __getattr__(self, name: str) -> Callable[..., None]:
        # inverseOffers, operationStatusUpdate, ...: not used by this framework.
        return lambda *args, **kwargs: None


class MesosDriver(LeaderComponent):
    """Owns the pymesos driver and the event thread for one term.

    `on_offers(offers)`, `on_rescind(offer_id)`, `on_status(status) -> bool` (True: processed,
    acknowledge it), `on_connected()` are called from `sched-mesos-events`.
    """

    name = "mesos-driver"

    def __init__(
        self,
        settings: Settings,
        framework_ids: FrameworkIds,
        on_offers: Callable[[list[dict[str, Any]]], None],
        on_rescind: Callable[[str], None],
        on_status: Callable[[dict[str, Any]], bool],
        on_connected: Callable[[], None],
        on_disconnected: Callable[[], None],
    ) -> None:
        self._settings = settings
        self._framework_ids = framework_ids
        self._on_offers = on_offers
        self._on_rescind = on_rescind
        self._on_status = on_status
        self._on_connected = on_connected
        self._on_disconnected = on_disconnected
        self._events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._driver: Any = None
        self._lock = threading.RLock()
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self.connected = threading.Event()
        self.master: str | None = None
        self.status = "not started"
        self._paused = False
        self._retry_at = 0.0
        self._retry_s = 1.0

    # -- lifecycle --------------------------------------------------------------------------

    def framework_info(self) -> dict[str, Any]:
        s = self._settings
        info: dict[str, Any] = {
            "user": s.user,
            "name": f"{s.framework_name}-{s.mesos_role}" if s.mesos_role else s.framework_name,
            "hostname": s.hostname,
            "failover_timeout": s.framework_failover_timeout_seconds,
            "checkpoint": True,
            "webui_url": f"http://{s.identity}",
            "capabilities": [{"type": "PARTITION_AWARE"}],
        }
        if s.mesos_role:
            info["role"] = s.mesos_role
        if s.framework_principal:
            info["principal"] = s.framework_principal
        framework_id = self._framework_ids.framework_id
        if framework_id:
            info["id"] = {"value": framework_id}
        return info

    def _connect(self) -> None:
        """Start a pymesos driver in thread `sched-mesos-connect` (with a zk:// master URL its
        start blocks until ZooKeeper answers). A failure is retried with back-off from the
        event thread: an unreachable master is never a reason to give up the term."""
        s = self._settings
        driver = MesosSchedulerDriver(
            _Callbacks(self._events),
            self.framework_info(),
            s.mesos_url,
            use_addict=False,
            implicit_acknowledgements=False,
            principal=s.framework_principal or None,
            secret=s.framework_secret or None,
            failover=True,
            # pymesos raises in the main thread after this long without a master; a leader
            # keeps its term and keeps trying instead.
            timeout=10 * 365 * 86400,
        )
        with self._lock:
            self._driver = driver
        self.status = "connecting"
        log.info(
            "mesos: connecting to %s as framework %s",
            s.mesos_url,
            self._framework_ids.framework_id or "(new)",
        )

        def start() -> None:
            try:
                driver.start()
            except Exception as exc:
                log.error("mesos: cannot start the driver: %s", exc, exc_info=exc)
                self._events.put(("connect_failed", (driver, exc)))

        threading.Thread(target=start, name="sched-mesos-connect", daemon=True).start()

    def _connect_failed(self, driver: Any, exc: Exception) -> None:
        with self._lock:
            if self._driver is not driver:
                return
            self._driver = None
        self.status = f"cannot connect: {exc}"
        self._retry_at = time.monotonic() + self._retry_s
        log.error("mesos: retrying the connection in %.0f s", self._retry_s)
        self._retry_s = min(_RETRY_MAX_S, self._retry_s * 2)
        _stop_driver(driver)

    def _disconnect(self) -> None:
        with self._lock:
            driver, self._driver = self._driver, None
            self.connected.clear()
            self.status = "disconnected"
        if driver is not None:
            # failover=True: no TEARDOWN, the framework and its tasks survive for the next leader.
            # The IO thread ends on its own; joining could wait for a blocked zk:// detector.
            driver.stop(failover=True)

    def start(self) -> None:
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name="sched-mesos-events", daemon=True)
        self._thread.start()
        # Connect from the event thread: a zk:// master URL may block for a connection timeout,
        # and the leader's API must not wait for Mesos.
        self._events.put(("connect", None))

    def stop(self) -> None:
        self._stopping.set()
        self._disconnect()
        self._events.put(("stop", None))
        if self._thread is not None:
            self._thread.join(5.0)
            if self._thread.is_alive():
                log.error("mesos: thread sched-mesos-events did not stop")
            self._thread = None

    def pause(self) -> None:
        log.warning("mesos: disconnecting while the ZooKeeper session is suspended")
        self._paused = True
        self._disconnect()
        self._on_disconnected()

    def resume(self) -> None:
        self._paused = False
        if not self._stopping.is_set():
            self._events.put(("connect", None))

    # -- calls (any thread) -----------------------------------------------------------------

    def _call(self, what: str, fn: Callable[[Any], Any]) -> bool:
        with self._lock:
            driver = self._driver
            if driver is None or not self.connected.is_set():
                log.warning("mesos: %s skipped, not connected", what)
                return False
            try:
                fn(driver)
            except Exception:
                log.exception("mesos: %s failed", what)
                return False
        return True

    def accept(self, offer_ids: list[str], tasks: list[dict[str, Any]], refuse_s: float) -> bool:
        return self._call(
            f"launch of {len(tasks)} tasks",
            lambda d: d.launchTasks(
                [{"value": o} for o in offer_ids], tasks, {"refuse_seconds": refuse_s}
            ),
        )

    def decline(self, offer_ids: list[str], refuse_s: float) -> bool:
        return self._call(
            "decline",
            lambda d: d.declineOffer(
                [{"value": o} for o in offer_ids], {"refuse_seconds": refuse_s}
            ),
        )

    def revive(self) -> bool:
        return self._call("revive", lambda d: d.reviveOffers())

    def suppress(self) -> bool:
        return self._call("suppress", lambda d: d.suppressOffers())

    def kill(self, task_id: str) -> bool:
        return self._call(f"kill {task_id}", lambda d: d.killTask({"value": task_id}))

    def reconcile_tasks(self, tasks: list[tuple[str, str]]) -> bool:
        body = [{"task_id": {"value": t}, "agent_id": {"value": a}} for t, a in tasks]
        return self._call("reconcile", lambda d: d.reconcileTasks(body))

    def send_message(self, executor_id: str, agent_id: str, data: bytes) -> bool:
        return self._call(
            f"message to {executor_id}",
            lambda d: d.sendFrameworkMessage(
                {"value": executor_id}, {"value": agent_id}, base64.b64encode(data).decode()
            ),
        )

    def master_state(self) -> dict[str, Any]:
        """The master's `/master/state` (RegistryError-free; raises OSError/ValueError)."""
        master = self.master
        if master is None:
            raise OSError("not connected to a Mesos master")
        with urllib.request.urlopen(f"http://{master}/master/state", timeout=5) as resp:
            state: dict[str, Any] = json.load(resp)
            return state

    def agent_totals(self, timeout_s: float = 5.0) -> dict[str, tuple[float, float]]:
        """Each agent's total (cpus, mem MB) from the master's v1 operator API `GET_AGENTS`.

        Blocks up to `timeout_s`; raises OSError (unreachable, HTTP error) or ValueError (an
        answer that is not the expected JSON).
        """
        master = self.master
        if master is None:
            raise OSError("not connected to a Mesos master")
        request = urllib.request.Request(
            f"http://{master}/api/v1",
            data=b'{"type": "GET_AGENTS"}',
            headers={"Content-Type": "application/json", "Accept": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=timeout_s) as resp:
            answer = json.load(resp)
        try:
            agents = answer["get_agents"].get("agents", [])
            totals: dict[str, tuple[float, float]] = {}
            for agent in agents:
                info = agent["agent_info"]
                # total_resources since Mesos 1.2; older masters only have the agent's own.
                resources = agent.get("total_resources") or info.get("resources") or []
                totals[str(info["id"]["value"])] = (
                    _scalar_sum(resources, "cpus"),
                    _scalar_sum(resources, "mem"),
                )
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"unexpected GET_AGENTS answer: {exc!r}") from exc
        return totals

    # -- the event thread -------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            try:
                kind, payload = self._events.get(timeout=1.0)
            except queue.Empty:
                self._watchdog()
                continue
            if kind == "stop":
                return
            try:
                self._handle(kind, payload)
            except Exception:
                log.exception("mesos: handling %s failed", kind)

    def _handle(self, kind: str, payload: Any) -> None:
        if kind == "connect":
            if self._driver is None and not self._stopping.is_set() and not self._paused:
                self._connect()
        elif kind == "connect_failed":
            self._connect_failed(*payload)
        elif kind in ("registered", "reregistered"):
            if kind == "registered":
                framework_id, master_info = payload
                self._framework_ids.save(framework_id)
            else:
                master_info = payload
            address = master_info.get("address") or {}
            host = address.get("hostname") or master_info.get("hostname")
            port = address.get("port") or master_info.get("port")
            self.master = f"{host}:{port}" if host and port else self.master
            self.connected.set()
            self.status = "connected"
            self._retry_s = 1.0
            log.info("mesos: %s with %s as %s", kind, self.master, self._framework_ids.framework_id)
            self._on_connected()
        elif kind == "disconnected":
            self.connected.clear()
            self.status = "reconnecting"
            self._on_disconnected()
            log.warning("mesos: disconnected from the master; pymesos reconnects")
        elif kind == "offers":
            self._on_offers(list(payload))
        elif kind == "rescind":
            self._on_rescind(payload)
        elif kind == "status":
            if self._on_status(payload) and "uuid" in payload:
                self._call("acknowledge", lambda d: d.acknowledgeStatusUpdate(payload))
        elif kind == "error":
            self._on_error(str(payload))
        elif kind == "agent_lost":
            log.warning("mesos: agent %s lost", payload)
        elif kind == "executor_lost":
            log.warning("mesos: executor %s on %s exited with status %s", *payload)

    def _watchdog(self) -> None:
        if self._stopping.is_set() or self._paused:
            return
        if DRIVER_CRASHED.is_set():
            DRIVER_CRASHED.clear()
            log.error("mesos: the pymesos driver thread died; reconnecting")
            self._disconnect()
            self._on_disconnected()
            self._retry_at = time.monotonic() + self._retry_s
            self._retry_s = min(_RETRY_MAX_S, self._retry_s * 2)
        if self._driver is None and time.monotonic() >= self._retry_at:
            self._connect()

    def _on_error(self, message: str) -> None:
        log.error("mesos: error from the master: %s", message)
        if FRAMEWORK_REMOVED in message:
            # The stored id is stale (failover timeout passed or torn down): register anew.
            self._disconnect()
            self._framework_ids.clear()
            if not self._stopping.is_set():
                self._connect()
        elif FRAMEWORK_FAILED_OVER in message:
            # Another scheduler subscribed with our framework id: it is the leader now.
            self._disconnect()
            self._on_disconnected()

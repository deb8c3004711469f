"""The leader's connection to Mesos: a pymesos `MesosSchedulerDriver` per connection.

pymesos calls the scheduler callbacks on its IO thread; they only queue typed events
(`driver_events`). The `sched-mesos-events` thread handles them: it saves the framework id,
hands offers and status updates to the handlers bound to it (`DriverHandlers`: the launcher's,
the status handler's and the reconciler's, bound once after those were built with the driver in
hand) and acknowledges each update only after it was processed (explicit acknowledgements), so
a crash never loses one. A paused leader (SUSPENDED session) disconnects from Mesos instead of
only idling: a new leader's subscription would otherwise close this one's stream, and pymesos
would re-subscribe at once, stealing the framework back.
"""

from __future__ import annotations

import base64
import json
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, assert_never

from pymesos import MesosSchedulerDriver

from scheduler.leader import outbound
from scheduler.leader.lifecycle import EventLoopComponent, join_thread
from scheduler.leader.mesos.calls import (
    CallEndpoint,
    CallFailed,
    PipelinedCalls,
    accept_body,
    basic_credential,
)
from scheduler.leader.mesos.driver_events import (
    AgentLost,
    Connect,
    ConnectFailed,
    Disconnected,
    DriverEvent,
    ExecutorLost,
    FrameworkMessage,
    MasterError,
    Offers,
    PymesosDriver,
    QueueingCallbacks,
    Rescinded,
    StatusUpdate,
    Subscribed,
)
from scheduler.leader.mesos.offers import AcceptOutcome
from scheduler.model.errors import SchedulerError
from scheduler.model.settings import Settings

log = logging.getLogger(__name__)

MASTER_READ_TIMEOUT_S = 5.0
MASTER_ANSWER_MAX_BYTES = 64 * 1024 * 1024

FRAMEWORK_REMOVED = "Framework has been removed"
# pymesos's IO thread reports its death by interrupting the main thread (SIGINT); the process's
# signal handler sets this instead of stopping the replica, and the driver reconnects.
DRIVER_CRASHED = threading.Event()
_RETRY_MAX_S = 30.0
# How long `stop` waits for a `sched-mesos-connect` thread (it only starts a pymesos driver).
_CONNECT_JOIN_S = 0.5
# The acknowledgement thread's last write and its answers (within MASTER_READ_TIMEOUT_S).
_ACK_JOIN_S = 5.0
FRAMEWORK_FAILED_OVER = "Framework failed over"
# At most this many status updates handled (and written) together.
_STATUS_BATCH_MAX = 64
# At most this many acknowledgements in one pipelined write.
_ACK_BATCH_MAX = 256


def _scalar_sum(resources: list[dict[str, Any]], name: str) -> float:
    """The sum of the scalar resources called `name` (every role) in a v1 resource list."""
    return sum(
        float(r.get("scalar", {}).get("value", 0.0))
        for r in resources
        if r.get("name") == name and r.get("type", "SCALAR") == "SCALAR"
    )


def _master_json(
    master: str | None, method: str, path: str, body: bytes | None, timeout_s: float
) -> Any:
    """One JSON answer of the master (`host:port`), the whole request within `timeout_s`
    (`scheduler/leader/outbound.py`: a peer that trickles its answer cannot hold the caller,
    and a redirect is an error, never followed). Raises OSError (unreachable, timed out, not
    HTTP 200) or ValueError (not JSON, or larger than `MASTER_ANSWER_MAX_BYTES`)."""
    if master is None:
        raise OSError("not connected to a Mesos master")
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    answer = outbound.request(
        method,
        f"http://{master}{path}",
        deadline_s=timeout_s,
        body=body,
        headers=headers,
        max_answer_bytes=MASTER_ANSWER_MAX_BYTES + 1,
    )
    if answer.status != 200:
        where = answer.headers.get("Location") or answer.headers.get("location")
        moved = f" (redirect to {where} not followed)" if where else ""
        raise OSError(f"the Mesos master answered HTTP {answer.status} to {path}{moved}")
    if len(answer.body) > MASTER_ANSWER_MAX_BYTES:
        raise ValueError(f"the Mesos master's {path} exceeds {MASTER_ANSWER_MAX_BYTES} bytes")
    return json.loads(answer.body)


def _refusal(exc: RuntimeError) -> str | None:
    """pymesos's error for a call the master answered with an HTTP error (or made while it had
    no connection), in one short line; None for any other RuntimeError (a bug: traced)."""
    text = str(exc)
    if not text.startswith(("Failed to send request", "Not connected yet")):
        return None
    line = text.splitlines()[0] if text else text
    return line if len(line) <= 200 else line[:200] + "..."


def _stop_driver(driver: PymesosDriver, timeout_s: float = 3.0) -> None:
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


@dataclass(frozen=True)
class DriverHandlers:
    """What the driver's event thread (`sched-mesos-events`) calls, one at a time.

    `on_offers(offers)` with the offers of one callback, `on_rescind(offer_id)`,
    `on_status(status) -> bool` (True: processed, acknowledge it), `on_connected()` after each
    (re)subscription, `on_disconnected()` when the offers in hand are void (disconnected,
    paused, crashed or failed over) and `on_agent_lost(agent_id)` when Mesos says an agent is
    gone (the term binds the reconciler's `reconcile_agent`; the default only logs).
    """

    on_offers: Callable[[list[dict[str, Any]]], None]
    on_rescind: Callable[[str], None]
    on_status: Callable[[dict[str, Any]], bool]
    on_connected: Callable[[], None]
    on_disconnected: Callable[[], None]
    on_agent_lost: Callable[[str], None] = lambda agent_id: None
    on_statuses: Callable[[list[dict[str, Any]]], list[bool]] | None = None
    """Status updates that came one after another, with the answer for each as `on_status`
    gives it (None: each goes to `on_status`)."""


class DriverWiringError(SchedulerError):
    """The driver was started with no handlers bound, or bound twice: a wiring mistake that
    would otherwise drop every offer and status update silently."""


class MesosDriver(EventLoopComponent[DriverEvent]):
    """Owns the pymesos driver and the event thread for one term.

    Built first, without handlers, so that the components that call it (launcher, status
    handler, reconciler) can be given it; `bind` then hands it their handlers, once, before
    `start`, which refuses to run without them.
    """

    name = "mesos-driver"
    thread_name = "sched-mesos-events"
    # The watchdog (`_idle`) runs after this long without an event.
    idle_s = 1.0
    # Events taken together when they queued up (status updates handled as one batch).
    batch_max = _STATUS_BATCH_MAX

    def __init__(
        self,
        settings: Settings,
        framework_ids: FrameworkIds,
    ) -> None:
        super().__init__()
        self._settings = settings
        self._framework_ids = framework_ids
        self._handlers: DriverHandlers | None = None
        self._driver: PymesosDriver | None = None
        self._lock = threading.RLock()
        # `sched-mesos-connect` threads that may still run (joined at stop).
        self._connecting: list[threading.Thread] = []
        self.connected = threading.Event()
        self.master: str | None = None
        self.status = "not started"
        self._paused = False
        self._retry_at = 0.0
        self._retry_s = 1.0
        # Acknowledgements to send, in the order the updates were processed, by their own
        # thread: each is an HTTP round trip to the master, which the event thread waited for
        # before it took the next update (at 200 updates a second the updates fell behind the
        # agent's 10-s resend, and the resends made it worse).
        self._acks: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._ack_thread: threading.Thread | None = None
        # The `Authorization` of the hot calls (`calls.py`), as pymesos sends it.
        self._credential = basic_credential(
            settings.framework_principal or None, settings.framework_secret or None
        )
        # The launcher's ACCEPTs, on a connection of their own (closed at stop).
        self._accepts = PipelinedCalls(MASTER_READ_TIMEOUT_S)
        self._accept_lock = threading.Lock()

    # -- lifecycle --------------------------------------------------------------------------

    def bind(self, handlers: DriverHandlers) -> None:
        """Hand the driver the handlers of its events; once, before `start`."""
        if self._handlers is not None:
            raise DriverWiringError("the Mesos driver's handlers are already bound")
        self._handlers = handlers

    @property
    def _bound(self) -> DriverHandlers:
        """The handlers; `start` made sure they are bound before any event is handled."""
        handlers = self._handlers
        if handlers is None:
            raise DriverWiringError("the Mesos driver has no handlers bound")
        return handlers

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
            QueueingCallbacks(self.post),
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
                self.post(ConnectFailed(driver, exc))
                return
            with self._lock:
                ours = self._driver is driver
            if not ours:
                # Disconnected (paused, stopped) before this thread got to start it: pymesos's
                # start undoes a stop that came first, and the driver would run on unseen. Two
                # drivers of one framework then fail each other over without end (seen after
                # a ZooKeeper member froze twice in a row: pause, resume, pause, resume).
                driver.stop(failover=True)

        thread = threading.Thread(target=start, name="sched-mesos-connect", daemon=True)
        self._connecting = [t for t in self._connecting if t.is_alive()]
        self._connecting.append(thread)
        thread.start()

    def _connect_failed(self, driver: PymesosDriver, exc: Exception) -> None:
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
        if self._handlers is None:
            raise DriverWiringError("the Mesos driver was started with no handlers bound")
        self._start_thread()
        self._acks = queue.Queue()
        self._ack_thread = threading.Thread(
            target=self._send_acks, name="sched-mesos-acks", daemon=True
        )
        self._ack_thread.start()
        # Connect from the event thread: a zk:// master URL may block for a connection timeout,
        # and the leader's API must not wait for Mesos.
        self.post(Connect())

    def _send_acks(self) -> None:
        """`sched-mesos-acks`: acknowledge the processed updates, in order, until stopped: all
        those queued when it looks, in one pipelined write (`calls.PipelinedCalls`). An
        acknowledgement not sent is no loss: the agent sends its update again."""
        sender = PipelinedCalls(MASTER_READ_TIMEOUT_S)
        try:
            while True:
                status = self._acks.get()
                if status is None:
                    return
                batch = [status]
                while len(batch) < _ACK_BATCH_MAX:
                    try:
                        status = self._acks.get_nowait()
                    except queue.Empty:
                        break
                    if status is None:
                        self._acknowledge(sender, batch)
                        return
                    batch.append(status)
                self._acknowledge(sender, batch)
        finally:
            sender.close()

    def _endpoint(self) -> CallEndpoint | None:
        """Where the calls of the current subscription go; None while not subscribed."""
        with self._lock:
            driver = self._driver
            if driver is None or not self.connected.is_set():
                return None
            master, stream_id = driver.master, driver.stream_id
            framework_id = driver.framework_id
        if not master or not stream_id or not framework_id:
            return None
        return CallEndpoint(master, stream_id, framework_id, self._credential)

    def _acknowledge(self, sender: PipelinedCalls, batch: list[dict[str, Any]]) -> None:
        try:
            endpoint = self._endpoint()
            if endpoint is None:
                log.warning("mesos: %d acknowledgement(s) skipped, not connected", len(batch))
                return
            outcome = sender.acknowledge(endpoint, batch)
        except (CallFailed, ValueError) as exc:
            log.warning("mesos: acknowledgements not sent (the agents send again): %s", exc)
            return
        if outcome.refused:
            # As while the master fails over (403): one line, no stack trace.
            log.warning(
                "mesos: %d of %d acknowledgement(s) not accepted by the master: %s",
                len(outcome.refused),
                len(batch),
                outcome.refused[0],
            )

    def stop(self) -> None:
        self._stopping.set()
        self._acks.put(None)
        self._disconnect()
        self._stop_thread()
        join_thread(self._ack_thread, _ACK_JOIN_S, self.name)
        self._ack_thread = None
        # An ACCEPT in flight (the launcher stops after the driver) is given a moment, then
        # fails on its closed connection (logged, its bookkeeping undone).
        locked = self._accept_lock.acquire(timeout=_CONNECT_JOIN_S)
        try:
            self._accepts.close()
        finally:
            if locked:
                self._accept_lock.release()
        # A connect thread ends once its driver started or failed; one still waiting for a
        # zk:// master that does not answer may wait a while longer, and the hand-over to the
        # next leader must not wait for it.
        for thread in self._connecting:
            thread.join(_CONNECT_JOIN_S)
            if thread.is_alive():
                log.warning(
                    "mesos: thread %s still waiting for the master; left to end on its own",
                    thread.name,
                )
        self._connecting = []

    def pause(self) -> None:
        log.warning("mesos: disconnecting while the ZooKeeper session is suspended")
        self._paused = True
        self._disconnect()
        self._bound.on_disconnected()

    def resume(self) -> None:
        self._paused = False
        if not self._stopping.is_set():
            self.post(Connect())

    # -- calls (any thread) -----------------------------------------------------------------

    def _call(self, what: str, fn: Callable[[PymesosDriver], None]) -> bool:
        with self._lock:
            driver = self._driver
            if driver is None or not self.connected.is_set():
                log.warning("mesos: %s skipped, not connected", what)
                return False
            try:
                fn(driver)
            except RuntimeError as exc:
                refused = _refusal(exc)
                if refused is None:
                    log.exception("mesos: %s failed", what)
                    return False
                # The master refused the call (as it does, 403, while it fails over): one line,
                # no stack trace; an unacknowledged update is sent again by the agent.
                log.warning("mesos: %s not accepted by the master: %s", what, refused)
                return False
            except Exception:
                log.exception("mesos: %s failed", what)
                return False
        return True

    def accept(
        self, offer_ids: list[str], tasks: list[dict[str, Any]], refuse_s: float
    ) -> AcceptOutcome:
        """Launch `tasks` on the offers: an ACCEPT on the launcher's own connection
        (`calls.PipelinedCalls`, its body encoded by orjson), never written twice. REFUSED
        (logged) when the master refused it or it was not sent; UNCONFIRMED (logged) when it
        was written and no answer came: the master may have taken it."""
        if not tasks:
            declined = self.decline(offer_ids, refuse_s)
            return AcceptOutcome.LAUNCHED if declined else AcceptOutcome.REFUSED
        what = f"launch of {len(tasks)} tasks"
        with self._accept_lock:
            try:
                endpoint = self._endpoint()
                if endpoint is None:
                    log.warning("mesos: %s skipped, not connected", what)
                    return AcceptOutcome.REFUSED
                body = accept_body(endpoint.framework_id, offer_ids, tasks, refuse_s)
                outcome = self._accepts.call(endpoint, [body])
            except CallFailed as exc:
                if exc.written:
                    log.error("mesos: %s unconfirmed (the master may have it): %s", what, exc)
                    return AcceptOutcome.UNCONFIRMED
                log.error("mesos: %s failed, not sent: %s", what, exc)
                return AcceptOutcome.REFUSED
            except (TypeError, ValueError) as exc:  # a TaskInfo orjson cannot write: a bug
                log.exception("mesos: %s failed: %s", what, exc)
                return AcceptOutcome.REFUSED
        if outcome.refused:
            log.warning("mesos: %s not accepted by the master: %s", what, outcome.refused[0])
            return AcceptOutcome.REFUSED
        return AcceptOutcome.LAUNCHED

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

    def master_state(self, timeout_s: float = MASTER_READ_TIMEOUT_S) -> dict[str, Any]:
        """The master's `/master/state`, read within `timeout_s` for the whole request (a
        redirect is refused, not followed); raises OSError or ValueError."""
        state = _master_json(self.master, "GET", "/master/state", None, timeout_s)
        if not isinstance(state, dict):
            raise ValueError("the Mesos master's /master/state is not a JSON object")
        return state

    def agent_totals(self, timeout_s: float = 5.0) -> dict[str, tuple[float, float]]:
        """Each agent's total (cpus, mem MB) from the master's v1 operator API `GET_AGENTS`.

        Blocks up to `timeout_s`; raises OSError (unreachable, HTTP error) or ValueError (an
        answer that is not the expected JSON).
        """
        answer = _master_json(self.master, "POST", "/api/v1", b'{"type": "GET_AGENTS"}', timeout_s)
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

    def _handle_batch(self, events: list[DriverEvent]) -> None:
        """Status updates that queued up one after another go to `on_statuses` together (the
        handler writes them in one transaction); every other event, in its place, to
        `_handle` (which gives `on_statuses` an update that came alone)."""
        on_statuses = self._bound.on_statuses
        if on_statuses is None:
            super()._handle_batch(events)
            return
        run: list[dict[str, Any]] = []
        for event in [*events, None]:
            if isinstance(event, StatusUpdate):
                run.append(event.status)
                continue
            if run:
                self._statuses(on_statuses, run)
            run = []
            if event is not None:
                self._handle_one(event)

    def _statuses(
        self,
        on_statuses: Callable[[list[dict[str, Any]]], list[bool]],
        statuses: list[dict[str, Any]],
    ) -> None:
        try:
            answers = on_statuses(statuses)
        except Exception:
            log.exception("%s: handling %d status updates failed", self.name, len(statuses))
            return  # none acknowledged: the agents send them again
        for status, ack in zip(statuses, answers, strict=True):
            if ack and "uuid" in status:
                self._acks.put(status)

    def _handle(self, event: DriverEvent) -> None:
        match event:
            case Connect():
                if self._driver is None and not self._stopping.is_set() and not self._paused:
                    self._connect()
            case ConnectFailed(driver, error):
                self._connect_failed(driver, error)
            case Subscribed(framework_id, master_info):
                if framework_id is not None:
                    self._framework_ids.save(framework_id)
                address = master_info.get("address") or {}
                host = address.get("hostname") or master_info.get("hostname")
                port = address.get("port") or master_info.get("port")
                self.master = f"{host}:{port}" if host and port else self.master
                self.connected.set()
                self.status = "connected"
                self._retry_s = 1.0
                log.info(
                    "mesos: %s with %s as %s",
                    "registered" if framework_id is not None else "reregistered",
                    self.master,
                    self._framework_ids.framework_id,
                )
                self._bound.on_connected()
            case Disconnected():
                self.connected.clear()
                self.status = "reconnecting"
                self._bound.on_disconnected()
                log.warning("mesos: disconnected from the master; pymesos reconnects")
            case Offers(offers):
                self._bound.on_offers(offers)
            case Rescinded(offer_id):
                self._bound.on_rescind(offer_id)
            case StatusUpdate(status):
                on_statuses = self._bound.on_statuses
                if on_statuses is not None:
                    self._statuses(on_statuses, [status])
                elif self._bound.on_status(status) and "uuid" in status:
                    self._acks.put(status)
            case FrameworkMessage(executor_id, agent_id, data):
                log.info(
                    "mesos: message of %d characters from executor %s on %s ignored (this "
                    "framework expects none)",
                    len(data),
                    executor_id,
                    agent_id,
                )
            case MasterError(message):
                self._on_error(message)
            case AgentLost(agent_id):
                log.warning("mesos: agent %s lost", agent_id)
                self._bound.on_agent_lost(agent_id)
            case ExecutorLost(executor_id, agent_id, status):
                log.warning(
                    "mesos: executor %s on %s exited with status %s", executor_id, agent_id, status
                )
            case _:
                assert_never(event)

    def _idle(self) -> None:
        self._watchdog()

    def _watchdog(self) -> None:
        if self._stopping.is_set() or self._paused:
            return
        if DRIVER_CRASHED.is_set():
            DRIVER_CRASHED.clear()
            log.error("mesos: the pymesos driver thread died; reconnecting")
            self._disconnect()
            self._bound.on_disconnected()
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
            self._bound.on_disconnected()

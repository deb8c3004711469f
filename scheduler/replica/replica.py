"""A scheduler replica: ZooKeeper session, the election loop, leadership terms and shutdown.

Threads (each owned, named and joined here):
- `sched-election`: the contender loop, Curator's LeaderSelector with autoRequeue. Each pass
  builds a fresh kazoo `Election`, blocks until it wins, runs one term (`_lead`) and re-enters.
- `sched-leader-watch`: follows the election's first contender, for `/health` and redirects.
- `sched-zk-watchdog`: every 0.5 s checks that the kazoo client is alive (see below), that
  ZooKeeper answers on a connection kazoo calls open, and whether the wall clock stepped.
- `sched-http` (scheduler.edge.http, built by scheduler.wiring.replica): `/health`, `/metrics`,
  `/api/*`.

kazoo never tells the holder of an `Election` that it lost, and reports LOST only once it has
reconnected. So the state listener only sets flags: SUSPENDED fences the term at once (no
launches, no leader writes), and the leader thread steps down on LOST, on a new session, or once
SUSPENDED has lasted a session timeout.

A kazoo client does not come back once its connection thread has ended: an exception inside that
thread (an unencodable path once did it) or a stop leaves it CLOSED for good, and every call fails
at once. The watchdog notices within 0.5 s, fences any term and wakes the election thread, which
ends the term (components stop) and builds a new client, a new `Registry` over it, and re-enters
the election; terms are built from `self.registry`, so nothing of the dead client survives. The
old session's election node lingers until ZooKeeper expires it (one session timeout), which is
also what keeps every other replica from leading before the dead term's session is gone. If the
new client is not in place within a session timeout (a component that will not stop), or one of
the replica's threads has died, the replica is `failed`: `python -m scheduler` then exits 3 so its
supervisor restarts it.

`/health` carries a `reason` (None when healthy): set whenever the replica cannot reach ZooKeeper
(SUSPENDED beyond a short grace, LOST, client dead) or cannot act (failed, stopping); the HTTP
layer answers 503 then, so a supervisor replaces the replica.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    ConnectionClosedError,
    KazooException,
)
from kazoo.handlers.threading import KazooTimeoutError

from scheduler.edge.job_series import MetricsRegistry
from scheduler.edge.metrics import ReplicaCollector, ReplicaFigures, SchedulerMetrics
from scheduler.leader.lifecycle import ComponentStartError, TermComponents
from scheduler.model.errors import RegistryError, SchedulerError
from scheduler.model.settings import Settings
from scheduler.replica.clock_step import ClockStepWatch
from scheduler.replica.election_nodes import client_death, secure_election_path
from scheduler.replica.leader_watch import LeaderWatch
from scheduler.replica.silence import SilenceProbe
from scheduler.replica.startup_warnings import DEV_CLUSTER_ENV, startup_warnings
from scheduler.replica.term import BuiltTerm, LeaderContext, Term, TermReadout, term_number
from scheduler.replica.vouching import Vouching
from scheduler.storage.acl import make_client, secure_namespace
from scheduler.storage.config_store import resolve_time_zone
from scheduler.storage.layout import ELECTION
from scheduler.storage.parsed_jobs import ParsedJobs
from scheduler.storage.registry import Registry

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIApplication

log = logging.getLogger(__name__)


def _installed_version() -> str:
    """This replica's ejcloud version (pyproject.toml's, as installed); "unknown" when run from
    sources that were never installed."""
    try:
        return importlib.metadata.version("ejcloud")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


VERSION = _installed_version()
"""Shown to authenticated callers in `/health` (`version`), so that a rolling upgrade can be
followed replica by replica (docs/upgrading.md); not in the public part."""

ComponentFactory = Callable[[LeaderContext], BuiltTerm]
_T = TypeVar("_T")


class ReplicaServer(Protocol):
    """The HTTP server a replica runs (`scheduler.edge.http.ReplicaHttp`, built by
    `scheduler.wiring.replica` from the replica's own health, leader and vouching)."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def mount_api(self, app: WSGIApplication | None) -> None: ...


# Builds the replica's HTTP server once the replica's own parts (metrics, vouching) exist.
ServerFactory = Callable[["Replica"], ReplicaServer]
# Follows the revoked console sessions and the access records (users, grants, tokens) on a
# registry, calling back when a watch fires; True when it read (`Sessions.follow` and
# `AccessFollower.follow` of the process's authenticator, both composed by wiring/replica.py).
SessionFollower = Callable[[Registry, Callable[[], None]], bool]

_WATCHDOG_INTERVAL_S = 0.5
# How long a replica has been a standby before it parses the jobs ahead of a term (a replica
# that wins at its start never does).
_STANDBY_SETTLE_S = 5.0
# /health tolerates a SUSPENDED session this long (capped at half the session timeout) before it
# answers 503: a blip that kazoo recovers from in a moment should not get the replica replaced.
_SUSPENDED_GRACE_S = 2.0


class Replica:
    """One `python -m scheduler` process's scheduler logic (not the signal handling).

    Composed by `scheduler.wiring.replica.build_replica`, which gives it its HTTP server
    (`server_for`) and how it follows the revoked console sessions (`follow_sessions`).
    """

    def __init__(
        self,
        settings: Settings,
        component_factory: ComponentFactory,
        *,
        server_for: ServerFactory,
        follow_sessions: SessionFollower,
    ) -> None:
        self.settings = settings
        self._factory = component_factory
        self._follow_revoked = follow_sessions
        self._client: KazooClient = make_client(settings)
        self.registry = Registry(
            self._client, settings.zk_namespace, settings.zk_session_timeout_seconds
        )
        self._listen(self._client)
        self._election_path = self.registry.abs(ELECTION)
        # Which of them this replica vouches for (leader-watch thread); only those are listed,
        # granted CORS and redirected to.
        self.vouching = Vouching(settings)
        self.warnings = startup_warnings(settings, os.environ)
        # A registry of this replica's own (several replicas may share a process in tests).
        self.metrics = MetricsRegistry()
        self.scheduler_metrics = SchedulerMetrics(self.metrics, settings.metrics_max_jobs)
        self.http = server_for(self)
        self._stopping = threading.Event()
        self._wake = threading.Event()  # the leader thread re-checks the session state
        self._leader_changed = threading.Event()
        self._zk_state: str = KazooState.LOST
        self._suspended_since: float | None = None
        self._lost_count = 0
        self._term: Term | None = None
        self._service_up = False
        self._election: Any = None
        self._threads: list[threading.Thread] = []
        self._started_at = time.time()
        self._clock = ClockStepWatch()  # the watchdog's clock step check
        # The watchdog's probe of ZooKeeper: is it silent too long on an open connection?
        self._silence = SilenceProbe(
            settings.identity,
            settings.zk_session_timeout_seconds,
            current_client=lambda: self._client,
            on_state=self._on_zk_state,
        )
        self.counters = {"terms": 0, "term_failures": 0, "leader_changes": 0, "zk_clients": 1}
        self._leader_watch = LeaderWatch(
            self._election_path,
            self.vouching,
            client=lambda: self._client,
            connected=lambda: self._zk_state == KazooState.CONNECTED,
            stopping=self._stopping,
            changed=self._leader_changed,
            follow_sessions=self._follow_sessions,
            counters=self.counters,
        )
        self.last_term: dict[str, Any] | None = None
        # What /health and /metrics read of the term (its wiring built it).
        self._readout: TermReadout | None = None
        # Set by the watchdog when the client died; cleared once a new client is in place.
        self._client_death: str | None = None
        self._client_died_at = 0.0
        # Set when the replica cannot recover in-process; its process should exit non-zero.
        self.failed = threading.Event()
        self.failure: str | None = None
        self.metrics.register(ReplicaCollector(self.figures))
        # Jobs parsed while a standby, for the next term's start (issue 29).
        self.parsed_ahead = ParsedJobs()

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Connect to ZooKeeper, serve HTTP and enter the election.

        Raises RegistryError when ZooKeeper cannot be reached within the connection timeout, and
        OSError when the HTTP port is taken.
        """
        for warning in self.warnings:
            log.warning("replica %s: WARNING: %s", self.settings.identity, warning)
        if not self.settings.zk_digest and not self.warnings:
            log.info(
                "replica %s: zk_digest is not set (local development cluster: %s=1, ZooKeeper "
                "on loopback)",
                self.settings.identity,
                DEV_CLUSTER_ENV,
            )
        try:
            self._client.start(timeout=self.settings.zk_connection_timeout_seconds)
        except KazooTimeoutError as exc:
            self._client.close()
            raise RegistryError(
                f"cannot connect to ZooKeeper at {self.settings.zk_servers} within "
                f"{self.settings.zk_connection_timeout_seconds:g}s"
            ) from exc
        self.registry.ensure(ELECTION)
        if self.settings.zk_digest:
            self._secure_election_path()
        self.registry.probe_multi_read()  # before contending: an old server drops the connection
        self.http.start()
        for target, name in (
            (self._contend, "sched-election"),
            (self._leader_watch.run, "sched-leader-watch"),
            (self._watchdog, "sched-zk-watchdog"),
        ):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        if self.settings.standby_parse_ahead_minutes > 0:
            # Not one of the threads the watchdog requires alive, nor one the stop waits for (a
            # pass may be in a read; it stops at its next chunk, and holds nothing).
            threading.Thread(
                target=self._parse_ahead, name="sched-standby-parse", daemon=True
            ).start()
        log.info(
            "replica %s: started (namespace /%s)",
            self.settings.identity,
            self.settings.zk_namespace,
        )

    def _secure_election_path(self) -> None:
        """Give the election path the digest's ACL before contending (see `vouching`)."""
        try:
            done = secure_election_path(self._client, self._election_path, self.settings.zk_digest)
        except KazooException as exc:
            raise RegistryError(
                f"cannot secure the election path {self._election_path}: {exc!r}"
            ) from exc
        log.info(
            "replica %s: election path %s: %s", self.settings.identity, self._election_path, done
        )

    def stop(self, timeout_s: float = 20.0) -> None:
        """Warm stop: end the term (components stop, the election node is deleted), then close.

        Blocks up to about `timeout_s`; threads still alive then are named in an ERROR.
        """
        log.info("replica %s: stopping", self.settings.identity)
        self._stopping.set()
        self._wake.set()
        self._leader_changed.set()
        election = self._election
        if election is not None:
            election.cancel()  # wakes a standby's blocking acquire
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.1, deadline - time.monotonic()))
        # Closing the session also deletes any node a stuck thread still holds.
        self._client.stop()
        self._client.close()
        for thread in self._threads:
            thread.join(1.0)
            if thread.is_alive():
                log.error("replica: thread %s did not stop within %ss", thread.name, timeout_s)
        self.http.stop()
        log.info("replica %s: stopped", self.settings.identity)

    # -- kazoo listener: flags only ----------------------------------------------------------

    def _listen(self, client: KazooClient) -> None:
        def on_state(state: str) -> None:
            if client is self._client:  # a replaced client's late news is not ours
                if state == KazooState.CONNECTED:  # the server answered its handshake
                    self._silence.answered_handshake()
                self._on_zk_state(state)

        client.add_listener(on_state)

    def _on_zk_state(self, state: str) -> None:
        self._zk_state = state
        term = self._term
        if state == KazooState.SUSPENDED:
            self._suspended_since = time.monotonic()
            if term is not None:
                term.stop_acting()
        elif state == KazooState.LOST:
            self._lost_count += 1
            if term is not None:
                term.stop_acting()
        else:
            self._suspended_since = None
        self._wake.set()
        self._leader_changed.set()

    # -- watchdog: the client must stay alive ------------------------------------------------

    def _watchdog(self) -> None:
        while not self._stopping.wait(_WATCHDOG_INTERVAL_S):
            try:
                self._check_liveness()
                self._silence.check(
                    self._client,
                    self._client_death is None and self._zk_state == KazooState.CONNECTED,
                )
                self._clock.check(self.settings.identity, self.is_acting_leader())
            except Exception:
                log.exception("watchdog: check failed")

    def _check_liveness(self) -> None:
        """One watchdog pass (thread `sched-zk-watchdog`): flag a dead client, fail if stuck."""
        if self._stopping.is_set() or self.failed.is_set():
            return
        dead = [t.name for t in self._threads if not t.is_alive()]
        if dead:
            self._fail(f"thread {', '.join(dead)} ended unexpectedly")
            return
        if self._client_death is None:
            why = client_death(self._client)
            if why is None or self._stopping.is_set():
                return
            self._client_died_at = time.monotonic()
            self._client_death = why
            log.critical(
                "replica %s: ZooKeeper client is dead (%s); ending any term and building a new "
                "client",
                self.settings.identity,
                why,
            )
            self._zk_state = KazooState.LOST
            term = self._term
            if term is not None:
                term.stop_acting()
            self._wake.set()
            self._leader_changed.set()
            return
        limit_s = self.settings.zk_session_timeout_seconds
        if time.monotonic() - self._client_died_at > limit_s:
            self._fail(f"no new ZooKeeper client within {limit_s:g}s of the old one dying")

    def _fail(self, why: str) -> None:
        """The replica cannot recover in-process: fence, flag, and let the process exit."""
        self.failure = why
        term = self._term
        if term is not None:
            term.stop_acting()
        log.critical("replica %s: failed: %s", self.settings.identity, why)
        self.failed.set()
        self._wake.set()

    def _replace_client(self) -> None:
        """Build a new client and registry in place of the dead one (election thread, no term)."""
        old = self._client
        try:
            old.stop()
            old.close()
        except Exception:
            log.exception("replica: closing the dead ZooKeeper client failed")
        client = make_client(self.settings)
        self._zk_state = KazooState.LOST
        self._client = client
        self.registry = Registry(
            client,
            self.settings.zk_namespace,
            self.settings.zk_session_timeout_seconds,
            multi_read=self.registry.multi_read,  # same servers: no second probe
        )
        self._listen(client)
        client.start_async()  # connects (and reconnects) in the background, forever
        self.counters["zk_clients"] += 1
        self._client_death = None
        log.warning(
            "replica %s: new ZooKeeper client started (client %d); re-entering the election once "
            "it is connected",
            self.settings.identity,
            self.counters["zk_clients"],
        )
        self._leader_changed.set()

    # -- standby: jobs parsed ahead ----------------------------------------------------------

    def _parse_ahead(self) -> None:
        """Thread `sched-standby-parse` (started when `standby_parse_ahead_minutes` is not 0):
        while this replica is a standby, read and parse every job that often (the first pass
        once it has been a standby for `_STANDBY_SETTLE_S`), so that its term, when it comes,
        parses only the jobs changed since. A pass stops as soon as a term begins, the session
        wavers or the replica stops."""
        interval_s = self.settings.standby_parse_ahead_minutes * 60
        time_zone = resolve_time_zone(self.settings.time_zone)
        standby_since: float | None = None
        next_pass = 0.0
        while not self._stopping.wait(1.0):
            if not self._standing_by():
                standby_since = None
                continue
            now = time.monotonic()
            if standby_since is None:
                standby_since = now
                next_pass = now + _STANDBY_SETTLE_S
            if now < next_pass:
                continue
            try:
                done = self.parsed_ahead.warm(
                    self.registry, time_zone, lambda: not self._standing_by()
                )
            except Exception as exc:  # noqa: BLE001 - a standby's extra: never ends the thread
                if self._standing_by():
                    log.warning("standby: jobs not parsed ahead this time: %s", exc)
                done = None
            next_pass = time.monotonic() + (interval_s if done is not None else _STANDBY_SETTLE_S)

    def _standing_by(self) -> bool:
        return (
            self._term is None
            and not self._stopping.is_set()
            and self._client_death is None
            and self._zk_state == KazooState.CONNECTED
        )

    # -- election loop -----------------------------------------------------------------------

    def _contend(self) -> None:
        while not self._stopping.is_set() and not self.failed.is_set():
            if self._client_death is not None:
                self._replace_client()
                continue
            if self._zk_state != KazooState.CONNECTED:
                self._wake.wait(0.2)
                self._wake.clear()
                continue
            failed = False
            try:
                self._election = self._client.Election(self._election_path, self.settings.identity)
                if self._stopping.is_set():
                    break
                failed = bool(self._election.run(self._lead, self._election))
            except ConnectionClosedError:
                if not self._stopping.is_set():
                    log.warning("election: ZooKeeper client closed; re-entering")
            except Exception:
                log.exception("election: unexpected error; re-entering after a back-off")
                failed = True
            finally:
                self._election = None
            # autoRequeue, with a back-off after a failed term so a broken leader cannot spin.
            pause = self.settings.leader_retry_backoff_seconds if failed else 0.05
            self._stopping.wait(pause)

    def _lead(self, election: Any) -> bool:
        """One leadership term, run in `sched-election` while holding the election lock.

        Returns True when the term failed to start (the caller backs off).
        """
        lock = election.lock
        client_id = self._client.client_id
        if self._stopping.is_set() or client_id is None or self._zk_state != KazooState.CONNECTED:
            return False
        term = Term(term_number(lock.node), f"{lock.path}/{lock.node}", client_id[0])
        lost_before = self._lost_count
        self._term = term
        log.info("leader: %s won term %s", self.settings.identity, term.number)
        if self.settings.zk_digest:
            # Before any component: nothing launches from a tree others can still rewrite.
            try:
                secure_namespace(
                    self.registry,
                    term.fence,
                    term.number,
                    self.settings.zk_digest,
                    self.settings.zk_namespace,
                )
            except SchedulerError as exc:
                return self._give_up(term, f"cannot set ACLs: {exc.message}")
            except Exception as exc:
                log.exception("leader: term %s could not set ACLs", term.number)
                return self._give_up(term, f"cannot set ACLs: {type(exc).__name__}: {exc}")
        ctx = LeaderContext(
            self.settings,
            self.registry,
            term,
            self.http.mount_api,
            metrics=self.scheduler_metrics,
            parsed_ahead=self.parsed_ahead,
        )
        self._readout = None
        try:
            built = self._factory(ctx)
            self._readout = built.readout
            components = TermComponents(built.components)
            components.start()
        except ComponentStartError as exc:
            return self._give_up(term, str(exc))
        except Exception as exc:
            log.exception("leader: term %s could not build its components", term.number)
            return self._give_up(term, f"{type(exc).__name__}: {exc}")
        self._service_up = True
        self.counters["terms"] += 1
        self._leader_changed.set()
        reason = "?"
        try:
            reason = self._hold(term, components, lost_before)
        finally:
            term.end()  # fence first, so nothing acts while the components stop
            self._service_up = False
            components.stop()
            self._term = None
            self.last_term = term.describe() | {"endReason": reason}
            log.info("leader: term %s ended (%s); components stopped", term.number, reason)
        return False

    def _give_up(self, term: Term, why: str) -> bool:
        self.counters["term_failures"] += 1
        term.end()
        self._term = None
        self.last_term = term.describe() | {"failed": why}
        log.error(
            "leader: term %s given up (%s); re-entering the election in %ss",
            term.number,
            why,
            self.settings.leader_retry_backoff_seconds,
        )
        return True

    def _hold(self, term: Term, components: TermComponents, lost_before: int) -> str:
        """Block while the term lasts; returns why it ended."""
        timeout_s = self.settings.zk_session_timeout_seconds
        while True:
            self._wake.wait(0.5)
            self._wake.clear()
            if self._stopping.is_set():
                return "shutdown"
            if self.failed.is_set():
                return f"replica failed: {self.failure}"
            if self._client_death is not None:
                return "ZooKeeper client died"
            if self._lost_count != lost_before:
                return "session lost"
            state = self._zk_state
            if state == KazooState.SUSPENDED:
                term.stop_acting()
                if not components.paused:
                    log.warning("leader: term %s paused, ZooKeeper session suspended", term.number)
                    components.pause()
                since = self._suspended_since
                if since is not None and time.monotonic() - since >= timeout_s:
                    return f"suspended for {timeout_s:g}s"
            elif state == KazooState.CONNECTED and not term.acting:
                client_id = self._client.client_id
                if client_id is None or client_id[0] != term.session_id:
                    return "new ZooKeeper session"
                term.resume_acting()
                components.resume()
                log.info("leader: term %s resumed, same ZooKeeper session is back", term.number)

    # -- leader tracking ---------------------------------------------------------------------

    def leader(self) -> str | None:
        """The identity of the replica the election names leader (None: none known)."""
        return self._leader_watch.leader()

    def vouched_replicas(self) -> list[str]:
        """The election members this replica vouches for, leader first, itself included."""
        return self.vouching.vouched(self._leader_watch.contenders())

    # -- status ------------------------------------------------------------------------------

    def is_acting_leader(self) -> bool:
        term = self._term
        return self._service_up and term is not None and term.acting

    def unhealthy_reason(self) -> str | None:
        """Why this replica cannot reach ZooKeeper or cannot act now, or None (any thread)."""
        if self.failed.is_set():
            return f"replica failed ({self.failure}); it exits so that its supervisor restarts it"
        if self._stopping.is_set():
            return "replica is stopping"
        death = self._client_death
        if death is not None:
            return f"ZooKeeper client is dead ({death}); building a new one"
        state = self._zk_state
        if state == KazooState.LOST:
            return "ZooKeeper session lost; reconnecting with a new session"
        since = self._suspended_since
        if state == KazooState.SUSPENDED and since is not None:
            grace_s = min(_SUSPENDED_GRACE_S, self.settings.zk_session_timeout_seconds / 2)
            suspended_s = time.monotonic() - since
            if suspended_s >= grace_s:
                return f"ZooKeeper unreachable for {suspended_s:.1f}s (session suspended)"
        return None

    def _follow_sessions(self) -> None:
        """Follow the revoked console sessions and the access records on the current client
        (read again when a watch fired), so a logout, a revoked token or a removed grant on
        the leader is in force here too within the watch's delay (sched-leader-watch)."""
        try:
            self._follow_revoked(self.registry, self._leader_changed.set)
        except (SchedulerError, KazooException) as exc:
            log.warning(
                "leader-watch: cannot follow revoked console sessions and access records yet: %s",
                exc,
            )

    def health(self) -> dict[str, Any]:
        """The /health body; `reason` is not None when the answer should be 503."""
        term = self._term
        acting = self.is_acting_leader()
        leader = self.settings.identity if acting else self.leader()
        return {
            "reason": self.unhealthy_reason(),
            "role": "leader" if acting else "standby",
            "leader": leader,
            "leaderVouched": acting or self.vouching.is_vouched(leader),
            "zookeeper": str(self._zk_state),
            "identity": self.settings.identity,
            "version": VERSION,
            "replicas": self.vouched_replicas(),
            "warnings": list(self.warnings),
            "pid": os.getpid(),
            "term": term.describe() if term is not None else None,
            "lastTerm": self.last_term,
            "mesos": self._read_term("mesos", lambda r: r.mesos()) if acting else None,
            "statistics": (
                self._read_term("statistics", lambda r: r.statistics()) if acting else None
            ),
        }

    def _read_term(self, what: str, read: Callable[[TermReadout], _T]) -> _T | None:
        """`read` of the term's read-out: None without one, or when it fails (logged)."""
        readout = self._readout
        if readout is None:
            return None
        try:
            return read(readout)
        except Exception:
            log.exception("health: %s not available", what)
            return None

    def figures(self) -> ReplicaFigures:
        """A snapshot for `/metrics` (the HTTP server's ops threads; never blocks)."""
        term = self._term
        acting = self.is_acting_leader()
        return ReplicaFigures(
            acting=acting,
            terms=self.counters["terms"],
            term_failures=self.counters["term_failures"],
            leader_changes=self.counters["leader_changes"],
            zk_clients=self.counters["zk_clients"],
            zk_state=str(self._zk_state),
            started_at=self._started_at,
            term_started_at=term.started_at if term else 0.0,
            unplaceable=(self._read_term("unplaceable", lambda r: r.unplaceable()) or 0)
            if acting
            else 0,
            mesos=str(self._read_term("mesos", lambda r: r.mesos())) if acting else None,
            term=self._read_term("figures", lambda r: r.figures()) if acting else None,
        )

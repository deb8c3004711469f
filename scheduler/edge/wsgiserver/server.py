"""The production HTTP server under every replica: waitress, hardened for hostile clients.

waitress reads each request completely in one I/O thread and hands only whole requests to worker
threads, so a slow or half-sent request costs a buffer, never a thread. What it does not do by
itself is added here (each point checked against waitress 3.0's source):
- a deadline for a request's line and headers, counted from its first byte, and one for its body,
  counted from the end of the headers: waitress only closes a connection that has been idle for
  `channel_timeout`, so one byte every few seconds kept a request open for hours. A late request
  gets 408 and the connection is closed. A client that stops reading its answer for the idle
  timeout is dropped too (waitress would keep a worker waiting on it).
- when the connection limit is reached, idle connections (no request being served) are closed,
  least recently active first, so a health probe still gets in: waitress just stops accepting.
- chunked framing is bounded: a chunk size beyond the body limit, a chunk-size line longer than
  1 KiB or a trailer longer than 8 KiB answers 400 at once (waitress let the last two grow until
  the body limit and re-copied them on every read).
- two worker pools: `/health` and `/metrics` are served by threads of their own, so slow `/api`
  requests can never queue ahead of a health check.
- accepted sockets move to descriptor numbers of 1024 and above when the limit leaves room, so
  libraries that still wait with select() (pymesos does) keep working however many clients are
  connected; poll() is used for the server's own loop.
- the answers waitress gives itself (400, 408, 413, 431, 501) are JSON like every other error,
  and it never logs per request or per queued task.
- TLS (waitress has none), without giving up that a slow client costs a buffer, never a
  thread: an accepted socket is wrapped once its first byte arrives, the handshake is driven
  by the I/O loop without blocking (SSLWantRead/SSLWantWrite wait for the next poll), and it
  must end within the header deadline counted from the accept, however slowly its bytes
  trickle; reads drain every byte OpenSSL has already decrypted (`pending()`), which poll()
  cannot see. A client that speaks plain HTTP to the TLS port gets a plain-text JSON 400
  saying so, then the connection is closed. TLS 1.2 and 1.3 only, no compression, no
  renegotiation; the handshake's CPU cost is spent in the I/O thread (one signature each).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

# waitress ships no type information: its classes are Any here, and stay inside this package.
from waitress import wasyncore  # type: ignore[import-untyped]
from waitress.adjustments import Adjustments  # type: ignore[import-untyped]
from waitress.server import TcpWSGIServer  # type: ignore[import-untyped]
from waitress.task import ThreadedTaskDispatcher  # type: ignore[import-untyped]

from scheduler.edge.wsgiserver.channel import Channel
from scheduler.edge.wsgiserver.limits import (
    HttpLimits,
    connection_limit_for,
    fd_floor,
    fd_soft_limit,
)
from scheduler.edge.wsgiserver.tls_channel import TlsChannel

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIApplication

log = logging.getLogger(__name__)

_OPS_THREADS = 2
_OPS_PATHS = frozenset({"/health", "/metrics"})
_LOOP_TIMEOUT_S = 0.5
_MAINTENANCE_INTERVAL_S = 0.5
# A connection closing after a last answer gets this long to take it.
_CLOSE_GRACE_S = 2.0
_ACCEPTS_PER_PASS = 64
_EVICT_TO_FRACTION = 0.9
_ACCEPT_PAUSE_S = 0.5
_WARN_INTERVAL_S = 10.0


class Pool(ThreadedTaskDispatcher):  # type: ignore[misc]
    """waitress's worker pool with named threads and no log line per queued task."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def start_new_thread(self, target: Any, thread_no: int) -> None:
        thread = threading.Thread(
            target=target, name=f"{self.name}-{thread_no}", args=(thread_no,), daemon=True
        )
        thread.start()

    def add_task(self, task: Any) -> None:
        with self.lock:
            self.queue.append(task)
            self.queue_cv.notify()

    def depth(self) -> int:
        return len(self.queue)


class Listener(TcpWSGIServer):  # type: ignore[misc]
    """A listening socket of the server; its hooks run in the I/O thread."""

    channel_class = Channel

    def __init__(self, edge: EdgeServer, *args: Any, **kwargs: Any) -> None:
        self.edge = edge
        self._accept_paused_until = 0.0
        super().__init__(*args, **kwargs)

    def readable(self) -> bool:
        # At the limit the loop evicts idle connections after this pass; accept on the next.
        return bool(
            self.accepting
            and time.monotonic() >= self._accept_paused_until
            and self.edge.connections() < self.edge.connection_limit
        )

    def handle_accept(self) -> None:
        # Several per pass: a burst of connections waiting in the backlog is taken quickly.
        for _ in range(_ACCEPTS_PER_PASS):
            if self.edge.connections() >= self.edge.connection_limit:
                return
            try:
                pair = self.accept()
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    # Out of descriptors or memory: retrying at once would spin the loop.
                    self._accept_paused_until = time.monotonic() + _ACCEPT_PAUSE_S
                    self.edge.warn("http: accept failed (%s); pausing accepts", exc)
                return
            if pair is None:
                return  # nothing more waiting
            conn, addr = pair
            try:
                conn = self.edge.place(conn)
                self.set_socket_options(conn)
            except OSError:
                conn.close()
                continue
            channel_class = self.channel_class if self.edge.tls is None else TlsChannel
            channel_class(self, conn, self.fix_addr(addr), self.adj, map=self._map)

    def handle_error(self) -> None:
        # waitress would close the listening socket, leaving the replica unreachable for good.
        self._accept_paused_until = time.monotonic() + _ACCEPT_PAUSE_S
        self.edge.warn("http: accepting a connection failed", exc_info=True)

    def add_task(self, task: Any) -> None:
        # Called with the channel's requests lock held; requests[0] is the next to serve.
        self.edge.dispatch(task)

    def maintenance(self, now: float) -> None:
        """Unused: the edge's own maintenance replaces waitress's idle sweep."""


class EdgeServer:
    """An HTTP/1.1 server for one WSGI app on `bind_address:port`, within `limits`.

    Threads (all owned here): `sched-http` runs the I/O loop; `sched-http-api-N` serve requests;
    `sched-http-ops-N` (two) serve only `/health` and `/metrics`. With `tls` (a server context,
    see `server_tls_context`) every connection is https and `wsgi.url_scheme` is `https`.
    """

    def __init__(
        self,
        app: WSGIApplication,
        bind_address: str,
        port: int,
        limits: HttpLimits,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._app = app
        self.tls = tls
        self._bind = (bind_address, port)
        self.limits = limits
        self.fd_limit = 0
        self.connection_limit = 0
        self._fd_floor = 0
        self._map: dict[int, Any] = {}
        self._listeners: list[Any] = []
        self._api_pool = Pool("sched-http-api")
        self._ops_pool = Pool("sched-http-ops")
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._counts_lock = threading.Lock()
        self._refused: dict[int, int] = {}
        self.timed_out = 0
        self.idle_closed = 0
        self.evicted = 0
        self.tls_failed = 0
        self.tls_timed_out = 0
        self._next_warning = 0.0

    # -- lifecycle (caller's thread) ---------------------------------------------------------

    def start(self) -> None:
        """Bind, start the pools and the I/O thread. Raises OSError when the port is taken."""
        self.fd_limit = fd_soft_limit()
        self.connection_limit = connection_limit_for(self.fd_limit, self.limits.connection_limit)
        if self.limits.connection_limit > self.connection_limit:
            log.warning(
                "http: connection limit lowered from %s to %s (file-descriptor limit %s)",
                self.limits.connection_limit,
                self.connection_limit,
                self.fd_limit,
            )
        self._fd_floor = fd_floor(self.fd_limit, self.connection_limit)
        host, port = self._bind
        try:
            adj = Adjustments(
                host=host,
                port=port,
                threads=self.limits.threads,
                connection_limit=self.connection_limit,
                # waitress refuses a body whose length reaches its limit; ours is inclusive.
                max_request_header_size=self.limits.max_header_bytes,
                max_request_body_size=self.limits.max_body_bytes + 1,
                channel_timeout=max(1, int(self.limits.channel_timeout_s)),
                asyncore_use_poll=True,
                url_scheme="http" if self.tls is None else "https",
                # waitress would delete every X-Forwarded-*/Forwarded header (no trusted_proxy
                # set): the replica decides itself whom to believe (http_trusted_proxies).
                clear_untrusted_proxy_headers=False,
                log_socket_errors=False,
                expose_tracebacks=False,
                ident="ejcloud",
            )
        except ValueError as exc:
            raise OSError(f"cannot listen on {host}:{port}: {exc}") from exc
        adj.ejc_max_body_bytes = self.limits.max_body_bytes
        try:
            for sockinfo in adj.listen:
                self._listeners.append(
                    Listener(
                        self,
                        self._app,
                        map=self._map,
                        dispatcher=self._api_pool,
                        adj=adj,
                        sockinfo=sockinfo,
                    )
                )
        except BaseException:
            wasyncore.close_all(self._map, ignore_all=True)
            self._listeners = []
            raise
        self._api_pool.set_thread_count(self.limits.threads)
        self._ops_pool.set_thread_count(_OPS_THREADS)
        self._thread = threading.Thread(target=self._serve, name="sched-http", daemon=True)
        self._thread.start()
        log.info(
            "http: serving %s on %s:%s (%s workers + %s for /health and /metrics, connection limit "
            "%s, file-descriptor limit %s)",
            "https" if self.tls is not None else "http",
            host,
            port,
            self.limits.threads,
            _OPS_THREADS,
            self.connection_limit,
            self.fd_limit,
        )

    def stop(self, timeout_s: float = 5.0) -> None:
        """Close every connection and stop all threads; blocks up to about `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        self._stopping.set()
        if self._listeners:
            try:
                self._listeners[0].pull_trigger()  # wakes the loop out of poll()
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(max(0.1, deadline - time.monotonic()))
            if self._thread.is_alive():
                log.error("http: thread sched-http did not stop in %ss", timeout_s)
        for pool in (self._api_pool, self._ops_pool):
            pool.shutdown(cancel_pending=True, timeout=max(0.1, deadline - time.monotonic()))
        self._thread = None
        self._listeners = []

    def _serve(self) -> None:
        next_maintenance = 0.0
        try:
            while not self._stopping.is_set():
                try:
                    wasyncore.poll2(_LOOP_TIMEOUT_S, self._map)
                    # Between passes, so that closing a connection never disturbs one.
                    now = time.monotonic()
                    if now >= next_maintenance:
                        next_maintenance = now + _MAINTENANCE_INTERVAL_S
                        self._maintain(now)
                    if self.connections() >= self.connection_limit:
                        self._evict()
                except Exception:
                    # A fault in one pass must not end HTTP for the life of the process.
                    log.exception("http: I/O loop pass failed")
                    self._stopping.wait(0.1)
        finally:
            for channel in self._channels():
                # Its buffers too (a large answer's is a temporary file): close_all below closes
                # only the sockets, and a buffer left open was closed by the garbage collector.
                try:
                    channel.handle_close()
                except Exception:
                    log.debug("http: closing a connection at stop failed", exc_info=True)
            wasyncore.close_all(self._map, ignore_all=True)

    def _channels(self) -> list[Any]:
        return [c for listener in self._listeners for c in listener.active_channels.values()]

    # -- hooks called by the listener in the I/O thread --------------------------------------

    def place(self, conn: socket.socket) -> socket.socket:
        """Move an accepted socket to a descriptor number >= the floor (select()-safe low fds)."""
        if self._fd_floor == 0 or conn.fileno() >= self._fd_floor:
            return conn
        fd = fcntl.fcntl(conn.fileno(), fcntl.F_DUPFD_CLOEXEC, self._fd_floor)
        conn.close()
        return socket.socket(fileno=fd)

    def dispatch(self, channel: Any) -> None:
        request = channel.requests[0] if channel.requests else None
        if (
            request is not None
            and request.error is None
            and getattr(request, "path", "") in _OPS_PATHS
        ):
            self._ops_pool.add_task(channel)
        else:
            self._api_pool.add_task(channel)

    def _maintain(self, now: float) -> None:
        """Answer overdue requests 408; close idle connections and clients that stopped reading.

        A close is done here, at once: a connection only acts on a close flag when its socket
        turns writable, which never happens for a client that reads nothing.
        """
        idle_cutoff = time.time() - self.limits.channel_timeout_s
        grace_cutoff = time.time() - _CLOSE_GRACE_S
        for channel in self._channels():
            if self.tls is not None and channel.handshake_overdue(
                now, self.limits.header_timeout_s
            ):
                channel.handle_close()
                self.tls_timed_out += 1
                continue
            if channel.will_close or channel.close_when_flushed:
                # A last answer is being flushed; a client that does not take it is cut off.
                if channel.last_activity < grace_cutoff:
                    channel.handle_close()
                continue
            if channel.requests:
                # Being served; but an answer nobody reads for the idle timeout is abandoned
                # (the worker writing it gets ClientDisconnected and is free again).
                if channel.total_outbufs_len and channel.last_activity < idle_cutoff:
                    channel.handle_close()
                    self.idle_closed += 1
                continue
            part = channel.overdue(now, self.limits)
            if part is not None:
                seconds = (
                    self.limits.body_timeout_s if part == "body" else self.limits.header_timeout_s
                )
                channel.answer_timeout(part, seconds)
                self.timed_out += 1
            elif channel.request is None and channel.last_activity < idle_cutoff:
                channel.handle_close()
                self.idle_closed += 1

    def _evict(self) -> None:
        """At the connection limit: close idle connections, least recently active first."""
        channels = self._channels()
        excess = len(channels) - int(self.connection_limit * _EVICT_TO_FRACTION)
        idle = [c for c in channels if not c.requests]
        if excess <= 0 or not idle:
            return  # every connection is being served: accepting waits for one to finish
        idle.sort(key=lambda c: c.last_activity)
        for channel in idle[:excess]:
            channel.handle_close()
        closed = min(excess, len(idle))
        self.evicted += closed
        self.warn(
            "http: connection limit %s reached; closed %s idle connections",
            self.connection_limit,
            closed,
        )

    def warn(self, message: str, *args: Any, exc_info: bool = False) -> None:
        """A WARNING at most every 10 s: an attack must not flood the log."""
        now = time.monotonic()
        if now >= self._next_warning:
            self._next_warning = now + _WARN_INTERVAL_S
            log.warning(message, *args, exc_info=exc_info)

    # -- any thread --------------------------------------------------------------------------

    def connections(self) -> int:
        """Open client connections."""
        return sum(len(listener.active_channels) for listener in self._listeners)

    def count_refused(self, code: int) -> None:
        with self._counts_lock:
            self._refused[code] = self._refused.get(code, 0) + 1

    def collect(self) -> Iterator[Metric]:
        """The server's own metrics, for a prometheus_client registry (any thread)."""
        with self._counts_lock:
            refused = dict(self._refused)
        yield GaugeMetricFamily(
            "ejc_http_connections", "Open HTTP connections.", value=self.connections()
        )
        yield GaugeMetricFamily(
            "ejc_http_connection_limit",
            "Open HTTP connections allowed.",
            value=self.connection_limit,
        )
        queued = GaugeMetricFamily(
            "ejc_http_queued_requests", "Whole requests waiting for a worker.", labels=["pool"]
        )
        queued.add_metric(["api"], self._api_pool.depth())
        queued.add_metric(["ops"], self._ops_pool.depth())
        yield queued
        yield CounterMetricFamily(
            "ejc_http_requests_timed_out",
            "Requests not received in time (408).",
            value=self.timed_out,
        )
        yield CounterMetricFamily(
            "ejc_http_connections_closed_idle",
            "Connections closed after the idle timeout.",
            value=self.idle_closed,
        )
        yield CounterMetricFamily(
            "ejc_http_connections_evicted",
            "Idle connections closed at the limit.",
            value=self.evicted,
        )
        yield CounterMetricFamily(
            "ejc_http_tls_handshakes_failed",
            "TLS handshakes that failed (bad hello, alert, reset).",
            value=self.tls_failed,
        )
        yield CounterMetricFamily(
            "ejc_http_tls_handshakes_timed_out",
            "TLS connections closed for not finishing the handshake within the header timeout.",
            value=self.tls_timed_out,
        )
        refusals = CounterMetricFamily(
            "ejc_http_requests_refused",
            "Requests refused by the server (framing, limits).",
            labels=["code"],
        )
        for code in (400, 413, 431, 501):
            refusals.add_metric([str(code)], refused.get(code, 0))
        yield refusals

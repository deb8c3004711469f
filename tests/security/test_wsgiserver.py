"""The hardened waitress server in-process: pools, limits and deadlines, with a controllable app.

A real server on 127.0.0.1 with an app whose `/api` calls can be held on an Event, so the tests
can make every API worker busy on purpose. Every server is stopped by its fixture.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from deploy.zookeeper import free_port
from scheduler.edge.http import redirect_location
from scheduler.edge.wsgiserver import EdgeServer, HttpLimits, connection_limit_for
from tests.support.waiting import wait_for

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment


class _App:
    """`/api/block` waits on `release`; `/api/big` answers `big_bytes`; the rest answers at once."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.blocked = 0
        self.big_bytes = 0
        self._lock = threading.Lock()

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ["PATH_INFO"]
        if path == "/api/block":
            with self._lock:
                self.blocked += 1
            self.release.wait(30)
        if path == "/api/big":
            start_response("200 OK", [("Content-Type", "application/octet-stream")])
            return (b"x" * 65536 for _ in range(self.big_bytes // 65536))
        body = json.dumps({"path": path}).encode()
        start_response(
            "200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        )
        return [body]


Serve = Callable[..., tuple[EdgeServer, _App, int]]


@pytest.fixture
def serve() -> Iterator[Serve]:
    servers: list[tuple[EdgeServer, _App]] = []

    def start(**limits: Any) -> tuple[EdgeServer, _App, int]:
        app = _App()
        port = free_port()
        server = EdgeServer(app, "127.0.0.1", port, HttpLimits(**limits))
        server.start()
        servers.append((server, app))
        return server, app, port

    yield start
    for server, app in servers:
        app.release.set()
        server.stop(5)


def _get(port: int, path: str, timeout_s: float = 5.0) -> tuple[int, bytes, float]:
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    status = int(data.split(b" ", 2)[1]) if data else 0
    return status, data, time.monotonic() - started


def _send_and_read(port: int, raw: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(raw)
        data = b""
        try:
            while chunk := sock.recv(65536):
                data += chunk
        except ConnectionResetError:
            pass
    return data


def _queued(server: EdgeServer) -> float:
    """The server's queued API requests, as its metrics say."""
    families = {family.name: family for family in server.collect()}
    (api,) = [s for s in families["ejc_http_queued_requests"].samples if s.labels["pool"] == "api"]
    return float(api.value)


def test_health_is_served_while_every_api_worker_is_busy(serve: Serve) -> None:
    server, app, port = serve(threads=2)
    threads = [threading.Thread(target=_get, args=(port, "/api/block", 30)) for _ in range(12)]
    for thread in threads:
        thread.start()
    try:
        wait_for(lambda: app.blocked == 2, 5, message="both API workers busy")
        wait_for(lambda: _queued(server) == 10, 5, message="10 API requests queued")
        for path in ("/health", "/metrics"):
            status, _, seconds = _get(port, path)
            assert status == 200 and seconds < 0.5
        # Another /api request waits behind the busy workers.
        with pytest.raises(TimeoutError):
            _get(port, "/api/other", timeout_s=0.5)
    finally:
        app.release.set()
        for thread in threads:
            thread.join(30)
    assert app.blocked == 12


def test_idle_connections_are_evicted_at_the_limit_so_probes_get_in(serve: Serve) -> None:
    server, _, port = serve(connection_limit=50, channel_timeout_s=300)
    held: list[socket.socket] = []
    try:
        for _ in range(80):
            held.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        wait_for(lambda: server.evicted >= 20, 10, message="idle connections evicted")
        status, _, seconds = _get(port, "/health")
        assert status == 200 and seconds < 1.0
        assert server.connections() <= 50
        # The oldest went first: the first connection opened is closed by the server.
        held[0].settimeout(5)
        assert held[0].recv(1) == b""
    finally:
        for sock in held:
            sock.close()


def test_a_client_that_stops_reading_is_dropped_and_frees_its_worker(serve: Serve) -> None:
    server, app, port = serve(threads=1, channel_timeout_s=1)
    app.big_bytes = 64 << 20  # well past what socket buffers and the output watermark hold
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        sock.sendall(b"GET /api/big HTTP/1.1\r\nHost: x\r\n\r\n")
        # The only worker is writing to a client that reads nothing; once dropped, it is free.
        wait_for(lambda: server.idle_closed >= 1, 10, message="non-reading client dropped")
        status, _, _ = _get(port, "/api/after", timeout_s=10)
        assert status == 200
    finally:
        sock.close()


def test_accepted_sockets_live_above_the_select_range(serve: Serve) -> None:
    server, _, port = serve(connection_limit=100)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"GET /api/x HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        fds = [fd for listener in server._listeners for fd in listener.active_channels]
        assert fds and min(fds) >= 1024


def test_a_taken_port_raises_oserror_and_leaks_no_descriptors(serve: Serve) -> None:
    _, _, port = serve()
    before = len(os.listdir("/proc/self/fd"))
    other = EdgeServer(_App(), "127.0.0.1", port, HttpLimits())
    with pytest.raises(OSError):
        other.start()
    other.stop(1)
    assert len(os.listdir("/proc/self/fd")) == before


@pytest.mark.parametrize(
    ("raw", "status", "kind"),
    [
        (
            b"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + b"1" * 2000,
            400,
            "BadRequest",
        ),
        (
            b"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n"
            + b"X: y\r\n" * 2000,
            400,
            "BadRequest",
        ),
        (b"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501, "NotImplemented"),
        (
            b"GET /x HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 40000 + b"\r\n\r\n",
            431,
            "RequestHeaderFieldsTooLarge",
        ),
        (b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 12x\r\n\r\n", 400, "BadRequest"),
    ],
    ids=["chunk-line", "trailer", "unknown-coding", "headers", "content-length"],
)
def test_bad_framing_gets_a_json_4xx(serve: Serve, raw: bytes, status: int, kind: str) -> None:
    _, _, port = serve()
    answer = _send_and_read(port, raw)
    assert int(answer.split(b" ", 2)[1]) == status
    assert json.loads(answer.partition(b"\r\n\r\n")[2])["type"] == kind


def test_a_body_of_exactly_the_limit_is_accepted(serve: Serve) -> None:
    _, _, port = serve(max_body_bytes=4096)
    head = b"POST /api/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %d\r\n\r\n"
    assert _send_and_read(port, head % 4096 + b"a" * 4096).startswith(b"HTTP/1.1 200")
    assert _send_and_read(port, head % 4097 + b"a" * 4097).startswith(b"HTTP/1.1 413")


def test_connection_limit_stays_well_below_the_descriptor_limit() -> None:
    assert connection_limit_for(1024, 0) == 256
    assert connection_limit_for(20000, 0) == 4096
    assert connection_limit_for(20000, 100000) == 9744
    assert connection_limit_for(1024, 100) == 100


@pytest.mark.parametrize(
    ("path", "query", "expected"),
    [
        ("/api/job/jobs", "x=1", "http://h:1/api/job/jobs?x=1"),
        ("/api/\r\n", "", "http://h:1/api/%0D%0A"),
        ("/api/a b%", 'a=%0d%0a&b=\x01"<', "http://h:1/api/a%20b%25?a=%0d%0a&b=%01%22%3C"),
        ("/api/\xc3\xa9", "", "http://h:1/api/%C3%A9"),
    ],
)
def test_redirect_location_is_header_safe(path: str, query: str, expected: str) -> None:
    environ: Any = {"PATH_INFO": path, "QUERY_STRING": query, "SCRIPT_NAME": ""}
    assert redirect_location("h:1", environ) == expected

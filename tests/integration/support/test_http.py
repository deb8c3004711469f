"""`tests.support.http.exchange` against a real HTTP server on 127.0.0.1: every
answer comes back whatever its status, and an error answer's connection is closed by the call
itself, even when its body never arrives whole.

Whether the client closed its socket is seen from the server's side: after answering, each
handler waits for the client to hang up (EOF) and records it per path.
"""

from __future__ import annotations

import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.support.http import exchange
from tests.support.waiting import wait_for

# How long a handler waits for the client to hang up, and the tests for the handler to see it.
HANG_UP_WAIT_S = 10.0


@dataclass(frozen=True)
class _Canned:
    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    sent_bytes: int | None = None  # fewer than the body's length: the rest never comes


_CANNED = {
    "/ok": _Canned(200, b'{"ok": true}', (("X-Probe", "yes"),)),
    "/missing": _Canned(404, b'{"error": "JobNotFound"}'),
    "/busy": _Canned(503, b'{"error": "NotLeader"}'),
    "/stalled": _Canned(503, b"x" * 100, sent_bytes=10),
    "/moved": _Canned(307, headers=(("Location", "/ok"),)),
}


class _Server:
    """Answers each path of `_CANNED` until `close`; `hung_up[path]` is set once a client that
    asked for `path` closed its connection."""

    def __init__(self) -> None:
        self.hung_up = {path: threading.Event() for path in _CANNED}
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                canned = _CANNED[self.path]
                self.send_response(canned.status)
                for name, value in canned.headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(canned.body)))
                self.end_headers()
                self.wfile.write(canned.body[: canned.sent_bytes])
                server._await_hang_up(self.connection, self.path)

            def log_message(self, *args: Any) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}"
        # A short poll, so that `close` (whose shutdown waits for the next poll) is quick.
        self._thread = threading.Thread(
            target=partial(self._http.serve_forever, poll_interval=0.05), name="test-http-server"
        )
        self._thread.start()

    def _await_hang_up(self, connection: socket.socket, path: str) -> None:
        # The client sends nothing after its request, so the next read ends only at its close.
        connection.settimeout(HANG_UP_WAIT_S)
        try:
            closed = connection.recv(1) == b""
        except ConnectionResetError:
            closed = True
        except TimeoutError:
            closed = False
        if closed:
            self.hung_up[path].set()

    def close(self) -> None:
        self._http.shutdown()
        self._http.server_close()  # joins the handler threads, each done within HANG_UP_WAIT_S
        self._thread.join(HANG_UP_WAIT_S)


@pytest.fixture
def server() -> Iterator[_Server]:
    served = _Server()
    try:
        yield served
    finally:
        served.close()


def test_a_2xx_answer_comes_back_with_its_status_headers_and_body(server: _Server) -> None:
    answer = exchange("GET", f"{server.url}/ok")

    assert answer.status == 200
    assert answer.headers["x-probe"] == "yes"  # names looked up ignoring case
    assert answer.body == b'{"ok": true}'
    assert answer.json() == {"ok": True}


@pytest.mark.parametrize(("path", "status"), [("/missing", 404), ("/busy", 503)])
def test_an_error_answer_comes_back_instead_of_being_raised(
    server: _Server, path: str, status: int
) -> None:
    answer = exchange("GET", f"{server.url}{path}")

    assert answer.status == status
    assert answer.body == _CANNED[path].body
    assert server.hung_up[path].wait(HANG_UP_WAIT_S)


def test_an_error_answer_whose_body_stalls_is_closed_when_its_read_times_out(
    server: _Server,
) -> None:
    with pytest.raises(TimeoutError) as raised:
        exchange("GET", f"{server.url}/stalled", timeout_s=0.5)

    # The HTTPError stays referenced (the timeout's __context__, held by `raised`) until the test
    # ends, so the garbage collector cannot close its socket meanwhile: only `exchange` can.
    assert raised.value.__context__ is not None
    assert server.hung_up["/stalled"].wait(HANG_UP_WAIT_S), "the client kept its socket open"


def test_a_redirect_is_followed_by_default(server: _Server) -> None:
    answer = exchange("GET", f"{server.url}/moved")

    assert (answer.status, answer.body) == (200, b'{"ok": true}')


def test_a_refused_redirect_is_the_answer_and_is_closed(server: _Server) -> None:
    answer = exchange("GET", f"{server.url}/moved", follow_redirects=False)

    assert answer.status == 307
    assert answer.headers["Location"] == "/ok"
    assert server.hung_up["/moved"].wait(HANG_UP_WAIT_S)


def test_wait_for_closes_an_http_error_it_takes_as_not_yet(server: _Server) -> None:
    """A waited condition that raises HTTPError (a bare urlopen meeting a 503) holds its answer's
    connection; `wait_for` closes it, or the garbage collector's ResourceWarning would fail a
    later test."""
    errors: list[urllib.error.HTTPError] = []

    def stalled() -> bool:
        try:
            urllib.request.urlopen(f"{server.url}/stalled", timeout=5).close()
        except urllib.error.HTTPError as exc:
            errors.append(exc)  # kept referenced: only `wait_for` can close it
            raise
        return True

    with pytest.raises(AssertionError, match="the stalled answer"):
        wait_for(stalled, 0.0, message="the stalled answer")
    assert len(errors) == 1
    assert server.hung_up["/stalled"].wait(HANG_UP_WAIT_S), "the socket was left open"

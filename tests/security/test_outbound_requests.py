"""The leader's outbound requests against real servers on 127.0.0.1: one deadline for the whole
request (a peer answering a byte at a time cannot hold the caller longer), no redirect followed
(the agents' `/state`, `/files/read`, the master's `GET_AGENTS` and the driver's reads of the
master's `/master/state` and `GET_AGENTS` included), and a pinned
https request that still checks the certificate against the URL's own name."""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from scheduler.leader.mesos import sandbox
from scheduler.leader.mesos.sandbox import AgentUnreachable, SandboxNotFound
from scheduler.leader.outbound import OutboundError, request
from tests.support.certificates import self_signed
from tests.support.webhook_receiver import Trickler


class _Server:
    """An HTTP server on 127.0.0.1 answering every request with `status`, `body` and
    `location`; `hits` lists the paths asked."""

    def __init__(self, status: int = 200, body: bytes = b"{}", location: str = "") -> None:
        self.hits: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                server.hits.append(self.path)
                length = int(self.headers.get("Content-Length", "0"))
                self.rfile.read(length)
                self.send_response(status)
                if location:
                    self.send_header("Location", location)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.http.server_address[1]}"
        self._thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()
        self._thread.join(5)


@pytest.fixture
def servers() -> Iterator[list[_Server]]:
    started: list[_Server] = []
    yield started
    for server in started:
        server.close()


@pytest.fixture
def trickler() -> Iterator[Trickler]:
    answer = b'HTTP/1.1 200 OK\r\nContent-Length: 30\r\n\r\n{"data": "abc", "offset": 0}  '
    slow = Trickler(every_s=2.0, answer=answer)
    yield slow
    slow.close()


def test_agent_requests_follow_no_redirect(servers: list[_Server]) -> None:
    elsewhere = _Server(body=b'{"frameworks": []}')
    servers.append(elsewhere)
    agent = _Server(status=307, location=f"http://{elsewhere.address}/state")
    servers.append(agent)
    with pytest.raises(AgentUnreachable) as state:
        sandbox.agent_state(agent.address)
    assert "answered HTTP 307" in state.value.message
    with pytest.raises(AgentUnreachable):
        sandbox.read_file(agent.address, "/sandbox/stdout", 0, 100)
    master = _Server(status=302, location=f"http://{elsewhere.address}/api/v1")
    servers.append(master)
    with pytest.raises(OSError, match="HTTP 302"):
        sandbox.get_agents(master.address)
    assert elsewhere.hits == [] and len(agent.hits) == 2 and master.hits == ["/api/v1"]


def test_agent_answers_are_read_as_before(servers: list[_Server]) -> None:
    agent = _Server(body=b'{"data": "out\\u00e9", "offset": 7}')
    servers.append(agent)
    chunk = sandbox.read_file(agent.address, "/sandbox/stdout", 7, 100)
    assert (chunk.data, chunk.offset) == ("out\u00e9".encode(), 7)
    missing = _Server(status=404)
    servers.append(missing)
    with pytest.raises(SandboxNotFound):
        sandbox.read_file(missing.address, "/sandbox/stdout", 0, 100)


def test_a_trickling_agent_holds_a_request_only_until_its_deadline(
    trickler: Trickler, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sandbox, "TIMEOUT_S", 1.5)
    began = time.monotonic()
    with pytest.raises(AgentUnreachable) as slow:
        sandbox.read_file(f"127.0.0.1:{trickler.port}", "/sandbox/stdout", 0, 100)
    elapsed_s = time.monotonic() - began
    assert "no whole answer within 1.5 s" in slow.value.message
    # A byte every 2 s: a timeout per read would never end it (it would take the whole
    # answer, 70 bytes, 140 s); the deadline ends it after 1.5 s.
    assert elapsed_s < 1.5 + 2.0 and trickler.finished == 0, elapsed_s


def _certificate(tmp_path: Path, name: str) -> tuple[Path, Path]:
    return self_signed(tmp_path, names=(name,), ips=(), kind="rsa")


def test_a_pinned_https_request_checks_the_certificate_against_the_urls_name(
    tmp_path: Path, servers: list[_Server]
) -> None:
    cert, key = _certificate(tmp_path, "hooks.test")
    server = _Server(status=204, body=b"")
    servers.append(server)
    serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    serving.load_cert_chain(cert, key)
    server.http.socket = serving.wrap_socket(server.http.socket, server_side=True)
    port = server.address.rsplit(":", 1)[1]
    trusting = ssl.create_default_context(cafile=str(cert))
    answer = request(
        "POST",
        f"https://hooks.test:{port}/hook",
        deadline_s=5,
        body=b"{}",
        connect_to=["127.0.0.1"],
        tls=trusting,
    )
    assert answer.status == 204 and server.hits == ["/hook"]
    with pytest.raises(OutboundError, match="TLS"):
        request(
            "POST",
            f"https://other.test:{port}/hook",
            deadline_s=5,
            body=b"{}",
            connect_to=["127.0.0.1"],
            tls=trusting,
        )
    assert server.hits == ["/hook"]


def _driver_of(master: str) -> Any:
    """A Mesos driver (never started) that believes it is subscribed to `master`."""
    from scheduler.leader.mesos.driver import MesosDriver
    from scheduler.model.settings import load_settings
    from tests.integration.leader.mesos.helpers import FrameworkIds

    driver = MesosDriver(load_settings({}, {}, {"mesos_url": f"http://{master}"}), FrameworkIds())
    driver.master = master
    return driver


def test_the_masters_state_and_agents_follow_no_redirect(servers: list[_Server]) -> None:
    elsewhere = _Server(body=b'{"frameworks": [], "get_agents": {"agents": []}}')
    servers.append(elsewhere)
    master = _Server(status=307, location=f"http://{elsewhere.address}/master/state")
    servers.append(master)
    driver = _driver_of(master.address)
    with pytest.raises(OSError, match=r"HTTP 307 .*not followed"):
        driver.master_state()
    with pytest.raises(OSError, match="HTTP 307"):
        driver.agent_totals(5.0)
    assert elsewhere.hits == [] and master.hits == ["/master/state", "/api/v1"]
    # Answered in place, both read as before.
    assert _driver_of(elsewhere.address).master_state()["frameworks"] == []
    assert _driver_of(elsewhere.address).agent_totals(5.0) == {}


def test_a_trickling_master_holds_its_reads_only_until_their_deadline(trickler: Trickler) -> None:
    driver = _driver_of(f"127.0.0.1:{trickler.port}")
    for read in (lambda: driver.master_state(1.5), lambda: driver.agent_totals(1.5)):
        began = time.monotonic()
        with pytest.raises(TimeoutError):
            read()
        elapsed_s = time.monotonic() - began
        # A byte every 2 s: urllib's per-read timeout would wait for the whole answer (140 s).
        assert elapsed_s < 1.5 + 2.0 and trickler.finished == 0, elapsed_s

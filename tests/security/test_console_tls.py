"""The web console in a real Chromium over https: served by a TLS replica with a self-signed
certificate, and behind a TLS-terminating proxy the replica trusts (issue 23).

Before: the server had no TLS, and behind a TLS proxy every console write was refused 403 (the
replica saw http, the page's origin is https). The proxy here is a small thread of the test: it
terminates TLS, adds `X-Forwarded-Proto: https` and `X-Forwarded-For`, and forwards each request
from 127.0.0.2, the address the replica is told to trust.
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from playwright.sync_api import Browser, Page, expect, sync_playwright

from deploy.zookeeper import free_port
from tests.security.conftest import StartReplica
from tests.security.test_edge_trust import ADMIN, APP, JOB, _exchange, _https_health, _request
from tests.support.replicas import ReplicaProcess
from tests.support.waiting import wait_for

CHROMIUM = "/usr/bin/chromium"
WAIT_MS = 20_000
_MAX_HEAD = 65536


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    manager = sync_playwright().start()
    try:
        launched = manager.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()
    finally:
        manager.stop()


class _TlsProxy:
    """A TLS-terminating reverse proxy to `upstream_port`, one request per connection."""

    def __init__(self, cert: Path, key: Path, port: int, upstream_port: int) -> None:
        self.port = port
        self._upstream = upstream_port
        self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._context.load_cert_chain(str(cert), str(key))
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._listener.settimeout(0.2)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.forwarded = 0
        self._accepting = threading.Thread(target=self._accept, name="test-tls-proxy")
        self._accepting.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            thread = threading.Thread(target=self._serve, args=(conn,), name="test-tls-proxy-c")
            thread.start()
            self._threads.append(thread)

    def _serve(self, raw: socket.socket) -> None:
        try:
            raw.settimeout(10)
            with self._context.wrap_socket(raw, server_side=True) as client:
                data = b""
                while b"\r\n\r\n" not in data and len(data) < _MAX_HEAD:
                    chunk = client.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                lines = head.split(b"\r\n")
                kept = [
                    line
                    for line in lines[1:]
                    if not line.lower().startswith((b"connection:", b"x-forwarded-", b"keep-alive"))
                ]
                length = next(
                    (int(line.split(b":", 1)[1]) for line in kept
                     if line.lower().startswith(b"content-length:")),
                    0,
                )  # fmt: skip
                while len(body) < length:
                    body += client.recv(65536)
                kept += [
                    b"X-Forwarded-Proto: https",
                    b"X-Forwarded-For: 203.0.113.9",
                    b"Connection: close",
                ]
                request = b"\r\n".join([lines[0], *kept]) + b"\r\n\r\n" + body
                with socket.create_connection(
                    ("127.0.0.1", self._upstream), timeout=10, source_address=("127.0.0.2", 0)
                ) as upstream:
                    upstream.sendall(request)
                    self.forwarded += 1
                    while chunk := upstream.recv(65536):
                        client.sendall(chunk)
        except OSError:
            pass

    def close(self) -> None:
        self._stop.set()
        self._accepting.join(5)
        for thread in self._threads:
            thread.join(5)
        self._listener.close()


def _login(page: Page, base: str) -> None:
    page.set_default_timeout(WAIT_MS)
    page.goto(f"{base}/#/")
    page.fill("#login-user", "root")
    page.fill("#login-password", "root")
    page.click("form#login button[type=submit]")
    expect(page.locator("#who [data-role=root]")).to_be_visible()


def _disable_from_the_page(page: Page) -> Any:
    """A write sent by the console's own page (its origin, its session cookie)."""
    return page.evaluate(
        """async () => {
            const answer = await fetch("/api/job/edge_job/disable", {
                method: "POST", credentials: "same-origin"});
            return answer.status;
        }"""
    )


def _disabled(zk_client: KazooClient, namespace: str) -> bool:
    return zk_client.exists(f"/{namespace}/state/disable/job/edge_job") is not None


def test_the_console_logs_in_and_writes_over_https_with_a_self_signed_certificate(
    start_replica: StartReplica,
    certificate: tuple[Path, Path],
    browser: Browser,
    zk_client: KazooClient,
    zk_namespace: str,
) -> None:
    cert, key = certificate
    leader = start_replica(http_tls_cert_file=str(cert), http_tls_key_file=str(key))
    verified = ssl.create_default_context(cafile=str(cert))
    wait_for(
        lambda: (_https_health(leader, verified) or {}).get("role") == "leader",
        30,
        message="the TLS replica leads",
    )
    _register(leader, verified)
    context = browser.new_context(ignore_https_errors=True)
    try:
        page = context.new_page()
        _login(page, f"https://localhost:{leader.port}")
        cookies = context.cookies()
        assert cookies and all(cookie["secure"] for cookie in cookies)
        assert _disable_from_the_page(page) == 204
        assert _disabled(zk_client, zk_namespace)
    finally:
        context.close()


def test_the_console_writes_behind_a_tls_proxy_the_replica_trusts(
    start_leader: StartReplica,
    certificate: tuple[Path, Path],
    browser: Browser,
    zk_client: KazooClient,
    zk_namespace: str,
) -> None:
    # The browser's Host names the proxy's port: that name is allowed, as the README says.
    port = free_port()
    leader = start_leader(
        http_trusted_proxies="127.0.0.2/32", http_allowed_hosts=f"localhost:{port}"
    )
    _register(leader, None)
    proxy = _TlsProxy(*certificate, port, leader.port)
    context = browser.new_context(ignore_https_errors=True)
    try:
        page = context.new_page()
        _login(page, f"https://localhost:{proxy.port}")
        assert _disable_from_the_page(page) == 204
        assert _disabled(zk_client, zk_namespace)
        assert proxy.forwarded > 0
    finally:
        context.close()
        proxy.close()


def _register(replica: ReplicaProcess, tls: ssl.SSLContext | None) -> None:
    host = f"localhost:{replica.port}"
    for path, body in (("/api/app", APP), ("/api/job/register", JOB)):
        answer = _exchange(
            replica.port, _request("POST", path, host, {"Authorization": ADMIN}, body), tls=tls
        )
        assert answer.status in (200, 201, 204), answer.body

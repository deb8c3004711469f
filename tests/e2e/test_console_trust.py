"""Where the console's credentials go (issue 23), in a real Chromium against real replica
processes, the local Mesos stand-in and a real ZooKeeper: the password never stays in the
browser, a logout ends the session on every replica, a rogue election node never hears from a
console session, the page works under `localhost`, and the log view reads every byte."""

from __future__ import annotations

import io
import json
import re
import socket
import ssl
import tarfile
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from playwright.sync_api import Browser, BrowserContext, Page, Playwright, expect, sync_playwright

from deploy.zookeeper import ZooKeeperEnsemble
from tests.e2e.pipeline_support import System, running_system
from tests.support.http import exchange
from tests.support.recording_http import Recorded, Reply, recording_server
from tests.support.replicas import ReplicaProcess
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
WAIT_MS = 20_000
ADMIN = "Basic cm9vdDpyb290"  # root:root
COOKIE = "ejcloud_session"
expect.set_options(timeout=WAIT_MS)


def call(
    replica: ReplicaProcess, path: str, headers: dict[str, str], method: str = "GET"
) -> tuple[int, Any]:
    """One request to `replica` (a redirect is followed, as urllib does): (status, JSON)."""
    answer = exchange(method, f"http://{replica.identity}{path}", headers=headers)
    return answer.status, answer.json()


@pytest.fixture(scope="module")
def namespace() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module")
def system(
    zk: ZooKeeperEnsemble, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[System]:
    with running_system(zk.hosts, namespace, tmp_path_factory.mktemp("trust"), replicas=2) as s:
        yield s


def roles(system: System) -> tuple[ReplicaProcess, ReplicaProcess]:
    leader = system.leader()
    assert leader is not None
    return leader, next(r for r in system.replicas if r is not leader)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    manager: Playwright = sync_playwright().start()
    try:
        launched = manager.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()
    finally:
        manager.stop()


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    opened = browser.new_context()
    try:
        yield opened
    finally:
        opened.close()


def login(page: Page, base: str, user: str = "root", password: str = "root") -> None:
    page.goto(f"{base}/#/")
    page.fill("#login-user", user)
    page.fill("#login-password", password)
    page.click("form#login button[type=submit]")
    expect(page.locator(f"#who [data-role={user}]")).to_be_visible()


def session_cookie(context: BrowserContext) -> dict[str, Any] | None:
    return next((dict(c) for c in context.cookies() if c["name"] == COOKIE), None)


def test_the_browser_keeps_no_password_and_a_logout_ends_the_session_on_every_replica(
    system: System, context: BrowserContext
) -> None:
    leader, standby = roles(system)
    page = context.new_page()
    login(page, f"http://{leader.identity}")
    expect(page.locator("[data-table=replicas] tbody tr")).to_have_count(2)

    # Nothing of the credentials in the page's storage; the session is an HttpOnly cookie.
    stored = page.evaluate(
        "JSON.stringify([Object.entries(sessionStorage), Object.entries(localStorage)])"
    )
    assert "root" not in stored and "Basic" not in stored and "cm9vdDpyb290" not in stored
    cookie = session_cookie(context)
    assert cookie is not None, context.cookies()
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    assert page.evaluate("document.cookie") == ""  # scripts cannot read it
    token = {"Cookie": f"{COOKIE}={cookie['value']}"}

    # Every replica of the cluster accepts it (the standby shows its /health details).
    assert "pid" in call(standby, "/health", token)[1]
    assert call(leader, "/api/job/tasks/ready", token)[0] == 200

    page.click("#who button")  # Log out
    expect(page.locator("form#login")).to_be_visible()
    assert session_cookie(context) is None

    # The token, replayed: refused by the leader at once and by the standby after its watch.
    status, body = call(leader, "/api/job/tasks/ready", token)
    assert status == 401 and body["type"] == "Unauthorized"
    assert "pid" not in call(leader, "/health", token)[1]
    wait_for(
        lambda: "pid" not in (call(standby, "/health", token)[1] or {"pid": 0}),
        5,
        message="the standby to refuse the revoked session",
    )


@pytest.fixture
def rogue_election_node(
    zk: ZooKeeperEnsemble, namespace: str, system: System
) -> Iterator[tuple[Any, list[Recorded]]]:
    """A recording server on 127.0.0.2 named by an election node written with a plain kazoo
    client (no digest is needed without zk_digest), ahead of every real contender."""

    def answer(request: Recorded) -> Reply:
        body = {"role": "leader", "leader": "x", "identity": "x", "zookeeper": "CONNECTED"}
        return Reply(200, body, (("Access-Control-Allow-Origin", "*"),))

    with recording_server(answer, host="127.0.0.2") as rogue:
        client = KazooClient(hosts=zk.hosts)
        client.start(timeout=10)
        node = f"/{namespace}/ha/election/{uuid.uuid4().hex}__lock__0000000000"
        try:
            client.create(node, rogue.identity.encode())
            yield rogue, rogue.requests
        finally:
            client.delete(node)
            client.stop()
            client.close()


def test_a_rogue_election_node_never_receives_a_credential_from_a_console_session(
    system: System, context: BrowserContext, rogue_election_node: tuple[Any, list[Recorded]]
) -> None:
    rogue, requests = rogue_election_node
    leader, standby = roles(system)
    # The replicas have seen the rogue node: they asked it to prove it is one of them (it
    # cannot), or the standby names it as the election's first.
    wait_for(
        lambda: (
            any("challenge=" in r.path for r in list(requests))
            or (standby.health() or {}).get("leader") == rogue.identity
        ),
        20,
        message="the replicas to see the rogue node",
    )
    on_leader = context.new_page()
    login(on_leader, f"http://{leader.identity}")
    rows = on_leader.locator("[data-table=replicas] tbody tr")
    expect(rows).to_have_count(2)  # the vouched replicas only
    expect(on_leader.locator("[data-table=replicas]")).not_to_contain_text(rogue.identity)
    on_standby = context.new_page()
    on_standby.goto(f"http://{standby.identity}/#/")
    expect(on_standby.locator("[data-standby]")).to_contain_text("This replica is a standby")
    if (standby.health() or {}).get("leader") == rogue.identity:
        expect(on_standby.locator("[data-standby]")).to_contain_text("cannot vouch")
        expect(on_standby.locator("a[data-leader-console]")).to_have_count(0)
    else:  # the standby names the real leader: the link goes there, never to the rogue
        expect(on_standby.locator("a[data-leader-console]")).to_have_attribute(
            "href", f"http://{leader.identity}/"
        )
    # Let both pages poll a while (the overview every 5 s, the standby's page every 3 s).
    deadline = time.monotonic() + 12
    while time.monotonic() < deadline:
        on_leader.wait_for_timeout(500)
    policy = on_leader.evaluate(
        "fetch('/', {cache: 'no-store'}).then(r => r.headers.get('content-security-policy'))"
    )
    assert rogue.identity not in policy and leader.identity in policy
    from_browser = [r for r in requests if "Chrome" in r.headers.get("user-agent", "")]
    assert from_browser == [], from_browser
    assert [r for r in requests if r.credentials] == []


def test_the_console_works_opened_at_localhost(system: System, context: BrowserContext) -> None:
    leader, standby = roles(system)
    leader_port = leader.identity.rsplit(":", 1)[1]
    standby_port = standby.identity.rsplit(":", 1)[1]
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    login(page, f"http://localhost:{leader_port}")
    rows = page.locator("[data-table=replicas] tbody tr")
    expect(rows).to_have_count(2)
    # The standby's public /health is read across origins from the localhost page too.
    expect(rows.filter(has_text=standby.identity)).to_contain_text("standby")
    expect(rows.filter(has_text=standby.identity)).to_contain_text("CONNECTED")
    # A standby's page opened at localhost offers the leader's console.
    other = context.new_page()
    other.goto(f"http://localhost:{standby_port}/#/")
    expect(other.locator("a[data-leader-console]")).to_have_attribute(
        "href", f"http://{leader.identity}/"
    )
    assert errors == [], errors


BYTES_SH = """#!/bin/sh
printf 'before \\377\\376 after\\n'
sleep 6
echo "line one"
echo "line two"
"""


def test_the_log_view_shows_every_line_after_output_that_is_not_utf8(
    system: System, context: BrowserContext, tmp_path: Path
) -> None:
    leader, _ = roles(system)
    archive = tmp_path / "bytes_app.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        data = BYTES_SH.encode()
        info = tarfile.TarInfo("bytes.sh")
        info.size = len(data)
        info.mode = 0o755
        tar.addfile(info, io.BytesIO(data))
    app = {
        "appName": "bytes_app",
        "appURL": str(archive),
        "bootstrapScript": "true",
        "cpuCount": 0.1,
        "memoryMB": 32,
    }
    job = {
        "jobName": "bytes_job",
        "appName": "bytes_app",
        "jobType": "SCRIPT",
        "jobExecutionType": "TRANSIENT",
        "scriptCommandLine": "sh bytes.sh",
        "cron": "0 0 3 * * ?",
        "shardingTotalCount": 1,
        "cpuCount": 0.1,
        "memoryMB": 16,
    }
    auth = {"Authorization": ADMIN, "Content-Type": "application/json"}
    for path, body in (("/api/app", app), ("/api/job/register", job)):
        request = urllib.request.Request(
            f"http://{leader.identity}{path}", json.dumps(body).encode(), auth, method="POST"
        )
        with urllib.request.urlopen(request, timeout=10) as resp:
            assert resp.status == 204
    trigger = urllib.request.Request(
        f"http://{leader.identity}/api/job/trigger", b'"bytes_job"', auth, method="POST"
    )
    urllib.request.urlopen(trigger, timeout=10).close()

    def running_task() -> str | None:
        _, tasks = call(leader, "/api/job/tasks/running", {"Authorization": ADMIN})
        return next((t["id"] for t in tasks or [] if t["id"].startswith("bytes_job@-@")), None)

    task_id = wait_for(running_task, 30, message="the run to start")
    page = context.new_page()
    login(page, f"http://{leader.identity}")
    page.goto(f"http://{leader.identity}/#/runs/bytes_job/{urllib.parse.quote(task_id, safe='')}")
    log = page.locator("pre.log")
    # The first read ends after the bytes that are not UTF-8 (each shown as U+FFFD) ...
    expect(log).to_contain_text("before \ufffd\ufffd after", timeout=30_000)
    # ... and the next reads start right after them: no line of what follows is cut.
    expect(log).to_contain_text("after\nline one\nline two", timeout=30_000)


# -- https: directly, and behind a TLS-terminating proxy the replica trusts -----------------


def https_role(url: str) -> str | None:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2, context=context) as resp:
            return str(json.loads(resp.read()).get("role"))
    except (OSError, ValueError):
        return None


class TlsProxy:
    """A TLS-terminating reverse proxy on 127.0.0.1: each request is read whole, sent to the
    replica over plain http with `X-Forwarded-Proto: https` and `X-Forwarded-For`, and its
    answer sent back; one request per connection (`Connection: close` both ways)."""

    def __init__(self, certificate: tuple[Path, Path], upstream_port: int) -> None:
        self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._context.load_cert_chain(str(certificate[0]), str(certificate[1]))
        self._upstream = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="tls-proxy", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self._listener.settimeout(0.2)
        while not self._stop.is_set():
            try:
                raw, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._one, args=(raw,), daemon=True).start()

    def _one(self, raw: socket.socket) -> None:
        try:
            raw.settimeout(10)
            with self._context.wrap_socket(raw, server_side=True) as client:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = client.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                lines = head.split(b"\r\n")
                headers = [
                    line
                    for line in lines[1:]
                    if not line.lower().startswith((b"connection:", b"x-forwarded-"))
                ]
                length = next(
                    (
                        int(h.split(b":", 1)[1])
                        for h in headers
                        if h.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                while len(body) < length:
                    body += client.recv(65536)
                request = b"\r\n".join(
                    [lines[0], *headers, b"Connection: close", b"X-Forwarded-Proto: https",
                     b"X-Forwarded-For: 198.51.100.9"]
                ) + b"\r\n\r\n" + body  # fmt: skip
                with socket.create_connection(("127.0.0.1", self._upstream), timeout=10) as up:
                    up.sendall(request)
                    while chunk := up.recv(65536):
                        client.sendall(chunk)
        except (OSError, ssl.SSLError, ValueError):
            pass  # the browser gave up on a connection (or probed one): nothing to relay

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        self._thread.join(5)


@pytest.fixture(scope="module")
def tls_replicas(
    zk: ZooKeeperEnsemble, certificate: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ReplicaProcess, ReplicaProcess, TlsProxy]]:
    """A replica serving https itself, and one behind a TLS proxy it trusts (each its own
    cluster: one leads each)."""
    tmp = tmp_path_factory.mktemp("https")
    cert, key = certificate
    direct = ReplicaProcess(
        zk.hosts,
        tmp,
        zk_namespace=f"t-{uuid.uuid4().hex[:12]}",
        http_tls_cert_file=str(cert),
        http_tls_key_file=str(key),
    ).start()
    behind = ReplicaProcess(
        zk.hosts,
        tmp,
        zk_namespace=f"t-{uuid.uuid4().hex[:12]}",
        http_trusted_proxies="127.0.0.1/32",
    )
    proxy = TlsProxy(certificate, behind.port)
    behind.settings["http_allowed_hosts"] = f"localhost:{proxy.port}"
    behind.start()
    try:
        wait_for(lambda: https_role(f"https://localhost:{direct.port}") == "leader", 30)
        wait_for(behind.is_leader, 30, message="the proxied replica leads")
        yield direct, behind, proxy
    finally:
        proxy.close()
        direct.stop()
        behind.stop()


@pytest.mark.parametrize("where", ["direct", "proxied"])
def test_the_console_works_over_https_with_a_secure_session_cookie(
    browser: Browser,
    tls_replicas: tuple[ReplicaProcess, ReplicaProcess, TlsProxy],
    where: str,
) -> None:
    direct, _, proxy = tls_replicas
    port = direct.port if where == "direct" else proxy.port
    base = f"https://localhost:{port}"
    context = browser.new_context(ignore_https_errors=True)
    try:
        page = context.new_page()
        login(page, base)
        cookie = session_cookie(context)
        assert cookie is not None and cookie["secure"] is True and cookie["httpOnly"] is True
        # A write through the page: the replica sees the https origin it is told of.
        page.goto(f"{base}/#/apps")
        page.click("[data-action=add-app]")
        form = page.locator("form[data-form=app]")
        form.locator("[name=appName]").fill(f"tls_{where}")
        form.locator("[name=appURL]").fill("https://example.invalid/app.tar.gz")
        form.locator("[name=bootstrapScript]").fill("true")
        form.locator("button[type=submit]").click()
        expect(page).to_have_url(re.compile(rf"#/apps/tls_{where}$"))
    finally:
        context.close()

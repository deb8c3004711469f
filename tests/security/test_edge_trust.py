"""Who may address a replica, over what: the Host allow-list, TLS, trusted proxies (issue 23).

Real `python -m scheduler` processes on the session's ZooKeeper; raw sockets so that every header
(Host, Origin, X-Forwarded-*) and the source address are the test's choice. The certificate is
a self-signed one made with `openssl`, as the README shows.
"""

from __future__ import annotations

import base64
import json
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from tests.security.conftest import StartReplica
from tests.support.replicas import ROOT, ReplicaProcess
from tests.support.waiting import wait_for

ADMIN = "Basic " + base64.b64encode(b"root:root").decode()
APP = {"appName": "edge_app", "appURL": "file:///tmp/edge.tar.gz", "bootstrapScript": "run.sh"}
JOB = {
    "jobName": "edge_job",
    "appName": "edge_app",
    "jobType": "SCRIPT",
    "scriptCommandLine": "true",
    "jobExecutionType": "TRANSIENT",
    "cron": "0 0 0 1 1 ? 2099",
    "shardingTotalCount": 1,
    "cpuCount": 0.1,
    "memoryMB": 32,
}


class Answer:
    """One parsed HTTP answer read from a raw socket."""

    def __init__(self, raw: bytes) -> None:
        head, _, self.body = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1]) if lines[0].startswith("HTTP/") else 0
        self.headers = {
            name.strip().lower(): value.strip()
            for name, _, value in (line.partition(":") for line in lines[1:])
        }

    def json(self) -> Any:
        return json.loads(self.body)


def _exchange(
    port: int,
    request: bytes,
    *,
    source: str | None = None,
    tls: ssl.SSLContext | None = None,
    timeout_s: float = 10.0,
) -> Answer:
    """Send `request` (which asks for Connection: close) and read the answer to the end."""
    sock = socket.create_connection(
        ("127.0.0.1", port), timeout=timeout_s, source_address=(source, 0) if source else None
    )
    if tls is not None:
        sock = tls.wrap_socket(sock, server_hostname="localhost")
    with sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return Answer(data)


def _request(
    method: str,
    path: str,
    host: str | None,
    headers: dict[str, str] | None = None,
    body: dict[str, Any] | None = None,
    version: str = "1.1",
) -> bytes:
    lines = [f"{method} {path} HTTP/{version}"]
    if host is not None:
        lines.append(f"Host: {host}")
    data = b"" if body is None else json.dumps(body).encode()
    for name, value in (headers or {}).items():
        lines.append(f"{name}: {value}")
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(data)}"]
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + data


def _register(replica: ReplicaProcess, tls: ssl.SSLContext | None = None) -> None:
    host = f"127.0.0.1:{replica.port}"
    for path, body in (("/api/app", APP), ("/api/job/register", JOB)):
        answer = _exchange(
            replica.port,
            _request("POST", path, host, {"Authorization": ADMIN}, body),
            tls=tls,
        )
        assert answer.status in (200, 201, 204), answer.body


def _disabled(zk_client: KazooClient, namespace: str) -> bool:
    return zk_client.exists(f"/{namespace}/state/disable/job/edge_job") is not None


@pytest.fixture
def verified(certificate: tuple[Path, Path]) -> ssl.SSLContext:
    """A client context that trusts the test certificate only."""
    return ssl.create_default_context(cafile=str(certificate[0]))


# -- the Host allow-list -------------------------------------------------------------------


def test_a_dns_rebinding_write_gets_421_before_authentication_and_writes_nothing(
    start_leader: StartReplica, zk_client: KazooClient, zk_namespace: str
) -> None:
    leader = start_leader()
    _register(leader)
    evil = f"evil.example:{leader.port}"
    # Given a page of evil.example whose name now resolves to the leader, with the admin's
    # credentials saved in the browser: Host and Origin agree with each other.
    rebound = _request(
        "POST",
        "/api/job/edge_job/disable",
        evil,
        {"Origin": f"http://{evil}", "Authorization": ADMIN},
    )
    answer = _exchange(leader.port, rebound)
    assert answer.status == 421
    assert answer.headers["content-type"] == "application/json"
    assert answer.json()["type"] == "MisdirectedRequest"
    assert "evil.example" in answer.json()["error"]
    assert not _disabled(zk_client, zk_namespace)
    # Without credentials too: refused for its Host, not asked for a password.
    bare = _exchange(leader.port, _request("POST", "/api/job/edge_job/disable", evil))
    assert bare.status == 421
    # The same write addressed to the replica's own name is served (so the 421 was the Host),
    # and its 204 claims no content type.
    own = _exchange(
        leader.port,
        _request("POST", "/api/job/edge_job/disable", f"localhost:{leader.port}",
                 {"Authorization": ADMIN}),
    )  # fmt: skip
    assert own.status == 204
    assert "content-type" not in own.headers
    assert _disabled(zk_client, zk_namespace)


def test_every_path_refuses_a_host_that_is_not_the_replicas(start_leader: StartReplica) -> None:
    leader = start_leader()
    port = leader.port
    for path in ("/health", "/metrics", "/", "/console/index.html", "/api/job/jobs", "/nope"):
        answer = _exchange(port, _request("GET", path, "evil.example"))
        assert (path, answer.status) == (path, 421)
        assert answer.headers["content-type"] == "application/json"
    refused = [
        _request("GET", "/health", None),  # HTTP/1.1 without Host
        _request("GET", "/health", f"127.0.0.1:{port + 1}"),
        _request("GET", "/health", f"localhost:{port}, evil.example"),
        _request("GET", f"http://evil.example:{port}/health", f"127.0.0.1:{port}"),
    ]
    for raw in refused:
        assert _exchange(port, raw).status == 421, raw
    allowed = [
        _request("GET", "/health", f"127.0.0.1:{port}"),
        _request("GET", "/health", f"LOCALHOST.:{port}"),
        _request("GET", "/health", "localhost"),
        _request("GET", "/health", f"[::1]:{port}"),
        _request("GET", "/health", None, version="1.0"),
        _request("GET", f"http://127.0.0.1:{port}/health", f"127.0.0.1:{port}"),
    ]
    for raw in allowed:
        assert _exchange(port, raw).status == 200, raw


def test_configured_hosts_are_added_and_a_star_turns_the_check_off(
    start_leader: StartReplica, start_replica: StartReplica
) -> None:
    leader = start_leader(http_allowed_hosts="ejcloud.example.com")
    assert _exchange(leader.port, _request("GET", "/health", "ejcloud.example.com")).status == 200
    assert _exchange(leader.port, _request("GET", "/health", "localhost")).status == 200
    assert _exchange(leader.port, _request("GET", "/health", "other.example")).status == 421
    anyone = start_replica(http_allowed_hosts="*")
    wait_for(lambda: anyone.health() is not None, 30, message="the second replica serves")
    assert _exchange(anyone.port, _request("GET", "/health", "other.example")).status == 200


def test_health_is_never_cached(start_leader: StartReplica) -> None:
    leader = start_leader()
    host = f"127.0.0.1:{leader.port}"
    public = _exchange(leader.port, _request("GET", "/health", host))
    full = _exchange(leader.port, _request("GET", "/health", host, {"Authorization": ADMIN}))
    assert "term" in full.json() and "term" not in public.json()
    for answer in (public, full):
        assert answer.status == 200
        assert answer.headers["cache-control"] == "no-store"


# -- trusted proxies -----------------------------------------------------------------------


def test_a_trusted_proxy_is_believed_for_the_scheme_and_the_client_and_no_one_else(
    start_leader: StartReplica,
) -> None:
    # 127.0.0.2 plays the TLS-terminating proxy; 127.0.0.1 is any other client.
    leader = start_leader(http_trusted_proxies="127.0.0.2/32", auth_max_failures="2")
    host = f"127.0.0.1:{leader.port}"
    forwarded = {
        "Origin": f"https://{host}",
        "X-Forwarded-Proto": "https",
        "X-Forwarded-For": "198.51.100.7",
        "Authorization": ADMIN,
    }
    through_proxy = _exchange(
        leader.port, _request("POST", "/api/app", host, forwarded, APP), source="127.0.0.2"
    )
    assert through_proxy.status in (200, 201, 204), through_proxy.body
    direct = _exchange(
        leader.port, _request("POST", "/api/app", host, forwarded, APP), source="127.0.0.1"
    )
    assert direct.status == 403
    assert direct.json()["type"] == "CrossOriginRefused"
    # RFC 7239's header does the same.
    rfc = {"Origin": f"https://{host}", "Forwarded": "for=198.51.100.8;proto=https"}
    again = _exchange(
        leader.port,
        _request("POST", "/api/app", host, {**rfc, "Authorization": ADMIN}, APP),
        source="127.0.0.2",
    )
    assert again.status != 403, again.body
    # Failed logins count against the client the proxy names, not the proxy itself.
    wrong = "Basic " + base64.b64encode(b"root:wrong").decode()

    def login(client: str) -> int:
        headers = {"X-Forwarded-For": client, "Authorization": wrong}
        return _exchange(
            leader.port, _request("GET", "/api/app/list", host, headers), source="127.0.0.2"
        ).status

    assert [login("198.51.100.20") for _ in range(3)] == [401, 401, 429]
    assert login("198.51.100.21") == 401


# -- TLS -----------------------------------------------------------------------------------


def _https_health(replica: ReplicaProcess, context: ssl.SSLContext) -> dict[str, Any] | None:
    try:
        answer = _exchange(
            replica.port,
            _request("GET", "/health", f"localhost:{replica.port}", {"Authorization": ADMIN}),
            tls=context,
            timeout_s=2,
        )
    except OSError:
        return None
    return answer.json() if answer.status in (200, 503) else None


def _tls_metric(replica: ReplicaProcess, context: ssl.SSLContext, name: str) -> float:
    answer = _exchange(
        replica.port, _request("GET", "/metrics", f"localhost:{replica.port}"), tls=context
    )
    for line in answer.body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no metric {name}")


@pytest.fixture
def tls_leader(
    start_replica: StartReplica, certificate: tuple[Path, Path], verified: ssl.SSLContext
) -> ReplicaProcess:
    cert, key = certificate
    leader = start_replica(
        http_tls_cert_file=str(cert), http_tls_key_file=str(key), http_header_timeout_seconds="1"
    )
    wait_for(
        lambda: (_https_health(leader, verified) or {}).get("role") == "leader",
        30,
        message="the TLS replica leads",
    )
    return leader


def test_a_replica_serves_https_verified_against_its_certificate(
    tls_leader: ReplicaProcess, verified: ssl.SSLContext
) -> None:
    port = tls_leader.port
    health = _exchange(port, _request("GET", "/health", f"localhost:{port}"), tls=verified)
    assert health.status == 200 and health.headers["cache-control"] == "no-store"
    # A write from the replica's own https origin is accepted (the scheme is https).
    own = {"Origin": f"https://localhost:{port}", "Authorization": ADMIN}
    created = _exchange(
        port, _request("POST", "/api/app", f"localhost:{port}", own, APP), tls=verified
    )
    assert created.status in (200, 201, 204), created.body
    # A client that trusts only the system's certificates refuses the self-signed one.
    with pytest.raises(ssl.SSLCertVerificationError):
        _exchange(port, _request("GET", "/health", "localhost"), tls=ssl.create_default_context())


def test_plain_http_to_the_tls_port_gets_a_clear_400_and_is_closed(
    tls_leader: ReplicaProcess,
) -> None:
    answer = _exchange(tls_leader.port, _request("GET", "/health", "localhost"))
    assert answer.status == 400
    assert answer.headers["content-type"] == "application/json"
    assert "https" in answer.json()["error"]


def test_silent_and_trickling_handshakes_are_closed_at_the_header_deadline_without_blocking(
    tls_leader: ReplicaProcess, verified: ssl.SSLContext
) -> None:
    port = tls_leader.port
    timed_out_before = _tls_metric(tls_leader, verified, "ejc_http_tls_handshakes_timed_out_total")
    silent = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(20)]
    trickler = socket.create_connection(("127.0.0.1", port), timeout=10)
    hello = _client_hello()
    try:
        # While they hang on, other clients are served at once.
        started = time.monotonic()
        assert _https_health(tls_leader, verified) is not None
        assert time.monotonic() - started < 1.0
        # The trickler sends its hello a byte every 0.2 s: never done within the 1 s deadline.
        closed_at = None
        opened = time.monotonic()
        for byte in hello:
            try:
                trickler.sendall(bytes([byte]))
            except OSError:
                closed_at = time.monotonic()
                break
            time.sleep(0.2)
            if time.monotonic() - opened > 4:
                break
        assert closed_at is not None, "the trickling handshake was not closed"
        assert closed_at - opened < 3.5
        for sock in silent:
            sock.settimeout(5)
            assert sock.recv(1) == b""  # closed by the server, not answered
    finally:
        for sock in [*silent, trickler]:
            sock.close()
    wait_for(
        lambda: (
            _tls_metric(tls_leader, verified, "ejc_http_tls_handshakes_timed_out_total")
            >= timed_out_before + 21
        ),
        5,
        message="the timed-out handshakes are counted",
    )


def _client_hello() -> bytes:
    """The first flight of a real TLS client, captured through a memory BIO."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        client.do_handshake()
    return outgoing.read()


def test_the_cli_talks_https_with_cacert(
    tls_leader: ReplicaProcess, certificate: tuple[Path, Path]
) -> None:
    server = f"https://localhost:{tls_leader.port}"
    base = [sys.executable, "-m", "ejcloud_cli", "--server", server, "--user", "root"]
    base += ["--password", "root", "--json"]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(certificate[0].parent)}
    ok = subprocess.run(
        [*base, "--cacert", str(certificate[0]), "app", "list"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert isinstance(json.loads(ok.stdout), list | dict)
    untrusted = subprocess.run(
        [*base, "app", "list"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert untrusted.returncode == 3
    assert "certificate" in untrusted.stderr.lower()


@pytest.mark.parametrize("case", ["missing", "mismatched", "not pem"])
def test_an_unusable_certificate_or_key_stops_start_up_with_exit_code_2(
    case: str, certificate: tuple[Path, Path], tmp_path: Path
) -> None:
    cert, key = certificate
    if case == "missing":
        cert = tmp_path / "absent.pem"
    elif case == "mismatched":
        other = tmp_path / "other.pem"
        subprocess.run(
            ["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-out", str(other)],
            check=True, capture_output=True, timeout=30,
        )  # fmt: skip
        key = other
    else:
        cert = tmp_path / "junk.pem"
        cert.write_text("not a certificate\n")
    ran = subprocess.run(
        [sys.executable, "-m", "scheduler", "--zk_servers", "127.0.0.1:1",
         "--http_tls_cert_file", str(cert), "--http_tls_key_file", str(key)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert ran.returncode == 2, ran.stderr
    assert "http_tls_cert_file" in ran.stderr
    assert str(cert) in ran.stderr
    assert "Traceback" not in ran.stderr

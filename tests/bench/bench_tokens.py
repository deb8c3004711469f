"""API tokens against Basic auth (issue 26): what a request costs with each, and whether 10,000
tokens slow a token check.

1. Through a real replica process on a real ZooKeeper (its HTTP server, its API): the same
   `GET /api/app/list`, N times with the settings' admin's Basic credentials (a scrypt hash, so
   the authenticator's cache answers after the first request: Basic auth as a deployment with a
   password hash has it today) and N times with an API token, interleaved on two persistent
   connections in the same run; p50 and p99 of each and their ratio. Then 10,000 more tokens
   are written to ZooKeeper and the token requests are measured again.
2. In process: `Authenticator.check` of a Bearer token with 10 and with 10,000 tokens in the
   directory (a dictionary lookup and one SHA-256 either way); p50 and p99 per check.

The user, grant and tokens are written with the model's codecs, as the access API writes them.
Prints figures; asserts nothing about time (see tests/ for behaviour).

Run: `./dev.sh bench tokens [--requests N] [--checks N]`.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from kazoo.client import KazooClient
from werkzeug.security import generate_password_hash

from deploy.zookeeper import ZooKeeperEnsemble
from scheduler.edge.authenticator import Authenticator
from scheduler.model.access.directory import AccessDirectory
from scheduler.model.access.records import (
    TokenRecord,
    UserRecord,
    encode_grant,
    encode_token,
    encode_user,
)
from scheduler.model.access.roles import ANY_APP, Grant, Role
from scheduler.model.access.tokens import new_token, secret_digest
from scheduler.model.settings import load_settings
from scheduler.storage.access_follower import settings_rights
from scheduler.storage.layout import (
    ACCESS_TOKENS,
    access_grant_path,
    access_token_path,
    access_user_path,
)
from tests.support.replicas import ReplicaProcess
from tests.support.waiting import wait_for

PASSWORD = "bench-admin-password"
BASIC = "Basic " + base64.b64encode(f"root:{PASSWORD}".encode()).decode()
OWNER = "benchuser"
PATH = "/api/app/list"


def _token(owner: str = f"user:{OWNER}") -> tuple[str, TokenRecord]:
    text, parts = new_token()
    record = TokenRecord(
        parts.id,
        "bench",
        owner,
        Role.CLUSTER_ADMIN,
        ANY_APP,
        secret_digest(parts.secret),
        int(time.time() * 1000),
        None,
    )
    return text, record


def _get(conn: http.client.HTTPConnection, authorization: str) -> tuple[int, float]:
    began = time.perf_counter()
    conn.request("GET", PATH, headers={"Authorization": authorization})
    resp = conn.getresponse()
    resp.read()
    return resp.status, time.perf_counter() - began


def _figures(name: str, latencies: list[float], unit: float = 1000.0, label: str = "ms") -> float:
    ordered = sorted(latencies)
    p50 = statistics.median(ordered)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    print(
        f"  {name:<34} p50 {p50 * unit:8.3f} {label}  p99 {p99 * unit:8.3f} {label}  "
        f"({len(ordered)} samples)"
    )
    return p50


def _p99(latencies: list[float]) -> float:
    ordered = sorted(latencies)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def _write_tokens(zk: KazooClient, namespace: str, count: int) -> str:
    """Write `count` tokens in transactions of 1,000; the text of the last one."""
    zk.ensure_path(f"/{namespace}{ACCESS_TOKENS}")
    made = [_token() for _ in range(count)]
    for start in range(0, count, 1000):
        transaction = zk.transaction()
        for _, record in made[start : start + 1000]:
            transaction.create(f"/{namespace}{access_token_path(record.id)}", encode_token(record))
        transaction.commit()
    return made[-1][0]


def _interleaved(
    basic: http.client.HTTPConnection, token: http.client.HTTPConnection, bearer: str, n: int
) -> tuple[list[float], list[float]]:
    by_basic: list[float] = []
    by_token: list[float] = []
    for i in range(n):
        # Alternate which goes first, so neither always follows the other.
        order = ((basic, BASIC, by_basic), (token, bearer, by_token))
        for conn, authorization, out in order if i % 2 == 0 else order[::-1]:
            status, took = _get(conn, authorization)
            if status != 200:
                raise RuntimeError(f"GET {PATH} answered {status}")
            out.append(took)
    return by_basic, by_token


def through_http(requests: int) -> None:
    print(f"through a replica's HTTP server: GET {PATH}, {requests} of each, interleaved")
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        zk = ZooKeeperEnsemble(base / "zk", size=1)
        zk.start()
        namespace = f"bench-{uuid.uuid4().hex[:8]}"
        replica = ReplicaProcess(
            zk.hosts,
            base,
            zk_namespace=namespace,
            log_level="WARNING",
            auth_admin_password_hash=generate_password_hash(PASSWORD),
            # Polls for a token the replica has not read yet are failed logins: no 429 here.
            auth_max_failures=1_000_000,
        ).start()
        client = KazooClient(hosts=zk.hosts, timeout=10)
        client.start(timeout=15)
        try:
            wait_for(replica.is_leader, 30, message="the replica leads")
            now_ms = int(time.time() * 1000)
            hashed = generate_password_hash("unused-bench-password")
            client.create(
                f"/{namespace}{access_user_path(OWNER)}",
                encode_user(UserRecord(OWNER, hashed, now_ms)),
                makepath=True,
            )
            grant = Grant("b" * 16, f"user:{OWNER}", Role.CLUSTER_ADMIN, ANY_APP)
            client.create(
                f"/{namespace}{access_grant_path(grant.id)}", encode_grant(grant), makepath=True
            )
            text, record = _token()
            client.create(
                f"/{namespace}{access_token_path(record.id)}", encode_token(record), makepath=True
            )
            bearer = f"Bearer {text}"
            host, port = replica.identity.split(":")
            basic_conn = http.client.HTTPConnection(host, int(port), timeout=10)
            token_conn = http.client.HTTPConnection(host, int(port), timeout=10)
            wait_for(lambda: _get(token_conn, bearer)[0] == 200, 10, message="the token in force")
            _interleaved(basic_conn, token_conn, bearer, 200)  # warm up: caches, connections
            by_basic, by_token = _interleaved(basic_conn, token_conn, bearer, requests)
            basic_p50 = _figures("Basic (cached scrypt)", by_basic)
            token_p50 = _figures("Bearer token (1 token)", by_token)
            print(
                f"  token / Basic: p50 {token_p50 / basic_p50:.2f}  "
                f"p99 {_p99(by_token) / _p99(by_basic):.2f}"
            )
            began = time.perf_counter()
            last_text = _write_tokens(client, namespace, 10_000)
            written_s = time.perf_counter() - began
            wait_for(
                lambda: _get(token_conn, f"Bearer {last_text}")[0] == 200,
                30,
                interval_s=0.005,
                message="the 10,000 tokens read by the replica",
            )
            followed_s = time.perf_counter() - began
            # With 10,000 tokens followed, one more: how soon the replica accepts it.
            probe_text, probe = _token()
            began = time.perf_counter()
            client.create(f"/{namespace}{access_token_path(probe.id)}", encode_token(probe))
            wait_for(
                lambda: _get(token_conn, f"Bearer {probe_text}")[0] == 200,
                10,
                interval_s=0.002,
                message="a token written after 10,000 others in force",
            )
            print(
                f"  10,000 tokens written in {written_s:.1f} s, all in force {followed_s:.1f} s "
                f"after the first write; one more in force "
                f"{(time.perf_counter() - began) * 1000:.0f} ms after its write"
            )
            by_basic, by_token = _interleaved(basic_conn, token_conn, bearer, requests)
            basic_p50 = _figures("Basic (cached scrypt)", by_basic)
            token_p50 = _figures("Bearer token (10,002 tokens)", by_token)
            print(
                f"  token / Basic: p50 {token_p50 / basic_p50:.2f}  "
                f"p99 {_p99(by_token) / _p99(by_basic):.2f}"
            )
            basic_conn.close()
            token_conn.close()
        finally:
            client.stop()
            client.close()
            replica.stop()
            zk.stop()


def in_process(checks: int) -> None:
    print(f"in process: Authenticator.check of a Bearer token, {checks} checks each")
    settings = load_settings({}, {}, {"auth_max_failures": "1000000"})
    user = UserRecord(OWNER, "pbkdf2:sha256:1$x$y", 0)
    grant = Grant("c" * 16, f"user:{OWNER}", Role.CLUSTER_ADMIN, ANY_APP)
    results: dict[int, float] = {}
    for count in (10, 10_000):
        made = [_token() for _ in range(count)]
        auth = Authenticator(settings)
        auth.access.install(
            AccessDirectory.build(
                [user], [r for _, r in made], [grant], settings_rights("root", "guest")
            )
        )
        header = f"Bearer {made[count // 2][0]}"
        for _ in range(1000):  # warm up
            auth.check(header, "10.0.0.1")
        latencies: list[float] = []
        for _ in range(checks):
            began = time.perf_counter()
            result = auth.check(header, "10.0.0.1")
            latencies.append(time.perf_counter() - began)
            if result.status != 200:
                raise RuntimeError(f"the token was refused: {result.status}")
        results[count] = _figures(f"{count:,} tokens", latencies, 1e6, "us")
    print(f"  10,000 / 10 tokens: p50 {results[10_000] / results[10]:.2f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--checks", type=int, default=50_000)
    args = parser.parse_args(argv)
    in_process(args.checks)
    through_http(args.requests)
    print(json.dumps({"requests": args.requests, "checks": args.checks}))


if __name__ == "__main__":
    main()

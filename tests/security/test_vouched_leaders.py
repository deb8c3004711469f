"""Issue 23: a node written into the election by anyone who reaches ZooKeeper is no reason to
trust its address. Real replica processes on the session's real ZooKeeper; the forged members
point at a server this test runs on 127.0.0.2, which records every request it gets.

A standby lists, grants CORS to and redirects `/api` to only the leaders it vouches for: by the
digest ACL of the election path, or by a challenge only a replica of the same cluster answers.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from deploy.zookeeper import ZooKeeperEnsemble
from tests.security.conftest import StartReplica
from tests.support.replicas import ROOT, ReplicaProcess, http_get
from tests.support.waiting import wait_for


class _Rogue(ThreadingHTTPServer):
    """A server at 127.0.0.2 that records each request (path and headers).

    `relay_to`, when set, is a real replica whose `/health` answer (challenge and all) it
    passes back as its own: a relay of the challenge.
    """

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.2", 0), _RogueHandler)
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.relay_to: str | None = None

    @property
    def identity(self) -> str:
        return f"127.0.0.2:{self.server_address[1]}"


class _RogueHandler(BaseHTTPRequestHandler):
    server: _Rogue

    def do_GET(self) -> None:
        self.server.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
        body = b"{}"
        relay = self.server.relay_to
        if relay is not None and self.path.startswith("/health"):
            _, _, body = http_get(f"http://{relay}{self.path}")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def rogue() -> Iterator[_Rogue]:
    server = _Rogue()
    thread = threading.Thread(target=server.serve_forever, name="test-rogue", daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.fixture
def plain_zk(zk: ZooKeeperEnsemble) -> Iterator[KazooClient]:
    """A ZooKeeper client with no credentials: what anyone who reaches ZooKeeper has."""
    client = KazooClient(hosts=zk.hosts)
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


def _forge_first_member(client: KazooClient, namespace: str, identity: str) -> str:
    """Add an election node that sorts before every real one (sequence -1), data `identity`."""
    path = f"/{namespace}/ha/election/forged__lock__-0000000001"
    client.create(path, identity.encode(), ephemeral=True, makepath=True)
    return path


def _health(replica: ReplicaProcess) -> dict[str, Any]:
    found = replica.health()
    assert found is not None, f"no /health from {replica.identity}"
    return found


def _api(replica: ReplicaProcess, path: str = "/api/app/list") -> tuple[int, dict[str, str], bytes]:
    return http_get(f"http://{replica.identity}{path}", headers=replica.admin_headers())


def _pair(start_replica: StartReplica, **settings: Any) -> tuple[ReplicaProcess, ReplicaProcess]:
    first = start_replica(**settings)
    wait_for(first.is_leader, 30, message=f"{first.identity} leads")
    second = start_replica(**settings)
    wait_for(
        lambda: (h := second.health()) is not None and h["leader"] == first.identity,
        30,
        message=f"{second.identity} follows {first.identity}",
    )
    return first, second


def _waiting(predicate: Callable[[], bool], message: str) -> None:
    wait_for(predicate, 20, message=message)


def test_a_forged_first_election_member_is_not_listed_redirected_to_or_sent_credentials(
    start_replica: StartReplica, plain_zk: KazooClient, zk_namespace: str, rogue: _Rogue
) -> None:
    leader, standby = _pair(start_replica)
    wait_for(
        lambda: _health(standby)["leaderVouched"] is True, 20, message="the real leader vouched"
    )
    assert set(_health(leader)["replicas"]) == {leader.identity, standby.identity}

    forged = _forge_first_member(plain_zk, zk_namespace, rogue.identity)
    _waiting(lambda: _health(standby)["leader"] == rogue.identity, "the standby sees the forgery")
    # The forged member was challenged and failed: it answered, but without a proof.
    _waiting(lambda: any(p.startswith("/health?challenge=") for p, _ in rogue.requests), "a check")

    health = _health(standby)
    assert health["leaderVouched"] is False
    assert rogue.identity not in health["replicas"]
    assert rogue.identity not in _health(leader)["replicas"]
    status, _, body = http_get(f"http://{standby.identity}/health")  # no credentials
    assert status == 200 and json.loads(body)["leaderVouched"] is False

    # /api on the standby: 503 naming the unverified leader, never a 307 to it.
    status, headers, body = _api(standby)
    assert status == 503, (status, body)
    answer = json.loads(body)
    assert answer["type"] == "NotLeader"
    assert f"the leader {rogue.identity} could not be verified" in answer["error"]
    assert "Location" not in headers and headers.get("Retry-After")
    assert "could not be verified" in standby.log_text()

    # Neither the console's CSP nor CORS admits the forged member's origin.
    status, headers, _ = http_get(f"http://{standby.identity}/")
    assert status == 200 and "127.0.0.2" not in headers.get("Content-Security-Policy", "")
    status, headers, _ = http_get(
        f"http://{standby.identity}/health", headers={"Origin": f"http://{rogue.identity}"}
    )
    assert "Access-Control-Allow-Origin" not in headers

    # The forged member is gone: the real leader is vouched for again and the 307 leads to it.
    plain_zk.delete(forged)
    _waiting(lambda: _health(standby)["leader"] == leader.identity, "the real leader is back")
    _waiting(lambda: _health(standby)["leaderVouched"] is True, "the real leader vouched")
    status, headers, _ = _api(standby)
    assert status == 307 and headers["Location"].startswith(f"http://{leader.identity}/api/")
    request = urllib.request.Request(
        f"http://{standby.identity}/api/app/list", headers=leader.admin_headers()
    )
    with urllib.request.urlopen(request, timeout=5) as followed:
        assert followed.status == 200 and json.loads(followed.read()) == []

    # Nothing the forged member got carried a credential.
    assert rogue.requests, "the forged member was never checked"
    for path, headers in rogue.requests:
        assert path.startswith("/health?challenge="), path
        assert "authorization" not in headers and "cookie" not in headers, headers


def test_a_server_that_relays_the_challenge_to_a_real_replica_is_not_vouched_for(
    start_replica: StartReplica, plain_zk: KazooClient, zk_namespace: str, rogue: _Rogue
) -> None:
    leader, standby = _pair(start_replica)
    rogue.relay_to = leader.identity  # a genuine replica's genuine proof, for its own identity
    _forge_first_member(plain_zk, zk_namespace, rogue.identity)
    _waiting(lambda: _health(standby)["leader"] == rogue.identity, "the standby sees the forgery")
    _waiting(lambda: any("challenge=" in p for p, _ in rogue.requests), "the relayed challenge")

    health = _health(standby)
    assert health["leaderVouched"] is False and rogue.identity not in health["replicas"]
    status, _, body = _api(standby)
    assert status == 503 and "could not be verified" in json.loads(body)["error"]
    for _path, headers in rogue.requests:
        assert "authorization" not in headers and "cookie" not in headers


def test_with_zk_digest_the_election_is_trusted_and_closed_to_others(
    start_replica: StartReplica, plain_zk: KazooClient, zk_namespace: str, rogue: _Rogue
) -> None:
    leader, standby = _pair(start_replica, zk_digest="ejcloud:vouch-test-secret")
    _waiting(lambda: _health(standby)["leaderVouched"] is True, "the leader trusted")
    health = _health(standby)
    assert set(health["replicas"]) == {leader.identity, standby.identity}
    assert health["warnings"] == []
    status, headers, _ = _api(standby)
    assert status == 307 and headers["Location"].startswith(f"http://{leader.identity}/")

    # Without the digest nobody can add a member any more.
    with pytest.raises(NoAuthError):
        _forge_first_member(plain_zk, zk_namespace, rogue.identity)
    assert rogue.requests == []


def test_require_zk_digest_without_a_digest_refuses_to_start(tmp_path: Any) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "scheduler", "--require_zk_digest", "true"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2, done
    assert "require_zk_digest" in done.stderr and "zk_digest is not set" in done.stderr


def test_a_replica_without_zk_digest_warns_unless_in_the_dev_cluster(
    start_replica: StartReplica,
) -> None:
    plain = start_replica()
    dev = start_replica(env={"EJCLOUD_DEV_CLUSTER": "1"})
    for replica in (plain, dev):
        wait_for(replica.health, 30, message=f"{replica.identity} serves /health")
    assert any("zk_digest is not set" in w for w in _health(plain)["warnings"])
    assert "zk_digest is not set" in plain.log_text()
    assert _health(dev)["warnings"] == []

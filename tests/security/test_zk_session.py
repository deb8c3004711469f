"""The ZooKeeper session of real replica processes: a dead kazoo client, /health, digest ACLs.

A corrupt reply injected into a leader's ZooKeeper connection (a frame answering no request)
kills kazoo's connection thread, as a lone surrogate in a path once did: the replica must end its
term, say 503 while it cannot act, build a new client and come back, and no two leaders may act.
"""

from __future__ import annotations

import itertools
import json
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from deploy.zookeeper import ZooKeeperEnsemble
from scheduler.storage.acl import digest_acl
from tests.support.replicas import ReplicaProcess
from tests.support.tcpproxy import TcpProxy
from tests.support.waiting import wait_for

SESSION_TIMEOUT_S = 4.0  # ReplicaProcess's default
# A ZooKeeper reply frame (length, xid, zxid, err) whose xid matches no request.
STRAY_REPLY = struct.pack("!iiqi", 16, 0x5EC, 0, 0)

StartReplica = Callable[..., ReplicaProcess]


@pytest.fixture
def start(zk: ZooKeeperEnsemble, zk_namespace: str, tmp_path: Path) -> Iterator[StartReplica]:
    started: list[ReplicaProcess] = []

    def start_one(zk_servers: str | None = None, **settings: Any) -> ReplicaProcess:
        replica = ReplicaProcess(
            zk_servers or zk.hosts, tmp_path, zk_namespace=zk_namespace, **settings
        )
        started.append(replica)
        return replica.start()

    yield start_one
    for replica in started:
        replica.stop()


@pytest.fixture
def zk_proxy(zk: ZooKeeperEnsemble) -> Iterator[TcpProxy]:
    """A proxy in front of the session's ZooKeeper. Request it before `start`: fixtures are torn
    down in reverse, so the replicas stop while it still forwards (behind a closed proxy a
    replica's stop waits for a session it cannot close)."""
    host, port = zk.servers[0].address.split(":")
    proxy = TcpProxy(host, int(port))
    yield proxy
    proxy.close()


def wait_health(replica: ReplicaProcess, status: int, timeout_s: float) -> dict[str, Any]:
    """The /health body once it answers `status`."""

    def answered() -> dict[str, Any] | None:
        got = replica.health_status()
        return got[1] if got is not None and got[0] == status else None

    return wait_for(answered, timeout_s, message=f"{replica.identity} /health {status}")


def term_records(zk_client: KazooClient, namespace: str) -> list[dict[str, Any]]:
    path = f"/{namespace}/ha/terms"
    return [
        json.loads(zk_client.get(f"{path}/{name}")[0])
        for name in sorted(zk_client.get_children(path))
    ]


def test_leader_whose_kazoo_thread_dies_hands_over_says_503_and_comes_back(
    zk_proxy: TcpProxy, start: StartReplica, zk_client: KazooClient, zk_namespace: str
) -> None:
    first = start(zk_servers=zk_proxy.address)
    wait_for(first.is_leader, 30, message="first leads")
    second = start()
    wait_for(lambda: (second.health() or {}).get("leader") == first.identity, 15, message="standby")

    # The stray reply kills first's kazoo thread; the proxy then holds first's new connections,
    # so it stays unable to reach ZooKeeper until restore().
    assert zk_proxy.inject(STRAY_REPLY) == 1
    body = wait_health(first, 503, 5)
    assert body["role"] == "standby"
    assert "ZooKeeper" in body["reason"]
    wait_for(lambda: "ZooKeeper client is dead" in first.log_text(), 5, message="the log")
    # The standby leads once the dead client's session has expired, not before.
    wait_for(second.is_leader, SESSION_TIMEOUT_S + 10, message="second leads")
    assert not first.is_leader()
    assert wait_health(first, 503, 1)["zookeeper"] != "CONNECTED"

    zk_proxy.restore()
    assert wait_health(first, 200, 15)["reason"] is None
    wait_for(lambda: (first.health() or {}).get("leader") == second.identity, 15, message="follows")
    assert first.alive()
    assert first.metrics()["ejc_zookeeper_clients_total"] == 2
    assert [r for r in (first, second) if r.is_leader()] == [second]
    records = term_records(zk_client, zk_namespace)
    assert len(records) == 2
    for earlier, later in itertools.pairwise(records):
        assert earlier["lastActingAt"] < later["startedAt"], (earlier, later)
    # Without zk_digest the replica said at start that ZooKeeper is open to anyone.
    assert "zk_digest is not set" in first.log_text()


def test_health_is_503_while_zookeeper_is_unreachable_and_200_after(
    zk_proxy: TcpProxy, start: StartReplica
) -> None:
    replica = start(zk_servers=zk_proxy.address)
    wait_for(replica.is_leader, 30, message="leads")
    assert wait_health(replica, 200, 1)["reason"] is None
    zk_proxy.cut()
    body = wait_health(replica, 503, SESSION_TIMEOUT_S)
    assert "unreachable" in body["reason"] or "lost" in body["reason"]
    assert body["role"] == "standby"
    zk_proxy.restore()
    wait_for(replica.is_leader, 30, message="leads again")
    assert wait_health(replica, 200, 1)["reason"] is None


def test_leader_with_zk_digest_locks_down_nodes_created_before_it(
    start: StartReplica, zk: ZooKeeperEnsemble, zk_client: KazooClient, zk_namespace: str
) -> None:
    digest = "ejcloud:correct horse"
    root = f"/{zk_namespace}"
    job = f"{root}/config/job/old_job"
    zk_client.create(job, b'{"jobName": "old_job"}', makepath=True)

    replica = start(zk_digest=digest)
    wait_for(replica.is_leader, 30, message="leads")
    with pytest.raises(NoAuthError):
        zk_client.set(job, b'{"jobName": "old_job", "jobClass": "evil"}')
    with pytest.raises(NoAuthError):
        zk_client.create(f"{root}/config/job/new_job", b"{}")
    admin = KazooClient(hosts=zk.hosts, timeout=4, auth_data=[("digest", digest)])
    admin.start(timeout=15)
    try:
        for path in (root, f"{root}/config", f"{root}/config/job", job, f"{root}/ha/terms"):
            assert list(admin.get_acls(path)[0]) == digest_acl(digest), path
    finally:
        admin.stop()
        admin.close()
    assert "CREATOR_ALL ACL set on 4 of" in replica.log_text()
    assert "zk_digest is not set" not in replica.log_text()

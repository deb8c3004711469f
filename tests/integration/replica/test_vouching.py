"""In-process replicas on a real ZooKeeper: how the election path is secured with `zk_digest`,
and vouching for a leader over https (issue 23)."""

from __future__ import annotations

import json
import ssl
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import OPEN_ACL_UNSAFE

from deploy.zookeeper import ZooKeeperEnsemble, free_port
from scheduler.model.settings import load_settings
from scheduler.replica.replica import Replica
from scheduler.replica.term import BuiltTerm, LeaderContext
from scheduler.storage.acl import digest_acl
from scheduler.wiring.replica import build_replica
from tests.support.waiting import wait_for

DIGEST = "ejcloud:vouching-secret"


def _no_components(_ctx: LeaderContext) -> BuiltTerm:
    return BuiltTerm([])


@pytest.fixture
def make_replica(zk: ZooKeeperEnsemble, zk_namespace: str) -> Iterator[Any]:
    replicas: list[Replica] = []

    def make(**extra: str) -> Replica:
        settings = load_settings(
            {},
            {},
            {
                "zk_servers": zk.hosts,
                "zk_namespace": zk_namespace,
                "hostname": "127.0.0.1",
                "http_bind_address": "127.0.0.1",
                "http_port": str(free_port()),
                "zk_session_timeout_seconds": "3",
                "leader_retry_backoff_seconds": "0.2",
                **extra,
            },
        )
        replica = build_replica(settings, _no_components)
        replicas.append(replica)
        replica.start()
        return replica

    yield make
    for replica in replicas:
        replica.stop(timeout_s=10)


@pytest.fixture
def plain_zk(zk: ZooKeeperEnsemble) -> Iterator[KazooClient]:
    client = KazooClient(hosts=zk.hosts)
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


def _election(namespace: str) -> str:
    return f"/{namespace}/ha/election"


def test_an_open_empty_election_path_is_made_anew_with_the_digest_acl(
    make_replica: Any, plain_zk: KazooClient, zk_namespace: str
) -> None:
    # Left open by someone without the digest (or a replica from before zk_digest was set).
    plain_zk.ensure_path(_election(zk_namespace), acl=OPEN_ACL_UNSAFE)
    replica = make_replica(zk_digest=DIGEST)
    wait_for(replica.is_acting_leader, 15, message="the replica leads")

    acls, stat = replica._client.get_acls(_election(zk_namespace))
    assert list(acls) == digest_acl(DIGEST) and stat.aversion == 0
    # Leading may come before the leader-watch thread's first pass.
    wait_for(lambda: replica.vouching.by_acl, 10, message="the election trusted by its ACL")
    with pytest.raises(NoAuthError):
        plain_zk.create(f"{_election(zk_namespace)}/x__lock__-0000000001", b"127.0.0.2:1")


def test_an_open_election_path_with_a_forged_member_is_locked_and_the_member_challenged(
    make_replica: Any, plain_zk: KazooClient, zk_namespace: str
) -> None:
    plain_zk.ensure_path(_election(zk_namespace), acl=OPEN_ACL_UNSAFE)
    forged_identity = f"127.0.0.2:{free_port()}"  # nobody listens there
    forged = plain_zk.create(
        f"{_election(zk_namespace)}/x__lock__-0000000001", forged_identity.encode(), ephemeral=True
    )
    replica = make_replica(zk_digest=DIGEST)
    wait_for(lambda: replica.health()["leader"] == forged_identity, 15, message="the forgery seen")

    acls, stat = replica._client.get_acls(_election(zk_namespace))
    assert list(acls) == digest_acl(DIGEST) and stat.aversion == 1
    # Its ACL changed after the forged node was made, so the ACL proves nothing: challenged.
    assert not replica.vouching.by_acl
    health = replica.health()
    assert health["leaderVouched"] is False
    assert health["replicas"] == [replica.settings.identity]

    with pytest.raises(NoAuthError):  # deleting needs the parent's DELETE, the digest's now
        plain_zk.delete(forged)
    plain_zk.stop()  # the forger's session ends, and its ephemeral node with it
    wait_for(replica.is_acting_leader, 15, message="the replica leads once the forgery is gone")
    assert replica.health()["leaderVouched"] is True


def test_replicas_serving_https_vouch_for_each_other_over_https(
    make_replica: Any, certificate: tuple[Path, Path]
) -> None:
    tls = {"http_tls_cert_file": str(certificate[0]), "http_tls_key_file": str(certificate[1])}
    leader = make_replica(**tls)
    wait_for(leader.is_acting_leader, 15, message="the first replica leads")
    standby = make_replica(**tls)
    wait_for(
        lambda: standby.health()["leaderVouched"] is True,
        15,
        message="the standby vouches for the leader over https",
    )
    assert not standby.vouching.by_acl  # no digest: the challenge decided
    assert standby.health()["replicas"] == [leader.settings.identity, standby.settings.identity]

    # The proof is served over https without credentials.
    context = ssl.create_default_context(cafile=str(certificate[0]))
    challenge = "0f" * 32
    with urllib.request.urlopen(
        f"https://127.0.0.1:{leader.settings.http_port}/health?challenge={challenge}",
        context=context,
        timeout=5,
    ) as answer:
        body = json.loads(answer.read())
    assert body["proof"] == leader.vouching.answer(challenge)
    assert "replicas" not in body  # the public part, and the proof

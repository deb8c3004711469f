"""The deploy command's default-login check against a real replica, and the fake replica's match.

After a deployment the command tries `root/root` and `guest/guest` on the leader's REST API: a
replica that got its password hashes must refuse both, one that got nothing accepts both. The
fake replica of the other deploy tests must answer the same way, or those tests prove nothing.
"""

from __future__ import annotations

import base64
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from werkzeug.security import generate_password_hash

from deploy.zookeeper import ZooKeeperEnsemble
from marathon.deployer import try_logins
from tests.integration.marathon.fake_marathon import Served
from tests.support.replicas import ReplicaProcess
from tests.support.waiting import wait_for

DEFAULTS = [("root", "root"), ("guest", "guest")]
ADMIN_PASSWORD = "admin-s3cret-1"
HASHES = {
    "auth_admin_password_hash": generate_password_hash(ADMIN_PASSWORD),
    "auth_guest_password_hash": generate_password_hash("guest-s3cret-2"),
}


Start = Callable[..., ReplicaProcess]


@pytest.fixture
def served() -> Iterator[Served]:
    servers = Served()
    yield servers
    servers.close()


@pytest.fixture
def start_replica(zk: ZooKeeperEnsemble, zk_namespace: str, tmp_path: Path) -> Iterator[Start]:
    """Starts a replica process with settings and waits until it leads; stops it afterwards."""
    started: list[ReplicaProcess] = []

    def start(**settings: Any) -> ReplicaProcess:
        replica = ReplicaProcess(zk.hosts, tmp_path, zk_namespace=zk_namespace, **settings)
        started.append(replica.start())
        wait_for(replica.is_leader, 30, message=f"replica {replica.identity} leads")
        return replica

    yield start
    for replica in started:
        replica.stop()


def _status(address: str, user: str, password: str) -> int:
    request = urllib.request.Request(f"http://{address}/api/job/jobs")
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        exc.close()
        return exc.code


def test_a_replica_with_hashes_refuses_the_default_logins_as_the_fake_does(
    start_replica: Start, served: Served
) -> None:
    replica = start_replica(**HASHES)
    fake = served.health("leader")
    expected = {login: "refused" for login in DEFAULTS}
    assert try_logins(replica.identity, DEFAULTS, 10) == expected
    assert try_logins(fake.address, DEFAULTS, 10) == expected
    # The check can tell: the replica does accept the password the hash was made from.
    assert _status(replica.identity, "root", ADMIN_PASSWORD) == 200


def test_a_replica_without_hashes_accepts_them_as_the_fake_does(
    start_replica: Start, served: Served
) -> None:
    replica = start_replica()
    fake = served.health("leader")
    fake.accepted_logins = set(DEFAULTS)
    expected = {login: "accepted" for login in DEFAULTS}
    assert try_logins(replica.identity, DEFAULTS, 10) == expected
    assert try_logins(fake.address, DEFAULTS, 10) == expected

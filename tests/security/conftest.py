"""Fixtures of the security suite: real replica processes over the session's real ZooKeeper.

Attacks run from this process against 127.0.0.1 only, bounded in count and time. Every replica a
test starts is stopped when the test ends, pass or fail.
"""

from __future__ import annotations

import resource
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy.zookeeper import ZooKeeperEnsemble
from tests.support.replicas import ReplicaProcess
from tests.support.waiting import wait_for

StartReplica = Callable[..., ReplicaProcess]


@pytest.fixture(scope="session", autouse=True)
def fd_limit() -> Iterator[int]:
    """The test process may open as many descriptors as its hard limit allows (attacks hold
    thousands of sockets); the soft limit is put back afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    yield target
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.fixture
def start_replica(
    zk: ZooKeeperEnsemble, zk_namespace: str, tmp_path: Path
) -> Iterator[StartReplica]:
    """Start a `python -m scheduler` process with the given settings (all in one namespace)."""
    started: list[ReplicaProcess] = []

    def start(**settings: Any) -> ReplicaProcess:
        replica = ReplicaProcess(zk.hosts, tmp_path, zk_namespace=zk_namespace, **settings)
        started.append(replica)
        return replica.start()

    yield start
    for replica in started:
        replica.stop()


@pytest.fixture
def start_leader(start_replica: StartReplica) -> StartReplica:
    """Start one replica with the given settings and wait until it leads."""

    def start(**settings: Any) -> ReplicaProcess:
        replica = start_replica(**settings)
        wait_for(replica.is_leader, 30, message=f"replica {replica.identity} leads")
        return replica

    return start

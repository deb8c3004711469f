"""Fixtures of the in-process replica tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from deploy.zookeeper import ZooKeeperEnsemble
from tests.support.tcpproxy import TcpProxy


@pytest.fixture
def zk_proxy(zk: ZooKeeperEnsemble) -> Iterator[TcpProxy]:
    """A proxy in front of the session's ZooKeeper that a test can cut and restore.

    Request it before `make_replica` in a test's arguments: fixtures are torn down in reverse,
    so the replicas stop while the proxy still forwards (a replica stopped behind a closed proxy
    waits out its whole stop deadline, 10 s, for a session it cannot close).
    """
    host, port = zk.servers[0].address.split(":")
    proxy = TcpProxy(host, int(port))
    yield proxy
    proxy.close()

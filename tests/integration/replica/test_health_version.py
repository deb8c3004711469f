"""`/health` names the replica's version to authenticated callers (issue 30: a rolling upgrade
is followed replica by replica, docs/upgrading.md), never to anonymous ones."""

from __future__ import annotations

import base64
import importlib.metadata
import json
from collections.abc import Iterator

import pytest

from deploy.zookeeper import ZooKeeperEnsemble, free_port
from scheduler.model.settings import load_settings
from scheduler.replica.replica import Replica
from scheduler.replica.term import BuiltTerm
from scheduler.wiring.replica import build_replica
from tests.support.replicas import http_get
from tests.support.waiting import wait_for


@pytest.fixture
def replica(zk: ZooKeeperEnsemble, zk_namespace: str) -> Iterator[Replica]:
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
        },
    )
    made = build_replica(settings, lambda ctx: BuiltTerm([]))
    made.start()
    try:
        wait_for(made.is_acting_leader, 10, message="the replica leads")
        yield made
    finally:
        made.stop(timeout_s=10)


def test_health_names_the_installed_version_to_authenticated_callers_only(
    replica: Replica,
) -> None:
    url = f"http://{replica.settings.identity}/health"
    root = {"Authorization": "Basic " + base64.b64encode(b"root:root").decode()}
    status, _, body = http_get(url, headers=root)
    assert status == 200
    assert json.loads(body)["version"] == importlib.metadata.version("ejcloud")
    status, _, body = http_get(url)
    assert status == 200
    public = json.loads(body)
    assert public["role"] == "leader"
    assert "version" not in public

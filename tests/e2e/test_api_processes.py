"""The REST API through real replica processes: redirects, auth, and data across a hand-over."""

from __future__ import annotations

import base64
import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy.zookeeper import ZooKeeperEnsemble
from tests.support.http import exchange
from tests.support.replicas import ReplicaProcess
from tests.support.waiting import wait_for

AUTH = "Basic " + base64.b64encode(b"root:root").decode()


def request(method: str, url: str, body: Any = None, auth: str | None = AUTH) -> tuple[int, Any]:
    """A request that follows a 307 with the same method, body and credentials (as
    `curl --location-trusted` does)."""
    status, headers, answer = _once(method, url, body, auth)
    if status == 307:
        status, headers, answer = _once(method, headers["Location"], body, auth)
    return status, answer


def _once(method: str, url: str, body: Any, auth: str | None) -> tuple[int, Any, Any]:
    data = None if body is None else json.dumps(body).encode()
    headers = {}
    if data is not None:
        headers["Content-Type"] = "application/json"
    if auth:
        headers["Authorization"] = auth
    answer = exchange(method, url, data=data, headers=headers, timeout_s=5, follow_redirects=False)
    return answer.status, answer.headers, answer.json()


@pytest.fixture
def replicas(
    zk: ZooKeeperEnsemble, zk_namespace: str, tmp_path: Path
) -> Iterator[list[ReplicaProcess]]:
    started = [
        ReplicaProcess(zk.hosts, tmp_path, zk_namespace=zk_namespace).start() for _ in range(2)
    ]
    yield started
    for r in started:
        r.stop()


def test_api_through_a_standby_and_across_a_hand_over(replicas: list[ReplicaProcess]) -> None:
    leader = wait_for(
        lambda: next((r for r in replicas if r.is_leader()), None), 15, message="leader"
    )
    standby = next(r for r in replicas if r is not leader)
    wait_for(
        lambda: (standby.health() or {}).get("leader") == leader.identity,
        10,
        message="standby follows",
    )
    app = {"appName": "a1", "appURL": "file:///tmp/a1.tar.gz", "bootstrapScript": "bin/start.sh"}
    # Through the standby: a 307 to the leader, which the client follows with method and body.
    status, _ = request("POST", f"http://{standby.identity}/api/app", app)
    assert status == 204
    status, body = request("GET", f"http://{leader.identity}/api/app/a1")
    assert status == 200 and body["appName"] == "a1"
    assert request("GET", f"http://{leader.identity}/api/app/a1", auth=None)[0] == 401
    leader.signal(signal.SIGTERM)
    wait_for(standby.is_leader, 10, message="standby takes over")
    status, body = request("GET", f"http://{standby.identity}/api/app/list")
    assert status == 200 and [a["appName"] for a in body] == ["a1"]

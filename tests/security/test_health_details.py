"""Unauthenticated `/health` shows role, leader and connection states only; details need
credentials (either role). A real replica process; no Mesos master, so the Mesos state carries
an error text that must not leak."""

from __future__ import annotations

import json
from typing import Any

from deploy.zookeeper import free_port
from tests.security.conftest import StartReplica
from tests.support.replicas import ReplicaProcess, http_get

_PUBLIC = {"role", "leader", "leaderVouched", "zookeeper", "identity", "mesos", "reason"}


def _health(replica: ReplicaProcess, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    status, _, body = http_get(f"http://{replica.identity}/health", headers=headers)
    found: dict[str, Any] = json.loads(body)
    return status, found


def test_health_details_need_credentials(start_leader: StartReplica) -> None:
    # A Mesos master that refuses connections: the driver's state names the error.
    leader = start_leader(mesos_url=f"127.0.0.1:{free_port()}")

    status, anonymous = _health(leader, {})
    assert status == 200
    assert set(anonymous) == _PUBLIC
    assert anonymous["role"] == "leader" and anonymous["zookeeper"] == "CONNECTED"
    assert anonymous["reason"] is None
    assert ":" not in (anonymous["mesos"] or ""), anonymous["mesos"]

    wrong = {"Authorization": "Basic " + "cm9vdDp3cm9uZw=="}  # root:wrong
    assert set(_health(leader, wrong)[1]) == _PUBLIC

    status, full = _health(leader, leader.admin_headers())
    assert status == 200
    assert full["pid"] == leader.proc.pid if leader.proc else False
    assert full["term"] is not None
    assert {"statistics", "lastTerm"} <= set(full)

    guest = {"Authorization": "Basic Z3Vlc3Q6Z3Vlc3Q="}  # guest:guest
    assert "pid" in _health(leader, guest)[1]

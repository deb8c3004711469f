"""`ejcloud user|grant|token` and `EJCLOUD_TOKEN` (issue 26) as real subprocesses against two
real replica processes and a real ZooKeeper.

The CLI talks to the standby, so every request is redirected to the leader and sent again there
with its credentials: a user's Basic ones, or a token as Bearer. One cluster for the module.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.zookeeper import ZooKeeperEnsemble
from tests.e2e.test_cli import Cli
from tests.support.replicas import ReplicaProcess
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

PASSWORD = "alice-password-1"
_TOKEN = re.compile(r"ejc_([0-9a-f]{12})_[0-9a-f]{48}")


@pytest.fixture(scope="module")
def standby(zk: ZooKeeperEnsemble, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The standby's URL, once it follows the leader."""
    logs = tmp_path_factory.mktemp("cli-access")
    namespace = f"t-{uuid.uuid4().hex[:12]}"
    started = [ReplicaProcess(zk.hosts, logs, zk_namespace=namespace).start() for _ in range(2)]
    try:
        leader = wait_for(
            lambda: next((r for r in started if r.is_leader()), None), 20, message="a leader"
        )
        other = next(r for r in started if r is not leader)
        wait_for(
            lambda: (other.health() or {}).get("leader") == leader.identity,
            10,
            message="the standby to follow the leader",
        )
        yield f"http://{other.identity}"
    finally:
        for replica in started:
            replica.stop()


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cli-access-home")


def test_a_cluster_admin_makes_a_user_an_app_admin_whose_token_works_until_revoked(
    standby: str, home: Path
) -> None:
    root = Cli(home, EJCLOUD_SERVER=standby, EJCLOUD_USER="root", EJCLOUD_PASSWORD="root")
    root.ok("user", "add", "alice", "--password-stdin", stdin=PASSWORD + "\n")
    root.ok("app", "add", "team_a", "--url", "file:///tmp/a.tar.gz", "--bootstrap", "bin/x")
    root.ok("app", "add", "team_b", "--url", "file:///tmp/b.tar.gz", "--bootstrap", "bin/x")
    granted = root.json("grant", "add", "user:alice", "app-admin", "team_a")
    assert granted["ok"] and re.fullmatch(r"[0-9a-f]{16}", granted["id"])
    assert "alice" in root.ok("user", "list")

    alice = Cli(home, EJCLOUD_SERVER=standby, EJCLOUD_USER="alice", EJCLOUD_PASSWORD=PASSWORD)
    made = alice(
        "token", "create", "ci", "--role", "operator", "--app", "team_a", "--expires-in", "30d"
    )
    assert made.returncode == 0, made.stderr
    found = _TOKEN.search(made.stdout)
    assert found is not None, made.stdout
    token, token_id = found.group(0), found.group(1)
    assert "store this token now" in made.stderr and token not in made.stderr
    refused = alice("user", "list")
    assert refused.returncode == 5, refused.stderr
    assert alice("token", "create", "x", "--role", "viewer", "--app", "team_b").returncode == 4

    ci = Cli(home, EJCLOUD_SERVER=standby, EJCLOUD_TOKEN=token)
    shown = ci.json("app", "show", "team_a")
    assert shown["appName"] == "team_a"
    assert [a["appName"] for a in ci.json("app", "list")] == ["team_a"]
    listed = ci.json("token", "list")
    assert [(t["id"], t["owner"], t["role"]) for t in listed] == [
        (token_id, "user:alice", "operator")
    ]
    table = ci.ok("token", "list")
    assert token_id in table and token not in table, table
    assert re.search(r"token:\s+set \(env\)", ci.ok("config"))
    assert [g["app"] for g in alice.json("grant", "list")] == ["team_a"]

    alice.ok("token", "revoke", token_id)
    after = ci("app", "show", "team_a")
    assert after.returncode == 5, after.stderr
    assert token not in after.stdout + after.stderr
    assert alice.json("token", "list") == []

    root.ok("user", "delete", "alice", "--yes")
    gone = alice("app", "show", "team_a")
    assert gone.returncode == 5
    assert root.json("grant", "list") == []

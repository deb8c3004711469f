"""The audit log with real replica processes and a real PostgreSQL server (issue 26).

Two replicas, each the leader of its own namespace with its own database on the same server:
one with `audit_mode=enforced`, one with `best_effort` and an `audit_file`. While the server
runs, a change is one record, read back through `GET /api/audit` and `ejcloud audit`. With the
server stopped, the enforced replica refuses a change with 503 and writes nothing in ZooKeeper;
the best-effort one makes it, counts the failed write on /metrics, keeps the JSON line, and
writes the record once the server is back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from deploy.postgres import PostgresServer
from deploy.zookeeper import ZooKeeperEnsemble
from tests.e2e.test_api_processes import AUTH
from tests.support.http import exchange
from tests.support.replicas import ReplicaProcess
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
APP = {
    "appName": "audited",
    "appURL": "http://example.invalid/a.tar.gz",
    "bootstrapScript": "bin/start.sh",
    "cpuCount": 0.5,
    "memoryMB": 64,
}


@dataclass
class Leader:
    replica: ReplicaProcess
    namespace: str
    audit_file: Path

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any, dict[str, str]]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": AUTH}
        if data is not None:
            headers["Content-Type"] = "application/json"
        answer = exchange(
            method,
            f"http://{self.replica.identity}{path}",
            data=data,
            headers=headers,
            timeout_s=15,
        )
        return answer.status, answer.json(), dict(answer.headers)

    def records(self, query: str = "") -> list[dict[str, Any]]:
        status, body, _ = self.call("GET", f"/api/audit?limit=100{query}")
        assert status == 200, body
        items: list[dict[str, Any]] = body["items"]
        return items


@dataclass
class Pair:
    enforced: Leader
    best_effort: Leader
    zk: KazooClient
    postgres: PostgresServer


def _leader(zk: ZooKeeperEnsemble, tmp: Path, url: str, mode: str) -> Leader:
    namespace = f"t-{uuid.uuid4().hex[:12]}"
    audit_file = tmp / f"{mode}.jsonl"
    replica = ReplicaProcess(
        zk.hosts,
        tmp,
        zk_namespace=namespace,
        event_trace_rdb_url=url,
        audit_mode=mode,
        audit_file=str(audit_file),
    ).start()
    return Leader(replica, namespace, audit_file)


@pytest.fixture(scope="module")
def pair(
    zk: ZooKeeperEnsemble, postgres: PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pair]:
    tmp = tmp_path_factory.mktemp("audit")
    names = [f"t_{uuid.uuid4().hex[:12]}" for _ in range(2)]
    urls = [postgres.create_database(name) for name in names]
    leaders: list[Leader] = []
    client = KazooClient(hosts=zk.hosts, timeout=10)
    client.start(timeout=15)
    try:
        leaders.append(_leader(zk, tmp, urls[0], "enforced"))
        leaders.append(_leader(zk, tmp, urls[1], "best_effort"))
        for leader in leaders:
            # Led, with the schema migrated: the audit log takes records.
            wait_for(partial(_ready, leader), 30, message="a leader with its trace database ready")
        yield Pair(leaders[0], leaders[1], client, postgres)
    finally:
        for leader in leaders:
            leader.replica.stop()
        client.stop()
        client.close()
        postgres.start()  # if a test left it stopped
        for name in names:
            postgres.drop_database(name)


def _ready(leader: Leader) -> bool:
    statistics = (leader.replica.health() or {}).get("statistics", {})
    return statistics.get("ready") is True


def _snapshot(client: KazooClient, namespace: str) -> dict[str, bytes]:
    """Every node of the namespace but the election's and the terms' (the replica's own)."""
    out: dict[str, bytes] = {}

    def walk(path: str) -> None:
        for child in client.get_children(path):
            full = f"{path.rstrip('/')}/{child}"
            if full.startswith(f"/{namespace}/ha"):
                continue
            out[full] = client.get(full)[0] or b""
            walk(full)

    walk(f"/{namespace}")
    return out


def _cli(leader: Leader, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EJCLOUD_")}
    env.update(EJCLOUD_USER="root", EJCLOUD_PASSWORD="root", HOME=str(leader.audit_file.parent))
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "ejcloud_cli",
            "--server",
            f"http://{leader.replica.identity}",
            *args,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_a_change_is_one_record_in_postgresql_read_by_the_api_and_the_cli(pair: Pair) -> None:
    for leader in (pair.enforced, pair.best_effort):
        status, body, headers = leader.call("POST", "/api/app", {**APP, "appName": "first"})
        assert status == 204, body
        request_id = headers["X-Request-Id"]
        first = partial(leader.records, "&action=app.create&app=first")
        records = wait_for(first, 15, message="the record")
        assert [(r["requestId"], r["actor"], r["resource"], r["outcome"]) for r in records] == [
            (request_id, "user:root", "app/first", "ok")
        ]
        assert records[0]["changes"]["after"]["appName"] == "first"
    done = _cli(pair.enforced, "audit", "--action", "app.create", "--app", "first", "--json")
    assert done.returncode == 0, done.stderr
    assert [r["resource"] for r in json.loads(done.stdout)] == ["app/first"]
    table = _cli(pair.enforced, "audit", "--outcome", "ok")
    assert table.returncode == 0 and "app.create" in table.stdout and "user:root" in table.stdout


def test_with_postgresql_stopped_enforced_refuses_and_best_effort_counts(pair: Pair) -> None:
    enforced, best_effort = pair.enforced, pair.best_effort
    before = _snapshot(pair.zk, enforced.namespace)
    pair.postgres.stop()
    try:
        status, body, headers = enforced.call("POST", "/api/app", {**APP, "appName": "second"})
        assert status == 503, body
        assert body["type"] == "AuditUnavailable"
        assert len(headers["X-Request-Id"]) == 32
        assert _snapshot(pair.zk, enforced.namespace) == before
        # Reads go on.
        assert enforced.call("GET", "/api/app/list")[0] == 200

        status, body, headers = best_effort.call("POST", "/api/app", {**APP, "appName": "second"})
        assert status == 204, body
        wait_for(
            lambda: best_effort.replica.metrics().get("ejc_audit_write_failures_total", 0) >= 1,
            20,
            message="the failed audit write counted on /metrics",
        )
        lines = [json.loads(line) for line in best_effort.audit_file.read_text().splitlines()]
        assert lines[-1]["requestId"] == headers["X-Request-Id"]
        assert lines[-1]["resource"] == "app/second"
    finally:
        pair.postgres.start()
    # Held, then written once the server is back; the enforced replica takes changes again.

    def held_record_written() -> bool:
        status, body, _ = best_effort.call("GET", "/api/audit?app=second")
        return status == 200 and [r["action"] for r in body["items"]] == ["app.create"]

    wait_for(held_record_written, 60, message="the held record written")
    wait_for(
        lambda: enforced.call("POST", "/api/app", {**APP, "appName": "third"})[0] == 204,
        30,
        message="enforced takes changes again",
    )

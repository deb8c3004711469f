"""The requests that took the cluster down, sent to a real leader process over real HTTP.

A lone surrogate in a name killed kazoo's connection thread (the leader lost its session for good
and the standby, sent the same request, did too); a 2 MB field dropped the ZooKeeper connection;
overflowing pages, dates before year 1 in UTC and 100,000 levels of JSON answered 500; a web page
of another site could make a logged-in browser write. Each is now a 4xx naming the problem, the
leader keeps its term and session, and nothing answers 500.
"""

from __future__ import annotations

import base64
import http.client
import json

from tests.security.conftest import StartReplica
from tests.support.replicas import ReplicaProcess
from tests.support.waiting import wait_for

ADMIN = "Basic " + base64.b64encode(b"root:root").decode()
GUEST = "Basic " + base64.b64encode(b"guest:guest").decode()
APP = {"appName": "demo_app", "appURL": "file:///tmp/demo.tar.gz", "bootstrapScript": "run.sh"}
JOB = {
    "jobName": "demo_job",
    "appName": "demo_app",
    "jobType": "SCRIPT",
    "scriptCommandLine": "true",
    "jobExecutionType": "TRANSIENT",
    "cron": "0 0 0 1 1 ? 2099",
    "shardingTotalCount": 1,
    "cpuCount": 0.1,
    "memoryMB": 32,
}


def _request(
    replica: ReplicaProcess,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, object]]:
    conn = http.client.HTTPConnection("127.0.0.1", replica.port, timeout=10)
    try:
        hdrs = {"Authorization": ADMIN, **(headers or {})}
        if body is not None and "Content-Type" not in hdrs:
            hdrs["Content-Type"] = "application/json"
        conn.request(method, path, body, hdrs)
        answer = conn.getresponse()
        data = answer.read()
        return answer.status, json.loads(data) if data else {}
    finally:
        conn.close()


def test_hostile_requests_get_4xx_and_the_leader_keeps_its_term(
    start_leader: StartReplica, start_replica: StartReplica
) -> None:
    leader = start_leader()
    standby = start_replica()
    wait_for(lambda: standby.health() is not None, 30, message="standby up")
    terms = leader.metrics()["ejc_leader_terms_total"]
    assert _request(leader, "POST", "/api/app", json.dumps(APP).encode())[0] == 204
    assert _request(leader, "POST", "/api/job/register", json.dumps(JOB).encode())[0] == 204

    surrogate = b'"\\ud800"'
    attacks: list[tuple[str, str, bytes | None, dict[str, str], int, str | None]] = [
        ("PUT", "/api/app", b'{"appName": ' + surrogate + b"}", {}, 400, "appName"),
        ("PUT", "/api/job/update", b'{"jobName": ' + surrogate + b"}", {}, 400, "jobName"),
        ("DELETE", "/api/job/deregister", surrogate, {}, 400, "jobName"),
        ("POST", "/api/job/trigger", b'{"jobName": "a\\udfffb"}', {}, 400, "jobName"),
        (
            "POST",
            "/api/job/register",
            json.dumps({**JOB, "jobName": "big", "jobParameter": "x" * 900_000}).encode(),
            {},
            400,
            "jobParameter",
        ),
        ("POST", "/api/app", b"[" * 100_000 + b"]" * 100_000, {}, 400, "body"),
        ("POST", "/api/app/%ED%A0%80/disable", None, {}, 400, "appName"),
        ("GET", "/api/job/events/executions?page=10000000000000000000", None, {}, 400, "page"),
        (
            "GET",
            "/api/job/events/statusTraces?startTime=0001-01-01T00:00:00%2B14:00",
            None,
            {"Authorization": GUEST},
            400,
            "startTime",
        ),
        (
            "POST",
            "/api/job/demo_job/disable",
            None,
            {"Origin": "http://evil.example"},
            403,
            None,
        ),
        (
            "POST",
            "/api/job/trigger",
            b"jobName=demo_job",
            {"Content-Type": "application/x-www-form-urlencoded"},
            415,
            None,
        ),
        ("POST", "/api/job/trigger", b"demo_job", {"Content-Type": "text/plain"}, 415, None),
    ]
    for method, path, body, headers, status, field in attacks:
        got, answer = _request(leader, method, path, body, headers)
        assert got == status, (method, path[:60], got, answer)
        assert isinstance(answer.get("error"), str), answer
        if field is not None:
            assert field in answer["fields"], (path[:60], answer)  # type: ignore[operator]

    # A browser page of this very server may write; so may a script without Origin.
    own = {"Origin": f"http://{leader.identity}"}
    assert _request(leader, "POST", "/api/job/trigger", b"demo_job", own)[0] == 204
    assert _request(leader, "POST", "/api/job/demo_job/disable")[0] == 204

    health = leader.health()
    assert health is not None and health["role"] == "leader", health
    assert health["zookeeper"] == "CONNECTED", health
    assert leader.metrics()["ejc_leader_terms_total"] == terms
    standby_health = standby.health()
    assert standby_health is not None and standby_health["role"] == "standby", standby_health
    assert _request(leader, "GET", "/api/job/jobs/big")[0] == 404  # nothing was written
    log = leader.log_text()
    assert "Traceback" not in log and "unexpected error" not in log

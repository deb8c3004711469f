"""What the audit log costs a request (issue 26), in process on a real ZooKeeper and a real
SQLite trace database.

Three leader APIs over one namespace, as `create_app` builds them: without an audit database
(only the request id and the hooks), `audit_mode=best_effort` (the record buffered for the
writer thread) and `audit_mode=enforced` (a `SELECT 1` before the change, the record written
before the answer). Interleaved in the same run, each API on a job of its own: `POST
/api/job/{job}/disable` and `.../enable` (changes), and `GET /api/job/jobs/{job}` (a read: no
record). p50 and p99 of each. Prints figures; asserts nothing about time (see tests/ for
behaviour).

A figure (2 cores shared with other work, 600 each): a change p50 5.3 ms without a database,
5.2 ms best_effort, 7.8 ms enforced (the probe and the synchronous insert); a read 1.2, 2.4
(the writer thread commits the change's record meanwhile) and 1.3 ms.

Run: `./dev.sh bench audit [--requests N]`.
"""

from __future__ import annotations

import argparse
import base64
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from flask.testing import FlaskClient
from kazoo.client import KazooClient

from deploy.zookeeper import ZooKeeperEnsemble
from scheduler.api import create_app
from scheduler.leader.mesos.operator_actions import RecordedActions
from scheduler.leader.statistics import create_trace_engine, upgrade_to_head
from scheduler.leader.statistics.audit_log import AuditLog
from scheduler.model.settings import load_settings
from scheduler.replica.term import LeaderContext, Term
from scheduler.storage.registry import Registry
from tests.support.bodies import job_body

ADMIN = {"Authorization": "Basic " + base64.b64encode(b"root:root").decode()}
APP = {
    "appName": "demo_app",
    "appURL": "http://example.invalid/demo.tar.gz",
    "bootstrapScript": "bin/start.sh",
    "cpuCount": 0.5,
    "memoryMB": 64,
}


def _client(zk: KazooClient, namespace: str, audit: AuditLog | None, mode: str) -> FlaskClient:
    registry = Registry(zk, namespace)
    registry.ensure("/ha/election")
    node = zk.create(registry.abs("/ha/election/n_"), b"me", ephemeral=True, sequence=True)
    settings = load_settings({}, {}, {"time_zone": "UTC", "audit_mode": mode})
    ctx = LeaderContext(settings, registry, Term(1, node, zk.client_id[0]), lambda app: None)
    return create_app(ctx, RecordedActions(), audit=audit).test_client()


def _timed(client: FlaskClient, method: str, path: str) -> float:
    start = time.perf_counter()
    answer = client.open(path, method=method, headers=ADMIN)
    elapsed = time.perf_counter() - start
    assert answer.status_code in (200, 204), (method, path, answer.status_code, answer.data)
    return elapsed


def _line(name: str, latencies: list[float]) -> None:
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    print(f"  {name:<34} p50 {statistics.median(ordered) * 1000:6.2f} ms  p99 {p99 * 1000:6.2f} ms")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="bench audit")
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        ensemble = ZooKeeperEnsemble(base / "zk", size=1)
        ensemble.start()
        zk = KazooClient(hosts=ensemble.hosts, timeout=10)
        zk.start(timeout=15)
        engine = create_trace_engine(f"sqlite:///{base}/trace.db")
        logs = [AuditLog(), AuditLog()]
        try:
            upgrade_to_head(engine)
            for log in logs:
                log.open(engine)
                log.start()
            namespace = f"bench-{uuid.uuid4().hex[:8]}"
            clients = {
                "no audit database": _client(zk, namespace, None, "best_effort"),
                "best_effort (SQLite)": _client(zk, namespace, logs[0], "best_effort"),
                "enforced (SQLite)": _client(zk, namespace, logs[1], "enforced"),
            }
            first = next(iter(clients.values()))
            assert first.post("/api/app", json=APP, headers=ADMIN).status_code == 204
            # A job of each API's own, so that each change changes something.
            jobs = {name: f"job_{n}" for n, name in enumerate(clients)}
            for job_name in jobs.values():
                job = job_body(job_name, appName="demo_app")
                assert first.post("/api/job/register", json=job, headers=ADMIN).status_code == 204
            writes: dict[str, list[float]] = {name: [] for name in clients}
            reads: dict[str, list[float]] = {name: [] for name in clients}
            for n in range(args.requests + 20):  # the first 20 warm up
                for name, client in clients.items():
                    verb = "disable" if n % 2 == 0 else "enable"
                    wrote = _timed(client, "POST", f"/api/job/{jobs[name]}/{verb}")
                    read = _timed(client, "GET", f"/api/job/jobs/{jobs[name]}")
                    if n >= 20:
                        writes[name].append(wrote)
                        reads[name].append(read)
            print(f"a change (job disable/enable), {args.requests} each, interleaved")
            for name, latencies in writes.items():
                _line(name, latencies)
            print(f"a read (GET a job), {args.requests} each")
            for name, latencies in reads.items():
                _line(name, latencies)
            written = sum(log.counters()["written"] for log in logs)
            print(
                f"  records written: {written}; write failures: {sum(log.failures for log in logs)}"
            )
        finally:
            for log in logs:
                log.stop(5.0)
            engine.dispose()
            zk.stop()
            zk.close()
            ensemble.stop()

"""Job registration benchmark: N `POST /api/job/register` to a real leader process on a real
ZooKeeper, one client, persistent connection. Prints registrations per second and latencies.

Run: `./dev.sh bench api [--jobs N]`.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

from deploy.zookeeper import ZooKeeperEnsemble
from tests.support.replicas import ReplicaProcess
from tests.support.waiting import wait_for

AUTH = "Basic " + base64.b64encode(b"root:root").decode()


def _post(conn: http.client.HTTPConnection, path: str, body: Mapping[str, object]) -> int:
    conn.request(
        "POST", path, json.dumps(body), {"Content-Type": "application/json", "Authorization": AUTH}
    )
    resp = conn.getresponse()
    resp.read()
    return resp.status


def run(jobs: int) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        zk = ZooKeeperEnsemble(base / "zk", size=1)
        zk.start()
        replica = ReplicaProcess(
            zk.hosts, base, zk_namespace=f"bench-{uuid.uuid4().hex[:8]}", log_level="WARNING"
        ).start()
        try:
            wait_for(replica.is_leader, 30, message="the replica leads")
            host, port = replica.identity.split(":")
            conn = http.client.HTTPConnection(host, int(port), timeout=10)
            app = {"appName": "bench_app", "appURL": "file:///x.tar.gz", "bootstrapScript": "b"}
            assert _post(conn, "/api/app", app) == 204
            latencies: list[float] = []
            for i in range(jobs):
                job = {
                    "jobName": f"job_{i:05d}",
                    "jobClass": "m:f",
                    "jobType": "SIMPLE",
                    "jobExecutionType": "TRANSIENT",
                    "cron": "0 0/5 * * * ?",
                    "shardingTotalCount": 3,
                    "appName": "bench_app",
                    "cpuCount": 0.1,
                    "memoryMB": 16,
                }
                began = time.perf_counter()
                status = _post(conn, "/api/job/register", job)
                latencies.append(time.perf_counter() - began)
                if status != 204:
                    raise RuntimeError(f"register answered {status}")
            conn.close()
            return latencies
        finally:
            replica.stop()
            zk.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=1000)
    args = parser.parse_args(argv)
    lat = run(args.jobs)
    ordered = sorted(lat)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    print(f"registered {len(lat)} jobs through the API: {len(lat) / sum(lat):.0f} per second")
    print(
        f"  latency p50 {statistics.median(lat) * 1000:.1f} ms  p99 {p99 * 1000:.1f} ms  "
        f"max {max(lat) * 1000:.1f} ms"
    )


if __name__ == "__main__":
    main()

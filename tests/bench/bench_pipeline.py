"""Pipeline benchmarks on a real ZooKeeper, the local Mesos stand-in and a replica process.

1. cron-fire-to-launch latency with idle resources: one 3-shard job firing every 2 s; the
   latency of a fire is from its scheduled second to the launcher's "launched" log line.
2. tasks launched per second when many 1-shard jobs fire at once (one cron shared by all).
3. leader start-up time with 10,000 registered jobs: from winning the election to every
   component started (the replica's own log lines).
4. (1) with the event trace off, on SQLite and on PostgreSQL (a server it starts itself).

Run: `./dev.sh bench pipeline [--fires N] [--jobs N] [--startup-jobs N] [--trace-only]`.
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import re
import statistics
import tarfile
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from deploy.zookeeper import ZooKeeperEnsemble
from tests.support.mesosfw import StandIn
from tests.support.replicas import ReplicaProcess

AUTH = "Basic " + base64.b64encode(b"root:root").decode()
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*launcher: launched (\d+) tasks")


def _post(replica: ReplicaProcess, path: str, body: object) -> None:
    req = urllib.request.Request(
        f"http://{replica.identity}{path}", data=json.dumps(body).encode(), method="POST"
    )
    req.add_header("Authorization", AUTH)
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=10) as resp:
        resp.read()


def _launches(replica: ReplicaProcess) -> list[tuple[float, int]]:
    out = []
    for line in replica.log_text().splitlines():
        m = _STAMP.match(line)
        if m:
            when = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            out.append((when, int(m.group(2))))
    return out


def _wait(predicate: Callable[[], object], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError("benchmark condition not reached")
        time.sleep(0.05)


def _app(base: Path) -> str:
    archive = base / "noop.tar.gz"
    (base / "noop.sh").write_text("#!/bin/sh\nexit 0\n")
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(base / "noop.sh", arcname="noop.sh")
    return str(archive)


def _job(name: str, cron: str, shards: int) -> dict[str, object]:
    return {
        "jobName": name,
        "appName": "bench",
        "jobType": "SCRIPT",
        "jobExecutionType": "TRANSIENT",
        "scriptCommandLine": "sh noop.sh",
        "cron": cron,
        "shardingTotalCount": shards,
        "cpuCount": 0.01,
        "memoryMB": 1,
    }


def _system(base: Path, zk: ZooKeeperEnsemble, **settings: Any) -> tuple[StandIn, ReplicaProcess]:
    mesos = StandIn(
        base / "mesos",
        "--agents",
        "2",
        "--resources",
        "cpus:64;mem:65536;disk:10240;ports:[31000-32000]",
    ).start()
    replica = ReplicaProcess(
        zk.hosts,
        base,
        zk_namespace=f"b-{uuid.uuid4().hex[:6]}",
        mesos_url=mesos.address,
        **settings,
    ).start()
    _wait(replica.is_leader, 30)
    _wait(lambda: (replica.health() or {}).get("mesos") == "connected", 30)
    _post(
        replica,
        "/api/app",
        {
            "appName": "bench",
            "appURL": _app(base),
            "bootstrapScript": "true",
            "cpuCount": 0.01,
            "memoryMB": 1,
        },
    )
    return mesos, replica


def _latencies(replica: ReplicaProcess, fires: int) -> list[float]:
    """Fire-to-launch latencies (ms, sorted) of `fires` fires of a 3-shard job every 2 s."""
    _post(replica, "/api/job/register", _job("lat", "0/2 * * * * ?", 3))
    _wait(lambda: len(_launches(replica)) >= fires + 1, fires * 2 + 30)
    lat = []
    for when, _n in _launches(replica)[1 : fires + 1]:
        fire = math.floor(when / 2) * 2  # the even second it fired at
        lat.append((when - fire) * 1000)
    return sorted(lat)


def _p99(lat: list[float]) -> float:
    return lat[min(len(lat) - 1, int(len(lat) * 0.99))]


def trace_on_off(base: Path, zk: ZooKeeperEnsemble, fires: int, rounds: int) -> None:
    """Fire-to-launch latency with the event trace off, on SQLite and on PostgreSQL.

    `rounds` rounds, the order of the three rotated each round, so warm-up and drift spread
    over all of them; each run is a fresh replica and stand-in.
    """
    from deploy.postgres import PostgresServer

    print(
        f"fire-to-launch latency with the trace off and on ({rounds} rounds of {fires} fires of "
        "a 3-shard job each):"
    )
    with PostgresServer(base / "postgres") as postgres:
        configs = [
            ("off", "none"),
            ("sqlite", f"sqlite:///{base / 'trace.db'}"),
            ("postgresql", postgres.create_database("bench")),
        ]
        results: dict[str, list[float]] = {name: [] for name, _url in configs}
        for round_ in range(rounds):
            for name, url in configs[round_ % 3 :] + configs[: round_ % 3]:
                run = base / f"trace-{name}-{round_}"
                run.mkdir()
                mesos, replica = _system(run, zk, event_trace_rdb_url=url)
                try:
                    results[name] += _latencies(replica, fires)
                finally:
                    replica.stop()
                    mesos.stop()
    base_mean = statistics.fmean(results["off"])
    for name, lat in results.items():
        lat.sort()
        mean = statistics.fmean(lat)
        growth = (
            "" if name == "off" else f"  mean {100 * (mean - base_mean) / base_mean:+.1f}% vs off"
        )
        print(
            f"  {name:<10} mean {mean:.1f} ms  p50 {statistics.median(lat):.0f} ms  "
            f"p99 {_p99(lat):.0f} ms  max {max(lat):.0f} ms{growth}"
        )


def latency_and_throughput(base: Path, zk: ZooKeeperEnsemble, fires: int, jobs: int) -> None:
    mesos, replica = _system(base, zk)
    try:
        lat = _latencies(replica, fires)
        print(f"fire-to-launch latency, {len(lat)} fires of a 3-shard job, idle resources:")
        print(
            f"  p50 {statistics.median(lat):.0f} ms  p99 {_p99(lat):.0f} ms  max {max(lat):.0f} ms"
        )
        req = urllib.request.Request(
            f"http://{replica.identity}/api/job/lat/disable", method="POST"
        )
        req.add_header("Authorization", AUTH)
        urllib.request.urlopen(req, timeout=10).read()
        # Many jobs on one cron, far enough ahead to register them all first.
        start_at = time.time() + 10 + jobs * 0.01
        second = math.ceil(start_at) % 60
        minute = "*"
        before = len(_launches(replica))
        for i in range(jobs):
            _post(
                replica, "/api/job/register", _job(f"many{i:04d}", f"{second} {minute} * * * ?", 1)
            )
        _wait(lambda: sum(n for _, n in _launches(replica)[before:]) >= jobs, 120)
        batch = _launches(replica)[before:]
        fire = math.floor(batch[0][0])
        took = batch[-1][0] - fire
        print(
            f"{jobs} one-shard jobs firing at once: all launched {took * 1000:.0f} ms "
            "after the fire "
            f"({jobs / took:.0f} tasks/s, {len(batch)} launch calls)"
        )
    finally:
        replica.stop()
        mesos.stop()


def startup(base: Path, zk: ZooKeeperEnsemble, count: int) -> None:
    namespace = f"s-{uuid.uuid4().hex[:6]}"
    client = KazooClient(hosts=zk.hosts)
    client.start()
    app = {
        "appName": "bench",
        "appURL": "file:///x.tar.gz",
        "bootstrapScript": "true",
        "cpuCount": 1.0,
        "memoryMB": 128.0,
        "appCacheEnable": True,
        "eventTraceSamplingCount": 0,
    }
    client.create(f"/{namespace}/config/app/bench", json.dumps(app).encode(), makepath=True)
    client.ensure_path(f"/{namespace}/config/job")
    began = time.monotonic()
    for i in range(0, count, 500):
        tx = client.transaction()
        for j in range(i, min(count, i + 500)):
            tx.create(
                f"/{namespace}/config/job/job{j:05d}",
                json.dumps(_job(f"job{j:05d}", "0 0 3 * * ?", 2)).encode(),
            )
        tx.commit()
    client.stop()
    client.close()
    print(f"wrote {count} jobs into ZooKeeper in {time.monotonic() - began:.1f} s")
    replica = ReplicaProcess(
        zk.hosts, base, zk_namespace=namespace, mesos_url="127.0.0.1:1"
    ).start()
    try:
        _wait(lambda: "started reconcile" in replica.log_text(), 120)
        stamps = {}
        for line in replica.log_text().splitlines():
            for key in ("won term", "started reconcile", "jobs loaded"):
                if key in line and key not in stamps:
                    stamps[key] = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        total = stamps["started reconcile"] - stamps["won term"]
        print(
            f"leader start-up with {count} jobs: {total:.2f} s from winning the election to every "
            f"component started ({stamps['jobs loaded'] - stamps['won term']:.2f} s to load and "
            "schedule the jobs)"
        )
    finally:
        replica.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fires", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--startup-jobs", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the trace comparison")
    parser.add_argument(
        "--trace-only",
        action="store_true",
        help="only compare the latency with the event trace off, on SQLite, on PostgreSQL",
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        zk = ZooKeeperEnsemble(base / "zk", size=1)
        zk.start()
        try:
            if not args.trace_only:
                latency_and_throughput(base, zk, args.fires, args.jobs)
                startup(base, zk, args.startup_jobs)
            trace_on_off(base, zk, args.fires, args.rounds)
        finally:
            zk.stop()


if __name__ == "__main__":
    main()

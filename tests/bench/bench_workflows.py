"""Workflow benchmarks (issue 27) on a real ZooKeeper, the local Mesos stand-in and a replica
process.

1. A workflow of 100 nodes in 10 layers of 10 (each node after 2 nodes of the layer before;
   one 1-shard SCRIPT job per node): for every node, the time from the end of its last parent
   (the parent's script's last line) to its own start (its script's first line), so the step of
   the run, the launch and the command task's start together; p50 and p99 over the 90 nodes
   that have parents, and the whole run's duration.
2. The leader's start with 1,000 registered workflows (each of 3 nodes, a cron far away):
   from winning the election to every component started, and to the workflows component
   started (the replica's own log lines).

Run: `./dev.sh bench workflows [--layers 10] [--width 10] [--startup-workflows 1000]`.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tarfile
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

from kazoo.client import KazooClient

from deploy.zookeeper import ZooKeeperEnsemble
from tests.e2e.pipeline_support import running_system
from tests.support.replicas import ReplicaProcess
from tests.support.waiting import wait_for

SCRIPT = """#!/bin/sh
echo "start $EJC_JOB_NAME $(date +%s.%N)" >> "{out}"
echo "end $EJC_JOB_NAME $(date +%s.%N)" >> "{out}"
"""


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def layered(base: Path, zk: ZooKeeperEnsemble, layers: int, width: int) -> None:
    namespace = f"w-{uuid.uuid4().hex[:6]}"
    with running_system(zk.hosts, namespace, base / "layered", replicas=1) as system:
        out = base / "layered.runs"
        src = base / "wf-src"
        src.mkdir()
        (src / "wf.sh").write_text(SCRIPT.format(out=out))
        archive = base / "wf.tar.gz"
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(src / "wf.sh", arcname="wf.sh")
        app = {
            "appName": "bench",
            "appURL": str(archive),
            "bootstrapScript": "true",
            "cpuCount": 0.1,
            "memoryMB": 32,
        }
        assert system.api("POST", "/api/app", app)[0] < 300
        rng = random.Random(27)
        nodes = []
        parents_of: dict[str, list[str]] = {}
        for layer in range(layers):
            for i in range(width):
                name = f"n{layer:02d}_{i:02d}"
                job = {
                    "jobName": name,
                    "appName": "bench",
                    "jobType": "SCRIPT",
                    "jobExecutionType": "TRANSIENT",
                    "scriptCommandLine": "sh wf.sh",
                    "cron": "",
                    "shardingTotalCount": 1,
                    "cpuCount": 0.1,
                    "memoryMB": 16,
                }
                assert system.api("POST", "/api/job/register", job)[0] < 300
                before = [f"n{layer - 1:02d}_{j:02d}" for j in range(width)] if layer else []
                parents = sorted(rng.sample(before, min(2, len(before))))
                parents_of[name] = parents
                nodes.append({"name": name, "job": name, "dependsOn": parents})
        body = {"workflowName": "layers", "appName": "bench", "nodes": nodes}
        status, answer = system.api("POST", "/api/workflow", body)
        assert status == 201, answer
        began = time.time()
        status, answer = system.api("POST", "/api/workflow/layers/trigger")
        assert status == 201, answer
        run_id = answer["runId"]

        def ended() -> dict[str, object] | None:
            got = system.api("GET", f"/api/workflow/layers/runs/{run_id}")[1]
            return got if got and got["state"] != "running" else None

        result = wait_for(ended, 600, interval_s=0.5, message="the layered run ended")
        assert result["state"] == "succeeded", result["state"]
        starts: dict[str, float] = {}
        ends: dict[str, float] = {}
        for line in out.read_text().splitlines():
            event, job_name, at = line.split()
            (starts if event == "start" else ends).setdefault(job_name, float(at))
        gaps = [
            starts[name] - max(ends[p] for p in parents)
            for name, parents in parents_of.items()
            if parents
        ]
        total = max(ends.values()) - began
        print(
            f"layered workflow ({layers} layers x {width} nodes, 1 shard each): parent's end to "
            f"child's start p50 {statistics.median(gaps) * 1000:.0f} ms, p99 "
            f"{_p(gaps, 0.99) * 1000:.0f} ms, max {max(gaps) * 1000:.0f} ms over {len(gaps)} "
            f"nodes; whole run {total:.1f} s from the trigger"
        )


def startup(base: Path, zk: ZooKeeperEnsemble, count: int) -> None:
    namespace = f"s-{uuid.uuid4().hex[:6]}"
    client = KazooClient(hosts=zk.hosts)
    client.start()
    client.ensure_path(f"/{namespace}/workflows/config")
    began = time.monotonic()
    for i in range(0, count, 200):
        tx = client.transaction()
        for j in range(i, min(count, i + 200)):
            name = f"wf{j:05d}"
            doc = {
                "workflowName": name,
                "appName": "bench",
                "cron": "0 0 3 1 1 ?",
                "misfire": False,
                "overlapPolicy": "FORBID",
                "failFast": False,
                "description": "",
                "nodes": [
                    {"name": "a", "job": "j", "dependsOn": [], "condition": "on_success"},
                    {"name": "b", "job": "j", "dependsOn": ["a"], "condition": "on_success"},
                    {"name": "c", "job": "j", "dependsOn": ["a", "b"], "condition": "on_done"},
                ],
            }
            tx.create(f"/{namespace}/workflows/config/{name}", json.dumps(doc).encode())
        tx.commit()
    client.stop()
    client.close()
    print(f"wrote {count} workflows into ZooKeeper in {time.monotonic() - began:.1f} s")
    replica = ReplicaProcess(zk.hosts, base, zk_namespace=namespace, mesos_url="127.0.0.1:1")
    replica.start()
    try:
        wait_for(lambda: "started reconcile" in replica.log_text(), 120, interval_s=0.2)
        stamps: dict[str, float] = {}
        for line in replica.log_text().splitlines():
            for key in ("won term", "started workflows", "started reconcile"):
                if key in line and key not in stamps:
                    stamps[key] = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        total = stamps["started reconcile"] - stamps["won term"]
        engine = stamps["started workflows"] - stamps["won term"]
        print(
            f"leader start-up with {count} workflows: {total:.2f} s from winning the election "
            f"to every component started (the workflows component started after {engine:.2f} s)"
        )
    finally:
        replica.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--layers", type=int, default=10)
    parser.add_argument("--width", type=int, default=10)
    parser.add_argument("--startup-workflows", type=int, default=1000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        zk = ZooKeeperEnsemble(base / "zk", size=1)
        zk.start()
        try:
            layered(base, zk, args.layers, args.width)
            startup(base, zk, args.startup_workflows)
        finally:
            zk.stop()


if __name__ == "__main__":
    main()

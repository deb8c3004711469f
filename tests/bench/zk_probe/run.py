"""Where the leader's ZooKeeper requests per launched task go (issue 29): a probe's breakdown.

Starts a ZooKeeper server, the local Mesos stand-in (one agent) and one replica whose kazoo
clients are counted by `probe.py` (loaded through a `sitecustomize.py` on its PYTHONPATH; no
product code changes), registers `--jobs` one-shard TRANSIENT SCRIPT jobs firing every second
(`* * * * * ?`, written straight into ZooKeeper as bench_scale's launch-cost part does), waits
until all are scheduled and `--warmup-s` more, then counts over `--seconds`:

- fires due (jobs x window), tasks launched (the stand-in's ACCEPT lines of our framework),
  fires that added no run (the leader's `ejc_job_fires_skipped_total` by outcome);
- every request the replica's kazoo clients sent in the window, and per launched task;
- the leader's CPU per launched task (utime + stime; inflated by the probe's own counting);
- the breakdown: the top `--top` rows by count (count, per task, type, path pattern, component).

The machine has 2 shared cores: every figure is an upper bound. `--json PATH` also writes the
whole window's rows.

Run: `.venv/bin/python -m tests.bench.zk_probe.run [--jobs 100] [--seconds 60] [--top 25]`.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from deploy.zookeeper import ZooKeeperEnsemble
from tests.bench import bench_launch, bench_scale, scale_launch
from tests.bench.bench_pipeline import _job, _wait
from tests.bench.scale_probes import count_scheduled, cpu_s, mntr, started_zookeeper
from tests.support.mesosfw import StandIn
from tests.support.replicas import ROOT, ReplicaProcess

_SITE = "from tests.bench.zk_probe.probe import install\n\ninstall()\n"
Rows = dict[tuple[str, str, str], tuple[int, int]]


def _system(
    base: Path, zk: ZooKeeperEnsemble, namespace: str, probe_dir: Path
) -> tuple[StandIn, ReplicaProcess]:
    """bench_launch._system with the probe on the replica's PYTHONPATH."""
    site = base / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_SITE)
    return bench_launch._system(
        base,
        zk,
        namespace,
        resources=bench_scale.RESOURCES,
        env={"PYTHONPATH": f"{site}:{ROOT}", "ZK_PROBE_DIR": str(probe_dir)},
    )


def _snapshot(probe_dir: Path, name: str) -> Rows:
    """Ask the probe for its counts now and read them."""
    answer = probe_dir / f"{name}.json"
    answer.unlink(missing_ok=True)
    (probe_dir / f"{name}.ask").touch()
    _wait(answer.exists, 10)
    data = json.loads(answer.read_text())
    return {
        (r["type"], r["path"], r["component"]): (int(r["count"]), int(r["ops"]))
        for r in data["rows"]
    }


def _diff(before: Rows, after: Rows) -> Rows:
    out = {}
    for key, (count, ops) in after.items():
        c0, o0 = before.get(key, (0, 0))
        if count - c0:
            out[key] = (count - c0, ops - o0)
    return out


def _launched(mesos: StandIn, framework: str) -> int:
    return sum(len(ids) for _, f, ids in scale_launch._accepts(mesos) if f == framework)


def _print_table(rows: Rows, launched: int, top: int) -> None:
    ordered = sorted(rows.items(), key=lambda kv: -kv[1][0])
    print(f"{'count':>7} {'/task':>6} {'ops/req':>7}  type | path pattern | component")
    for (kind, path, component), (count, ops) in ordered[:top]:
        per = count / launched if launched else math.inf
        print(f"{count:7d} {per:6.2f} {ops / count:7.1f}  {kind} | {path} | {component}")
    rest = ordered[top:]
    if rest:
        n = sum(c for _, (c, _) in rest)
        print(f"{n:7d} {n / max(launched, 1):6.2f}          ({len(rest)} more rows)")


def _by_type(rows: Rows, launched: int) -> None:
    kinds: dict[str, int] = {}
    for (kind, _, _), (count, _) in rows.items():
        kinds[kind] = kinds.get(kind, 0) + count
    print(
        "by type: "
        + ", ".join(
            f"{k} {v} ({v / max(launched, 1):.2f}/task)"
            for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])
        )
    )


def run(args: argparse.Namespace, base: Path) -> dict[str, Any]:
    probe_dir = base / "probe"
    probe_dir.mkdir()
    zk = started_zookeeper(base / "zk", args.zk_heap_mb)
    try:
        namespace = f"probe-{uuid.uuid4().hex[:6]}"
        mesos, replica = _system(base, zk, namespace, probe_dir)
        try:
            framework = bench_launch._framework_id(zk, namespace)
            bench_launch._write_jobs(
                zk, namespace, [_job(f"every{i:04d}", "* * * * * ?", 1) for i in range(args.jobs)]
            )
            _wait(lambda: count_scheduled(replica, "every") >= args.jobs, 120)
            time.sleep(args.warmup_s)  # past the first fires, which may meet the scheduling
            port = zk.servers[0].client_port
            before = _snapshot(probe_dir, "start")
            cpu0, packets0 = cpu_s(replica.pid), int(mntr(port)["zk_packets_received"])
            launched0, skipped0, at0 = (
                _launched(mesos, framework),
                scale_launch._skipped(replica),
                time.monotonic(),
            )
            time.sleep(args.seconds)  # the measured window
            after = _snapshot(probe_dir, "end")
            cpu1, packets1 = cpu_s(replica.pid), int(mntr(port)["zk_packets_received"])
            launched1, skipped1, at1 = (
                _launched(mesos, framework),
                scale_launch._skipped(replica),
                time.monotonic(),
            )
        finally:
            replica.stop()
            mesos.stop()
    finally:
        zk.stop()
    rows = _diff(before, after)
    launched = launched1 - launched0
    skipped = {k: v - skipped0.get(k, 0.0) for k, v in skipped1.items()}
    total = sum(c for c, _ in rows.values())
    window = at1 - at0
    per_task = total / launched if launched else math.inf
    cpu_ms = (cpu1 - cpu0) / launched * 1000 if launched else math.inf
    print(
        f"jobs {args.jobs}, window {window:.1f} s (2 shared cores: figures are upper bounds)\n"
        f"fires due {args.jobs * window:.0f}, tasks launched {launched}, fires with no run: "
        + (", ".join(f"{k} {v:.0f}" for k, v in sorted(skipped.items())) or "none")
        + f"\nrequests counted by the probe {total} = {per_task:.2f} per launched task; "
        f"ZooKeeper packets received (mntr, pings included) {packets1 - packets0} = "
        f"{(packets1 - packets0) / max(launched, 1):.2f} per task\n"
        f"leader CPU {cpu1 - cpu0:.1f} s = {cpu_ms:.2f} ms per launched task (probe included)",
        flush=True,
    )
    _by_type(rows, launched)
    _print_table(rows, launched, args.top)
    return {
        "jobs": args.jobs,
        "window_s": window,
        "launched": launched,
        "skipped": skipped,
        "requests": total,
        "packets": packets1 - packets0,
        "cpu_s": cpu1 - cpu0,
        "rows": [
            {"type": k[0], "path": k[1], "component": k[2], "count": c, "ops": o}
            for k, (c, o) in sorted(rows.items(), key=lambda kv: -kv[1][0])
        ],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=100, help="jobs firing every second")
    parser.add_argument("--seconds", type=float, default=60.0, help="the measured window")
    parser.add_argument("--warmup-s", type=float, default=3.0)
    parser.add_argument("--top", type=int, default=25, help="rows of the breakdown printed")
    parser.add_argument("--zk-heap-mb", type=int, default=1024)
    parser.add_argument("--json", type=Path, help="write every row of the window here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        result = run(args, Path(tmp))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

"""The launch path at the limit: burst throughput, fire-to-launch latency, leader start-up.

Every figure is taken from the Mesos side where it can be: the stand-in logs one line per
ACCEPT ("framework F: launched N task(s) on H"), written once the master holds the tasks in
TASK_STAGING; those lines' timestamps (ms) are the launch times below.

1. burst: N one-shard TRANSIENT SCRIPT jobs on one cron second (written straight into
   ZooKeeper, picked up by the leader's config listener, all scheduled before the second
   comes). Clock: from that cron second to the master's last launch of the N tasks. In the same
   run, on the same stand-in (one agent, `--resources`), before the burst: a bare pymesos
   framework given the same N command tasks (same app archive fetched and extracted, same
   command, same cpu and memory), which packs them into its first offer, once registered
   with `checkpoint` as the scheduler's framework is (the baseline: the stand-in's agent then
   writes the same checkpoint files for both, inside the ACCEPT) and once without. Its clock:
   from its first offer to the master's last launch. The rates and ratios are printed.
2. latency: one 1-shard job every 2 s on an idle cluster; a fire's latency is from its even
   second to the master's launch of its task; p50/p99/max over `--fires` fires.
3. startup: a leader started over `--startup-jobs` jobs written into ZooKeeper, each with the
   record of its last fire as a leader taking over finds it (daily jobs, last fired at the
   last 03:00 UTC, so none is due); from the replica's "won term" to "started reconcile"
   (every component started), and the replica's resident memory then (VmRSS, and its peak
   VmHWM, from /proc).

Run: `./dev.sh bench launch [--burst 500,5000] [--fires 40] [--startup-jobs 10000]
[--only burst|latency|startup] [--repeat N] [--schedule-margin-per-job S]`.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from deploy.zookeeper import ZooKeeperEnsemble
from scheduler.model.config.job import JobConfig
from tests.bench.bench_pipeline import _app, _job, _post, _wait
from tests.support.mesosfw import Framework, RecordingScheduler, StandIn, command_task
from tests.support.replicas import ReplicaProcess

RESOURCES = "cpus:64;mem:65536;disk:10240;ports:[31000-32000]"
TASK_CPUS = 0.01
TASK_MEM_MB = 1.0
_MASTER_LAUNCH = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*framework (\S+): launched (\d+) task\(s\)"
)
_SCHEDULED = re.compile(r"producer: job burst\d+ scheduled")
_STAMP = "%Y-%m-%d %H:%M:%S,%f"
Json = dict[str, Any]


def _stamp(text: str) -> float:
    return datetime.strptime(text, _STAMP).timestamp()


def master_launches(standin: StandIn, framework_id: str) -> list[tuple[float, int]]:
    """(wall time, tasks) of each ACCEPT of `framework_id` the stand-in's master logged."""
    text = standin.log_path.read_text(errors="replace") if standin.log_path.exists() else ""
    out = []
    for line in text.splitlines():
        m = _MASTER_LAUNCH.match(line)
        if m and m.group(2) == framework_id:
            out.append((_stamp(m.group(1)), int(m.group(3))))
    return out


def _launched(standin: StandIn, framework_id: str) -> int:
    return sum(n for _, n in master_launches(standin, framework_id))


class _TimedScheduler(RecordingScheduler):
    """Records the wall time of its first offer (the bare framework's clock start)."""

    first_offer_at: float = 0.0

    def resourceOffers(self, driver: Any, offers: list[Json]) -> None:
        if not self.first_offer_at:
            self.first_offer_at = time.time()
        super().resourceOffers(driver, offers)


def _system(
    base: Path,
    zk: ZooKeeperEnsemble,
    namespace: str,
    resources: str | None = None,
    env: dict[str, str] | None = None,
) -> tuple[StandIn, ReplicaProcess]:
    """The stand-in with one agent of `resources` (default RESOURCES) and a leader on it, with
    the app `bench` registered; `env` for the replica's process."""
    mesos = StandIn(base / "mesos", "--agents", "1", "--resources", resources or RESOURCES).start()
    replica = ReplicaProcess(
        zk.hosts, base, zk_namespace=namespace, mesos_url=mesos.address, env=env
    )
    replica.start()
    _wait(replica.is_leader, 60)
    _wait(lambda: (replica.health() or {}).get("mesos") == "connected", 60)
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


def _framework_id(zk: ZooKeeperEnsemble, namespace: str) -> str:
    client = KazooClient(hosts=zk.hosts)
    client.start()
    try:
        data, _ = client.get(f"/{namespace}/ha/framework_id")
        return str(data.decode())
    finally:
        client.stop()
        client.close()


def bare_framework(standin: StandIn, archive: str, count: int, checkpoint: bool = True) -> float:
    """Launch `count` command tasks like the jobs' with a bare pymesos framework; returns the
    seconds from its first offer to the master's last launch of them (tasks left to finish).
    `checkpoint`: the framework asks its agents to checkpoint, as the scheduler's does."""
    scheduler = _TimedScheduler(refuse_s=0.5)
    uri = {"value": archive, "cache": False, "extract": True, "executable": False}
    command = {"value": "sh noop.sh '{}'", "shell": True, "uris": [uri]}
    scheduler.launch(
        *(
            command_task(f"bare-{i}", "", TASK_CPUS, TASK_MEM_MB) | {"command": command}
            for i in range(count)
        )
    )
    framework = Framework(standin.address, scheduler, name="bench-bare", checkpoint=checkpoint)
    framework.start()
    try:
        _wait(lambda: _launched(standin, framework.id) >= count, 300)
        last = master_launches(standin, framework.id)[-1][0]
        took = last - scheduler.first_offer_at
        ended = ("TASK_FINISHED", "TASK_FAILED", "TASK_ERROR", "TASK_LOST", "TASK_KILLED")

        def finished() -> bool:
            with scheduler.cond:
                return sum(1 for u in scheduler.updates if u.state in ended) >= count

        _wait(finished, 600)  # resources back before the burst
    finally:
        framework.stop()
    return took


def _write_jobs(zk: ZooKeeperEnsemble, namespace: str, jobs: list[Json]) -> None:
    """`jobs` stored as the API stores them (every field written: a leader reads and parses
    the whole document, half as long again as the fields given alone)."""
    _write_nodes(
        zk,
        f"/{namespace}/config/job",
        {
            str(job["jobName"]): JobConfig.from_json(
                job, default_time_zone="UTC", strict=False
            ).to_bytes()
            for job in jobs
        },
    )


def _write_nodes(zk: ZooKeeperEnsemble, parent: str, nodes: dict[str, bytes]) -> None:
    client = KazooClient(hosts=zk.hosts)
    client.start()
    try:
        client.ensure_path(parent)
        items = list(nodes.items())
        for i in range(0, len(items), 200):
            tx = client.transaction()
            for name, data in items[i : i + 200]:
                tx.create(f"{parent}/{name}", data)
            tx.commit()
    finally:
        client.stop()
        client.close()


def burst(
    base: Path, zk: ZooKeeperEnsemble, count: int, margin_per_job_s: float
) -> tuple[float, float]:
    """Burst rates (ours, bare) for `count` jobs, in tasks per second; bare is the framework
    that checkpoints as ours does (the one without is printed too)."""
    namespace = f"burst-{uuid.uuid4().hex[:6]}"
    mesos, replica = _system(base, zk, namespace)
    try:
        archive = str(base / "noop.tar.gz")
        plain_s = bare_framework(mesos, archive, count, checkpoint=False)
        bare_s = bare_framework(mesos, archive, count, checkpoint=True)
        ours = _framework_id(zk, namespace)
        # A cron second far enough ahead for the leader to schedule every job first.
        fire = math.ceil(time.time() + 10 + count * margin_per_job_s)
        at = time.localtime(fire)
        cron = f"{at.tm_sec} {at.tm_min} {at.tm_hour} * * ?"
        names = [f"burst{i:05d}" for i in range(count)]
        _write_jobs(zk, namespace, [_job(name, cron, 1) for name in names])

        def scheduled() -> int:
            return len(_SCHEDULED.findall(replica.log_text()))

        try:
            _wait(lambda: scheduled() >= count, fire - time.time() - 0.5)
        except RuntimeError:
            raise RuntimeError(
                f"only {scheduled()} of {count} jobs scheduled before their fire; "
                "raise --schedule-margin-per-job"
            ) from None
        _wait(lambda: _launched(mesos, ours) >= count, 900)
        launches = master_launches(mesos, ours)
        took = launches[-1][0] - fire
        print(
            f"  burst of {count}: all launched {took:.2f} s after the fire second = "
            f"{count / took:.0f} launches/s (first {launches[0][0] - fire:.3f} s, "
            f"{len(launches)} ACCEPTs); bare pymesos, checkpointing as ours does, "
            f"{bare_s:.3f} s = {count / bare_s:.0f}/s: ratio {bare_s / took:.3f}; "
            f"without checkpointing {plain_s:.3f} s = {count / plain_s:.0f}/s: ratio "
            f"{plain_s / took:.3f}",
            flush=True,
        )
        return count / took, count / bare_s
    finally:
        replica.stop()
        mesos.stop()


def latency(base: Path, zk: ZooKeeperEnsemble, fires: int) -> list[float]:
    """Fire-to-launch latencies (ms, sorted) of a 1-shard job every 2 s on an idle cluster."""
    namespace = f"lat-{uuid.uuid4().hex[:6]}"
    mesos, replica = _system(base, zk, namespace)
    try:
        ours = _framework_id(zk, namespace)
        _post(replica, "/api/job/register", _job("lat", "0/2 * * * * ?", 1))
        # The first fire may come while the job is being scheduled: skipped.
        _wait(lambda: len(master_launches(mesos, ours)) >= fires + 1, fires * 2 + 60)
        lat = []
        for when, _n in master_launches(mesos, ours)[1 : fires + 1]:
            fire = math.floor(when / 2) * 2
            lat.append((when - fire) * 1000)
        lat.sort()
        print(
            f"  {len(lat)} fires: p50 {statistics.median(lat):.1f} ms  p99 {_p99(lat):.1f} ms  "
            f"max {max(lat):.1f} ms  min {min(lat):.1f} ms",
            flush=True,
        )
        return lat
    finally:
        replica.stop()
        mesos.stop()


def _p99(lat: list[float]) -> float:
    return lat[min(len(lat) - 1, math.ceil(len(lat) * 0.99) - 1)]


def _memory_kb(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def write_app(zk: ZooKeeperEnsemble, namespace: str) -> None:
    """The app `bench` of the start-up benchmarks, written straight into ZooKeeper."""
    app = {
        "appName": "bench",
        "appURL": "file:///x.tar.gz",
        "bootstrapScript": "true",
        "cpuCount": 1.0,
        "memoryMB": 128.0,
        "appCacheEnable": True,
        "eventTraceSamplingCount": 0,
    }
    client = KazooClient(hosts=zk.hosts)
    client.start()
    try:
        client.create(f"/{namespace}/config/app/bench", json.dumps(app).encode(), makepath=True)
    finally:
        client.stop()
        client.close()


def startup(base: Path, zk: ZooKeeperEnsemble, count: int) -> tuple[float, int]:
    """(seconds from "won term" to every component started, resident kB then)."""
    namespace = f"start-{uuid.uuid4().hex[:6]}"
    write_app(zk, namespace)
    _write_jobs(zk, namespace, [_job(f"job{j:05d}", "0 0 3 * * ?", 2) for j in range(count)])
    now = time.time()
    last_three = now - (now - 3 * 3600) % 86400  # the last 03:00 UTC
    record = f"{last_three:.3f}".encode()
    _write_nodes(zk, f"/{namespace}/state/last_fire", {f"job{j:05d}": record for j in range(count)})
    replica = ReplicaProcess(
        zk.hosts, base, zk_namespace=namespace, mesos_url="127.0.0.1:1"
    ).start()
    try:
        _wait(lambda: "started reconcile" in replica.log_text(), 900)
        memory = _memory_kb(replica.pid)
        stamps = {}
        for line in replica.log_text().splitlines():
            for key in ("won term", "started reconcile", "jobs loaded"):
                if key in line and key not in stamps:
                    stamps[key] = _stamp(line[:23])
        total = stamps["started reconcile"] - stamps["won term"]
        print(
            f"  start with {count} jobs: {total:.2f} s from 'won term' to 'started reconcile' "
            f"({stamps['jobs loaded'] - stamps['won term']:.2f} s to load and schedule the "
            f"jobs); RSS {memory['VmRSS'] / 1024:.0f} MB, peak {memory['VmHWM'] / 1024:.0f} MB",
            flush=True,
        )
        return total, memory["VmRSS"]
    finally:
        replica.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--burst", default="500,5000", help="burst sizes, comma-separated")
    parser.add_argument(
        "--schedule-margin-per-job",
        type=float,
        default=0.03,
        help="seconds per job between writing the burst's jobs and their fire",
    )
    parser.add_argument("--fires", type=int, default=40)
    parser.add_argument("--startup-jobs", type=int, default=10000)
    parser.add_argument("--only", choices=("burst", "latency", "startup"), action="append")
    parser.add_argument("--repeat", type=int, default=1, help="run each benchmark N times")
    args = parser.parse_args(argv)
    chosen = args.only or ["burst", "latency", "startup"]
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        zk = ZooKeeperEnsemble(base / "zk", size=1)
        zk.start()
        try:
            for run in range(args.repeat):
                print(f"run {run + 1} of {args.repeat}:", flush=True)
                if "burst" in chosen:
                    print(
                        "burst: N one-shard jobs on one cron second, fire second to the "
                        "master's last TASK_STAGING; bare pymesos, same tasks and stand-in, "
                        "first offer to the master's last launch:",
                        flush=True,
                    )
                    for n in (int(x) for x in args.burst.split(",")):
                        work = base / f"burst-{run}-{n}"
                        work.mkdir()
                        burst(work, zk, n, args.schedule_margin_per_job)
                if "latency" in chosen:
                    print(
                        "fire to launch, idle cluster, a 1-shard job every 2 s (even second "
                        "to the master's TASK_STAGING):",
                        flush=True,
                    )
                    work = base / f"latency-{run}"
                    work.mkdir()
                    latency(work, zk, args.fires)
                if "startup" in chosen:
                    print("leader start-up:", flush=True)
                    work = base / f"startup-{run}"
                    work.mkdir()
                    startup(work, zk, args.startup_jobs)
        finally:
            zk.stop()


if __name__ == "__main__":
    main()

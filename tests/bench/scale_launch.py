"""Parts 4-6 of the scale benchmark (`bench_scale`, whose docstring gives their method): the
cost of a launch at R fires a second, bursts on one cron second, fire-to-launch latency under
load. Each prints its figures against their goals through `scale_probes.verdict`."""

from __future__ import annotations

import http.client
import math
import re
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from deploy.zookeeper import ZooKeeperEnsemble
from tests.bench import bench_launch
from tests.bench.bench_pipeline import _job, _post, _wait
from tests.bench.bench_register import AUTH
from tests.bench.scale_probes import (
    count_scheduled,
    cpu_s,
    log_stamp,
    mntr,
    pct,
    verdict,
    zookeeper,
)
from tests.support.mesosfw import StandIn
from tests.support.replicas import ReplicaProcess, http_get

__all__ = ["bursts", "latency", "launch_cost"]

_ACCEPT = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) "
    r".*framework (\S+): launched \d+ task\(s\) on \S+: (.*)$"
)
_SKIPPED = re.compile(r'^ejc_job_fires_skipped_total\{.*outcome="([^"]+)"')


def _accepts(standin: StandIn) -> list[tuple[float, str, list[str]]]:
    """(wall time, framework id, task ids) of every ACCEPT the stand-in logged."""
    text = standin.log_path.read_text(errors="replace") if standin.log_path.exists() else ""
    out = []
    for line in text.splitlines():
        m = _ACCEPT.match(line)
        if m:
            out.append((log_stamp(m.group(1)), m.group(2), m.group(3).split()))
    return out


# -- 4: the cost of a launch ------------------------------------------------------------------


def _skipped(replica: ReplicaProcess, job: str | None = None) -> dict[str, float]:
    """Fires that added no run, by outcome: of every job, or of `job` alone."""
    out: dict[str, float] = {}
    for name, value in replica.metrics().items():
        m = _SKIPPED.match(name)
        if m and (job is None or f'job_name="{job}"' in name):
            out[m.group(1)] = out.get(m.group(1), 0.0) + value
    return out


@contextmanager
def _loaded(
    base: Path, heap_mb: int, prefix: str, jobs: list[dict[str, object]], timeout_s: float
) -> Iterator[tuple[ZooKeeperEnsemble, StandIn, ReplicaProcess, str]]:
    """ZooKeeper, the stand-in and a leader with `jobs` (named `prefix`...) written straight
    into ZooKeeper and all scheduled: (zk, stand-in, leader, our framework id); stopped after."""
    with zookeeper(base / "zk", heap_mb) as zk:
        namespace = f"{prefix}-{uuid.uuid4().hex[:6]}"
        mesos, replica = bench_launch._system(base, zk, namespace)
        try:
            framework = bench_launch._framework_id(zk, namespace)
            bench_launch._write_jobs(zk, namespace, jobs)
            _wait(lambda: count_scheduled(replica, prefix) >= len(jobs), timeout_s)
            yield zk, mesos, replica, framework
        finally:
            replica.stop()
            mesos.stop()


def launch_cost(base: Path, rate: int, window_s: float, heap_mb: int) -> None:
    jobs = [_job(f"every{i:04d}", "* * * * * ?", 1) for i in range(rate)]
    with _loaded(base, heap_mb, "every", jobs, 120) as (zk, mesos, replica, framework):
        time.sleep(3)  # past the first fires, which may come while jobs are scheduled
        port = zk.servers[0].client_port
        pid = replica.pid
        standin_pid = mesos.process.pid if mesos.process else pid
        standin_cpu0 = cpu_s(standin_pid)
        cpu0, packets0 = cpu_s(pid), int(mntr(port)["zk_packets_received"])
        launched0 = sum(len(ids) for _, f, ids in _accepts(mesos) if f == framework)
        skipped0, at0 = _skipped(replica), time.monotonic()
        time.sleep(window_s)  # the measured window
        cpu1, packets1 = cpu_s(pid), int(mntr(port)["zk_packets_received"])
        standin_cpu = cpu_s(standin_pid) - standin_cpu0
        launched1 = sum(len(ids) for _, f, ids in _accepts(mesos) if f == framework)
        skipped1, at1 = _skipped(replica), time.monotonic()
        launched = launched1 - launched0
        skipped = {k: v - skipped0.get(k, 0.0) for k, v in skipped1.items()}
        cpu = cpu1 - cpu0
        packets = packets1 - packets0
        per_task_ms = cpu / launched * 1000 if launched else math.inf
        per_task_zk = packets / launched if launched else math.inf
        note = (
            f"fires due {rate * (at1 - at0):.0f} over {at1 - at0:.0f} s, tasks launched "
            f"{launched}, fires with no run: "
            + (", ".join(f"{k} {v:.0f}" for k, v in sorted(skipped.items())) or "none")
            + f"; leader CPU {cpu:.1f} s ({cpu / (at1 - at0) * 100:.0f}% of a core), "
            f"the stand-in's own process {standin_cpu / (at1 - at0) * 100:.0f}%"
        )
        verdict(
            f"launch-cost[{rate}/s]",
            f"{per_task_ms:.2f} ms leader CPU per launched task",
            "< 1 ms",
            per_task_ms < 1,
            note,
        )
        verdict(
            f"launch-zk[{rate}/s]",
            f"{per_task_zk:.1f} ZooKeeper requests per launched task ({packets} packets)",
            "<= 3",
            per_task_zk <= 3,
        )


# -- 5: bursts --------------------------------------------------------------------------------


def bursts(base: Path, sizes: list[int], margin_s: float, heap_mb: int) -> None:
    """The first size (500) through bench_launch.burst with its bare-framework baseline; the
    larger ones alone (the bare framework's 10,000 tasks would take minutes to end first)."""
    with zookeeper(base / "zk", heap_mb) as zk:
        for i, n in enumerate(sizes):
            work = base / f"burst-{n}"
            work.mkdir()
            try:
                if i == 0:
                    ours, bare = bench_launch.burst(work, zk, n, margin_s)
                    verdict(
                        f"burst[{n}]",
                        f"{ours:.0f}/s vs bare pymesos (checkpointing) {bare:.0f}/s: ratio "
                        f"{ours / bare:.3f}",
                        ">= 0.6",
                        ours / bare >= 0.6,
                    )
                else:
                    took_s, first_s, accepts = _burst_alone(work, zk, n, margin_s)
                    verdict(
                        f"burst[{n}]",
                        f"all in TASK_STAGING {took_s:.2f} s after the cron second = "
                        f"{n / took_s:.0f}/s",
                        "within 5 s, >= 2,000/s",
                        took_s <= 5 and n / took_s >= 2000,
                        f"first launch at {first_s:.2f} s, {accepts} ACCEPTs",
                    )
            except Exception as exc:  # noqa: BLE001 - one size failing still lets the next run
                print(f"burst[{n}]: ERROR {type(exc).__name__}: {exc}", flush=True)


def _burst_alone(
    base: Path, zk: ZooKeeperEnsemble, count: int, margin_s: float
) -> tuple[float, float, int]:
    """bench_launch.burst's own half: `count` one-shard jobs on one cron second, far enough
    ahead for all to be scheduled; (fire second to the last launch, to the first, ACCEPTs)."""
    namespace = f"burst-{uuid.uuid4().hex[:6]}"
    mesos, replica = bench_launch._system(base, zk, namespace)
    try:
        ours = bench_launch._framework_id(zk, namespace)
        fire = math.ceil(time.time() + 10 + count * margin_s)
        at = time.localtime(fire)
        cron = f"{at.tm_sec} {at.tm_min} {at.tm_hour} * * ?"
        bench_launch._write_jobs(
            zk, namespace, [_job(f"burst{i:05d}", cron, 1) for i in range(count)]
        )
        try:
            _wait(lambda: count_scheduled(replica, "burst") >= count, fire - time.time() - 0.5)
        except RuntimeError:
            raise RuntimeError(
                f"only {count_scheduled(replica, 'burst')} of {count} jobs scheduled before "
                "their fire; raise --schedule-margin-per-job"
            ) from None

        def launched() -> int:
            return sum(n for _, n in bench_launch.master_launches(mesos, ours))

        _wait(lambda: launched() >= count, 300)
        launches = bench_launch.master_launches(mesos, ours)
        return launches[-1][0] - fire, launches[0][0] - fire, len(launches)
    finally:
        replica.stop()
        mesos.stop()


# -- 6: latency under load --------------------------------------------------------------------


def latency(
    base: Path, load_jobs: int, window_s: float, heap_mb: int, second0: bool, scrape_s: float
) -> None:
    jobs = [
        _job(f"load{i:05d}", f"{0 if second0 else i % 60} * * * * ?", 1) for i in range(load_jobs)
    ]
    with _loaded(base, heap_mb, "load", jobs, 600) as (_zk, mesos, replica, framework):
        _post(replica, "/api/job/register", _job("lat", "*/2 * * * * ?", 1))
        began = time.time()
        scrapes: list[float] = []
        if scrape_s > 0:
            _scraping(replica, scrape_s, began + window_s + 2, scrapes)
        time.sleep(window_s + 2)  # the measured window; then its last launch is logged
        # Read before the scrape below: rendering the metrics of 5,000 jobs takes the leader
        # about a second, and a fire meanwhile would be timed with the bench's own probe.
        accepts = _accepts(mesos)
        lat_skipped = _skipped(replica, "lat")
        lat = []
        total = 0
        for when, f, ids in accepts:
            if f == framework:
                total += len(ids)
            if f != framework or when < began + 2:  # the first fire may meet scheduling
                continue
            if any(task.startswith("lat@-@") for task in ids):
                lat.append((when - math.floor(when / 2) * 2) * 1000)
        p99 = pct(lat, 0.99) if lat else math.inf
        figure = (
            f"p99 {p99:.1f} ms, p50 {statistics.median(lat):.1f} ms, max {max(lat):.1f} ms "
            f"over {len(lat)} fires of the 2-s job"
            if lat
            else f"no launch of the 2-s job in {window_s:.0f} s"
        )
        verdict(
            "latency",
            figure,
            "p99 < 50 ms",
            p99 < 50,
            f"{load_jobs} jobs firing once a minute "
            + ("(all on second 0); " if second0 else "(job i on second i % 60); ")
            + f"{total} tasks launched since the start, {_ready_runs(replica)} runs in the "
            "ready queue at the end; the 2-s job's fires with no run: "
            + (", ".join(f"{k} {v:.0f}" for k, v in sorted(lat_skipped.items())) or "none")
            + (
                f"; /metrics read every {scrape_s:g} s, each in "
                + ", ".join(f"{t * 1000:.0f}" for t in scrapes)
                + " ms"
                if scrape_s > 0
                else ""
            ),
        )


def _scraping(replica: ReplicaProcess, every_s: float, until: float, took: list[float]) -> None:
    """Read the leader's /metrics every `every_s` until epoch `until` on a thread of its own,
    appending each read's time in seconds (request to the answer's last byte; inf: not 200)
    to `took`."""

    def scrape() -> None:
        while time.time() + every_s < until:
            time.sleep(every_s)
            started = time.monotonic()
            status, _, _ = http_get(f"http://{replica.identity}/metrics")
            took.append(time.monotonic() - started if status == 200 else math.inf)

    threading.Thread(target=scrape, name="bench-scrape", daemon=True).start()


def _ready_runs(replica: ReplicaProcess) -> str:
    """The ready queue's length (`X-Total-Count` of its first page), as text."""
    host, port = replica.identity.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("GET", "/api/job/tasks/ready?limit=1", headers={"Authorization": AUTH})
        resp = conn.getresponse()
        resp.read()
        return resp.getheader("X-Total-Count") or "?"
    finally:
        conn.close()

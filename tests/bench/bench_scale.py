"""The scheduler at scale (issue 29): start-up, memory and idle CPU over many jobs, the cost of a
launch, bursts, latency under load and paged lists, each figure printed against its goal.

Every part runs real processes on this machine: a ZooKeeper server of its own (Debian's, its
JVM given `--zk-heap-mb`), a leader (`python -m scheduler`, tests/support/replicas.py) and, where
tasks launch, the local Mesos stand-in with one agent (`bench_launch.RESOURCES`, raised here to
256 cpus so that 10,000 tasks of 0.01 cpu fit at once). Launch times are the stand-in's own log
lines, one per ACCEPT ("framework F: launched N task(s) on H: ids", written once the master
holds the tasks in TASK_STAGING). CPU is utime + stime of the leader's process from
/proc/PID/stat, memory its VmRSS from /proc/PID/status. The machine has 2 cores and runs other
work: every figure is an upper bound.

1. startup[N] (`--jobs`, default 10,000 and 100,000): N daily jobs (`0 0 3 * * ?`, 2 shards)
   written straight into ZooKeeper, each with the fire-ledger record a leader taking over finds
   (last fired at the last 03:00 UTC, so none is due), as bench_launch's start-up does; then a
   leader is started (no Mesos master: `127.0.0.1:1`, as there). Figure: from its "won term"
   log line to its last "leader: started <component>" line (every component started; the
   replica's health says leader once they have). Goal at 100k: < 5 s.
   takeover[N]: then a second replica is started as a standby; once it has parsed the jobs
   ahead (`standby_parse_ahead_minutes`: its "jobs parsed ahead" line, about 5 s after it
   became a standby) the leader is stopped, and the standby's start is measured the same way
   (the new leader of an HA deployment, where startup[N] is a lone replica's cold start).
2. rss[N]: the leader's VmRSS sampled every second from its process start to the end of the
   minute after its start (`--window-s`): the max. Goal at 100k: < 400 MB (MiB here).
3. idle-cpu[N]: the leader's CPU time over that minute divided by its wall time, and the same
   per tenth of the window (how the idle minute is shaped). Goal at 100k: < 5% of a core.
   zk-memory[N]: ZooKeeper's JVM with those jobs after the minute: `jcmd PID GC.run` then
   `GC.heap_info` (live heap), or its RSS when jcmd fails (the line says which), and its RSS.
4. launch-cost[R/s]: R one-shard TRANSIENT SCRIPT jobs (`sh noop.sh`) firing every second
   (`* * * * * ?`) on the stand-in, R = 10, 100, 300 (`--rates`). Once all are scheduled, over
   `--window-s`: the leader's CPU time divided by the tasks the stand-in logged as launched
   (goal < 1 ms per task), and ZooKeeper's `zk_packets_received` (`mntr`: every request of
   every client; the leader is the only client here, the stand-in uses no ZooKeeper) per
   launched task (goal <= 3). Also printed: the fires due (R x window), the tasks launched, and
   the fires that added no run from the leader's `ejc_job_fires_skipped_total` by outcome (a
   job still running when it fires again). The stand-in starts about 100 processes a second
   here, so at 300/s fewer tasks launch than fire.
5. burst: bench_launch.burst as it is: 500 jobs on one cron second against a bare pymesos
   framework's rate for the same tasks on the same stand-in, registered with `checkpoint` as
   ours is (goal ratio >= 0.6; the ratio to one without checkpointing is printed too); then 10,000
   (`--bursts`) the same way but without the bare framework (its 10,000 tasks would take
   minutes to end first): goal all in TASK_STAGING within 5 s of the cron second, >= 2,000/s.
6. latency: a 1-shard job every 2 s (`*/2 * * * * ?`) while `--load-jobs` (5,000) one-shard
   jobs fire once a minute each, job i on second i % 60; its fire-to-launch latency (the even
   second to the stand-in's ACCEPT line naming its task) over the window, p50/p99 (with fewer
   than 100 fires the p99 is the max). Goal p99 < 50 ms. `--load-second0`: the load jobs all
   on second 0 instead. `--scrape-every-s S`: the leader's /metrics read every S s through the
   window, as a Prometheus server would (each read's time printed). Also printed: the tasks
   launched, the ready queue's length at the end and the 2-s job's fires that added no run
   (its run still waiting).
7. lists (with the largest N of `--jobs`; on the leader of startup[N] when both run):
   `GET /api/job/jobs?limit=100` pages, one client on one connection, a walk from the first
   page through `nextCursor` then pages at random cursors (`paging.encode_cursor` of a random
   job name), `--list-requests` (200) in all: p50/p99, goal p99 < 50 ms. Then 4 concurrent
   clients each walking from a random cursor for `--window-s`: the leader's RSS before, its
   peak (VmHWM reset before) and after; goal: after - before < 16 MiB (no growth).

Each part prints `name: figure (goal ...) PASS|FAIL`; a part that fails to run prints ERROR
and the others still run. Every process started is stopped at the end of its part. Parts 4-6
are in scale_launch.py, the readings from /proc, ZooKeeper and the JVM in scale_probes.py.

Run: `./dev.sh bench scale [--jobs 10000,100000] [--only startup|launch|burst|latency|lists]
[--quick] [--window-s 60] [--rates 10,100,300] [--bursts 500,10000] [--load-jobs 5000]
[--load-second0] [--scrape-every-s S] [--zk-heap-mb 1024] [--keep-logs DIR]` (`--keep-logs`:
every process's log copied there at the end). `--quick`: 10,000 jobs, 20-s windows, bursts 500
and 2,000, 1,000 load jobs.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shutil
import statistics
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path

from deploy.zookeeper import ZooKeeperEnsemble
from scheduler.api.paging import encode_cursor
from tests.bench import bench_launch, scale_launch
from tests.bench.bench_list_memory import _reset_peak
from tests.bench.bench_pipeline import _job, _wait
from tests.bench.bench_register import AUTH
from tests.bench.scale_probes import (
    Sampler,
    hwm_kib,
    log_stamp,
    pct,
    rss_kib,
    verdict,
    zk_heap_kib,
    zookeeper,
)
from tests.support.replicas import ReplicaProcess

PARTS = ("startup", "launch", "burst", "latency", "lists")
# One agent big enough for a 10,000-task burst of 0.01 cpu and 1 MB each.
RESOURCES = "cpus:256;mem:262144;disk:10240;ports:[31000-32000]"


# -- 1-3 and 7: start-up, memory, idle CPU, lists ---------------------------------------------


def _write_daily_jobs(zk: ZooKeeperEnsemble, namespace: str, names: list[str]) -> None:
    """The app, `names` as daily jobs and their fire-ledger records, as bench_launch.startup."""
    bench_launch.write_app(zk, namespace)
    bench_launch._write_jobs(zk, namespace, [_job(name, "0 0 3 * * ?", 2) for name in names])
    now = time.time()
    record = f"{now - (now - 3 * 3600) % 86400:.3f}".encode()  # the last 03:00 UTC
    bench_launch._write_nodes(zk, f"/{namespace}/state/last_fire", dict.fromkeys(names, record))


def _start_seconds(replica: ReplicaProcess) -> tuple[float, float | None, str]:
    """(won term to the last component started, won term to 'jobs loaded', that component)."""
    won: float | None = None
    last: tuple[float, str] | None = None
    loaded: float | None = None
    for line in replica.log_text().splitlines():
        if " won term " in line and won is None:
            won = log_stamp(line)
        elif won is not None and "leader: started " in line:
            last = (log_stamp(line), line.split("leader: started ", 1)[1].split(" in ")[0])
        elif won is not None and loaded is None and "jobs loaded" in line:
            loaded = log_stamp(line)
    if won is None or last is None:
        raise RuntimeError("no 'won term' or 'leader: started' line in the replica's log")
    return last[0] - won, None if loaded is None else loaded - won, last[1]


def startup(base: Path, count: int, window_s: float, heap_mb: int, lists: ListsRun | None) -> None:
    """Parts 1-3 for `count` jobs, then `lists` on the same leader when given."""
    with zookeeper(base / "zk", heap_mb) as zk:
        namespace = f"scale-{uuid.uuid4().hex[:6]}"
        names = [f"job{j:06d}" for j in range(count)]
        began = time.monotonic()
        _write_daily_jobs(zk, namespace, names)
        print(
            f"  startup[{count}]: {count} jobs and their ledger records written into ZooKeeper "
            f"in {time.monotonic() - began:.0f} s",
            flush=True,
        )
        replica = ReplicaProcess(
            zk.hosts,
            base,
            zk_namespace=namespace,
            mesos_url="127.0.0.1:1",
            max_jobs=count + 100,
        ).start()
        sampler = Sampler(replica.pid).start()
        try:
            _wait(replica.is_leader, 900)
            start = sampler.sample()
            took_s, loaded_s, last = _start_seconds(replica)
            goal_s = 5.0
            verdict(
                f"startup[{count}]",
                f"{took_s:.2f} s from 'won term' to the last component started ({last})",
                f"< {goal_s:g} s at 100k",
                took_s < goal_s,
                "" if loaded_s is None else f"jobs loaded at {loaded_s:.2f} s",
            )
            time.sleep(window_s)  # the idle window, measured by the sampler
            end = sampler.sample()
            sampler.stop()
            cpu_pct = (end.cpu_s - start.cpu_s) / (end.at - start.at) * 100
            verdict(
                f"rss[{count}]",
                f"max {sampler.max_rss_kib() / 1024:.0f} MiB over start + {window_s:.0f} s "
                f"(at start {start.rss_kib / 1024:.0f}, at the end {end.rss_kib / 1024:.0f}, "
                f"VmHWM {hwm_kib(replica.pid) / 1024:.0f})",
                "< 400 MB at 100k",
                sampler.max_rss_kib() / 1024 < 400,
            )
            verdict(
                f"idle-cpu[{count}]",
                f"{cpu_pct:.1f}% of a core over the {end.at - start.at:.0f} s after the start",
                "< 5% at 100k",
                cpu_pct < 5,
                "per tenth: " + " ".join(f"{p:.0f}%" for p in _tenths(sampler, start.at)),
            )
            zk_pid = zk.servers[0].pid
            if zk_pid is not None:
                heap, what = zk_heap_kib(zk_pid)
                print(
                    f"zk-memory[{count}]: {heap / 1024:.0f} MiB {what}; JVM RSS "
                    f"{rss_kib(zk_pid) / 1024:.0f} MiB (-Xmx{heap_mb}m)",
                    flush=True,
                )
            if lists is not None:
                lists.run(replica, names)
            _takeover(zk, base, namespace, count, replica)
        finally:
            sampler.stop()
            replica.stop()


def _takeover(
    zk: ZooKeeperEnsemble, base: Path, namespace: str, count: int, leader: ReplicaProcess
) -> None:
    """takeover[N]: a second replica started as a standby, given the time to parse the jobs
    ahead (its 'jobs parsed ahead' line), then the leader stopped (SIGTERM): the standby's start
    from its 'won term' to its last component started, and its RSS after."""
    standby = ReplicaProcess(
        zk.hosts, base, zk_namespace=namespace, mesos_url="127.0.0.1:1", max_jobs=count + 100
    ).start()
    try:
        _wait(lambda: "jobs parsed ahead" in standby.log_text(), 900)
        leader.stop()
        _wait(standby.is_leader, 900)
        took_s, loaded_s, last = _start_seconds(standby)
        taken = next(
            (
                line.split("loaded (", 1)[1].split(")", 1)[0]
                for line in standby.log_text().splitlines()
                if "jobs loaded (" in line
            ),
            "?",
        )
        verdict(
            f"takeover[{count}]",
            f"{took_s:.2f} s from the standby's 'won term' to its last component started ({last})",
            "< 5 s at 100k",
            took_s < 5.0,
            f"jobs loaded at {loaded_s:.2f} s, {taken}; RSS after "
            f"{rss_kib(standby.pid) / 1024:.0f} MiB",
        )
    finally:
        standby.stop()


def _tenths(sampler: Sampler, from_at: float) -> list[float]:
    """CPU % of a core in each tenth of the samples taken after `from_at`."""
    samples = [s for s in sampler.samples if s.at >= from_at]
    if len(samples) < 11:
        return []
    step = (len(samples) - 1) / 10
    out = []
    for i in range(10):
        a, b = samples[round(i * step)], samples[round((i + 1) * step)]
        out.append((b.cpu_s - a.cpu_s) / max(b.at - a.at, 1e-9) * 100)
    return out


class ListsRun:
    """Part 7 on a leader that holds `names` (sorted) as jobs."""

    def __init__(self, requests: int, clients: int, walk_s: float) -> None:
        self.requests = requests
        self.clients = clients
        self.walk_s = walk_s

    def run(self, replica: ReplicaProcess, names: list[str]) -> None:
        host, port = replica.identity.split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        try:
            _get_page(conn, None)  # the credential's one hash, not measured
            latencies: list[float] = []
            cursor: str | None = None
            deadline = time.monotonic() + 300
            walk = self.requests // 4
            for n in range(self.requests):
                if time.monotonic() > deadline:
                    break
                if n >= walk or (cursor is None and n > 0):
                    cursor = encode_cursor("jobs", [random.choice(names)])
                sent = time.perf_counter()
                _, next_cursor = _get_page(conn, cursor)
                latencies.append((time.perf_counter() - sent) * 1000)
                cursor = next_cursor
        finally:
            conn.close()
        p99 = pct(latencies, 0.99)
        verdict(
            f"lists[{len(names)}]",
            f"p99 {p99:.1f} ms, p50 {statistics.median(latencies):.1f} ms, max "
            f"{max(latencies):.1f} ms over {len(latencies)} pages of 100 ({walk} walked by "
            "cursor, the rest at random cursors)",
            "p99 < 50 ms",
            p99 < 50,
        )
        self._concurrent(replica, host, int(port), names)

    def _concurrent(self, replica: ReplicaProcess, host: str, port: int, names: list[str]) -> None:
        pid = replica.pid
        reset = _reset_peak(pid)
        before = rss_kib(pid)
        pages: list[int] = []
        errors: list[str] = []
        deadline = time.monotonic() + self.walk_s

        def client() -> None:
            conn = http.client.HTTPConnection(host, port, timeout=60)
            count = 0
            try:
                cursor: str | None = encode_cursor("jobs", [random.choice(names)])
                while time.monotonic() < deadline:
                    _, cursor = _get_page(conn, cursor)
                    count += 1
                    if cursor is None:
                        cursor = encode_cursor("jobs", [random.choice(names)])
            except Exception as exc:  # noqa: BLE001 - a thread top: reported in the figures' line
                errors.append(f"{type(exc).__name__}: {exc}")
            finally:
                conn.close()
                pages.append(count)

        threads = [
            threading.Thread(target=client, name=f"bench-lists-{n}", daemon=True)
            for n in range(self.clients)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(self.walk_s + 120)
        after, peak = rss_kib(pid), hwm_kib(pid)
        growth = (after - before) / 1024
        verdict(
            f"lists-memory[{len(names)}]",
            f"RSS {before / 1024:.0f} MiB before, {'peak' if reset else 'peak so far'} "
            f"{peak / 1024:.0f}, {after / 1024:.0f} after ({growth:+.0f}) with {self.clients} "
            f"clients walking pages for {self.walk_s:.0f} s ({sum(pages)} pages)",
            "after - before < 16 MiB",
            growth < 16 and not errors,
            "; ".join(errors[:2]),
        )


def _get_page(conn: http.client.HTTPConnection, cursor: str | None) -> tuple[int, str | None]:
    path = "/api/job/jobs?limit=100" + (f"&cursor={cursor}" if cursor else "")
    conn.request("GET", path, headers={"Authorization": AUTH})
    resp = conn.getresponse()
    body = resp.read()
    if resp.status != 200:
        raise RuntimeError(f"GET {path} answered {resp.status}: {body[:200]!r}")
    page = json.loads(body)
    return len(page["items"]), page["nextCursor"]


# -- the command ------------------------------------------------------------------------------


def _part(name: str, run: Callable[[], None]) -> None:
    print(f"-- {name}", flush=True)
    began = time.monotonic()
    try:
        run()
    except Exception as exc:  # noqa: BLE001 - a broken part must not hide the others
        print(f"{name}: ERROR {type(exc).__name__}: {exc}", flush=True)
        traceback.print_exc()
    print(f"   ({name} took {time.monotonic() - began:.0f} s)", flush=True)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", help="job counts of the start-up parts (10000,100000)")
    parser.add_argument("--only", action="append", help=f"parts: {', '.join(PARTS)}")
    parser.add_argument("--quick", action="store_true", help="smaller and shorter")
    parser.add_argument("--window-s", type=float, help="the measured minute (60; quick 20)")
    parser.add_argument("--rates", default="10,100,300", help="jobs firing every second")
    parser.add_argument("--bursts", help="burst sizes (500,10000; quick 500,2000)")
    parser.add_argument("--schedule-margin-per-job", type=float, default=0.015)
    parser.add_argument("--load-jobs", type=int, help="jobs firing every minute (5000)")
    parser.add_argument(
        "--load-second0", action="store_true", help="the load jobs all on second 0 (not i %% 60)"
    )
    parser.add_argument(
        "--scrape-every-s",
        type=float,
        default=0.0,
        help="latency: GET /metrics this often through the window, as Prometheus would (0: not)",
    )
    parser.add_argument("--list-requests", type=int, default=200)
    parser.add_argument("--list-clients", type=int, default=4)
    parser.add_argument("--zk-heap-mb", type=int, default=1024)
    parser.add_argument("--keep-logs", type=Path, help="copy every *.log of the run here")
    args = parser.parse_args(argv)
    chosen = {p.strip() for text in args.only or [",".join(PARTS)] for p in text.split(",")}
    unknown = chosen - set(PARTS)
    if unknown:
        parser.error(f"unknown part(s) {', '.join(sorted(unknown))}; choose from {PARTS}")
    jobs = _ints(args.jobs or ("10000" if args.quick else "10000,100000"))
    window_s = args.window_s or (20.0 if args.quick else 60.0)
    burst_sizes = _ints(args.bursts or ("500,2000" if args.quick else "500,10000"))
    load_jobs = args.load_jobs or (1000 if args.quick else 5000)
    heap = args.zk_heap_mb
    # bench_launch's stand-in is sized for 5,000 tasks of 0.01 cpu; a 10,000 burst needs more.
    bench_launch.RESOURCES = RESOURCES
    lists = ListsRun(args.list_requests, args.list_clients, window_s)
    print(
        f"scale bench: parts {sorted(chosen)}, jobs {jobs}, window {window_s:g} s, "
        f"ZooKeeper -Xmx{heap}m; {os.cpu_count()} cores, shared: figures are upper bounds",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        try:
            _run_parts(base, args, chosen, jobs, window_s, burst_sizes, load_jobs, lists)
        finally:
            if args.keep_logs is not None:
                for log_file in base.rglob("*.log"):
                    target = args.keep_logs / log_file.relative_to(base)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(log_file, target)


def _run_parts(
    base: Path,
    args: argparse.Namespace,
    chosen: set[str],
    jobs: list[int],
    window_s: float,
    burst_sizes: list[int],
    load_jobs: int,
    lists: ListsRun,
) -> None:
    heap = args.zk_heap_mb

    def work(name: str) -> Path:
        path = base / name
        path.mkdir()
        return path

    if "startup" in chosen:
        for n in jobs:
            with_lists = lists if "lists" in chosen and n == max(jobs) else None
            _part(
                f"startup[{n}]",
                partial(startup, work(f"s{n}"), n, window_s, heap, with_lists),
            )
    elif "lists" in chosen:
        _part(
            f"lists[{max(jobs)}]",
            lambda: startup(work("lists"), max(jobs), 5.0, heap, lists),
        )
    if "launch" in chosen:
        for rate in _ints(args.rates):
            _part(
                f"launch-cost[{rate}/s]",
                partial(scale_launch.launch_cost, work(f"l{rate}"), rate, window_s, heap),
            )
    if "burst" in chosen:
        _part(
            "burst",
            lambda: scale_launch.bursts(
                work("burst"), burst_sizes, args.schedule_margin_per_job, heap
            ),
        )
    if "latency" in chosen:
        _part(
            "latency",
            lambda: scale_launch.latency(
                work("latency"), load_jobs, window_s, heap, args.load_second0, args.scrape_every_s
            ),
        )


if __name__ == "__main__":
    main()

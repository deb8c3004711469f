"""What every-second jobs cost the leader, with and without a fire budget (issue 23): N jobs
with the cron `* * * * * ?`, each in its own time zone (so each its own trigger), misfire on,
registered through the API of a real leader process on
a real ZooKeeper (no Mesos: their runs stay pending), then the leader's CPU time is read from
/proc over a window. Run once per budget (`max_fires_per_second`; 0 = none).

The issue's figure: 300 jobs firing every second cost half a core.

Run: `.venv/bin/python -m tests.bench fire_budget [--jobs 300] [--budgets 0,50] [--window 20]`
(`BENCH_TRACE=1`: with the default SQLite event trace, which gets a row per delayed fire).
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import tempfile
import time
import uuid
import zoneinfo
from pathlib import Path

from deploy.zookeeper import ZooKeeperEnsemble
from tests.support.replicas import ReplicaProcess
from tests.support.waiting import wait_for

AUTH = "Basic " + base64.b64encode(b"root:root").decode()
_TICKS = os.sysconf("SC_CLK_TCK")
TRACE = os.environ.get("BENCH_TRACE") == "1"  # the default SQLite event trace, else none


def _cpu_s(pid: int) -> float:
    """User and system CPU seconds of `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _post(conn: http.client.HTTPConnection, path: str, body: object) -> int:
    conn.request(
        "POST", path, json.dumps(body), {"Content-Type": "application/json", "Authorization": AUTH}
    )
    resp = conn.getresponse()
    resp.read()
    return resp.status


def _metric(identity: str, name: str) -> float:
    host, port = identity.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def run(jobs: int, budget: float, window_s: float) -> None:
    # A time zone each: every job its own cron trigger (jobs of one cron and zone are accounted
    # together, in one batch a fire, which would hide what each fire costs).
    zones = sorted(z for z in zoneinfo.available_timezones() if "/" in z and "Etc" not in z)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        zk = ZooKeeperEnsemble(base / "zk", size=1)
        zk.start()
        replica = ReplicaProcess(
            zk.hosts,
            base,
            zk_namespace=f"bench-{uuid.uuid4().hex[:8]}",
            log_level="WARNING",
            max_fires_per_second=budget,
            event_trace_rdb_url="" if TRACE else "none",
        ).start()
        try:
            wait_for(replica.is_leader, 30, message="the replica leads")
            host, port = replica.identity.split(":")
            conn = http.client.HTTPConnection(host, int(port), timeout=10)
            app = {"appName": "bench_app", "appURL": "file:///x.tar.gz", "bootstrapScript": "b"}
            assert _post(conn, "/api/app", app) == 204
            for i in range(jobs):
                job = {
                    "jobName": f"job_{i:05d}",
                    "jobClass": "m:f",
                    "jobType": "SIMPLE",
                    "jobExecutionType": "TRANSIENT",
                    "cron": "* * * * * ?",
                    "timeZone": zones[i % len(zones)],
                    "shardingTotalCount": 1,
                    "misfire": True,
                    "appName": "bench_app",
                    "cpuCount": 0.1,
                    "memoryMB": 16,
                }
                status = _post(conn, "/api/job/register", job)
                if status != 204:
                    raise RuntimeError(f"register answered {status}")
            conn.close()
            time.sleep(3)  # past the registrations' own cost
            pid = replica.pid
            cpu_before, wall_before = _cpu_s(pid), time.monotonic()
            delayed_before = _metric(replica.identity, "ejc_fires_delayed_total")
            time.sleep(window_s)
            cpu = _cpu_s(pid) - cpu_before
            wall = time.monotonic() - wall_before
            delayed = _metric(replica.identity, "ejc_fires_delayed_total") - delayed_before
            label = f"{budget:g}/s" if budget else "none"
            print(
                f"  budget {label:>6}: leader CPU {cpu / wall:.2f} cores over {wall:.0f} s; "
                f"fires delayed {delayed / wall:.0f}/s (demand {jobs}/s)"
            )
        finally:
            replica.stop()
            zk.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--budgets", default="0,50")
    parser.add_argument("--window", type=float, default=20.0)
    args = parser.parse_args(argv)
    print(f"{args.jobs} jobs firing every second (misfire on, no Mesos: runs stay pending)")
    for budget in (float(b) for b in args.budgets.split(",")):
        run(args.jobs, budget, args.window)


if __name__ == "__main__":
    main()

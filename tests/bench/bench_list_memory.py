"""Memory of the leader while clients list big jobs (issue 23): N jobs of K KiB each (stored
JSON, answered as large; default 100, at most about 124: the bench's ZooKeeper, with a 256 MiB
heap, stalls near 50 MB of data)
registered through the API of a real leader process on a real ZooKeeper, then C
concurrent clients list them, unpaged (`GET /api/job/jobs`, the EJC array) and paged
(`?limit=100` walked to the end). Prints the leader's resident memory (VmRSS) before, its peak
(VmHWM, reset before each round where the kernel allows it, else the peak so far) and after.

The issue's figure before paging and streaming: four concurrent unpaged lists over 300 jobs of
~200 KiB took the leader from 140 to 530 MiB.

Run: `.venv/bin/python -m tests.bench list_memory [--jobs 300] [--clients 4] [--job-kib 100]`.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from deploy.zookeeper import ZooKeeperEnsemble
from tests.support.replicas import ReplicaProcess
from tests.support.waiting import wait_for

AUTH = "Basic " + base64.b64encode(b"root:root").decode()
GUEST = "Basic " + base64.b64encode(b"guest:guest").decode()
# Text that takes as many bytes stored (Gson) as answered (Flask): no '=', '<', '>', '&' or '\''.
# Two fields of at most 64 KiB each (the model's bound per field) hold up to about 124 KiB.
_FIELD_MAX = 60 * 1024


def _status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of `pid` in KiB."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def _reset_peak(pid: int) -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0: write 5 to clear_refs); False if not
    allowed."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _request(
    conn: http.client.HTTPConnection, method: str, path: str, body: object = None
) -> tuple[int, bytes]:
    headers = {"Authorization": AUTH if method != "GET" else GUEST}
    data = None
    if body is not None:
        headers["Content-Type"] = "application/json"
        data = json.dumps(body)
    conn.request(method, path, data, headers)
    resp = conn.getresponse()
    return resp.status, resp.read()


def _list_unpaged(host: str, port: int, sizes: list[int]) -> None:
    conn = http.client.HTTPConnection(host, port, timeout=120)
    status, body = _request(conn, "GET", "/api/job/jobs")
    assert status == 200, status
    sizes.append(len(json.loads(body)))
    conn.close()


def _list_paged(host: str, port: int, sizes: list[int]) -> None:
    conn = http.client.HTTPConnection(host, port, timeout=120)
    cursor = ""
    count = 0
    while True:
        status, body = _request(conn, "GET", f"/api/job/jobs?limit=100&cursor={cursor}")
        assert status == 200, status
        page = json.loads(body)
        count += len(page["items"])
        if page["nextCursor"] is None:
            break
        cursor = page["nextCursor"]
    sizes.append(count)
    conn.close()


def _round(
    name: str,
    pid: int,
    host: str,
    port: int,
    clients: int,
    target: Callable[[str, int, list[int]], None],
) -> tuple[str, dict[str, int], dict[str, int], bool, float, list[int]]:
    reset = _reset_peak(pid)
    before = _status(pid)
    sizes: list[int] = []
    threads = [
        threading.Thread(target=target, args=(host, port, sizes), name=f"bench-list-{n}")
        for n in range(clients)
    ]
    began = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    elapsed = time.perf_counter() - began
    return name, before, _status(pid), reset, elapsed, sizes


def run(jobs: int, clients: int, job_kib: int) -> None:
    text = job_kib * 1024 - 1024  # the rest of the job takes about 1 KiB
    parameter = "x" * min(text, _FIELD_MAX)
    items = "0=" + "y" * max(0, min(text - _FIELD_MAX, _FIELD_MAX))
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        zk = ZooKeeperEnsemble(base / "zk", size=1)
        zk.start()
        replica = ReplicaProcess(
            zk.hosts,
            base,
            zk_namespace=f"bench-{uuid.uuid4().hex[:8]}",
            log_level="WARNING",
            max_job_bytes=262144,
            max_list_items=100000,
        ).start()
        try:
            wait_for(replica.is_leader, 30, message="the replica leads")
            host, port_text = replica.identity.split(":")
            port = int(port_text)
            conn = http.client.HTTPConnection(host, port, timeout=30)
            app = {"appName": "bench_app", "appURL": "file:///x.tar.gz", "bootstrapScript": "b"}
            assert _request(conn, "POST", "/api/app", app)[0] == 204
            for i in range(jobs):
                job = {
                    "jobName": f"job_{i:05d}",
                    "jobClass": "m:f",
                    "jobType": "SIMPLE",
                    "jobExecutionType": "TRANSIENT",
                    "cron": "0 0 0 1 1 ? 2099",
                    "shardingTotalCount": 1,
                    "jobParameter": parameter,
                    "shardingItemParameters": items,
                    "appName": "bench_app",
                    "cpuCount": 0.1,
                    "memoryMB": 16,
                }
                status, body = _request(conn, "POST", "/api/job/register", job)
                if status != 204:
                    raise RuntimeError(f"register #{i} answered {status}: {body[:200]!r}")
            status, one = _request(conn, "GET", "/api/job/jobs/job_00000")
            conn.close()
            print(
                f"{jobs} jobs of {len(one) / 1024:.0f} KiB (JSON answer; {job_kib} KiB stored), "
                f"{clients} concurrent clients"
            )
            pid = replica.pid
            time.sleep(2)  # the config listener's own reads of the new jobs settle
            for name, target in (("unpaged", _list_unpaged), ("paged 100", _list_paged)):
                for attempt in range(2):
                    label, before, after, reset, elapsed, sizes = _round(
                        name, pid, host, port, clients, target
                    )
                    peak = "peak" if reset else "peak so far (VmHWM not resettable)"
                    print(
                        f"  {label:<10} #{attempt + 1}: RSS {before['VmRSS'] / 1024:.0f} MiB "
                        f"before, {peak} {after['VmHWM'] / 1024:.0f} MiB "
                        f"(+{(after['VmHWM'] - before['VmRSS']) / 1024:.0f}), "
                        f"{after['VmRSS'] / 1024:.0f} MiB after; {elapsed:.1f} s; "
                        f"items per client {sorted(set(sizes))}"
                    )
        except BaseException:
            print("".join(replica.log_path.read_text().splitlines(True)[-40:]))
            raise
        finally:
            replica.stop()
            zk.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--job-kib", type=int, default=100)
    args = parser.parse_args(argv)
    run(args.jobs, args.clients, args.job_kib)


if __name__ == "__main__":
    main()

"""Measure a replica from a process of its own: `/health` latency and the replica's RSS.

`python -m tests.support.health_probe PORT PID MAX_S` polls `http://127.0.0.1:PORT/health` on a
fresh connection every 50 ms, reads VmRSS of PID each time, and stops when its stdin closes (or
after MAX_S seconds); it then prints one JSON object: `latencies_s`, `roles`, `rss_kb`.

A separate process, so the figures are the replica's and not the GIL contention of a test that
runs hundreds of client threads. `HealthProbe` starts it (a session of its own, dying with the
test) and collects the result.
"""

from __future__ import annotations

import http.client
import json
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy import children
from tests.support.parallel import ahead_of_the_suite

ROOT = Path(__file__).resolve().parents[2]
INTERVAL_S = 0.05


def _vm_rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _sample(port: int, pid: int, max_s: float) -> dict[str, list[Any]]:
    stop = threading.Event()

    def watch_stdin() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=watch_stdin, name="probe-stdin", daemon=True).start()
    out: dict[str, list[Any]] = {"latencies_s": [], "roles": [], "rss_kb": []}
    deadline = time.monotonic() + max_s
    while not stop.is_set() and time.monotonic() < deadline:
        started = time.monotonic()
        role = ""
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/health")
            body = conn.getresponse().read()
            conn.close()
            role = str(json.loads(body).get("role", ""))
        except (OSError, ValueError) as exc:
            role = f"error: {exc}"
        out["latencies_s"].append(time.monotonic() - started)
        out["roles"].append(role)
        out["rss_kb"].append(_vm_rss_kb(pid))
        stop.wait(INTERVAL_S)
    return out


@dataclass
class HealthProbe:
    """The probe process for one replica; `stop()` ends it and returns its samples."""

    port: int
    pid: int
    max_s: float = 120.0
    ahead: bool = False  # the probe's session `ahead_of_the_suite`, as its replica's should be
    proc: subprocess.Popen[str] | None = None
    result: dict[str, list[Any]] = field(default_factory=dict)

    def start(self) -> HealthProbe:
        self.proc = children.start(
            [
                sys.executable,
                "-m",
                "tests.support.health_probe",
                str(self.port),
                str(self.pid),
                str(self.max_s),
            ],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        if self.ahead:
            ahead_of_the_suite(self.proc.pid)
        return self

    def stop(self) -> dict[str, list[Any]]:
        """Close its stdin, wait for its figures (killed after 15 s), and return them."""
        if self.proc is None:
            return self.result
        try:
            out, _ = self.proc.communicate(timeout=15)
            self.result = json.loads(out)
        finally:
            children.stop(self.proc, signal.SIGKILL, 0)  # reaped; killed if still there
            self.proc = None
        return self.result

    def samples(self) -> int:
        return len(self.result.get("latencies_s", []))

    def p99_s(self) -> float:
        return self.quantile_s(0.99)

    def p50_s(self) -> float:
        return self.quantile_s(0.5)

    def quantile_s(self, q: float) -> float:
        ordered = sorted(self.result["latencies_s"])
        return float(ordered[int(q * (len(ordered) - 1))])


if __name__ == "__main__":
    figures = _sample(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]))
    print(json.dumps(figures))

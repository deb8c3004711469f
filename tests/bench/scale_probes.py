"""What the scale benchmark (`bench_scale`) reads from outside the processes it measures.

- A process's resident memory and CPU time from /proc (`rss_kib`, `hwm_kib`, `cpu_s`), and a
  `Sampler` thread that reads both every second into a list.
- ZooKeeper's own counters through its four-letter words (`mntr`; the bench's servers allow
  every word, `4lw.commands.whitelist=*` in deploy/zookeeper.py), and its JVM's live heap
  through `jcmd` (a full GC first, then `GC.heap_info`).
- A ZooKeeper server started with a heap of the bench's choosing (`ZooKeeperEnsemble.heap_mb`),
  and what the parts share: `verdict` (one figure's line against its goal), `pct`, `log_stamp`
  (a log line's time), `count_scheduled` (the producer's "scheduled" lines of a job prefix) and
  `zookeeper` (a started server, stopped on leaving).

Nothing here changes the code under test: every figure comes from /proc, the ZooKeeper server or
the JVM's tools.
"""

from __future__ import annotations

import math
import os
import re
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from deploy.zookeeper import ZooKeeperEnsemble
from tests.support.replicas import ReplicaProcess

__all__ = [
    "Sample",
    "Sampler",
    "count_scheduled",
    "cpu_s",
    "hwm_kib",
    "log_stamp",
    "mntr",
    "pct",
    "rss_kib",
    "started_zookeeper",
    "verdict",
    "zk_heap_kib",
    "zookeeper",
]

_TICKS = os.sysconf("SC_CLK_TCK")
_LOG_STAMP = "%Y-%m-%d %H:%M:%S,%f"
_HEAP_USED = re.compile(r"(?:generation|heap)\s+total (\d+)K, used (\d+)K")


def _status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name == key:
            return int(value.split()[0])
    return 0


def rss_kib(pid: int) -> int:
    """VmRSS of `pid` in KiB; raises OSError once it is gone."""
    return _status_kib(pid, "VmRSS")


def hwm_kib(pid: int) -> int:
    """VmHWM (peak resident memory) of `pid` in KiB."""
    return _status_kib(pid, "VmHWM")


def cpu_s(pid: int) -> float:
    """utime + stime of `pid` (all its threads) in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


@dataclass(frozen=True)
class Sample:
    at: float  # time.monotonic()
    rss_kib: int
    cpu_s: float


class Sampler:
    """Reads a process's RSS and CPU time every `interval_s` on the thread `bench-sampler`
    until `stop()`; a process that exits ends the sampling."""

    def __init__(self, pid: int, interval_s: float = 1.0) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)

    def sample(self) -> Sample:
        """One reading now (also called from the main thread at the window's edges)."""
        return Sample(time.monotonic(), rss_kib(self.pid), cpu_s(self.pid))

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append(self.sample())
            except OSError:
                return  # the process is gone
            self._stop.wait(self.interval_s)

    def max_rss_kib(self) -> int:
        return max((s.rss_kib for s in self.samples), default=0)


def mntr(port: int, timeout_s: float = 5.0) -> dict[str, str]:
    """ZooKeeper's `mntr` answer as a dict (e.g. `zk_packets_received`)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(b"mntr")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    out = {}
    for line in data.decode(errors="replace").splitlines():
        key, _, value = line.partition("\t")
        if value:
            out[key.strip()] = value.strip()
    return out


def zk_heap_kib(pid: int) -> tuple[int, str]:
    """(KiB, what it is) of the ZooKeeper JVM's memory: its live heap after a full GC through
    `jcmd`, or its VmRSS when jcmd fails (the text says which)."""
    try:
        subprocess.run(["jcmd", str(pid), "GC.run"], capture_output=True, timeout=60, check=True)
        info = subprocess.run(
            ["jcmd", str(pid), "GC.heap_info"],
            capture_output=True,
            timeout=60,
            check=True,
            text=True,
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return rss_kib(pid), f"JVM RSS (jcmd failed: {type(exc).__name__})"
    used = [int(m.group(2)) for m in _HEAP_USED.finditer(info)]
    if not used:
        return rss_kib(pid), "JVM RSS (jcmd's heap_info not understood)"
    return sum(used), "live heap after a full GC (jcmd GC.run, GC.heap_info)"


def started_zookeeper(base: Path, heap_mb: int) -> ZooKeeperEnsemble:
    """A standalone ZooKeeper in `base`, its JVM given `-Xmx{heap_mb}m`; started (blocks)."""
    zk = ZooKeeperEnsemble(base, size=1, heap_mb=heap_mb)
    try:
        zk.start()
    except BaseException:
        zk.stop()  # a member that started but never served
        raise
    return zk


# -- what the parts share --------------------------------------------------------------------


def verdict(name: str, figure: str, goal: str, ok: bool, note: str = "") -> None:
    """Print `name: figure (goal goal) PASS|FAIL[; note]`."""
    tail = f"; {note}" if note else ""
    print(f"{name}: {figure} (goal {goal}) {'PASS' if ok else 'FAIL'}{tail}", flush=True)


def pct(values: list[float], q: float) -> float:
    """The `q` quantile of `values` (nearest rank: the max below 1/(1-q) values)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(len(ordered) * q) - 1))]


def log_stamp(line: str) -> float:
    """The epoch time of a log line of ours (`2026-01-02 03:04:05,678 ...`)."""
    return datetime.strptime(line[:23], _LOG_STAMP).timestamp()


def count_scheduled(replica: ReplicaProcess, prefix: str) -> int:
    return len(re.findall(rf"producer: job {prefix}\d+ scheduled", replica.log_text()))


@contextmanager
def zookeeper(base: Path, heap_mb: int) -> Iterator[ZooKeeperEnsemble]:
    """A started standalone ZooKeeper (see `started_zookeeper`), stopped on leaving."""
    zk = started_zookeeper(base, heap_mb)
    try:
        yield zk
    finally:
        zk.stop()

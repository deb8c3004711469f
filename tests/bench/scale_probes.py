"""What the scale benchmark (`bench_scale`) reads from outside the processes it measures.

- A process's resident memory and CPU time from /proc (`rss_kib`, `hwm_kib`, `cpu_s`), and a
  `Sampler` thread that reads both every second into a list.
- ZooKeeper's own counters through its four-letter words (`mntr`; the bench's servers allow
  every word, `4lw.commands.whitelist=*` in deploy/zookeeper.py), and its JVM's live heap
  through `jcmd` (a full GC first, then `GC.heap_info`).
- A ZooKeeper server started with a heap of the bench's choosing (`ZooKeeperEnsemble.heap_mb`).

Nothing here changes the code under test: every figure comes from /proc, the ZooKeeper server or
the JVM's tools.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from deploy.zookeeper import ZooKeeperEnsemble

__all__ = [
    "Sample",
    "Sampler",
    "cpu_s",
    "hwm_kib",
    "mntr",
    "rss_kib",
    "started_zookeeper",
    "zk_heap_kib",
]

_TICKS = os.sysconf("SC_CLK_TCK")
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

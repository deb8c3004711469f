"""Run real ZooKeeper servers (Debian's `zookeeper` package) as child processes.

Used by the local cluster and by the test suite: a single server or an ensemble, each on free
loopback ports, with its data and log in a directory of the caller's. Each server runs in a
process group of its own and dies with the thread that started it (`deploy.children`).
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from deploy import children

log = logging.getLogger(__name__)

_JAR_DIR = Path("/usr/share/java")
# The server jar's manifest lists most of what it needs; slf4j-simple gives it a log to stderr.
_CLASSPATH_JARS = ("zookeeper.jar", "slf4j-simple.jar")


class ZooKeeperUnavailable(RuntimeError):
    """ZooKeeper or Java is not installed, or a server did not come up."""


_PORTS_LOCK = threading.Lock()
_PORTS_HANDED: set[int] = set()
_PORTS_RANDOM = random.Random()


def _ephemeral_low() -> int:
    """The first port of the kernel's range for outbound connections' local ends."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _worker_slice(low: int, high: int) -> tuple[int, int]:
    """This pytest-xdist worker's own part of [low, high), one part per worker (the whole
    range outside xdist): a port one worker handed out and whose server has not bound it yet
    is never handed out by another (a replica once failed to start on such a port)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    try:
        index = int(worker.removeprefix("gw"))
        count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    except ValueError:
        return low, high
    if not worker.startswith("gw") or count < 2 or not 0 <= index < count:
        return low, high
    size = (high - low) // count
    return low + index * size, low + (index + 1) * size


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, below the kernel's ephemeral range.

    A port of that range (what binding port 0 gives) can be taken by any outbound connection's
    local end while the server that had it is stopped: a ZooKeeper member restarted in a fault
    test found its client port so taken and exited. Ports below the range are only ever taken
    by a bind. Never the same port twice in one process; the random pick keeps parallel test
    workers apart, and the bind checks that the port is free now.
    """
    high = _ephemeral_low()
    low, high = _worker_slice(max(1024, high // 2), high)
    with _PORTS_LOCK:
        for _ in range(500):
            port = _PORTS_RANDOM.randrange(low, high)
            if port in _PORTS_HANDED:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _PORTS_HANDED.add(port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))  # the low range is full: any free port
        return int(sock.getsockname()[1])


def _classpath() -> str:
    missing = [jar for jar in _CLASSPATH_JARS if not (_JAR_DIR / jar).exists()]
    if missing:
        raise ZooKeeperUnavailable(
            f"missing {', '.join(missing)} in {_JAR_DIR}: install the Debian zookeeper package "
            "(./dev.sh setup does)"
        )
    return ":".join(str(_JAR_DIR / jar) for jar in _CLASSPATH_JARS)


def _served_data_dir(port: int, timeout_s: float = 1.0) -> Path | None:
    """The data directory of the server that serves clients on `port` (from `conf`), or None
    while nothing there serves (not listening, starting, or an ensemble member without quorum).
    """
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
            sock.sendall(b"conf")
            data = b""
            while chunk := sock.recv(4096):
                data += chunk
    except OSError:
        return None
    for line in data.decode(errors="replace").splitlines():
        if line.startswith("dataDir="):
            return Path(line.split("=", 1)[1].strip())
    return None


@dataclass
class ZooKeeperServer:
    """One ZooKeeper server process; in an ensemble, `peers` lists every member's ports."""

    data_dir: Path
    client_port: int = field(default_factory=free_port)
    server_id: int = 1
    peers: list[tuple[int, int, int]] = field(default_factory=list)  # (id, quorum, election)
    tick_ms: int = 500
    heap_mb: int = 256  # the JVM's -Xmx (benchmarks of 100,000 jobs want more)
    quick_start: bool = False
    """JIT with the client compiler only (C1): a server that lives minutes and serves light
    load (a test's) uses about a third less CPU (its first 4,000 requests: 2.2-2.35 s of CPU
    instead of 3.2-3.6 s), at a lower peak for a long-lived, loaded one (`./dev.sh run`, the
    benchmarks), which keep the default."""
    _proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "zookeeper.log"

    def _write_config(self) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "data").mkdir(exist_ok=True)
        lines = [
            f"tickTime={self.tick_ms}",
            f"dataDir={self.data_dir / 'data'}",
            f"clientPort={self.client_port}",
            "clientPortAddress=127.0.0.1",
            "initLimit=20",
            "syncLimit=10",
            # Sessions between 2 and 60 ticks: tests use short timeouts, users up to 30 s.
            f"minSessionTimeout={2 * self.tick_ms}",
            f"maxSessionTimeout={60 * self.tick_ms}",
            "maxClientCnxns=0",
            "admin.enableServer=false",
            "4lw.commands.whitelist=*",
            "autopurge.purgeInterval=1",
        ]
        if self.peers:
            (self.data_dir / "data" / "myid").write_text(f"{self.server_id}\n")
            for sid, quorum, election in self.peers:
                lines.append(f"server.{sid}=127.0.0.1:{quorum}:{election}")
        cfg = self.data_dir / "zoo.cfg"
        cfg.write_text("\n".join(lines) + "\n")
        return cfg

    def start(self, wait: bool = True, timeout_s: float = 60.0) -> None:
        """Start the server process; with `wait`, block until it serves clients.

        Raises ZooKeeperUnavailable (with the process stopped) when it exits, another server
        answers on its port, or it is not ready within `timeout_s`.
        """
        if self.running:
            return
        java = shutil.which("java")
        if java is None:
            raise ZooKeeperUnavailable("java is not installed")
        cfg = self._write_config()
        logfile = open(self.log_path, "ab")
        try:
            self._proc = children.start(
                [
                    java,
                    f"-Xmx{self.heap_mb}m",
                    "-XX:+UseSerialGC",
                    *(["-XX:TieredStopAtLevel=1"] if self.quick_start else []),
                    "-Dzookeeper.jmx.log4j.disable=true",
                    "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
                    "-cp",
                    _classpath(),
                    "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                    str(cfg),
                ],
                stdout=logfile,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        finally:
            logfile.close()
        log.info("zookeeper %s: started pid %s", self.address, self._proc.pid)
        if wait:
            try:
                self.wait_ready(timeout_s)
            except BaseException:
                self.stop()
                raise

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Block until this server serves clients.

        Raises ZooKeeperUnavailable when it exits, when another server answers on its port, or
        after `timeout_s`.
        """
        ours = (self.data_dir / "data").resolve()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise ZooKeeperUnavailable(
                    f"zookeeper {self.address} exited with {self._proc.returncode}; "
                    f"see {self.log_path}"
                )
            served = _served_data_dir(self.client_port)
            if served is not None:
                # ZooKeeper reports `<dataDir>/version-2`.
                if served.resolve().parent == ours:
                    return
                raise ZooKeeperUnavailable(
                    f"port {self.client_port} is served by another ZooKeeper (data in {served})"
                )
            time.sleep(0.05)
        raise ZooKeeperUnavailable(f"zookeeper {self.address} not ready in {timeout_s}s")

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the server (SIGTERM to its group, SIGKILL after `timeout_s`); blocks."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        children.stop(proc, signal.SIGTERM, timeout_s, whole_group=True)
        log.info("zookeeper %s: stopped", self.address)

    def kill(self) -> None:
        """SIGKILL the server's group, as a crash would (no clean close of its sessions or its
        ensemble links), and reap it; blocks. `start()` brings it back on the same ports and
        data."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        children.stop(proc, signal.SIGKILL, 5.0, whole_group=True)
        log.info("zookeeper %s: killed", self.address)

    def mode(self, timeout_s: float = 1.0) -> str | None:
        """What `srvr` says this server is: "leader", "follower", "standalone", or None while
        it does not serve (down, starting, or an ensemble member without quorum)."""
        try:
            with socket.create_connection(("127.0.0.1", self.client_port), timeout=timeout_s) as s:
                s.sendall(b"srvr")
                data = b""
                while chunk := s.recv(4096):
                    data += chunk
        except OSError:
            return None
        for line in data.decode(errors="replace").splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None


@dataclass
class ZooKeeperEnsemble:
    """`size` servers on loopback forming one ensemble (size 1 = standalone)."""

    base_dir: Path
    size: int = 1
    servers: list[ZooKeeperServer] = field(default_factory=list)
    heap_mb: int = 256
    quick_start: bool = False  # each server's (`ZooKeeperServer.quick_start`): for tests

    def __post_init__(self) -> None:
        if self.servers:
            return
        peers = (
            [(i + 1, free_port(), free_port()) for i in range(self.size)] if self.size > 1 else []
        )
        for i in range(self.size):
            self.servers.append(
                ZooKeeperServer(
                    self.base_dir / f"zk{i + 1}",
                    server_id=i + 1,
                    peers=peers,
                    heap_mb=self.heap_mb,
                    quick_start=self.quick_start,
                )
            )

    @property
    def hosts(self) -> str:
        """The client connection string, `127.0.0.1:p1,127.0.0.1:p2,...`."""
        return ",".join(s.address for s in self.servers)

    def start(self, timeout_s: float = 90.0) -> None:
        for server in self.servers:
            server.start(wait=False)
        for server in self.servers:
            server.wait_ready(timeout_s)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop every member (see `ZooKeeperServer.stop`); blocks."""
        for server in self.servers:
            server.stop(timeout_s)

    def leader(self) -> ZooKeeperServer | None:
        """The member the ensemble elected (a standalone server leads itself), or None while
        there is no quorum."""
        for server in self.servers:
            if server.mode() in ("leader", "standalone"):
                return server
        return None

    def followers(self) -> list[ZooKeeperServer]:
        """The members serving as followers now."""
        return [s for s in self.servers if s.mode() == "follower"]

    def wait_quorum(self, timeout_s: float = 60.0) -> ZooKeeperServer:
        """Block until every running member serves and one leads; returns the leader.

        Raises ZooKeeperUnavailable after `timeout_s`.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            running = [s for s in self.servers if s.running]
            modes = [s.mode() for s in running]
            if running and None not in modes:
                leader = self.leader()
                if leader is not None:
                    return leader
            time.sleep(0.1)
        raise ZooKeeperUnavailable(f"ensemble {self.hosts} has no quorum after {timeout_s}s")

"""`python -m deploy.cluster` (the README's `./dev.sh run`): the whole system on one machine.

Starts ZooKeeper (one server, or an ensemble with `--zk-servers 3`), the local Mesos stand-in and
scheduler replicas as child processes,
prints where each one listens and which replica leads, then shows a live view of what happens
until Ctrl-C, SIGTERM, SIGHUP (a closed terminal) or the death of its parent, when it stops
everything it started, in reverse order; a second signal hurries that up. The children die with
it even when it is SIGKILLed. State lives in `--data-dir`, so a restart continues where it
stopped.

Before starting anything it checks that every port it needs is free and that no other run uses
the data directory; if not, it names the port (and the process holding it) and exits 1.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any

from deploy import children
from deploy.demo import install_demo
from deploy.liveview import FollowedLog
from deploy.ports import describe_holder, holders, port_free
from deploy.zookeeper import (
    ZooKeeperEnsemble,
    ZooKeeperServer,
    ZooKeeperUnavailable,
    free_port,
)

ROOT = Path(__file__).resolve().parents[1]
_START_TIMEOUT_S = 60.0


class ClusterError(Exception):
    """The cluster cannot start; the message says why, for the user."""


def say(text: str, error: bool = False) -> None:
    """Print a line (to stderr with `error`); once the terminal is gone (SIGHUP), carry on
    without output."""
    try:
        print(text, flush=True, file=sys.stderr if error else sys.stdout)
    except OSError:
        # Later prints and the flush at exit would fail too (and turn the exit status into 120).
        devnull = open(os.devnull, "w")
        sys.stdout = sys.stderr = devnull


@dataclass
class Child:
    """A child process of the cluster: its own process group, dies with the cluster."""

    label: str
    args: list[str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    env: dict[str, str] | None = None  # added to this process's environment

    def start(self) -> None:
        env = None if self.env is None else {**os.environ, **self.env}
        with open(self.log_path, "ab") as out:
            self.proc = children.start(
                self.args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
            )

    def exit_code(self) -> int | None:
        """None while it runs (or was never started)."""
        return None if self.proc is None else self.proc.poll()

    def stop(self, hurry: threading.Event) -> None:
        if self.proc is not None:
            children.stop(self.proc, signal.SIGTERM, 15.0, hurry=hurry)

    def log_tail(self, lines: int = 5) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join("    " + line for line in text.splitlines()[-lines:])


def _health(address: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"http://{address}/health", timeout=1) as resp:
            body: dict[str, Any] = json.load(resp)
            return body
    except urllib.error.HTTPError as exc:  # 503 while it cannot act: still its answer
        try:
            answer: dict[str, Any] = json.load(exc)
            return answer
        except ValueError:
            return None
    except (OSError, ValueError):
        return None


@dataclass
class LocalCluster:
    data_dir: Path
    http_ports: list[int]
    agents: int = 2
    zk_port: int = 2181
    mesos_port: int = 5050
    with_mesos: bool = True
    zk_servers: int = 1
    zookeeper: ZooKeeperEnsemble | None = None
    mesos: Child | None = None
    replicas: list[Child] = field(default_factory=list)
    logs: list[FollowedLog] = field(default_factory=list)
    _lock_file: IO[str] | None = None

    @property
    def replica_addresses(self) -> list[str]:
        return [f"127.0.0.1:{port}" for port in self.http_ports]

    @property
    def zk_ports(self) -> list[int]:
        """The ZooKeeper servers' client ports: --zk-port and the ones after it."""
        return [self.zk_port + i for i in range(self.zk_servers)]

    def _ensemble(self) -> ZooKeeperEnsemble:
        """One server in `<data-dir>/zookeeper`, or an ensemble in `<data-dir>/zookeeper-N/zkI`
        (a different folder: a cluster run on 1 and on 3 servers keep separate states). The
        members' quorum and election ports are chosen free at each start."""
        if self.zk_servers == 1:
            server = ZooKeeperServer(self.data_dir / "zookeeper", client_port=self.zk_port)
            return ZooKeeperEnsemble(self.data_dir / "zookeeper", servers=[server])
        base = self.data_dir / f"zookeeper-{self.zk_servers}"
        peers = [(i + 1, free_port(), free_port()) for i in range(self.zk_servers)]
        servers = [
            ZooKeeperServer(base / f"zk{i + 1}", client_port=port, server_id=i + 1, peers=peers)
            for i, port in enumerate(self.zk_ports)
        ]
        return ZooKeeperEnsemble(base, size=self.zk_servers, servers=servers)

    def check_ports(self) -> None:
        """Raises ClusterError naming every port that is taken, and who holds it."""
        wanted = [
            (
                port,
                "ZooKeeper (--zk-port)"
                if i == 0
                else f"ZooKeeper server {i + 1} (--zk-port + {i})",
            )
            for i, port in enumerate(self.zk_ports)
        ]
        if self.with_mesos:
            wanted.append((self.mesos_port, "the local Mesos stand-in (--mesos-port)"))
        wanted += [
            (p, f"scheduler replica {i + 1} (--http-port)") for i, p in enumerate(self.http_ports)
        ]
        seen: dict[int, str] = {}
        problems = []
        for port, what in wanted:
            if port in seen:
                problems.append(f"port {port} is given to both {seen[port]} and {what}")
            elif not port_free(port):
                problems.append(f"port {port} for {what} is in use by {describe_holder(port)}")
            seen[port] = what
        if problems:
            raise ClusterError(
                "\n".join(problems) + "\nstop what holds it (an earlier ./dev.sh run?) or choose "
                "other ports: --zk-port, --mesos-port, --http-port or --http-ports"
            )

    def _lock_data_dir(self) -> None:
        """Take the data directory for this run; raises ClusterError when another run has it."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        lock = open(self.data_dir / "cluster.lock", "a+")  # held until stop()
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.seek(0)
            holder = lock.read().strip() or "unknown"
            lock.close()
            raise ClusterError(
                f"data directory {self.data_dir} is in use by another ./dev.sh run (pid {holder})"
                "; stop it or choose another --data-dir"
            ) from None
        lock.truncate(0)
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        self._lock_file = lock

    def start(self, stop: threading.Event) -> None:
        """Start everything, each part ready before the next; returns early once `stop` is set.

        Raises ClusterError (nothing is left running by it: call stop()) when a port is taken,
        the data directory is in use, or a part fails to come up.
        """
        self.check_ports()
        self._lock_data_dir()
        logs = self.data_dir / "logs"
        logs.mkdir(exist_ok=True)
        self.zookeeper = self._ensemble()
        try:
            self.zookeeper.start(timeout_s=_START_TIMEOUT_S)
        except ZooKeeperUnavailable as exc:
            raise ClusterError(f"ZooKeeper did not start: {exc}") from exc
        if self.zk_servers == 1:
            say(f"zookeeper     {self.zookeeper.hosts}")
        else:
            say(f"zookeeper     {self.zookeeper.hosts} ({self.zk_servers} servers)")
            for server in self.zookeeper.servers:
                say(
                    f"  server {server.server_id}    {server.address} pid {server.pid} "
                    f"{server.mode() or 'starting'}, log {server.log_path}"
                )
        mesos_url = f"127.0.0.1:{self.mesos_port}"
        if self.with_mesos:
            self.mesos = self._start_child(
                "mesos",
                [
                    *(sys.executable, "-m", "deploy.localmesos", "--port", str(self.mesos_port)),
                    *("--agents", str(self.agents), "--work-dir", str(self.data_dir / "mesos")),
                ],
                logs / "localmesos.log",
                "mesos",
            )
            self._wait(stop, self.mesos, "the local Mesos stand-in", self._mesos_ready)
            if stop.is_set():
                return
            say(f"local mesos   http://{mesos_url}/master/state ({self.agents} agents)")
        for address, port in zip(self.replica_addresses, self.http_ports, strict=True):
            args = [sys.executable, "-m", "scheduler", "--hostname", "127.0.0.1"]
            args += ["--http_bind_address", "127.0.0.1", "--http_port", str(port)]
            args += ["--zk_servers", self.zookeeper.hosts, "--mesos_url", mesos_url]
            args += ["--data_dir", str(self.data_dir)]
            # Tells the replicas they run in this local development cluster, where a missing
            # zk_digest is expected: they then do not warn about it
            # (scheduler/replica/startup_warnings.py believes it only while every ZooKeeper
            # server is on loopback).
            dev = {"EJCLOUD_DEV_CLUSTER": "1"}
            child = self._start_child(
                address, args, logs / f"scheduler-{port}.log", "replica", env=dev
            )
            self.replicas.append(child)
        for address, child in zip(self.replica_addresses, self.replicas, strict=True):
            self._wait(stop, child, f"scheduler replica {address}", self._replica_ready(address))
            if stop.is_set():
                return
            say(f"scheduler     http://{address}/health  http://{address}/api/...")
        say(f"logs          {logs}")

    def _start_child(
        self,
        label: str,
        args: list[str],
        log_path: Path,
        kind: str,
        env: dict[str, str] | None = None,
    ) -> Child:
        self.logs.append(FollowedLog.from_now(label, log_path, kind))
        child = Child(label, args, log_path, env=env)
        child.start()
        return child

    def _mesos_ready(self, child: Child) -> bool:
        followed = next(f for f in self.logs if f.label == "mesos")
        try:
            with open(child.log_path, "rb") as fh:
                fh.seek(followed.offset)
                return b"localmesos listening on" in fh.read()
        except OSError:
            return False

    @staticmethod
    def _replica_ready(address: str) -> Callable[[Child], bool]:
        port = int(address.rsplit(":", 1)[1])

        def ready(child: Child) -> bool:
            # It answers, and the answer is its own: it is the process that holds the port.
            return (
                _health(address) is not None
                and child.proc is not None
                and child.proc.pid in {pid for pid, _ in holders(port)}
            )

        return ready

    @staticmethod
    def _wait(
        stop: threading.Event, child: Child, what: str, ready: Callable[[Child], bool]
    ) -> None:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not stop.is_set():
            code = child.exit_code()
            if code is not None:
                raise ClusterError(
                    f"{what} exited with status {code} while starting; the end of "
                    f"{child.log_path}:\n{child.log_tail()}"
                )
            if ready(child):
                return
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"{what} did not come up in {_START_TIMEOUT_S:.0f} s; see {child.log_path}"
                )
            stop.wait(0.1)

    def leader(self) -> str | None:
        """The address of the replica of this cluster that leads, if one does."""
        for address, child in zip(self.replica_addresses, self.replicas, strict=True):
            health = _health(address)
            if health is not None and health.get("role") == "leader" and child.exit_code() is None:
                return address
        return None

    def install_demo(self, leader: str) -> None:
        """Register the demo app and job unless an earlier run did; show the job as it is."""
        say(install_demo(leader, self.data_dir))

    def follow(self, stop: threading.Event, parent_pid: int, demo_waits: bool = False) -> None:
        """Print the live view until `stop` is set or the parent process is gone. With
        `demo_waits` (no replica led within the start's time, on a loaded machine), the
        first leader is named and the demo registered once one leads."""
        reported: set[str] = set()
        while not stop.wait(0.5):
            if demo_waits:
                leader = self.leader()
                if leader is not None:
                    demo_waits = False
                    say(f"leader        {leader}")
                    self.install_demo(leader)
            events = []
            for followed in self.logs:
                events += [(key, t, followed.label, text) for key, t, text in followed.new_events()]
            for _, stamp, label, text in sorted(events, key=lambda e: e[0]):
                say(f"{stamp} {label:>15}  {text}")
            for child in ([self.mesos] if self.mesos else []) + self.replicas:
                code = child.exit_code()
                if code is not None and child.label not in reported:
                    reported.add(child.label)
                    stamp = time.strftime("%H:%M:%S")
                    say(f"{stamp} {child.label:>15}  exited with {code}; see {child.log_path}")
            if os.getppid() != parent_pid:
                say(f"{time.strftime('%H:%M:%S')} parent process gone")
                return

    def stop(self, hurry: threading.Event) -> None:
        """Stop what was started, in reverse order: schedulers first (they hand over and close
        their sessions), then Mesos, then ZooKeeper. Blocks; `hurry` cuts the waits short."""
        for child in reversed(self.replicas):
            child.stop(hurry)
        if self.mesos is not None:
            self.mesos.stop(hurry)
        if self.zookeeper is not None:
            self.zookeeper.stop(timeout_s=0.5 if hurry.is_set() else 10.0)
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None


def _http_ports(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[int]:
    if args.http_ports is None:
        return [args.http_port + i for i in range(args.replicas or 2)]
    try:
        ports = [int(p) for p in args.http_ports.split(",") if p.strip()]
    except ValueError:
        parser.error(f"--http-ports wants comma-separated port numbers, got {args.http_ports!r}")
    if args.replicas is not None and args.replicas != len(ports):
        parser.error(f"--replicas {args.replicas} but --http-ports lists {len(ports)} ports")
    return ports


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="./dev.sh run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--data-dir", type=Path, default=Path("data"), help="state and logs (default ./data)"
    )
    parser.add_argument("--replicas", type=int, default=None, help="scheduler replicas (default 2)")
    parser.add_argument("--agents", type=int, default=2, help="local Mesos agents (default 2)")
    parser.add_argument(
        "--zk-port", type=int, default=2181, help="first ZooKeeper server's client port"
    )
    parser.add_argument(
        "--zk-servers",
        type=int,
        default=1,
        choices=(1, 3, 5),
        help="ZooKeeper servers: 1 (default) or an ensemble of 3 or 5 on --zk-port and the ports "
        "after it (state kept apart from the single server's)",
    )
    parser.add_argument("--mesos-port", type=int, default=5050)
    parser.add_argument(
        "--http-port", type=int, default=8899, help="first replica's port; the next ones follow"
    )
    parser.add_argument(
        "--http-ports",
        default=None,
        metavar="P1,P2,...",
        help="each replica's port (instead of --http-port)",
    )
    parser.add_argument(
        "--no-mesos", action="store_true", help="do not start the local Mesos stand-in"
    )
    parser.add_argument(
        "--no-demo", action="store_true", help="do not register the demo app and job"
    )
    parser.add_argument(
        "--leader-wait-s",
        type=float,
        default=_START_TIMEOUT_S,
        help="how long to wait for a first leader before the live view starts; the leader is "
        f"named, and the demo registered, when one leads later (default {_START_TIMEOUT_S:g})",
    )
    args = parser.parse_args(argv)
    if not 0 <= args.leader_wait_s <= 3600:
        parser.error("--leader-wait-s must be between 0 and 3600")
    ports = _http_ports(args, parser)
    if not ports or args.agents < 1:
        parser.error("--replicas and --agents must be at least 1")
    zk_ports = [args.zk_port + i for i in range(args.zk_servers)]
    if any(not 1 <= p <= 65535 for p in [*ports, *zk_ports, args.mesos_port]):
        parser.error("ports must be between 1 and 65535")

    stop = threading.Event()
    hurry = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        (hurry if stop.is_set() else stop).set()

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, on_signal)
    # `./dev.sh run` execs this process, so its parent is the user's shell: when that dies, stop.
    parent_pid = os.getppid()
    children.set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != parent_pid:
        stop.set()

    cluster = LocalCluster(
        args.data_dir.resolve(),
        ports,
        args.agents,
        args.zk_port,
        args.mesos_port,
        with_mesos=not args.no_mesos,
        zk_servers=args.zk_servers,
    )
    code = 0
    try:
        cluster.start(stop)
        leader = None
        deadline = time.monotonic() + args.leader_wait_s
        while leader is None and not stop.is_set() and time.monotonic() < deadline:
            leader = cluster.leader()
            stop.wait(0.2)
        if not stop.is_set():
            with_demo = not args.no_demo and not args.no_mesos
            say(f"leader        {leader or 'none yet'}")
            if leader and with_demo:
                cluster.install_demo(leader)
            cluster.follow(stop, parent_pid, demo_waits=leader is None and with_demo)
    except ClusterError as exc:
        say(f"error: {exc}", error=True)
        code = 1
    finally:
        if code == 0:
            say("stopping ...")
        cluster.stop(hurry)
        if code == 0:
            say("stopped")
    return code


if __name__ == "__main__":
    sys.exit(main())

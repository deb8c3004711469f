"""`python -m deploy.cluster` (the README's `./dev.sh run`): the whole system on one machine.

Starts a ZooKeeper server, the local Mesos stand-in and scheduler replicas as child processes,
prints where each one listens and which replica leads, then follows what happens (leader
changes) until Ctrl-C or SIGTERM, when it stops everything it started, in reverse order.
State lives in `--data-dir`, so a restart continues where it stopped.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy.zookeeper import ZooKeeperServer

log = logging.getLogger("deploy.cluster")


@dataclass
class Child:
    """A child process of the cluster, stopped by its own pid."""

    name: str
    args: list[str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                self.args,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = 15.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            log.error(
                "%s (pid %s) did not stop in %ss; killing it", self.name, self.proc.pid, timeout_s
            )
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)


ROOT = Path(__file__).resolve().parents[1]
DEMO_DIR = ROOT / "examples" / "demo_app"
_AUTH = "Basic " + base64.b64encode(b"root:root").decode()
# Log lines worth showing in the live view: (pattern, how to show the match).
_VIEW = (
    (re.compile(r"leader: (\S+) won term (\d+)"), "leader {0} (term {1})"),
    (re.compile(r"launcher: launched (\d+) tasks on (\S+)"), "launched {0} task(s) on {1}"),
    (re.compile(r"status: (\S+?)@-@(\d+)@-@\S+ finished"), "finished {0} shard {1}"),
    (
        re.compile(r"status: (\S+?)@-@(\d+)@-@\S+ (TASK_\w+) \((\w*)\) ?(.*)"),
        "{2} {0} shard {1} {4}",
    ),
    (re.compile(r"status: (\S+?)@-@(\d+)@-@\S+ killed"), "killed {0} shard {1}"),
    (
        re.compile(r"status: shard (\d+) of (\S+) queued for failover"),
        "failover queued: {1} shard {0}",
    ),
    (re.compile(r"leader: term (\d+) ended \((.*)\)"), "term {0} ended: {1}"),
    (re.compile(r"missed its fire.*"), "{0}"),
)


def _api(address: str, method: str, path: str, body: Any) -> int:
    req = urllib.request.Request(
        f"http://{address}{path}", data=json.dumps(body).encode(), method=method
    )
    req.add_header("Authorization", _AUTH)
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _health(address: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"http://{address}/health", timeout=1) as resp:
            body: dict[str, Any] = json.load(resp)
            return body
    except (OSError, ValueError):
        return None


def _read_new(path: Path, offset: int) -> tuple[list[str], int]:
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except OSError:
        return [], offset
    end = data.rfind(b"\n") + 1
    return data[:end].decode(errors="replace").splitlines(), offset + end


def _view(line: str) -> str | None:
    for pattern, shape in _VIEW:
        m = pattern.search(line)
        if m:
            return shape.format(*(m.groups() or (m.group(0),)))
    return None


@dataclass
class LocalCluster:
    data_dir: Path
    replicas: int = 2
    agents: int = 2
    zk_port: int = 2181
    mesos_port: int = 5050
    http_port: int = 8899
    with_mesos: bool = True
    zookeeper: ZooKeeperServer | None = None
    children: list[Child] = field(default_factory=list)

    @property
    def replica_addresses(self) -> list[str]:
        return [f"127.0.0.1:{self.http_port + i}" for i in range(self.replicas)]

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        logs = self.data_dir / "logs"
        logs.mkdir(exist_ok=True)
        self.zookeeper = ZooKeeperServer(self.data_dir / "zookeeper", client_port=self.zk_port)
        self.zookeeper.start()
        print(f"zookeeper     {self.zookeeper.address}", flush=True)
        mesos_url = f"127.0.0.1:{self.mesos_port}"
        if self.with_mesos:
            mesos = Child(
                "localmesos",
                [
                    sys.executable,
                    "-m",
                    "deploy.localmesos",
                    "--port",
                    str(self.mesos_port),
                    "--agents",
                    str(self.agents),
                    "--work-dir",
                    str(self.data_dir / "mesos"),
                ],
                logs / "localmesos.log",
            )
            mesos.start()
            self.children.append(mesos)
            print(
                f"local mesos   http://{mesos_url}/master/state ({self.agents} agents)", flush=True
            )
        for address in self.replica_addresses:
            port = address.rsplit(":", 1)[1]
            child = Child(
                f"scheduler {address}",
                [
                    sys.executable,
                    "-m",
                    "scheduler",
                    "--hostname",
                    "127.0.0.1",
                    "--http_bind_address",
                    "127.0.0.1",
                    "--http_port",
                    port,
                    "--zk_servers",
                    self.zookeeper.address,
                    "--mesos_url",
                    mesos_url,
                    "--data_dir",
                    str(self.data_dir),
                ],
                logs / f"scheduler-{port}.log",
            )
            child.start()
            self.children.append(child)
            print(f"scheduler     http://{address}/health  http://{address}/api/...", flush=True)
        print(f"logs          {logs}", flush=True)

    def install_demo(self, leader: str) -> None:
        """Package examples/demo_app and register it with a SIMPLE job (3 shards, every 5 s)."""
        from executor.package import build_app_archive

        archive = build_app_archive(
            DEMO_DIR, self.data_dir / "demo_app.tar.gz", python=sys.executable
        )
        app = {
            "appName": "demo_app",
            "appURL": archive.app_url,
            "bootstrapScript": "bin/start.sh",
            "cpuCount": 0.1,
            "memoryMB": 64,
            "appCacheEnable": False,
        }
        job = {
            "jobName": "demo_job",
            "appName": "demo_app",
            "jobType": "SIMPLE",
            "jobClass": "demo.jobs:hello",
            "jobExecutionType": "TRANSIENT",
            "cron": "0/5 * * * * ?",
            "shardingTotalCount": 3,
            "shardingItemParameters": "0=red,1=green,2=blue",
            "cpuCount": 0.1,
            "memoryMB": 32,
            "failover": True,
        }
        for path, body in (("/api/app", app), ("/api/job/register", job)):
            status = _api(leader, "POST", path, body)
            if status not in (204, 409):  # 409: already there from an earlier start
                raise RuntimeError(f"registering the demo ({path}) answered {status}")
        print(
            f"demo          app demo_app ({archive.path}), job demo_job: 3 shards every 5 s",
            flush=True,
        )

    def leader(self) -> str | None:
        for address in self.replica_addresses:
            health = _health(address)
            if health and health.get("role") == "leader":
                return address
        return None

    def follow(self, stop: threading.Event) -> None:
        """Print a concise live view, read from the replicas' logs, until `stop` is set."""
        offsets = {
            c.name: c.log_path.stat().st_size if c.log_path.exists() else 0 for c in self.children
        }
        dead: set[str] = set()
        while not stop.wait(0.5):
            for child in self.children:
                if not child.name.startswith("scheduler"):
                    continue
                lines, offsets[child.name] = _read_new(child.log_path, offsets[child.name])
                for line in lines:
                    shown = _view(line)
                    if shown:
                        stamp = line[11:19] if len(line) > 19 else time.strftime("%H:%M:%S")
                        print(f"{stamp} {child.name.split()[1]:>15}  {shown}", flush=True)
            for child in self.children:
                if not child.alive() and child.name not in dead:
                    dead.add(child.name)
                    print(
                        f"{time.strftime('%H:%M:%S')} {child.name} exited; see {child.log_path}",
                        flush=True,
                    )

    def stop(self) -> None:
        # Schedulers first (they hand over and close their sessions), then Mesos, then ZooKeeper.
        for child in reversed(self.children):
            child.stop()
        if self.zookeeper is not None:
            self.zookeeper.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="./dev.sh run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--data-dir", type=Path, default=Path("data"), help="state and logs (default ./data)"
    )
    parser.add_argument("--replicas", type=int, default=2, help="scheduler replicas (default 2)")
    parser.add_argument("--agents", type=int, default=2, help="local Mesos agents (default 2)")
    parser.add_argument("--zk-port", type=int, default=2181)
    parser.add_argument("--mesos-port", type=int, default=5050)
    parser.add_argument(
        "--http-port", type=int, default=8899, help="first replica's port; the next ones follow"
    )
    parser.add_argument(
        "--no-mesos", action="store_true", help="do not start the local Mesos stand-in"
    )
    parser.add_argument(
        "--no-demo", action="store_true", help="do not register the demo app and job"
    )
    args = parser.parse_args(argv)
    if args.replicas < 1 or args.agents < 1:
        parser.error("--replicas and --agents must be at least 1")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    cluster = LocalCluster(
        args.data_dir.resolve(),
        args.replicas,
        args.agents,
        args.zk_port,
        args.mesos_port,
        args.http_port,
        with_mesos=not args.no_mesos,
    )
    try:
        cluster.start()
        leader = None
        deadline = time.monotonic() + 60
        while leader is None and not stop.is_set() and time.monotonic() < deadline:
            leader = cluster.leader()
            stop.wait(0.2)
        print(f"leader        {leader or 'none yet'}", flush=True)
        if leader and not args.no_demo and not args.no_mesos:
            cluster.install_demo(leader)
        cluster.follow(stop)
    finally:
        print("stopping ...", flush=True)
        cluster.stop()
        print("stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

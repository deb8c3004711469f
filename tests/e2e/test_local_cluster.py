"""`./dev.sh run` as a user runs it: the local cluster command, its demo, a leader crash, Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

from deploy.zookeeper import free_port
from tests.support.replicas import ROOT
from tests.support.waiting import wait_for


def descendants(pid: int) -> set[int]:
    """Every process below `pid` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def test_local_cluster_runs_the_demo_hands_over_and_stops_cleanly(tmp_path: Path) -> None:
    http_port = free_port()
    while free_port() == http_port + 1:
        pass
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "deploy.cluster",
            "--data-dir",
            str(tmp_path / "data"),
            "--zk-port",
            str(free_port()),
            "--mesos-port",
            str(free_port()),
            "--http-port",
            str(http_port),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        text = lambda: "\n".join(lines)  # noqa: E731
        wait_for(lambda: "demo          app demo_app" in text(), 90, message="demo registered")
        # The demo job runs on both agents.
        wait_for(
            lambda: (
                "on agent0.localmesos" in text()
                and "on agent1.localmesos" in text()
                and text().count("finished demo_job shard") >= 6
            ),
            60,
            message="demo runs on both agents",
        )
        leader_line = next(line for line in lines if line.startswith("leader "))
        leader = leader_line.split()[-1]
        with urllib.request.urlopen(f"http://{leader}/health", timeout=5) as resp:
            leader_pid = json.load(resp)["pid"]
        os.kill(leader_pid, signal.SIGKILL)
        other = (
            f"127.0.0.1:{http_port + 1}"
            if leader.endswith(str(http_port))
            else f"127.0.0.1:{http_port}"
        )

        def other_leads() -> bool:
            with urllib.request.urlopen(f"http://{other}/health", timeout=2) as resp:
                return bool(json.load(resp)["role"] == "leader")

        wait_for(other_leads, 40, message="the other replica takes over")
        seen = len(lines)
        wait_for(
            lambda: any("finished demo_job" in line for line in lines[seen:]),
            40,
            message="runs go on",
        )
        family = descendants(proc.pid)
        assert len(family) >= 4  # zookeeper, localmesos, a replica, executors
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
        wait_for(lambda: not [p for p in family if alive(p)], 20, message="no process left behind")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        reader.join(10)
        if proc.stdout is not None:
            proc.stdout.close()

"""`./dev.sh run` as a user runs it: the local cluster command, its demo and live view, a leader
crash, the ways it is stopped (Ctrl-C, SIGHUP, its parent's death), a second run on taken ports,
and a restart."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy import children
from tests.support.processes import live_pids
from tests.support.replicas import ROOT
from tests.support.waiting import wait_for

AUTH = "Basic " + base64.b64encode(b"root:root").decode()
# Stands between the test and a cluster, to see what the cluster does when its parent dies.
PARENT = "import subprocess, sys; sys.exit(subprocess.Popen(sys.argv[1:]).wait())"


def free_ports(count: int) -> list[int]:
    """`count` different TCP ports on 127.0.0.1 that were free a moment ago."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def processes_of(data_dir: Path) -> dict[int, str]:
    """Live processes whose command line or working directory is in `data_dir` (zombies left
    out): every process a cluster with that data directory started, executors included."""
    found: dict[int, str] = {}
    mark = str(data_dir)
    for pid in live_pids():
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:  # exited meanwhile
            continue
        cmdline = raw.replace(b"\0", b" ").decode(errors="replace")
        if mark in cmdline or cwd.startswith(mark):
            found[pid] = cmdline.strip()
    return found


def api(address: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://{address}{path}", data=data, method=method)
    req.add_header("Authorization", AUTH)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        exc.close()  # its unread answer holds the connection (a ResourceWarning when collected)
        return exc.code, None


def health(address: str) -> dict[str, Any]:
    """The full /health body (with credentials: without, it has no pid)."""
    req = urllib.request.Request(f"http://{address}/health", headers={"Authorization": AUTH})
    with urllib.request.urlopen(req, timeout=2) as resp:
        body: dict[str, Any] = json.load(resp)
        return body


class ClusterRun:
    """`python -m deploy.cluster` with its own ports and data directory; its output (stdout and
    stderr) is collected line by line. With `via_parent`, it runs under a small parent process
    (`parent_pid`) instead of directly under the test."""

    def __init__(self, data_dir: Path, ports: list[int], *extra: str, via_parent: bool = False):
        self.data_dir = data_dir
        self.zk_port, self.mesos_port, *self.http_ports = ports
        self.addresses = [f"127.0.0.1:{p}" for p in self.http_ports]
        command = [sys.executable, "-m", "deploy.cluster", "--data-dir", str(data_dir)]
        command += ["--zk-port", str(self.zk_port), "--mesos-port", str(self.mesos_port)]
        command += ["--http-ports", ",".join(map(str, self.http_ports)), *extra]
        if via_parent:
            command = [sys.executable, "-c", PARENT, *command]
        self.lines: list[str] = []
        self.proc = children.start(
            command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self._reader = threading.Thread(target=self._read, name="test-cluster-output")
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def text(self, since: int = 0) -> str:
        return "\n".join(self.lines[since:])

    def wait_for_output(self, pattern: str, timeout_s: float, since: int = 0) -> re.Match[str]:
        try:
            return wait_for(
                lambda: re.search(pattern, self.text(since)),
                timeout_s,
                message=f"output {pattern!r}",
            )
        except AssertionError as exc:
            tail = "\n".join(self.lines[-40:])
            raise AssertionError(f"{exc}; the output's last lines:\n{tail}") from exc

    def leader(self) -> str:
        """The address the banner names as leader."""
        return self.wait_for_output(r"(?m)^leader +(\S+)$", 90).group(1)

    def close(self) -> None:
        """Stop it (SIGTERM; SIGKILL to its group after 60 s) and collect the rest of its output."""
        children.stop(self.proc, signal.SIGTERM, 60)
        self._reader.join(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def runs() -> Iterator[list[ClusterRun]]:
    """Cluster runs of this test, stopped at its end whatever happened; and nothing of theirs
    may be left running."""
    started: list[ClusterRun] = []
    yield started
    for run in started:
        run.close()
    for run in started:
        assert_nothing_left(run.data_dir)


def _finishes(text: str) -> int:
    """Shards of the demo job the view shows finished (a line names each batch's tasks)."""
    return sum(line.count("demo_job shard") for line in re.findall(r"finished (.*)", text))


def assert_nothing_left(data_dir: Path) -> None:
    wait_for(lambda: not processes_of(data_dir), 20, message=f"no process of {data_dir} left")


def test_local_cluster_runs_the_demo_hands_over_shows_job_events_and_stops_cleanly(
    tmp_path: Path, runs: list[ClusterRun]
) -> None:
    run = ClusterRun(tmp_path / "data", free_ports(4))
    runs.append(run)
    run.wait_for_output(r"demo +app demo_app .*job demo_job: TRANSIENT SIMPLE, 3 shards", 90)
    # Launches name the job; the demo runs on both agents.
    run.wait_for_output(r"mesos  launched \d tasks? of demo_job on agent0\b", 60)
    run.wait_for_output(r"mesos  launched \d tasks? of demo_job on agent1\b", 60)
    wait_for(lambda: _finishes(run.text()) >= 6, 60, message="6 finishes")

    leader = run.leader()
    seen = len(run.lines)
    os.kill(health(leader)["pid"], signal.SIGKILL)
    other = next(a for a in run.addresses if a != leader)
    wait_for(lambda: health(other)["role"] == "leader", 40, message="the other replica leads")
    run.wait_for_output(rf"{re.escape(other)}  leader {re.escape(other)} \(term", 10, since=seen)
    run.wait_for_output(r"finished demo_job shard", 40, since=seen)

    # Job changes and a failing daemon job show in the live view.
    seen = len(run.lines)
    update = {"jobName": "demo_job", "cron": "0/3 * * * * ?"}
    assert api(other, "PUT", "/api/job/update", update)[0] == 204
    run.wait_for_output(r"updated demo_job", 20, since=seen)
    assert api(other, "POST", "/api/job/demo_job/disable")[0] == 204
    run.wait_for_output(r"disabled demo_job", 20, since=seen)
    assert api(other, "POST", "/api/job/demo_job/enable")[0] == 204
    run.wait_for_output(r"enabled demo_job", 20, since=seen)
    daemon = {
        "jobName": "failing_daemon",
        "appName": "demo_app",
        "jobType": "SIMPLE",
        "jobClass": "demo.jobs:hello",
        "jobExecutionType": "DAEMON",
        "cron": "0/2 * * * * ?",
        "shardingTotalCount": 1,
        "jobParameter": "fail",
        "cpuCount": 0.1,
        "memoryMB": 32,
    }
    assert api(other, "POST", "/api/job/register", daemon)[0] == 204
    run.wait_for_output(r"registered failing_daemon", 20, since=seen)
    run.wait_for_output(r"launched 1 task of failing_daemon on agent\d", 30, since=seen)
    run.wait_for_output(r"run failed: failing_daemon shard 0: .*asked to fail", 30, since=seen)

    family = processes_of(run.data_dir)
    assert len(family) >= 5, family  # zookeeper, localmesos, a replica, two executors
    run.proc.send_signal(signal.SIGINT)
    assert run.proc.wait(60) == 0
    run.wait_for_output(r"\nstopping \.\.\.\nstopped$", 10)
    assert_nothing_left(run.data_dir)


def test_sighup_stops_everything_and_a_second_run_on_taken_ports_starts_nothing(
    tmp_path: Path, runs: list[ClusterRun]
) -> None:
    ports = free_ports(4)
    first = ClusterRun(tmp_path / "first", ports)
    runs.append(first)
    first.wait_for_output(r"finished demo_job shard", 120)  # executors are running now
    family = processes_of(first.data_dir)
    assert len(family) >= 5, family

    second = ClusterRun(tmp_path / "second", ports)
    runs.append(second)
    assert second.proc.wait(30) != 0
    second.close()
    out = second.text()
    for port in ports:
        assert re.search(rf"port {port} for .* is in use by pid \d+", out), out
    assert not processes_of(second.data_dir)
    assert not (second.data_dir / "zookeeper").exists()  # not even a half start
    for address in first.addresses:
        assert health(address)["pid"] > 0  # the first run still serves
    first_lines = len(first.lines)
    first.wait_for_output(r"finished demo_job shard", 20, since=first_lines)

    first.proc.send_signal(signal.SIGHUP)
    assert first.proc.wait(60) == 0
    assert_nothing_left(first.data_dir)


def test_a_port_held_by_another_program_is_named_with_its_process(
    tmp_path: Path, runs: list[ClusterRun]
) -> None:
    ports = free_ports(4)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", ports[3]))
        holder.listen()
        run = ClusterRun(tmp_path / "data", ports)
        runs.append(run)
        assert run.proc.wait(30) == 1
    run.close()
    named = f"port {ports[3]} for scheduler replica 2 (--http-port) is in use by pid {os.getpid()}"
    assert named in run.text(), run.text()
    assert not run.data_dir.exists()  # nothing was started


def test_a_restart_shows_the_job_as_it_is_and_the_death_of_the_parent_stops_everything(
    tmp_path: Path, runs: list[ClusterRun]
) -> None:
    ports = free_ports(4)
    first = ClusterRun(tmp_path / "data", ports)
    runs.append(first)
    first.wait_for_output(r"demo +app demo_app", 90)
    leader = first.leader()
    update = {
        "jobName": "demo_job",
        "cron": "0/7 * * * * ?",
        "shardingTotalCount": 2,
        "shardingItemParameters": "0=red,1=green",
    }
    assert api(leader, "PUT", "/api/job/update", update)[0] == 204
    assert api(leader, "POST", "/api/job/demo_job/disable")[0] == 204
    first.proc.send_signal(signal.SIGTERM)
    assert first.proc.wait(60) == 0

    again = ClusterRun(tmp_path / "data", ports, via_parent=True)
    runs.append(again)
    again.wait_for_output(
        r"job demo_job: TRANSIENT SIMPLE, 2 shards, cron 0/7 \* \* \* \* \?, disabled", 90
    )
    assert len(processes_of(again.data_dir)) >= 4  # the cluster, zookeeper, mesos, replicas
    os.kill(again.proc.pid, signal.SIGKILL)  # the parent only; the cluster notices
    again.wait_for_output(r"\nstopped$", 60)
    assert_nothing_left(again.data_dir)


def test_a_sigkilled_cluster_takes_every_process_it_started_with_it(
    tmp_path: Path, runs: list[ClusterRun]
) -> None:
    run = ClusterRun(tmp_path / "data", free_ports(4))
    runs.append(run)
    run.wait_for_output(r"finished demo_job shard", 120)  # executors are running now
    executors = [cmd for cmd in processes_of(run.data_dir).values() if "-m executor" in cmd]
    assert executors
    run.proc.kill()
    assert_nothing_left(run.data_dir)


def test_a_leader_that_comes_after_the_wait_is_named_and_gets_the_demo(
    tmp_path: Path, runs: list[ClusterRun]
) -> None:
    """On a loaded machine the first election can outlast the start's wait: the live view
    starts, and the leader is named and the demo registered once one leads."""
    run = ClusterRun(tmp_path / "data", free_ports(4), "--leader-wait-s", "0")
    runs.append(run)
    run.wait_for_output(r"(?m)^leader +none yet$", 90)
    found = run.wait_for_output(r"(?m)^leader +(127\.0\.0\.1:\d+)$", 90)
    assert found.group(1) in run.addresses
    run.wait_for_output(r"demo +app demo_app", 90)
    status, body = api(found.group(1), "GET", "/api/job/jobs/demo_job")
    assert status == 200 and body["jobName"] == "demo_job"

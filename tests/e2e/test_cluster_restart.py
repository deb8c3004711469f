"""A restart of the whole local cluster, as `./dev.sh run` does one (issue 30): the scheduler
replica stopped, then the Mesos stand-in (which stops its agents and their executors), then both
started again on the same ZooKeeper namespace, port and work directory.

- An idle DAEMON task (waiting for its first run), gone with the cluster, is started again without a
  false failover: the master answers TASK_UNKNOWN "Reconciliation: Task is unknown" for it (as
  a real master does for a task no agent of it knows), and since no run of the daemon was going
  on, that is no failure (no failure counted, no back-off, no `run_failed`, no failed run in
  the metrics).
- The logs of runs from before the restart stay readable while their files are on disk: each
  agent keeps its id and lists the executor runs of its earlier life under
  `completed_frameworks`/`completed_executors` of its `/state`, as a Mesos agent restarted on
  its work_dir recovers them from its checkpoint.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from deploy.zookeeper import ZooKeeperEnsemble, free_port
from executor.package import build_app_archive
from tests.e2e.pipeline_support import AUTH
from tests.support.http import exchange
from tests.support.mesosfw import StandIn
from tests.support.replicas import ROOT, ReplicaProcess, http_get
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

NEVER = "0 0 0 1 1 ? 2099"
DEMO_APP = ROOT / "examples" / "demo_app"


def _api(replica: ReplicaProcess, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Authorization": AUTH}
    if data is not None:
        headers["Content-Type"] = "application/json"
    answer = exchange(method, f"http://{replica.identity}{path}", data=data, headers=headers)
    return answer.status, answer.json()


class _Cluster:
    """One stand-in (fixed port and work directory) and one replica, restartable."""

    def __init__(self, zk: ZooKeeperEnsemble, namespace: str, tmp: Path) -> None:
        self.zk, self.namespace, self.tmp = zk, namespace, tmp
        self.mesos_port = free_port()
        self.http_port = free_port()
        self.mesos: StandIn | None = None
        self.replica: ReplicaProcess | None = None
        self.lives = 0

    def start(self) -> ReplicaProcess:
        self.lives += 1
        self.mesos = StandIn(
            self.tmp, "--agents", "1", "--allocation-interval-seconds", "0.5",
            "--port", str(self.mesos_port),
        ).start()  # fmt: skip
        log_dir = self.tmp / f"life{self.lives}"
        log_dir.mkdir()
        self.replica = ReplicaProcess(
            self.zk.hosts,
            log_dir,
            zk_namespace=self.namespace,
            mesos_url=self.mesos.address,
            http_port=self.http_port,
            data_dir=self.tmp / "replica-data",  # its trace database, kept as ./dev.sh run does
            framework_failover_timeout_seconds=300,
        ).start()
        replica = self.replica
        wait_for(
            lambda: (replica.health() or {}).get("mesos") == "connected",
            40,
            message="the replica leading and connected to Mesos",
        )
        return replica

    def stop(self) -> None:
        """As the local cluster stops: the replica first, then the stand-in."""
        if self.replica is not None:
            self.replica.stop()
        if self.mesos is not None:
            self.mesos.stop()


def _running(replica: ReplicaProcess, job: str) -> list[dict[str, Any]]:
    status, body = _api(replica, "GET", "/api/job/tasks/running")
    assert status == 200, body
    return [t for t in body if t["metaInfo"]["jobName"] == job and t["state"] == "TASK_RUNNING"]


def _log(replica: ReplicaProcess, job: str, task_id: str) -> tuple[int, Any]:
    path = f"/api/job/{job}/runs/{quote(task_id, safe='')}/log?stream=stdout"
    return _api(replica, "GET", path)


def test_a_cluster_restart_keeps_an_idle_daemon_without_failover_and_earlier_logs_readable(
    zk: ZooKeeperEnsemble, zk_namespace: str, tmp_path: Path
) -> None:
    cluster = _Cluster(zk, zk_namespace, tmp_path)
    try:
        leader = cluster.start()
        archive = build_app_archive(DEMO_APP, tmp_path / "demo_app.tar.gz", python=sys.executable)
        app = {
            "appName": "demo_app",
            "appURL": archive.app_url,
            "bootstrapScript": "bin/start.sh",
            "cpuCount": 0.1,
            "memoryMB": 64,
        }
        assert _api(leader, "POST", "/api/app", app)[0] == 204
        base = {"appName": "demo_app", "jobType": "SIMPLE", "jobClass": "demo.jobs:hello"}
        # Its cron never fires: the task waits, idle, for its first run.
        daemon = {**base, "jobName": "dmn", "jobExecutionType": "DAEMON", "cron": NEVER}
        once = {**base, "jobName": "once", "jobExecutionType": "TRANSIENT", "cron": NEVER}
        for job in (daemon, once):
            body = {**job, "shardingTotalCount": 1, "cpuCount": 0.1, "memoryMB": 32}
            assert _api(leader, "POST", "/api/job/register", body)[0] == 204
        assert _api(leader, "POST", "/api/job/trigger", "once")[0] == 204

        def ended_run() -> dict[str, Any] | None:
            runs = _api(leader, "GET", "/api/job/once/runs?limit=10")[1]["runs"]
            return next((r for r in runs if r["endTime"] is not None), None)

        run = wait_for(ended_run, 60, message="the transient run ended")

        def log_before() -> dict[str, Any] | None:
            status, body = _log(leader, "once", run["taskId"])
            return body if status == 200 else None

        before = wait_for(log_before, 20, message="its log")
        assert "hello from once shard 0/1" in before["data"]
        # Idle once started (the flag is in ZooKeeper).
        first = wait_for(
            lambda: (found := _running(leader, "dmn")) and found[0]["idle"] and found[0],
            60,
            message="the daemon task running, idle",
        )
        assert first["type"] == "READY"

        cluster.stop()
        leader = cluster.start()

        second = wait_for(
            lambda: next((t for t in _running(leader, "dmn") if t["id"] != first["id"]), None),
            60,
            message="the daemon task running again",
        )
        assert [t["id"] for t in _running(leader, "dmn")] == [second["id"]]
        assert second["slaveId"] == first["slaveId"]  # the agent kept its id
        # No false failover: no failure counted (a back-off node would delay a relaunch and
        # grow with each restart), no failover entry left, and the replica says why.
        text = leader.log_text()
        assert "TASK_UNKNOWN (Reconciliation: Task is unknown; the daemon task was idle" in text
        assert "queued for failover" not in text
        assert _api(leader, "GET", "/api/job/tasks/failover")[1] == []
        metrics = leader.metrics()
        assert not [k for k in metrics if k.startswith("ejc_job_runs_total{") and "dmn" in k]
        assert metrics.get("ejc_runs_failed_total", 0) == 0

        # The run of the earlier life: its log reads as before.
        status, after = _log(leader, "once", run["taskId"])
        assert status == 200, after
        assert after["data"] == before["data"]
        # Through the agent's /state, as the scheduler found it: a completed executor there.
        agent = wait_for(
            lambda: next(iter(_agents(cluster)), None), 10, message="the agent in the master"
        )
        _, _, raw = http_get(f"http://{agent}/state")
        state = json.loads(raw)
        completed = [
            task["id"]
            for framework in state["completed_frameworks"] + state["frameworks"]
            for executor in framework["completed_executors"]
            for task in executor["completed_tasks"]
        ]
        assert run["taskId"] in completed and first["id"] in completed
    finally:
        cluster.stop()


def _agents(cluster: _Cluster) -> list[str]:
    assert cluster.mesos is not None
    _, _, raw = http_get(f"http://{cluster.mesos.address}/master/state")
    return [agent["pid"].rpartition("@")[2] for agent in json.loads(raw)["slaves"]]

"""Faults of Mesos under a running system (issue 24): an agent lost with a task whose end the
leader never received, a Mesos master failover, an executor killed mid-run. Real replica
processes, the stand-in with two agents, a real ZooKeeper; jobs fire every 2 s.

Each test asserts that no task is left "running" that does not run, that the job fires again
promptly, that no task id ran twice and that no shard was live twice, and prints the time from
the fault to the next on-time launch (a READY run of a fire that fell after the fault).
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from deploy.zookeeper import ZooKeeperEnsemble
from tests.e2e.pipeline_support import Runs, System, running_system
from tests.support.waiting import wait_for

CRON = "0/2 * * * * ?"


@pytest.fixture
def system(zk: ZooKeeperEnsemble, zk_namespace: str, tmp_path: Path) -> Iterator[System]:
    with running_system(zk.hosts, zk_namespace, tmp_path, replicas=1) as system:
        yield system


def task_ids(runs: Runs) -> list[str]:
    """The task id of every run that started, in order."""
    return [json.loads(p[3])["taskId"] for p in runs.lines() if p[0] == "start"]


def assert_no_run_twice(runs: Runs, shards: int) -> None:
    """No task id ran twice and no shard ran twice at once."""
    ids = task_ids(runs)
    assert len(ids) == len(set(ids)), f"a task id ran twice: {ids}"
    for item in range(shards):
        intervals = sorted(runs.intervals(item))
        overlaps = [(a, b) for a, b in pairwise(intervals) if b[0] < a[1]]
        assert not overlaps, f"shard {item} was live twice: {overlaps[:3]}"


def next_on_time_launch(runs: Runs, after: float, timeout_s: float) -> float:
    """Wall time of the first start of a READY run (a fire, not a failover relaunch) that began
    after `after`."""

    def found() -> float | None:
        for p in runs.lines():
            if p[0] == "start" and float(p[2]) > after and "@-@READY@-@" in p[3]:
                return float(p[2])
        return None

    return wait_for(found, timeout_s, message="an on-time launch after the fault")


def mesos_tasks(system: System, job: str) -> list[dict[str, Any]]:
    """The job's tasks the master still holds (running, or ended but not acknowledged)."""
    return [
        t
        for f in system.master_state()["frameworks"]
        for t in f.get("tasks", [])
        if t["id"].startswith(f"{job}@-@")
    ]


def held_running(system: System, job: str) -> list[dict[str, Any]]:
    return [t for t in system.running() if t["metaInfo"]["jobName"] == job]


@pytest.mark.timeout(120)
def test_an_agent_lost_with_an_unacknowledged_end_leaves_no_phantom_and_forbid_fires_again(
    system: System, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a FORBID job firing every 2 s whose first run freezes the leader at once (so the
    # leader acknowledges none of its updates: the run's RUNNING and FINISHED wait at the agent
    # behind its first update) and then finishes
    (leader,) = system.replicas
    runs = Runs(Path(system.make_app("app_lost")))
    mark = tmp_path / "froze-leader"
    # `kill` first: a builtin, it runs before the agent has even sent the run's first update.
    freeze = f"[ -e {mark} ] || {{ kill -STOP {leader.pid}; touch {mark}; }};"
    system.script_job(
        "lost",
        CRON,
        shards=1,
        app="app_lost",
        failover=True,
        misfire=False,
        overlapPolicy="FORBID",
        scriptCommandLine=f"{freeze} SLEEP_S=0.2 sh record.sh",
    )
    try:
        wait_for(mark.exists, 20, message="the first run froze the leader")
        (task,) = wait_for(
            lambda: [t for t in mesos_tasks(system, "lost") if t["state"] == "TASK_FINISHED"],
            5,
            message="the first run finished on its agent",
        )
        # When its agent is lost before the leader acknowledged (or even received) that end
        fault_at = time.time()
        assert (
            system.mesos.post_json("/faults/remove_agent", {"agent_id": task["slave_id"]})[0] == 200
        )
    finally:
        leader.signal(signal.SIGCONT)

    # Then the leader holds nothing running on the lost agent, and the job fires on time again
    wait_for(
        lambda: not [t for t in held_running(system, "lost") if t["slaveId"] == task["slave_id"]],
        10,
        message="no phantom of the lost agent's task",
    )
    launched_at = next_on_time_launch(runs, fault_at, 10)
    wait_for(lambda: len(runs.ends()) == len(runs.starts()), 10, message="runs ended")
    assert_no_run_twice(runs, shards=1)
    with capsys.disabled():
        print(f"\nagent lost: next on-time launch {launched_at - fault_at:.2f} s after the fault")

"""The cluster's fire budget (max_fires_per_second, issue 23) with a real leader, the local Mesos
stand-in and real runs: fires over the budget are delayed, recorded (log, metric, event trace)
and still run."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy.zookeeper import ZooKeeperEnsemble
from tests.e2e.pipeline_support import Runs, System, running_system
from tests.support.waiting import wait_for

JOBS = [f"budget{n}" for n in range(4)]


@pytest.fixture
def system(zk: ZooKeeperEnsemble, zk_namespace: str, tmp_path: Path) -> Iterator[System]:
    with running_system(
        zk.hosts, zk_namespace, tmp_path, replicas=1, max_fires_per_second=1
    ) as system:
        yield system


def _starts_by_job(runs: Runs) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for line in runs.lines():
        if line[0] == "start":
            job = json.loads(line[3])["taskId"].split("@-@")[0]
            out.setdefault(job, []).append(float(line[2]))
    return out


def _every_job_started(runs: Runs) -> dict[str, list[float]] | None:
    found = _starts_by_job(runs)
    return found if all(found.get(job) for job in JOBS) else None


def _delayed_rows(system: System) -> list[dict[str, Any]]:
    status, body = system.api("GET", "/api/job/events/statusTraces?state=FIRE_DELAYED&per_page=100")
    assert status == 200, body
    return list(body["rows"])


def test_fires_over_the_budget_are_delayed_and_recorded_and_every_job_still_runs(
    system: System,
) -> None:
    runs = Runs(Path(system.make_app()))
    # Registered well before a fire of their cron, so that all four wait for the same one.
    wait_for(lambda: 1 < time.time() % 10 < 6, 10, message="time to register before a fire")
    for name in JOBS:
        system.script_job(name, "0/10 * * * * ?", shards=1)
    fire = (time.time() // 10 + 1) * 10
    # One fire a second: the four runs of the one fire start about a second apart, and all run.
    starts = wait_for(
        lambda: _every_job_started(runs), fire - time.time() + 8, message="a run of every job"
    )
    firsts = sorted(times[0] for times in starts.values())
    assert firsts[0] >= fire - 0.1
    assert firsts[-1] - firsts[0] >= 2.0, firsts  # three delayed, by 1, 2 and 3 s
    assert all(first < fire + 6 for first in firsts), firsts  # ...and not until the next fire
    leader = system.leader()
    assert leader is not None
    metrics = wait_for(leader.metrics, 5, message="metrics")
    assert metrics["ejc_fires_delayed_total"] >= 3
    # Each delayed fire has its event-trace row, and the log says why.
    rows = wait_for(lambda: _delayed_rows(system), 10, message="FIRE_DELAYED rows")
    assert {row["jobName"] for row in rows} <= set(JOBS) and len(rows) >= 3
    assert "max_fires_per_second=1" in rows[0]["message"]
    assert "delayed over max_fires_per_second=1" in leader.log_path.read_text()

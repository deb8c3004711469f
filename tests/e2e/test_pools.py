"""Concurrency pools end to end (issue 28): replica processes, the local Mesos stand-in with two
agents and real executor tasks. Six jobs of two shards each share a pool of three slots: the
master never holds more than three of their tasks live (sampled every 0.25 s), while every job
runs, before and after the leader is killed (the new leader counts what runs before it
launches)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from deploy.zookeeper import ZooKeeperEnsemble
from scheduler.model.task_id import TaskId
from tests.e2e.pipeline_support import System, running_system, strike_leader
from tests.e2e.test_cli import Cli
from tests.support.waiting import wait_for

JOBS = [f"pooled{i}" for i in range(6)]
POOL_SIZE = 3
LIVE = ("TASK_STAGING", "TASK_STARTING", "TASK_RUNNING")


@dataclass
class Sampler:
    """Samples the master's tasks every 0.25 s on its own thread: the most of the pool's jobs'
    tasks live at once, and when each job's tasks were first seen (epoch seconds)."""

    system: System
    most: int = 0
    samples: int = 0
    seen: dict[str, list[float]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _ids: set[str] = field(default_factory=set)

    def run(self) -> None:
        while not self._stop.wait(0.25):
            try:
                state = self.system.master_state()
            except OSError as exc:
                self.errors.append(str(exc))
                continue
            tasks = [t for f in state.get("frameworks", []) for t in f.get("tasks", [])]
            live = 0
            for task in tasks:
                job = TaskId.parse(task["id"]).job_name
                if job not in JOBS or task["state"] not in LIVE:
                    continue
                live += 1
                if task["id"] not in self._ids:
                    self._ids.add(task["id"])
                    self.seen.setdefault(job, []).append(time.time())
            self.most = max(self.most, live)
            self.samples += 1

    def stop(self) -> None:
        self._stop.set()

    def jobs_seen_since(self, since: float) -> set[str]:
        return {job for job, times in self.seen.items() if any(t >= since for t in times)}


@pytest.fixture
def system(zk: ZooKeeperEnsemble, zk_namespace: str, tmp_path: Path) -> Iterator[System]:
    with running_system(zk.hosts, zk_namespace, tmp_path) as system:
        yield system


def test_a_pool_of_three_never_runs_more_than_three_tasks_while_all_six_jobs_progress(
    system: System, zk: ZooKeeperEnsemble, zk_namespace: str, tmp_path: Path
) -> None:
    status, body = system.api("POST", "/api/pool", {"poolName": "db", "size": POOL_SIZE})
    assert status == 201, body
    system.make_app()
    for name in JOBS:
        # Every 2 s, a second's work per shard: unpooled, the 12 shards would run together.
        system.script_job(name, "*/2 * * * * ?", shards=2, env="SLEEP_S=1", pool="db")
    sampler = Sampler(system)
    thread = threading.Thread(target=sampler.run, name="test-pool-sampler", daemon=True)
    thread.start()
    try:
        started = time.time()
        wait_for(
            lambda: sampler.jobs_seen_since(started) >= set(JOBS),
            40,
            interval_s=0.25,
            message="every job of the pool run",
        )
        in_pool = system.api("GET", "/api/pool/db")[1]
        assert in_pool["jobs"] == JOBS and in_pool["size"] == POOL_SIZE
        assert 0 <= in_pool["inUse"] <= POOL_SIZE
        # Runs wait (6 jobs firing every 2 s, one run of 2 slots at a time).
        wait_for(
            lambda: system.api("GET", "/api/pool/db")[1]["waiting"] > 0,
            10,
            message="runs waiting for the pool",
        )
        strike_leader(system, zk.hosts, zk_namespace, "SIGKILL", 0)
        after = time.time()
        wait_for(
            lambda: sampler.jobs_seen_since(after) >= set(JOBS),
            40,
            interval_s=0.25,
            message="every job of the pool run under the new leader",
        )
    finally:
        sampler.stop()
        thread.join(5)
    assert not thread.is_alive()
    assert sampler.samples > 40
    assert sampler.most <= POOL_SIZE, f"{sampler.most} tasks of the pool live at once"
    # The pool was used, not idle: a run (2 slots) was seen live.
    assert sampler.most >= 2
    _the_cli_manages_pools(system, tmp_path)


def _the_cli_manages_pools(system: System, tmp_path: Path) -> None:
    """`ejcloud pool ...` against the new leader: list, get, add, resize, delete, refusals."""
    leader = system.leader()
    assert leader is not None
    cli = Cli(
        tmp_path / "home",
        EJCLOUD_SERVER=leader.identity,
        EJCLOUD_USER="root",
        EJCLOUD_PASSWORD="root",
    )
    listed = json.loads(cli.ok("pool", "list", "--json"))
    assert [(p["poolName"], p["size"]) for p in listed] == [("db", POOL_SIZE)]
    shown = cli.ok("pool", "get", "db")
    assert "poolName: db" in shown and "pooled0, pooled1" in shown
    assert cli.ok("pool", "add", "web", "--size", "2").strip() == "pool web created (2 slots)"
    assert "resized to 5" in cli.ok("pool", "resize", "web", "--size", "5")
    table = cli.ok("pool", "list")
    assert "NAME" in table and "web" in table and " 5 " in table
    # Refused: db is used by the six jobs (409, naming them); one run of 2 slots needs 2.
    in_use = cli("pool", "delete", "db", "--yes")  # EXIT_CONFLICT
    assert in_use.returncode == 6 and "pooled0" in in_use.stderr, in_use.stderr
    too_small = cli("pool", "resize", "db", "--size", "1")
    assert too_small.returncode == 1 and "too small" in too_small.stderr, too_small.stderr
    assert cli.ok("pool", "delete", "web", "--yes").strip() == "pool web deleted"

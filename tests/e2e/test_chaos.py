"""Chaos: three replica processes, jobs firing every 2 s with misfire on and off, and the leader
SIGKILLed, SIGTERMed and frozen with SIGSTOP past its ZooKeeper session timeout, in turn, for
about two minutes. Then, with one leader acting again:

- no fire of a misfire job is lost: each shard ran exactly once per fire the leaders accounted
  (from the job's first record to its last);
- no run beyond the fires: a misfire-off job ran at most once per fire (the rest were skipped);
- no shard ran twice at once.

The figures (fires, runs, skipped, failover relaunches, leader kills and changes) are printed.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from functools import partial
from itertools import pairwise
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from deploy.zookeeper import ZooKeeperEnsemble
from scheduler.model.config import parse_cron
from scheduler.model.fires import due_fires
from scheduler.storage.fire_ledger import LAST_FIRE
from scheduler.storage.registry import Registry
from tests.e2e.pipeline_support import Runs, System, running_system
from tests.support.replicas import ReplicaProcess
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

CRON = "0/2 * * * * ?"
CHAOS_S = 120.0
SESSION_S = 4.0  # the replicas' zk_session_timeout_seconds (ReplicaProcess's default)
JOBS = {"on_a": True, "on_b": True, "off_a": False, "off_b": False}  # name -> misfire
SHARDS = 2


@pytest.fixture
def system(zk: ZooKeeperEnsemble, zk_namespace: str, tmp_path: Path) -> Iterator[System]:
    with running_system(zk.hosts, zk_namespace, tmp_path, replicas=3) as system:
        yield system


def fires_between(first: float, last: float) -> int:
    """Cron fire times in (first, last]."""
    trigger = parse_cron(CRON, "UTC").trigger()
    return len(due_fires(trigger, first, last, limit=1_000_000).times)


def recorded(registry: Registry, job: str) -> float | None:
    data = registry.get(f"{LAST_FIRE}/{job}")
    return float(data) if data else None


def counting_from(first_record: float) -> float:
    """Where a job's fires are counted from: its first record is the moment it was scheduled,
    unless a fire was accounted before the test read it (a fire time, a whole even second):
    then that fire counts too."""
    if first_record == int(first_record) and int(first_record) % 2 == 0:
        return first_record - 0.001
    return first_record


def recorded_after(registry: Registry, job: str, when: float) -> bool:
    return (recorded(registry, job) or 0.0) >= when


def passed(since: float, seconds: float) -> bool:
    return time.monotonic() - since > seconds


def replacement(system: System, zk: ZooKeeperEnsemble, zk_namespace: str) -> None:
    """Start a replica in place of one that died (stopped with the system)."""
    system.replicas.append(
        ReplicaProcess(
            zk.hosts,
            system.tmp,
            zk_namespace=zk_namespace,
            mesos_url=system.mesos.address,
            framework_failover_timeout_seconds=300,
        ).start()
    )


def new_leader(system: System, old: str) -> ReplicaProcess:
    def found() -> ReplicaProcess | None:
        leader = system.leader()
        if leader is None or leader.identity == old:
            return None
        return leader if (leader.health() or {}).get("mesos") == "connected" else None

    return wait_for(found, 40, message="a new leader connected to Mesos")


@pytest.mark.timeout(420)
def test_leader_chaos_loses_no_fire_and_runs_no_shard_twice(
    system: System,
    zk: ZooKeeperEnsemble,
    zk_namespace: str,
    zk_client: KazooClient,
    capsys: pytest.CaptureFixture[str],
) -> None:
    registry = Registry(zk_client, zk_namespace)
    records = {name: Runs(Path(system.make_app(f"app_{name}"))) for name in JOBS}
    for name, misfire in JOBS.items():
        # failover on: a task lost with a leader between its bookkeeping and its launch is
        # launched again, which counts as the run of its fire.
        system.script_job(
            name, CRON, shards=SHARDS, app=f"app_{name}", misfire=misfire, failover=True
        )
    first = {
        name: counting_from(
            wait_for(partial(recorded, registry, name), 20, message=f"{name}'s first record")
        )
        for name in JOBS
    }
    wait_for(
        lambda: all(len(r.ends(ok=True)) >= SHARDS for r in records.values()),
        30,
        message="every job ran",
    )

    kills = {"SIGKILL": 0, "SIGTERM": 0, "SIGSTOP": 0}
    began = time.monotonic()
    turn = 0
    while time.monotonic() - began < CHAOS_S:
        leader = wait_for(system.leader, 30, message="a leader")
        how = ("SIGKILL", "SIGTERM", "SIGSTOP")[turn % 3]
        turn += 1
        kills[how] += 1
        if how == "SIGKILL":
            leader.signal(signal.SIGKILL)
            leader.wait(10)
            replacement(system, zk, zk_namespace)
        elif how == "SIGTERM":
            leader.signal(signal.SIGTERM)
            assert leader.wait(20) == 0
            replacement(system, zk, zk_namespace)
        else:
            stopped_at = time.monotonic()
            leader.signal(signal.SIGSTOP)
            try:
                new_leader(system, leader.identity)
                wait_for(
                    partial(passed, stopped_at, SESSION_S + 3),
                    SESSION_S + 10,
                    message="frozen past its session timeout",
                )
            finally:
                leader.signal(signal.SIGCONT)
        current = new_leader(system, leader.identity)
        # Let the new leader work a while (4 more fires of a misfire job) before the next blow.
        mark = recorded(registry, "on_a") or 0.0
        wait_for(
            partial(recorded_after, registry, "on_a", mark + 8),
            30,
            message=f"fires go on under {current.identity}",
        )

    # A quiet moment: no run pending or running, and no fire accounted meanwhile.
    seen: dict[str, str] = {}

    def settled(name: str) -> tuple[float, list[int]] | None:
        last = recorded(registry, name)
        leader = system.leader()
        if last is None or leader is None:
            seen[name] = f"last fire {last}, leader {leader}"
            return None
        pending = [r for r in system.api("GET", "/api/job/tasks/ready")[1] if r["jobName"] == name]
        busy = [t for t in system.running() if t["metaInfo"]["jobName"] == name]
        runs = records[name]
        starts = [len(runs.starts(item)) for item in range(SHARDS)]
        ends = [len(runs.ends(item)) for item in range(SHARDS)]
        seen[name] = (
            f"pending {pending}, running {[t['metaInfo'] for t in busy]}, starts {starts}, "
            f"ends {ends}, last fire {last}"
        )
        if pending or busy or ends != starts or recorded(registry, name) != last:
            return None
        return last, starts

    figures = []
    for name, misfire in JOBS.items():
        try:
            last, starts = wait_for(partial(settled, name), 60, message=f"{name} settled")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last seen: {seen.get(name)}") from exc
        fires = fires_between(first[name], last)
        runs = records[name]
        relaunched = sum("@-@FAILOVER@-@" in line[3] for line in runs.lines() if line[0] == "start")
        figures.append((name, misfire, fires, starts, relaunched))
        for item in range(SHARDS):
            intervals = sorted(runs.intervals(item))
            overlaps = [(a, b) for a, b in pairwise(intervals) if b[0] < a[1]]
            assert not overlaps, f"{name} shard {item} ran twice at once: {overlaps[:3]}"
            if misfire:
                assert starts[item] == fires, f"{name} shard {item}: {starts[item]} of {fires}"
            else:
                assert starts[item] <= fires, f"{name} shard {item}: {starts[item]} > {fires}"
        assert not misfire or fires > CHAOS_S / 2 * 0.8  # the fires went on through the chaos

    changes = sum(
        r.metrics().get("ejc_leader_changes_total", 0) for r in system.replicas if r.alive()
    )
    with capsys.disabled():
        print(f"\nchaos: {time.monotonic() - began:.0f} s, leader kills {kills}, "
              f"replicas started {len(system.replicas)}, leader changes seen by the live "
              f"replicas {changes:.0f}")  # fmt: skip
        for name, misfire, fires, starts, relaunched in figures:
            skipped = [fires - s for s in starts]
            print(
                f"chaos: job {name} misfire={'on' if misfire else 'off'}: fires {fires}, runs "
                f"per shard {starts}, skipped {skipped}, failover relaunches {relaunched}"
            )

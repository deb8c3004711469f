"""The trace database down under load (issue 24), with a real replica, the stand-in and command
tasks firing every second: a real PostgreSQL server stopped for 30 s and started again, and
SQLite on a small tmpfs whose every byte is taken (a real ENOSPC, so SQLITE_FULL).

Scheduling goes on through the outage; `/health` says the database is down and since when, then
that it is back; what was held is written when it is back; with a small bound, what had to be
dropped is counted (`/health`, `/metrics`) and logged.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy.postgres import PostgresServer
from deploy.zookeeper import ZooKeeperEnsemble
from tests.e2e.pipeline_support import Runs, System, running_system
from tests.support.replicas import ReplicaProcess
from tests.support.waiting import wait_for

_ENDED = {"TASK_FINISHED", "TASK_FAILED", "TASK_KILLED", "TASK_LOST", "TASK_ERROR", "TASK_GONE"}


def _tasks(system: System, job: str) -> dict[str, str]:
    """Every task of `job` the master knows: id -> state."""
    return {
        task["id"]: task["state"]
        for framework in system.master_state()["frameworks"]
        for task in framework.get("tasks", []) + framework.get("completed_tasks", [])
        if task["id"].startswith(f"{job}@-@")
    }


def _finished(system: System, job: str) -> set[str]:
    return {task for task, state in _tasks(system, job).items() if state == "TASK_FINISHED"}


def _traced_finished(system: System, job: str) -> set[str]:
    status, body = system.api(
        "GET", f"/api/job/events/statusTraces?jobName={job}&state=TASK_FINISHED&per_page=1000"
    )
    assert status == 200, body
    return {row["taskId"] for row in body["rows"]}


def _counted(system: System) -> int:
    status, rows = system.api("GET", "/api/job/statistics/tasks/results?since=last24hours")
    assert status == 200, rows
    return sum(row["successCount"] for row in rows)


def _statistics(replica: ReplicaProcess) -> dict[str, Any]:
    return dict((replica.health() or {}).get("statistics") or {})


def _state_is(replica: ReplicaProcess, state: str) -> dict[str, Any] | None:
    info = _statistics(replica)
    return info if info.get("state") == state else None


def _start_job(system: System, name: str) -> Runs:
    runs = Runs(Path(system.make_app()))
    system.script_job(name, "* * * * * ?", shards=2, misfire=False)
    return runs


def _quiesce(system: System, job: str) -> None:
    status, body = system.api("POST", f"/api/job/{job}/disable")
    assert status == 204, body
    wait_for(
        lambda: (
            not system.running() and all(state in _ENDED for state in _tasks(system, job).values())
        ),
        30,
        message="no task of the job runs",
    )


def _runs_between(runs: Runs, start: float, end: float) -> int:
    return sum(start <= at <= end for at in runs.starts(0))


def test_postgresql_stopped_for_30s_under_load(
    zk: ZooKeeperEnsemble,
    zk_namespace: str,
    tmp_path: Path,
    postgres: PostgresServer,
    postgres_url: str,
) -> None:
    with running_system(
        zk.hosts, zk_namespace, tmp_path, replicas=1, event_trace_rdb_url=postgres_url
    ) as system:
        runs = _start_job(system, "load")
        wait_for(lambda: len(_traced_finished(system, "load")) >= 4, 30, message="traces")
        leader = system.leader()
        assert leader is not None
        postgres.stop()
        stopped_at = time.time()
        try:
            down = wait_for(lambda: _state_is(leader, "down"), 15, message="/health: down")
            assert "OperationalError" in down["problem"]
            metrics = leader.metrics()
            assert metrics["ejc_trace_database_down_since_timestamp_seconds"] > 0
            # Held for 30 s while the job fires every second.
            wait_for(lambda: time.time() - stopped_at >= 30, 35, message="30 s of outage")
            during = _statistics(leader)
            assert during["state"] == "down"
            assert during["downSeconds"] >= 20
            assert during["trace"]["pending"] > 0
        finally:
            postgres.start()
        back_at = time.time()
        # Scheduling went on: a run every second, or nearly (a 2-core machine shared).
        assert _runs_between(runs, stopped_at + 2, back_at - 1) >= 20
        up = wait_for(lambda: _state_is(leader, "up"), 20, message="/health: back")
        assert up["lastOutage"]["seconds"] >= 29
        _quiesce(system, "load")
        finished = _finished(system, "load")
        # Everything held is written: every finished task's trace, every result counted.
        wait_for(
            lambda: _traced_finished(system, "load") >= finished,
            30,
            message="the outage's traces",
        )
        wait_for(lambda: _counted(system) == len(finished), 30, message="results counted")
        info = _statistics(leader)
        assert info["trace"]["dropped"] == 0
        assert info["trace"]["errors"] == 0
        assert info["journal"]["dropped"] == 0
        assert leader.metrics()["ejc_trace_database_down_since_timestamp_seconds"] == 0


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs (mounting needs root: CAP_SYS_ADMIN), unmounted at the end."""
    mount = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(
            f"cannot mount a tmpfs here ({done.stderr.strip()}); the SQLITE_FULL of "
            "tests/integration/leader/statistics/test_outage.py covers the writer without one"
        )
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)
        if subprocess.run(["mountpoint", "-q", str(mount)], check=False).returncode == 0:
            subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(disk: Path) -> Path:
    """Take every free byte of `disk` with one file; returns it."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as out:  # unbuffered: nothing left to write at close
        for size in (65536, 512, 1):
            try:
                while out.write(b"\0" * size):
                    pass
            except OSError:
                pass  # ENOSPC: on to smaller writes, for the last bytes
    return filler


def test_sqlite_disk_full_under_load_with_a_small_buffer(
    zk: ZooKeeperEnsemble, zk_namespace: str, tmp_path: Path, small_disk: Path
) -> None:
    url = f"sqlite:///{small_disk / 'trace.db'}"
    with running_system(
        zk.hosts,
        zk_namespace,
        tmp_path,
        replicas=1,
        event_trace_rdb_url=url,
        trace_buffer_max_records=100,
    ) as system:
        runs = _start_job(system, "full")
        wait_for(lambda: len(_traced_finished(system, "full")) >= 4, 30, message="traces")
        leader = system.leader()
        assert leader is not None
        filler = _fill(small_disk)
        full_at = time.time()
        down = wait_for(lambda: _state_is(leader, "down"), 20, message="/health: down")
        assert "database or disk is full" in down["problem"]
        # A bound of 100 entries: about ten seconds of this job's traces.
        dropping = wait_for(
            lambda: (lambda i: i if i.get("trace", {}).get("dropped", 0) >= 50 else None)(
                _statistics(leader)
            ),
            30,
            message="entries dropped beyond the bound",
        )
        assert dropping["trace"]["pending"] <= 100
        assert leader.metrics()["ejc_trace_writer_dropped_total"] >= 50
        filler.unlink()
        freed_at = time.time()
        assert _runs_between(runs, full_at + 2, freed_at - 1) >= (freed_at - full_at) / 2
        up = wait_for(lambda: _state_is(leader, "up"), 30, message="/health: back")
        assert up["lastOutage"]["seconds"] > 0
        _quiesce(system, "full")
        wait_for(lambda: _statistics(leader)["trace"]["pending"] == 0, 20, message="written")
        info = _statistics(leader)
        dropped = info["trace"]["dropped"]
        assert info["trace"]["errors"] == 0
        finished = _finished(system, "full")
        traced = _traced_finished(system, "full")
        # Nothing silently lost: a finished task without its row is one the count covers.
        assert 0 < len(finished - traced) <= dropped
        # The oldest entries were dropped: the last runs before the disk was freed are there.
        before_freed = [task for task in finished if 0 < _started(runs, task) < freed_at - 1]
        last = sorted(before_freed, key=lambda task: _started(runs, task))[-2:]
        assert len(last) == 2
        assert set(last) <= traced, (last, finished - traced)
        # Results waited in ZooKeeper: every one counted.
        wait_for(lambda: _counted(system) == len(finished), 30, message="results counted")
        log = leader.log_text()
        assert "dropped in all" in log
        assert "back after" in log


def _started(runs: Runs, task: str) -> float:
    """When the run of `task` started, from its sharding context in the record file."""
    for line in runs.lines():
        if line[0] == "start" and task in line[-1]:
            return float(line[2])
    return 0.0

"""Statistics and the event trace end to end: real replicas, the local Mesos stand-in, real
command tasks, SQLite and a real PostgreSQL server; a leader SIGKILL and a database outage."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from sqlalchemy import create_engine, func, select
from sqlalchemy.orm import Session

from deploy.postgres import PostgresServer
from deploy.zookeeper import ZooKeeperEnsemble
from scheduler.leader.statistics.models import CountedResult, TaskResultStatisticsMinute
from scheduler.storage.layout import RESULTS
from scheduler.storage.registry import Registry
from tests.e2e.pipeline_support import Runs, System, running_system
from tests.support.waiting import wait_for

_FAILED = {"TASK_FAILED", "TASK_LOST", "TASK_ERROR", "TASK_DROPPED", "TASK_GONE", "TASK_UNKNOWN"}


def _mesos_tasks(system: System, job: str) -> dict[str, str]:
    """Every task of `job` the master knows: id -> state."""
    return {
        task["id"]: task["state"]
        for framework in system.master_state()["frameworks"]
        for task in framework.get("tasks", []) + framework.get("completed_tasks", [])
        if task["id"].startswith(f"{job}@-@")
    }


def _finished(system: System, job: str) -> int:
    return sum(state == "TASK_FINISHED" for state in _mesos_tasks(system, job).values())


def _counted(system: System) -> tuple[int, int]:
    """Success and failure counts in the MINUTE rows, through the REST API."""
    status, rows = system.api("GET", "/api/job/statistics/tasks/results?since=last24hours")
    assert status == 200, rows
    return sum(r["successCount"] for r in rows), sum(r["failedCount"] for r in rows)


def _journaled(registry: Registry) -> int:
    return sum(len(registry.children(f"{RESULTS}/{b}")) for b in registry.children(RESULTS))


def _database_view(url: str) -> dict[str, Any]:
    """What the tables hold, to explain a mismatch."""
    engine = create_engine(url)
    try:
        with Session(engine) as session:
            return {
                "counted_names": session.scalar(select(func.count()).select_from(CountedResult)),
                "minutes": [
                    (str(r.statistics_time), r.success_count, r.failed_count, str(r.creation_time))
                    for r in session.scalars(select(TaskResultStatisticsMinute))
                    if r.success_count or r.failed_count
                ],
            }
    finally:
        engine.dispose()


def _quiesce(system: System, job: str) -> None:
    """Disable `job` and wait until none of its tasks runs in Mesos or in the scheduler."""
    status, body = system.api("POST", f"/api/job/{job}/disable")
    assert status == 204, body
    wait_for(
        lambda: (
            not system.running()
            and all(
                state in ("TASK_FINISHED", "TASK_KILLED", *_FAILED)
                for state in _mesos_tasks(system, job).values()
            )
        ),
        30,
        message="no task of the job runs",
    )


def _job(system: System, name: str) -> Runs:
    runs = Runs(Path(system.make_app()))
    system.script_job(name, "* * * * * ?", shards=2, misfire=False)
    return runs


def test_counters_survive_a_leader_sigkill(
    zk: ZooKeeperEnsemble, zk_namespace: str, zk_client: KazooClient, tmp_path: Path, trace_url: str
) -> None:
    registry = Registry(zk_client, zk_namespace)
    with running_system(zk.hosts, zk_namespace, tmp_path, event_trace_rdb_url=trace_url) as system:
        _job(system, "counted")
        wait_for(lambda: _finished(system, "counted") >= 10, 40, message="ten runs finished")
        # Kill the leader while it holds results it has not moved into the database yet.
        wait_for(lambda: _journaled(registry) > 0, 10, message="results in the journal")
        old = system.leader()
        assert old is not None
        old.signal(signal.SIGKILL)
        new = wait_for(
            lambda: (lambda r: r if r is not None and r is not old else None)(system.leader()),
            30,
            message="a new leader",
        )
        wait_for(lambda: (new.health() or {}).get("mesos") == "connected", 20, message="Mesos")
        before = _finished(system, "counted")
        wait_for(lambda: _finished(system, "counted") >= before + 6, 40, message="runs go on")
        _quiesce(system, "counted")
        tasks = _mesos_tasks(system, "counted")
        finished = sum(state == "TASK_FINISHED" for state in tasks.values())
        failed = sum(state in _FAILED for state in tasks.values())

        def settled() -> tuple[int, int] | None:
            counted = _counted(system)
            return counted if counted[0] == finished and _journaled(registry) == 0 else None

        try:
            success, failures = wait_for(settled, 30, message=f"{finished} successes counted")
        except AssertionError as exc:
            raise AssertionError(
                f"counted {_counted(system)}, journal {_journaled(registry)}, "
                f"database: {_database_view(trace_url)}, Mesos: {tasks}"
            ) from exc
        # Nothing lost, nothing counted twice: exactly what Mesos ran, across the SIGKILL.
        assert success == finished
        # A launch the killed leader recorded but never sent is reconciled as lost by the next
        # one: a failure Mesos never saw (rare; its trace says so).
        status, body = system.api(
            "GET", "/api/job/events/statusTraces?jobName=counted&per_page=1000"
        )
        assert status == 200, body
        unseen = {
            row["taskId"]
            for row in body["rows"]
            if row["state"] in _FAILED and row["taskId"] not in tasks
        }
        assert failures == failed + len(unseen), (failures, failed, unseen, tasks)
        info = (new.health() or {}).get("statistics") or {}
        assert info.get("ready") is True
        assert info.get("journal", {}).get("dropped") == 0


def test_a_database_outage_loses_no_scheduling_and_recovers(
    zk: ZooKeeperEnsemble,
    zk_namespace: str,
    tmp_path: Path,
    postgres: PostgresServer,
    postgres_url: str,
) -> None:
    with running_system(
        zk.hosts, zk_namespace, tmp_path, event_trace_rdb_url=postgres_url
    ) as system:
        _job(system, "through")

        def traced_finished() -> set[str]:
            status, body = system.api(
                "GET",
                "/api/job/events/statusTraces?jobName=through&state=TASK_FINISHED&per_page=1000",
            )
            assert status == 200, body
            return {row["taskId"] for row in body["rows"]}

        wait_for(lambda: len(traced_finished()) >= 4, 40, message="traces before the outage")
        postgres.stop()
        try:
            before = _finished(system, "through")
            # Scheduling goes on without the database.
            wait_for(lambda: _finished(system, "through") >= before + 8, 40, message="runs go on")
            status, body = system.api("GET", "/api/job/events/statusTraces?jobName=through")
            assert (status, body["type"]) == (503, "TraceDatabaseUnavailable"), body
            leader = system.leader()
            assert leader is not None

            def problem() -> str | None:
                health: dict[str, Any] = leader.health() or {}
                return (health.get("statistics") or {}).get("problem")

            assert "OperationalError" in wait_for(problem, 15, message="the outage in /health")
        finally:
            postgres.start()
        _quiesce(system, "through")
        tasks = _mesos_tasks(system, "through")
        finished = {task for task, state in tasks.items() if state == "TASK_FINISHED"}
        # After the outage: every finished task's trace is written (held while the database
        # was down), and every result counted (the results waited in ZooKeeper).
        wait_for(lambda: traced_finished() >= finished, 40, message="traces of the outage")
        wait_for(lambda: _counted(system)[0] == len(finished), 30, message="results of the outage")


_BAD_QUERIES = [
    ("executions?per_page=0", "per_page"),
    ("executions?page=x", "page"),
    ("statusTraces?sort=job_name;drop", "sort"),
    ("statusTraces?order=sideways", "order"),
    ("executions?startTime=yesterday", "startTime"),
    ("executions?startTime=2024-01-02%2000:00:00&endTime=2024-01-01%2000:00:00", "endTime"),
    ("executions?isSuccess=maybe", "isSuccess"),
]


def test_bad_event_queries_get_400_naming_the_parameter(
    zk: ZooKeeperEnsemble, zk_namespace: str, tmp_path: Path
) -> None:
    with running_system(zk.hosts, zk_namespace, tmp_path, replicas=1) as system:
        for query, field in _BAD_QUERIES:
            status, body = system.api("GET", f"/api/job/events/{query}")
            assert status == 400, (query, body)
            assert field in body["fields"], (query, body)
        status, body = system.api("GET", "/api/job/statistics/tasks/results/yesterday")
        assert (status, list(body["fields"])) == (400, ["period"]), body

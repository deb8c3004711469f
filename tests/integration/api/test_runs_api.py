"""`/api/job/{job}/runs` and a run's `/log` on a real ZooKeeper and a real trace database:
paging, cursors, every parameter bounded and named when refused. The reads through a Mesos agent
are in tests/e2e/test_runs_and_logs.py (with the stand-in)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kazoo.client import KazooClient

from scheduler.leader.statistics import create_trace_engine, upgrade_to_head
from scheduler.leader.statistics.writer import TraceWriter
from scheduler.model.task_id import TaskId, TaskType
from scheduler.storage.state import RunningTask
from tests.integration.api.conftest import APP, JOB, Api, make_api
from tests.support.waiting import wait_for

T0 = datetime(2024, 3, 1, 10, 0, 0)


@pytest.fixture
def traced(zk_client: KazooClient, zk_namespace: str, tmp_path: Path) -> Iterator[Api]:
    """The API with the event trace on SQLite and the demo app and job registered."""
    engine = create_trace_engine(f"sqlite:///{tmp_path}/trace.db")
    upgrade_to_head(engine)
    api = make_api(zk_client, zk_namespace)
    api.client.application.extensions["ejc_term_access"].statistics = SimpleNamespace(engine=engine)
    assert api.call("POST", "/api/app", APP).status_code == 204
    assert api.call("POST", "/api/job/register", JOB).status_code == 204
    yield api
    engine.dispose()


def _trace(api: Api, rows: list[tuple[str, str, str, datetime]]) -> None:
    engine = api.client.application.extensions["ejc_term_access"].statistics.engine
    writer = TraceWriter(engine, idle_wait_s=0.05, linger_s=0.0)
    writer.start()
    try:
        for task_id, state, message, at in rows:
            tid = TaskId.parse(task_id)
            writer.record_status(
                job_name=tid.job_name,
                task_id=task_id,
                state=state,
                slave_id=tid.agent_id,
                message=message,
                creation_time=at,
            )
        wait_for(lambda: writer.written == len(rows), 20, message="trace rows written")
    finally:
        writer.stop(5.0)


def _runs(api: Api, query: str = "") -> tuple[int, Any]:
    answer = api.call("GET", f"/api/job/demo_job/runs{query}")
    return answer.status_code, answer.json


def _three_runs(api: Api) -> list[str]:
    """Three ended runs of demo_job, launched a second apart; oldest first."""
    tasks = [str(TaskId.new("demo_job", item, TaskType.READY, "S0")) for item in range(3)]
    rows = []
    for n, task in enumerate(tasks):
        at = T0 + timedelta(seconds=10 * n)
        rows += [
            (task, "TASK_STAGING", "launched", at),
            (task, "TASK_RUNNING", "", at + timedelta(seconds=1)),
            (task, "TASK_FINISHED", "", at + timedelta(seconds=2)),
        ]
    _trace(api, rows)
    return tasks


def test_runs_are_listed_newest_first_a_page_at_a_time(traced: Api) -> None:
    tasks = _three_runs(traced)
    status, body = _runs(traced)
    assert status == 200
    assert [r["taskId"] for r in body["runs"]] == tasks[::-1]
    assert body["next"] is None
    run = body["runs"][0]
    assert run["shardingItem"] == 2 and run["result"] == "success" and run["reason"] is None
    assert run["startTime"] == "2024-03-01T10:00:21.000Z"
    assert run["endTime"] == "2024-03-01T10:00:22.000Z"
    status, first = _runs(traced, "?limit=2")
    assert [r["taskId"] for r in first["runs"]] == [tasks[2], tasks[1]]
    assert first["next"] == tasks[1]
    status, rest = _runs(traced, f"?limit=2&before={first['next']}")
    assert status == 200 and [r["taskId"] for r in rest["runs"]] == [tasks[0]]
    assert rest["next"] is None
    # A time as the cursor (ISO 8601 with an offset, or the original's format in UTC).
    status, early = _runs(traced, "?before=2024-03-01T11:00:15%2B01:00")
    assert [r["taskId"] for r in early["runs"]] == [tasks[1], tasks[0]]
    status, early = _runs(traced, "?before=2024-03-01%2010:00:05")
    assert [r["taskId"] for r in early["runs"]] == [tasks[0]]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("?limit=0", "limit"),
        ("?limit=1001", "limit"),
        ("?limit=ten", "limit"),
        ("?limit=" + "9" * 30, "limit"),
        ("?before=yesterday", "before"),
        ("?before=demo_job@-@0@-@READY@-@S0@-@nosuch", "before"),
        ("?before=other@-@0@-@READY@-@S0@-@x", "before"),
        ("?before=a@-@b", "before"),
        ("?before=" + "x" * 2000, "before"),
        ("?before=0001-01-01T00:00:00%2B14:00", "before"),
    ],
)
def test_bad_runs_parameters_are_refused_naming_the_field(
    traced: Api, query: str, field: str
) -> None:
    status, body = _runs(traced, query)
    assert status == 400, body
    assert body["type"] == "InvalidRequest" and field in body["fields"]


def test_an_unknown_job_has_no_runs(traced: Api) -> None:
    answer = traced.call("GET", "/api/job/nosuch/runs")
    assert answer.status_code == 404 and answer.json["type"] == "NotFound"


def test_without_the_trace_the_runs_are_the_running_tasks(api: Api) -> None:
    assert api.call("POST", "/api/app", APP).status_code == 204
    assert api.call("POST", "/api/job/register", JOB).status_code == 204
    running = str(TaskId.new("demo_job", 1, TaskType.READY, "S0"))
    access = api.client.application.extensions["ejc_term_access"]
    access.running.add(RunningTask(running, "S0", state="TASK_RUNNING", launched_at=1.7e9))
    answer = api.call("GET", "/api/job/demo_job/runs")
    assert answer.status_code == 200
    (run,) = answer.json["runs"]
    assert run["taskId"] == running and run["result"] == "running" and run["shardingItem"] == 1
    assert answer.json["next"] is None


def _log(api: Api, task_id: str, query: str = "") -> tuple[int, Any]:
    answer = api.call("GET", f"/api/job/demo_job/runs/{task_id}/log{query}")
    return answer.status_code, answer.json


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("?stream=stdin", "stream"),
        ("?stream=../../etc/passwd", "stream"),
        ("?offset=-2", "offset"),
        ("?offset=x", "offset"),
        ("?offset=" + "9" * 19, "offset"),
        ("?length=-1", "length"),
        ("?length=1048577", "length"),
        ("?length=1e3", "length"),
    ],
)
def test_bad_log_parameters_are_refused_naming_the_field(
    traced: Api, query: str, field: str
) -> None:
    task = _three_runs(traced)[0]
    status, body = _log(traced, task, query)
    assert status == 400, body
    assert field in body["fields"]
    assert not [c for c in traced.actions.calls if c[0] == "read_run_file"]


@pytest.mark.parametrize(
    ("task_id", "status"),
    [
        ("not-a-task", 400),
        ("x" * 1100, 400),
        ("other_job@-@0@-@READY@-@S0@-@abc", 404),
        ("demo_job@-@0@-@READY@-@S0@-@nosuch", 404),
    ],
)
def test_a_log_of_no_run_of_the_job_is_refused(traced: Api, task_id: str, status: int) -> None:
    got, body = _log(traced, task_id)
    assert got == status, body
    if status == 400:
        assert "taskId" in body["fields"]


def test_a_known_runs_log_is_read_through_mesos_and_says_so_when_it_cannot(traced: Api) -> None:
    task = _three_runs(traced)[0]
    status, body = _log(traced, task, "?stream=stderr&offset=-1")
    # No Mesos driver in this term: the read is asked for, and refused with 503.
    assert status == 503 and body["type"] == "MesosUnavailable"
    (call,) = [c for c in traced.actions.calls if c[0] == "read_run_file"]
    assert call[1] == f"{task} tasks/{task}/stderr -1 1048576"

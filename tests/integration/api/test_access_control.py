"""Authorization of the API (issue 26) over a real ZooKeeper: the app of each resource decides,
an invisible app's resource is the 404 of one that does not exist, and every list holds only
what the caller sees.

Two teams: `team_a` (app `a_app`, job `a_job`) and `team_b` (`b_app`, `b_job`). The callers
are real principals, written as the access records are stored (the model's codecs into
ZooKeeper) and read by the API's own follower: users with a role on `a_app`, API tokens of
them, the settings' root and guest. H6's role-by-route matrix checks every route for every role;
this module checks the rules behind it and what each list and aggregate leaves out.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from kazoo.client import KazooClient
from werkzeug.security import generate_password_hash

from executor.records import ExecutionRecord
from scheduler.leader.statistics import TraceWriter, create_trace_engine, upgrade_to_head
from scheduler.model.access.records import (
    TokenRecord,
    UserRecord,
    encode_grant,
    encode_token,
    encode_user,
    new_grant_id,
)
from scheduler.model.access.roles import Grant, Role
from scheduler.model.access.tokens import new_token, secret_digest
from scheduler.model.task_id import TaskId, TaskType
from scheduler.storage import layout
from scheduler.storage.registry import Registry
from scheduler.storage.state import RunningTask
from tests.integration.api.conftest import ADMIN, GUEST, Api, make_api
from tests.support.bodies import app_body, job_body
from tests.support.waiting import wait_for

PASSWORD = "team-password-1"
_HASHED = generate_password_hash(PASSWORD)  # once: werkzeug's scrypt, as the users API stores
WEBHOOK = "https://hooks.example.com/services/T000/B000/secret-token"


def _basic(user: str, password: str) -> dict[str, str]:
    raw = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {raw}"}


def _put(registry: Registry, path: str, data: bytes) -> None:
    registry.client.create(registry.abs(path), data, makepath=True)


@dataclass
class Teams:
    api: Api
    tasks: dict[str, str]  # job -> its running task id

    def user(self, name: str, *grants: tuple[Role, str]) -> dict[str, str]:
        """A stored user with `grants`; its Basic header."""
        registry = self.api.registry
        now_ms = int(time.time() * 1000)
        _put(
            registry, layout.access_user_path(name), encode_user(UserRecord(name, _HASHED, now_ms))
        )
        for role, app in grants:
            grant = Grant(new_grant_id(), f"user:{name}", role, app)
            _put(registry, layout.access_grant_path(grant.id), encode_grant(grant))
        self.refresh()
        return _basic(name, PASSWORD)

    def token(self, owner: str, role: Role, app: str) -> dict[str, str]:
        """A stored API token of `owner`; its Bearer header."""
        text, parts = new_token()
        record = TokenRecord(
            parts.id,
            f"ci-{app}",
            f"user:{owner}",
            role,
            app,
            secret_digest(parts.secret),
            int(time.time() * 1000),
            None,
        )
        _put(self.api.registry, layout.access_token_path(parts.id), encode_token(record))
        self.refresh()
        return {"Authorization": f"Bearer {text}"}

    def refresh(self) -> None:
        follower = self.api.client.application.extensions["ejc_authenticator"].access
        follower.refresh(self.api.registry)

    def call(self, method: str, path: str, headers: dict[str, str], **kwargs: Any) -> Any:
        if kwargs.get("data") is not None:
            kwargs["content_type"] = "application/json"  # a raw job name, as the console sends
        return self.api.client.open(path, method=method, headers=headers, **kwargs)


@pytest.fixture
def teams(zk_client: KazooClient, zk_namespace: str) -> Iterator[Teams]:
    api = make_api(zk_client, zk_namespace)
    tasks: dict[str, str] = {}
    for team in ("a", "b"):
        assert api.call("POST", "/api/app", json=app_body(f"{team}_app")).status_code == 204
        job = job_body(f"{team}_job", appName=f"{team}_app", misfire=True)
        response = api.call("POST", "/api/job/register", json=job)
        assert response.status_code == 204, response.get_data(as_text=True)
        assert api.call("POST", "/api/job/trigger", raw=f"{team}_job").status_code == 204
        tasks[f"{team}_job"] = str(TaskId.new(f"{team}_job", 0, TaskType.READY, "S0"))
        access = api.client.application.extensions["ejc_term_access"]
        access.running.add(RunningTask(tasks[f"{team}_job"], "S0", state="TASK_RUNNING"))
    yield Teams(api, tasks)


def _writes_nothing(teams: Teams) -> dict[str, tuple[bytes, int]]:
    """Every node of the namespace with its data and version (but the election's and the
    tokens' last-use times, written whatever a request's outcome): compare before and after."""
    client = teams.api.registry.client
    root = teams.api.registry.abs("/").rstrip("/")
    found: dict[str, tuple[bytes, int]] = {}
    pending = [root]
    while pending:
        path = pending.pop()
        relative = path[len(root) :] or "/"
        if relative.startswith(("/ha", layout.ACCESS_TOKENS_USED)):
            continue
        data, stat = client.get(path)
        found[relative] = (data, stat.version)
        pending.extend(f"{path}/{child}" for child in client.get_children(path))
    return found


# -- the app decides -------------------------------------------------------------------------


def test_another_apps_job_is_the_404_of_a_job_that_does_not_exist(teams: Teams) -> None:
    viewer = teams.user("ann", (Role.VIEWER, "a_app"))
    seen = teams.call("GET", "/api/job/jobs/a_job", viewer)
    assert seen.status_code == 200 and seen.json["jobName"] == "a_job"
    hidden = teams.call("GET", "/api/job/jobs/b_job", viewer)
    missing = teams.call("GET", "/api/job/jobs/no_such_job", viewer)
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json == {"error": "job 'b_job' does not exist", "type": "NotFound"}
    assert missing.json["error"] == "job 'no_such_job' does not exist"
    for path in (
        "/api/job/b_job/runs",
        "/api/job/b_job/placement",
        "/api/job/b_job/next-fire-times",
        "/api/job/b_job/disable",
        f"/api/job/b_job/runs/{teams.tasks['b_job']}/log",
    ):
        answer = teams.call("GET", path, viewer)
        assert answer.status_code == 404, (path, answer.get_data(as_text=True))
        assert "b_job" not in answer.json["error"] or "does not exist" in answer.json["error"]
    app = teams.call("GET", "/api/app/b_app", viewer)
    assert app.status_code == 404 and app.json["error"] == "app 'b_app' does not exist"
    sandbox = teams.call("GET", "/api/operate/sandbox?appName=b_app", viewer)
    assert sandbox.status_code == 404 and sandbox.json["error"] == "app 'b_app' does not exist"


def test_a_role_too_small_on_a_visible_app_is_403_and_writes_nothing(teams: Teams) -> None:
    viewer = teams.user("ann", (Role.VIEWER, "a_app"))
    before = _writes_nothing(teams)
    for method, path, body in (
        ("POST", "/api/job/trigger", "a_job"),
        ("POST", "/api/job/a_job/disable", None),
        ("POST", "/api/job/a_job/kill", None),
        ("DELETE", "/api/job/a_job/deregister", None),
        ("POST", "/api/app/a_app/disable", None),
        ("DELETE", "/api/app/a_app", None),
    ):
        answer = teams.call(method, path, viewer, data=body)
        assert answer.status_code == 403, (method, path, answer.get_data(as_text=True))
        assert answer.json["type"] == "Forbidden"
        assert "on app 'a_app' is needed" in answer.json["error"]
        assert "user:ann holds viewer there" in answer.json["error"]
    assert _writes_nothing(teams) == before


def test_an_operator_triggers_and_disables_its_apps_jobs_but_not_another_apps(
    teams: Teams,
) -> None:
    operator = teams.user("otto", (Role.OPERATOR, "a_app"))
    assert teams.call("POST", "/api/job/a_job/disable", operator).status_code == 204
    assert teams.call("POST", "/api/job/a_job/enable", operator).status_code == 204
    assert teams.call("POST", "/api/job/trigger", operator, data="a_job").status_code == 204
    before = _writes_nothing(teams)
    refused = teams.call("POST", "/api/job/trigger", operator, data="b_job")
    assert refused.status_code == 404 and refused.json["error"] == "job 'b_job' does not exist"
    task = teams.tasks["b_job"]
    kill = teams.call("POST", f"/api/job/tasks/{task}/kill", operator)
    assert kill.status_code == 404 and kill.json["error"] == f"task '{task}' is not running"
    assert teams.call("POST", "/api/app/b_app/disable", operator).status_code == 404
    assert teams.call("DELETE", "/api/job/a_job/deregister", operator).status_code == 403
    assert _writes_nothing(teams) == before
    own = teams.call("POST", f"/api/job/tasks/{teams.tasks['a_job']}/kill", operator)
    assert own.status_code == 202, own.get_data(as_text=True)


def test_an_editor_registers_only_under_its_app_and_cannot_move_a_job_out(teams: Teams) -> None:
    editor = teams.user("eddie", (Role.EDITOR, "a_app"))
    body = job_body("a_new_job", appName="a_app")
    assert teams.call("POST", "/api/job/register", editor, json=body).status_code == 204
    before = _writes_nothing(teams)
    # Under another team's app: the answer of an app that is not registered at all.
    other = teams.call(
        "POST", "/api/job/register", editor, json=job_body("sneaky", appName="b_app")
    )
    ghost = teams.call(
        "POST", "/api/job/register", editor, json=job_body("sneaky", appName="ghost_app")
    )
    assert other.status_code == ghost.status_code == 400
    assert other.json["error"] == ghost.json["error"].replace("ghost_app", "b_app")
    moved = teams.call(
        "PUT", "/api/job/update", editor, json={"jobName": "a_new_job", "appName": "b_app"}
    )
    assert moved.status_code == 400, moved.get_data(as_text=True)
    stolen = teams.call(
        "PUT", "/api/job/update", editor, json={"jobName": "b_job", "cron": "0 0 * * * ?"}
    )
    assert stolen.status_code == 404 and stolen.json["error"] == "job 'b_job' does not exist"
    assert teams.call("DELETE", "/api/app/a_app", editor).status_code == 403
    assert teams.call("POST", "/api/app", editor, json=app_body("c_app")).status_code == 403
    assert _writes_nothing(teams) == before
    assert teams.call("DELETE", "/api/job/a_new_job/deregister", editor).status_code == 204


def test_moving_a_job_needs_editor_on_both_apps(teams: Teams) -> None:
    both = teams.user("bea", (Role.EDITOR, "a_app"), (Role.VIEWER, "b_app"))
    moved = teams.call(
        "PUT", "/api/job/update", both, json={"jobName": "a_job", "appName": "b_app"}
    )
    assert moved.status_code == 403 and "editor on app 'b_app'" in moved.json["error"]
    teams.user("bob", (Role.EDITOR, "a_app"), (Role.EDITOR, "b_app"))
    allowed = teams.call(
        "PUT",
        "/api/job/update",
        _basic("bob", PASSWORD),
        json={"jobName": "a_job", "appName": "b_app"},
    )
    assert allowed.status_code == 204, allowed.get_data(as_text=True)
    assert teams.api.call("GET", "/api/job/jobs/a_job").json["appName"] == "b_app"


def test_a_token_acts_with_its_role_on_its_app_only(teams: Teams) -> None:
    teams.user("adm", (Role.APP_ADMIN, "a_app"))
    viewer_token = teams.token("adm", Role.VIEWER, "a_app")
    assert teams.call("GET", "/api/job/jobs/a_job", viewer_token).status_code == 200
    assert teams.call("POST", "/api/job/trigger", viewer_token, data="a_job").status_code == 403
    assert teams.call("GET", "/api/job/jobs/b_job", viewer_token).status_code == 404
    operator_token = teams.token("adm", Role.OPERATOR, "a_app")
    assert teams.call("POST", "/api/job/trigger", operator_token, data="a_job").status_code == 204


def test_the_settings_guest_reads_everything_and_writes_nothing(teams: Teams) -> None:
    assert teams.call("GET", "/api/job/jobs/b_job", GUEST).status_code == 200
    names = {j["jobName"] for j in teams.call("GET", "/api/job/jobs", GUEST).json}
    assert names == {"a_job", "b_job"}
    refused = teams.call("POST", "/api/job/trigger", GUEST, data="b_job")
    assert refused.status_code == 403 and refused.json["type"] == "Forbidden"
    assert teams.call("POST", "/api/app", GUEST, json=app_body("c_app")).status_code == 403
    assert teams.call("POST", "/api/operate/reconcile/implicit", GUEST).status_code == 403


def test_a_user_without_grants_sees_no_app_and_only_the_cron_preview(teams: Teams) -> None:
    nobody = teams.user("newbie")
    assert teams.call("GET", "/api/app/list", nobody).json == []
    assert teams.call("GET", "/api/job/jobs", nobody).json == []
    assert teams.call("GET", "/api/job/jobs/a_job", nobody).status_code == 404
    preview = teams.call("GET", "/api/cron/next-fire-times?cron=0/5+*+*+*+*+%3F", nobody)
    assert preview.status_code == 200 and len(preview.json["nextFireTimes"]) == 5


def test_the_webhook_url_is_whole_for_the_apps_editors_only(teams: Teams) -> None:
    update = {"jobName": "a_job", "notifyWebhookUrl": WEBHOOK}
    assert teams.api.call("PUT", "/api/job/update", update).status_code == 204
    viewer = teams.user("ann", (Role.VIEWER, "a_app"))
    editor = teams.user("eddie", (Role.EDITOR, "a_app"))
    hidden = teams.call("GET", "/api/job/jobs/a_job", viewer).json["notifyWebhookUrl"]
    assert hidden == "https://hooks.example.com/..."
    assert teams.call("GET", "/api/job/jobs/a_job", editor).json["notifyWebhookUrl"] == WEBHOOK
    listed = teams.call("GET", "/api/job/jobs", viewer).json
    assert [j["notifyWebhookUrl"] for j in listed] == ["https://hooks.example.com/..."]


# -- lists -----------------------------------------------------------------------------------


def test_app_and_job_lists_hold_only_the_callers_apps_plain_and_paged(teams: Teams) -> None:
    viewer = teams.user("ann", (Role.VIEWER, "a_app"))
    apps = teams.call("GET", "/api/app/list", viewer)
    assert [a["appName"] for a in apps.json] == ["a_app"]
    assert apps.headers["X-Total-Count"] == "1"
    jobs = teams.call("GET", "/api/job/jobs", viewer)
    assert [j["jobName"] for j in jobs.json] == ["a_job"]
    assert jobs.headers["X-Total-Count"] == "1"
    paged = teams.call("GET", "/api/job/jobs?limit=1", viewer)
    assert [j["jobName"] for j in paged.json["items"]] == ["a_job"]
    assert paged.json["nextCursor"] is None
    everything = teams.call("GET", "/api/job/jobs", ADMIN)
    assert [j["jobName"] for j in everything.json] == ["a_job", "b_job"]


def test_task_lists_hold_only_the_tasks_of_the_callers_apps(teams: Teams) -> None:
    viewer = teams.user("ann", (Role.VIEWER, "a_app"))
    running = teams.call("GET", "/api/job/tasks/running", viewer).json
    assert [t["id"] for t in running] == [teams.tasks["a_job"]]
    ready = teams.call("GET", "/api/job/tasks/ready", viewer).json
    assert [r["jobName"] for r in ready] == ["a_job"]
    assert len(teams.call("GET", "/api/job/tasks/running", ADMIN).json) == 2
    assert len(teams.call("GET", "/api/job/tasks/ready", ADMIN).json) == 2


def test_failover_list_holds_only_the_callers_apps(teams: Teams) -> None:
    access = teams.api.client.application.extensions["ejc_term_access"]
    for job in ("a_job", "b_job"):
        assert access.failover.add(str(TaskId.new(job, 0, TaskType.READY, "S1")))
    viewer = teams.user("ann", (Role.VIEWER, "a_app"))
    wait_for(lambda: len(teams.call("GET", "/api/job/tasks/failover", ADMIN).json) == 2, 5)
    entries = teams.call("GET", "/api/job/tasks/failover", viewer).json
    assert [e["taskInfo"]["jobName"] for e in entries] == ["a_job"]


def _seed_trace(engine: Any, tasks: dict[str, str], failed: set[str]) -> None:
    writer = TraceWriter(engine, idle_wait_s=0.05, linger_s=0.0)
    writer.start()
    try:
        at = datetime.now(UTC) - timedelta(hours=2)
        for n, (job, task) in enumerate(sorted(tasks.items())):
            writer.record_status(
                job_name=job, task_id=task, state="TASK_RUNNING", slave_id="S0", creation_time=at
            )
            record = ExecutionRecord(
                id=f"run-{n}",
                job_name=job,
                task_id=task,
                sharding_item=0,
                hostname="host-1",
                ip="10.0.0.1",
                start_time_ms=int(at.timestamp() * 1000),
            )
            ended = int(at.timestamp() * 1000) + 1000
            writer.record_execution(record.finished(ended, "boom" if job in failed else None))
        wait_for(lambda: writer.written == 2 * len(tasks), 20, message="trace rows written")
    finally:
        writer.stop(5.0)


def test_events_and_statistics_count_only_the_callers_apps(teams: Teams, tmp_path: Any) -> None:
    engine = create_trace_engine(f"sqlite:///{tmp_path}/trace.db")
    try:
        upgrade_to_head(engine)
        access = teams.api.client.application.extensions["ejc_term_access"]
        access.statistics = SimpleNamespace(engine=engine)
        _seed_trace(engine, teams.tasks, failed={"b_job"})
        viewer = teams.user("ann", (Role.VIEWER, "a_app"))

        executions = teams.call("GET", "/api/job/events/executions", viewer).json
        assert {r["jobName"] for r in executions["rows"]} == {"a_job"}
        assert executions["total"] == 1
        probe = teams.call("GET", "/api/job/events/executions?jobName=b_job", viewer).json
        assert probe == {"total": 0, "rows": []}
        traces = teams.call("GET", "/api/job/events/statusTraces", viewer).json
        assert {r["jobName"] for r in traces["rows"]} == {"a_job"} and traces["total"] == 1
        assert teams.call("GET", "/api/job/events/executions", ADMIN).json["total"] == 2

        online = teams.call("GET", "/api/job/statistics/tasks/results/online", viewer).json
        assert (online["successCount"], online["failedCount"]) == (1, 0)
        week = teams.call("GET", "/api/job/statistics/tasks/results/lastWeek", viewer).json
        assert (week["successCount"], week["failedCount"]) == (1, 0)
        types = teams.call("GET", "/api/job/statistics/jobs/type", viewer).json
        assert types == {"scriptJobCount": 1, "simpleJobCount": 0, "dataflowJobCount": 0}
        kinds = teams.call("GET", "/api/job/statistics/jobs/executionType", viewer).json
        assert kinds == {"transientJobCount": 1, "daemonJobCount": 0}
        assert teams.call("GET", "/api/job/statistics/jobs/type", ADMIN).json["scriptJobCount"] == 2
        for series in (
            "/api/job/statistics/tasks/results?since=last24hours",
            "/api/job/statistics/tasks/running?since=lastWeek",
            "/api/job/statistics/jobs/running?since=lastWeek",
            "/api/job/statistics/jobs/register",
        ):
            answer = teams.call("GET", series, viewer)
            assert answer.status_code == 200 and answer.json == [], series
    finally:
        engine.dispose()


def test_runs_of_a_job_are_read_only_by_its_apps_viewers(teams: Teams) -> None:
    viewer = teams.user("ann", (Role.VIEWER, "a_app"))
    runs = teams.call("GET", "/api/job/a_job/runs", viewer)
    assert runs.status_code == 200 and [r["taskId"] for r in runs.json["runs"]] == [
        teams.tasks["a_job"]
    ]
    # A `before` naming another app's run answers as for a job that does not exist.
    other = teams.call("GET", f"/api/job/b_job/runs?before={teams.tasks['b_job']}", viewer)
    assert other.status_code == 404 and other.json["error"] == "job 'b_job' does not exist"

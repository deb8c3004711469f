"""The audit log through the API (issue 26) on a real ZooKeeper and a real SQLite trace
database: one record per change and per refusal with the right fields, `X-Request-Id`, the
filters and cursor of `GET /api/audit`, retention, the JSON lines file and `audit_mode`."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from sqlalchemy import create_engine

from scheduler.api import create_app
from scheduler.api.audit import ACTIONS, action_of
from scheduler.leader.mesos.operator_actions import RecordedActions
from scheduler.leader.statistics import create_trace_engine, upgrade_to_head
from scheduler.leader.statistics.audit import AuditEntry, AuditQuery
from scheduler.leader.statistics.audit_log import AuditLog
from scheduler.model.settings import load_settings
from scheduler.replica.term import LeaderContext, Term
from scheduler.storage.registry import Registry
from tests.integration.api.conftest import ADMIN, APP, GUEST, JOB, Api
from tests.support.waiting import wait_for

TERM = 7


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def _api(zk_client: KazooClient, namespace: str, audit: AuditLog, **settings: str) -> Api:
    registry = Registry(zk_client, namespace)
    registry.ensure("/ha/election")
    node = zk_client.create(registry.abs("/ha/election/n_"), b"me", ephemeral=True, sequence=True)
    term = Term(TERM, node, zk_client.client_id[0])
    ctx = LeaderContext(
        load_settings({}, {}, {"time_zone": "UTC", **settings}), registry, term, lambda app: None
    )
    actions = RecordedActions()
    app = create_app(ctx, actions, audit=audit)
    return Api(app.test_client(), registry, actions, term)


@pytest.fixture
def audit(tmp_path: Path) -> Iterator[AuditLog]:
    engine = create_trace_engine(f"sqlite:///{tmp_path}/trace.db")
    upgrade_to_head(engine)
    log = AuditLog(file_path=str(tmp_path / "audit.jsonl"), idle_wait_s=0.05)
    log.open(engine)
    log.start()
    yield log
    log.stop(5.0)
    engine.dispose()


@pytest.fixture
def api(zk_client: KazooClient, zk_namespace: str, audit: AuditLog) -> Api:
    return _api(zk_client, zk_namespace, audit)


def _records(api: Api, audit: AuditLog, count: int, query: str = "") -> list[dict[str, Any]]:
    """The newest records once `count` are written (newest first)."""
    wait_for(lambda: audit.pending == 0 and audit.written >= count, 10, message="records written")
    answer = api.call("GET", f"/api/audit?limit=1000{query}")
    assert answer.status_code == 200, answer.json
    items: list[dict[str, Any]] = answer.json["items"]
    return items


def test_each_change_makes_one_record_with_its_request_id_term_and_changes(
    api: Api, audit: AuditLog
) -> None:
    ids = []
    for method, path, body in [
        ("POST", "/api/app", APP),
        ("POST", "/api/job/register", JOB),
        ("PUT", "/api/job/update", {"jobName": "demo_job", "cron": "0/7 * * * * ?"}),
        ("POST", "/api/job/demo_job/disable", None),
        ("POST", "/api/job/demo_job/enable", None),
        ("DELETE", "/api/job/demo_job/deregister", None),
    ]:
        answer = api.call(method, path, body)
        assert answer.status_code == 204, (path, answer.json)
        ids.append(answer.headers["X-Request-Id"])
    # A read is no change: no record, but a request id all the same.
    read = api.call("GET", "/api/app/demo_app")
    assert read.status_code == 200 and len(read.headers["X-Request-Id"]) == 32
    records = _records(api, audit, 6)
    assert [r["action"] for r in records] == [
        "job.deregister",
        "job.enable",
        "job.disable",
        "job.update",
        "job.register",
        "app.create",
    ]
    assert [r["requestId"] for r in records] == ids[::-1]
    assert len(set(ids)) == 6
    for record in records:
        assert record["actor"] == "user:root"
        assert record["source"] == "127.0.0.1"
        assert record["outcome"] == "ok" and record["status"] == 204
        assert record["term"] == TERM
        assert record["app"] == "demo_app"
    assert records[0]["resource"] == "job/demo_job" and records[0]["job"] == "demo_job"
    update = records[3]["changes"]
    assert update["before"]["cron"] == "0/5 * * * * ?"
    assert update["after"]["cron"] == "0/7 * * * * ?"
    assert records[4]["changes"]["before"] is None
    assert records[0]["changes"]["after"] is None
    assert "changes" not in records[2]  # a disable changes no configuration


def test_a_failed_change_is_an_error_record_and_a_refused_one_denied(
    api: Api, audit: AuditLog
) -> None:
    # Reached its handler, refused there: an error record with its status.
    assert api.call("POST", "/api/job/register", {**JOB, "appName": "no_app"}).status_code == 400
    # No credentials, wrong password, guest writing: denied, each named as well as it can be.
    assert api.call("POST", "/api/app", APP, headers={}).status_code == 401
    assert api.call("POST", "/api/app", APP, headers=_basic("mallory", "x")).status_code == 401
    assert api.call("POST", "/api/app", APP, headers=GUEST).status_code == 403
    # A read refused for want of credentials is recorded too.
    assert api.call("GET", "/api/app/list", headers={}).status_code == 401
    records = _records(api, audit, 5)
    assert [(r["actor"], r["outcome"], r["status"], r["action"]) for r in records] == [
        ("unknown", "denied", 401, "apps.list_apps"),
        ("user:guest", "denied", 403, "app.create"),
        ("user:mallory", "denied", 401, "app.create"),
        ("unknown", "denied", 401, "app.create"),
        ("user:root", "error", 400, "job.register"),
    ]
    assert api.snapshot().get("/config/app/demo_app") is None


def test_the_list_filters_and_pages_with_a_cursor(api: Api, audit: AuditLog) -> None:
    assert api.call("POST", "/api/app", APP).status_code == 204
    assert api.call("POST", "/api/job/register", JOB).status_code == 204
    for _ in range(3):
        assert api.call("POST", "/api/job/trigger", raw="demo_job").status_code == 204
    assert api.call("POST", "/api/app", APP, headers=GUEST).status_code == 403
    records = _records(api, audit, 6)
    assert len(records) == 6
    seen = []
    cursor = ""
    while True:
        answer = api.call("GET", f"/api/audit?limit=2{cursor}")
        assert answer.status_code == 200
        seen += answer.json["items"]
        if answer.json["nextCursor"] is None:
            break
        cursor = f"&cursor={answer.json['nextCursor']}"
    assert [r["requestId"] for r in seen] == [r["requestId"] for r in records]
    triggers = api.call("GET", "/api/audit?action=job.trigger&job=demo_job").json["items"]
    assert len(triggers) == 3 and {r["action"] for r in triggers} == {"job.trigger"}
    denied = api.call("GET", "/api/audit?outcome=denied&actor=user:guest").json["items"]
    assert [r["status"] for r in denied] == [403]
    assert api.call("GET", "/api/audit?app=other").json["items"] == []
    newest = records[0]["time"]
    assert api.call("GET", f"/api/audit?since={newest}").json["items"][0] == records[0]
    until = api.call("GET", f"/api/audit?until={records[-1]['time']}").json["items"]
    assert until == []


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("outcome=maybe", "outcome"),
        ("since=yesterday", "since"),
        ("until=2026-13-01T00:00:00Z", "until"),
        ("cursor=bm90LWEtY3Vyc29y", "cursor"),
        ("actor=" + "a" * 321, "actor"),
        ("job=%00", "job"),
        ("colour=blue", "colour"),
        ("app=a&app=b", "app"),
    ],
)
def test_a_bad_parameter_is_a_400_naming_it(
    zk_client: KazooClient, zk_namespace: str, query: str, named: str
) -> None:
    # Checked before the database is asked: an audit log without one answers the same 400.
    api = _api(zk_client, zk_namespace, AuditLog())
    answer = api.call("GET", f"/api/audit?{query}")
    assert answer.status_code == 400
    assert named in answer.json["fields"]


def test_a_guest_reads_no_record(api: Api, audit: AuditLog) -> None:
    assert api.call("POST", "/api/app", APP).status_code == 204
    _records(api, audit, 1)
    answer = api.call("GET", "/api/audit", headers=GUEST)
    assert answer.status_code == 200
    assert answer.json["items"] == []


def test_the_json_lines_file_holds_each_record_with_secrets_masked(
    api: Api, audit: AuditLog, tmp_path: Path
) -> None:
    job = {**JOB, "notifyWebhookUrl": "https://hooks.example.com/x?key=s3cret"}
    assert api.call("POST", "/api/app", APP).status_code == 204
    assert api.call("POST", "/api/job/register", job).status_code == 204
    lines = (tmp_path / "audit.jsonl").read_text().splitlines()
    assert [json.loads(line)["action"] for line in lines] == ["app.create", "job.register"]
    assert "s3cret" not in lines[1]
    registered = json.loads(lines[1])
    assert registered["changes"]["after"]["notifyWebhookUrl"] == "https://hooks.example.com/***"
    stored = _records(api, audit, 2)[0]
    assert stored == registered


def test_retention_deletes_only_older_records(audit: AuditLog) -> None:
    now = datetime(2026, 11, 26, 12, 0, 0)
    for age_days in (200, 91, 89, 1):
        audit.record(
            AuditEntry.make(
                time=now - timedelta(days=age_days),
                actor="user:root",
                source="127.0.0.1",
                action="job.trigger",
                resource="job/demo_job",
                outcome="ok",
                status=204,
                request_id=f"r{age_days}",
                term=1,
            )
        )
    wait_for(lambda: audit.written == 4, 10, message="records written")
    assert audit.prune(90, now=now) == 2

    left, _ = audit.query(AuditQuery(limit=10))
    assert [entry.request_id for entry in left] == ["r1", "r89"]


def _broken_audit(tmp_path: Path) -> AuditLog:
    """An audit log whose database cannot be opened (its folder does not exist)."""
    engine = create_engine(f"sqlite:///{tmp_path}/missing/folder/trace.db")
    log = AuditLog(idle_wait_s=0.05)
    log.open(engine)
    log.start()
    return log


def test_enforced_refuses_a_change_it_cannot_audit_and_writes_nothing(
    zk_client: KazooClient, zk_namespace: str, tmp_path: Path
) -> None:
    broken = _broken_audit(tmp_path)
    try:
        api = _api(zk_client, zk_namespace, broken, audit_mode="enforced")
        before = api.snapshot()
        answer = api.call("POST", "/api/app", APP)
        assert answer.status_code == 503
        assert answer.json["type"] == "AuditUnavailable"
        assert "X-Request-Id" in answer.headers
        assert api.snapshot() == before
        # Reads go on.
        assert api.call("GET", "/api/app/list").status_code == 200
    finally:
        broken.stop(1.0)


def test_best_effort_lets_the_change_through_and_counts_the_failure(
    zk_client: KazooClient, zk_namespace: str, tmp_path: Path
) -> None:
    broken = _broken_audit(tmp_path)
    try:
        api = _api(zk_client, zk_namespace, broken)
        assert api.call("POST", "/api/app", APP).status_code == 204
        assert api.call("GET", "/api/app/demo_app").status_code == 200
        wait_for(lambda: broken.failures >= 1, 10, message="the failed write counted")
        assert broken.counters()["written"] == 0
        assert broken.pending == 1  # held for a retry
    finally:
        broken.stop(0.5)


def test_without_a_database_the_list_is_a_503_naming_the_problem(
    zk_client: KazooClient, zk_namespace: str
) -> None:
    api = _api(zk_client, zk_namespace, AuditLog())
    answer = api.call("GET", "/api/audit", headers=ADMIN)
    assert answer.status_code == 503
    assert answer.json["type"] == "AuditUnavailable"
    assert "event_trace_rdb_url=none" in answer.json["error"]


PASSWORD = "correct horse battery"


def test_another_apps_resource_is_a_denied_record_and_app_admins_read_their_apps_only(
    api: Api, audit: AuditLog
) -> None:
    for name in ("app_a", "app_b"):
        assert api.call("POST", "/api/app", {**APP, "appName": name}).status_code == 204
    job_a = {**JOB, "jobName": "job_a", "appName": "app_a"}
    assert api.call("POST", "/api/job/register", job_a).status_code == 204
    for user, role, app_name in (
        ("alice", "app-admin", "app_a"),
        ("bob", "app-admin", "app_b"),
        ("carol", "viewer", "app_a"),
    ):
        body = {"name": user, "password": PASSWORD}
        assert api.call("POST", "/api/access/users", body).status_code == 201
        grant = {"principal": f"user:{user}", "role": role, "app": app_name}
        assert api.call("POST", "/api/access/grants", grant).status_code == 201
    alice, bob, carol = (_basic(user, PASSWORD) for user in ("alice", "bob", "carol"))
    # Bob probes app_a's job (hidden: 404), and a job that exists nowhere (no record: a read).
    assert api.call("GET", "/api/job/jobs/job_a", headers=bob).status_code == 404
    assert api.call("POST", "/api/job/job_a/disable", headers=bob).status_code == 404
    assert api.call("GET", "/api/job/jobs/nosuch", headers=bob).status_code == 404
    # Carol sees app_a but may not trigger there: 403.
    assert api.call("POST", "/api/job/trigger", raw="job_a", headers=carol).status_code == 403
    total = 2 + 1 + 3 + 3 + 3  # apps, job, users, grants, refusals
    everything = _records(api, audit, total)
    assert len(everything) == total
    refusals = [(r["actor"], r["status"], r["resource"], r["app"]) for r in everything[:3]]
    assert refusals == [
        ("user:carol", 403, "app/app_a", "app_a"),
        ("user:bob", 404, "job/job_a", "app_a"),
        ("user:bob", 404, "job/job_a", "app_a"),
    ]
    assert {r["outcome"] for r in everything[:3]} == {"denied"}
    # Alice reads app_a's records only (her app's job and the refusals there), Bob app_b's.
    seen_by_alice = api.call("GET", "/api/audit?limit=100", headers=alice).json["items"]
    assert seen_by_alice and {r["app"] for r in seen_by_alice} == {"app_a"}
    assert [r["requestId"] for r in seen_by_alice] == [
        r["requestId"] for r in everything if r["app"] == "app_a"
    ]
    seen_by_bob = api.call("GET", "/api/audit?limit=100", headers=bob).json["items"]
    assert {r["app"] for r in seen_by_bob} == {"app_b"}
    assert api.call("GET", "/api/audit", headers=carol).json["items"] == []
    # Asking for another app's records gives none, never an error that confirms it.
    assert api.call("GET", "/api/audit?app=app_a", headers=bob).json["items"] == []


def test_a_token_is_named_by_its_id_and_a_login_by_the_name_it_tried(
    api: Api, audit: AuditLog
) -> None:
    assert api.call("POST", "/api/app", APP).status_code == 204
    made = api.call("POST", "/api/access/tokens", {"name": "ci", "role": "operator", "app": "*"})
    assert made.status_code == 201, made.json
    token, token_id = made.json["token"], made.json["id"]
    bearer = {"Authorization": f"Bearer {token}"}
    assert api.call("POST", "/api/app/demo_app/disable", headers=bearer).status_code == 204
    wrong = "ejc_" + "0" * 12 + "_" + "1" * 48
    assert (
        api.call(
            "POST", "/api/app/demo_app/enable", headers={"Authorization": f"Bearer {wrong}"}
        ).status_code
        == 401
    )
    login = {"user": "mallory", "password": "guess"}
    assert api.call("POST", "/api/session", login, headers={}).status_code == 401
    records = _records(api, audit, 5)
    assert [(r["actor"], r["action"], r["outcome"]) for r in records[:3]] == [
        ("user:mallory", "session.login", "denied"),
        ("token:" + "0" * 12, "app.enable", "denied"),
        (f"token:{token_id}", "app.disable", "ok"),
    ]
    created = records[3]
    assert created["action"] == "token.create" and created["actor"] == "user:root"
    # The token's secret is in no record, nor in the file.
    secret = token.rsplit("_", 1)[1]
    assert secret not in json.dumps(records)


def test_with_auth_off_the_actor_is_anonymous(
    zk_client: KazooClient, zk_namespace: str, audit: AuditLog
) -> None:
    api = _api(zk_client, zk_namespace, audit, auth_enabled="false")
    assert api.call("POST", "/api/app", APP, headers={}).status_code == 204
    records = _records(api, audit, 1)
    assert [(r["actor"], r["action"]) for r in records] == [("anonymous", "app.create")]


def test_every_write_route_has_a_named_action_and_every_name_a_route(api: Api) -> None:
    app = api.client.application
    unnamed = []
    for rule in app.url_map.iter_rules():
        for method in sorted((rule.methods or set()) - {"GET", "HEAD", "OPTIONS"}):
            if action_of(rule.endpoint, method, rule.rule) == rule.endpoint:
                unnamed.append(f"{method} {rule.rule} ({rule.endpoint})")
    # A new write route needs its line in ACTIONS (api/audit.py) and in docs/security.md.
    assert unnamed == []
    assert sorted(set(ACTIONS) - set(app.view_functions)) == []
    documented = Path(__file__).resolve().parents[3].joinpath("docs/security.md").read_text()
    assert all(f"`{name}`" in documented for name in set(ACTIONS.values()))

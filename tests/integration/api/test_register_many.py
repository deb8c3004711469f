"""`POST /api/job/register-many` (issue 29): many jobs in one request, all or none, against a
real ZooKeeper."""

from __future__ import annotations

import base64
import time
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from werkzeug.security import generate_password_hash

from scheduler.api import create_app
from scheduler.api.job_batches import MAX_JOBS_PER_REQUEST
from scheduler.leader.mesos.operator_actions import RecordedActions
from scheduler.leader.statistics import create_trace_engine, upgrade_to_head
from scheduler.leader.statistics.audit_log import AuditLog
from scheduler.model.access.records import UserRecord, encode_grant, encode_user, new_grant_id
from scheduler.model.access.roles import Grant, Role
from scheduler.model.settings import load_settings
from scheduler.replica.term import LeaderContext, Term
from scheduler.storage import layout
from scheduler.storage.config_store import JOBS_TXN_BUDGET_BYTES
from scheduler.storage.layout import JOBS
from scheduler.storage.registry import Registry
from tests.integration.api.conftest import APP, JOB, Api, make_api
from tests.support.waiting import wait_for

ROUTE = "/api/job/register-many"
PASSWORD = "editor-password-1"


def _job(name: str, **fields: Any) -> dict[str, Any]:
    return {**JOB, "jobName": name, **fields}


def _jobs(count: int, prefix: str = "bulk", **fields: Any) -> list[dict[str, Any]]:
    return [_job(f"{prefix}_{n:04d}", **fields) for n in range(count)]


def _ready(api: Api) -> Api:
    assert api.call("POST", "/api/app", APP).status_code == 204
    return api


def test_registers_every_job_of_the_body_in_one_request(api: Api) -> None:
    _ready(api)
    answer = api.call("POST", ROUTE, {"jobs": _jobs(250)})
    assert answer.status_code == 200, answer.json
    assert answer.json == {"registered": 250}
    assert api.registry.children(JOBS) == [f"bulk_{n:04d}" for n in range(250)]
    # Each reads back as the single registration would have written it.
    one = api.call("GET", "/api/job/jobs/bulk_0007").json
    assert one["cron"] == JOB["cron"] and one["shardingTotalCount"] == 3
    # A bare array is read the same way.
    assert api.call("POST", ROUTE, _jobs(2, "bare")).json == {"registered": 2}
    assert "bare_0001" in api.registry.children(JOBS)


def test_one_bad_job_in_the_middle_refuses_the_request_and_writes_nothing(api: Api) -> None:
    _ready(api)
    jobs: list[Any] = _jobs(9)
    jobs[4] = _job("bulk_0004", cron="not a cron")
    jobs[6] = {**_job("bulk_0006"), "shardingTotalCount": -1, "memoryMB": "x"}
    jobs[7] = "just a string"
    before = api.snapshot()
    refused = api.call("POST", ROUTE, {"jobs": jobs})
    assert refused.status_code == 400
    body = refused.json
    assert body["type"] == "InvalidRequest"
    assert [(j["index"], j["jobName"]) for j in body["jobs"]] == [
        (4, "bulk_0004"),
        (6, "bulk_0006"),
        (7, None),
    ]
    assert "cron" in body["jobs"][0]["fields"]
    assert {"shardingTotalCount", "memoryMB"} <= set(body["jobs"][1]["fields"])
    assert "jobs[4].cron" in body["fields"] and "jobs[6].memoryMB" in body["fields"]
    assert "3 of the 9 jobs are invalid" in body["error"] and "#4 'bulk_0004'" in body["error"]
    assert api.snapshot() == before


def test_a_job_too_large_or_firing_too_often_is_named_and_nothing_is_written(
    zk_client: KazooClient, zk_namespace: str
) -> None:
    api = _ready(
        make_api(zk_client, zk_namespace, max_job_bytes="2048", min_fire_interval_seconds="10")
    )
    jobs = _jobs(3, cron="0 0 3 * * ?")
    jobs[1] = _job("bulk_0001", jobParameter="x" * 3000)
    jobs[2] = _job("bulk_0002", cron="* * * * * ?")
    before = api.snapshot()
    refused = api.call("POST", ROUTE, {"jobs": jobs})
    assert refused.status_code == 400, refused.json
    listed = {j["index"]: j for j in refused.json["jobs"]}
    assert listed[1]["type"] == "TooLarge" and listed[1]["quota"] == "max_job_bytes"
    assert "min_fire_interval_seconds" in listed[2]["fields"]["cron"]
    assert 0 not in listed
    assert api.snapshot() == before


def test_names_taken_or_repeated_answer_409_naming_them_and_write_nothing(api: Api) -> None:
    _ready(api)
    assert api.call("POST", "/api/job/register", _job("taken")).status_code == 204
    jobs = [_job("fresh"), _job("taken"), _job("twice"), _job("other"), _job("twice")]
    before = api.snapshot()
    refused = api.call("POST", ROUTE, {"jobs": jobs})
    assert refused.status_code == 409
    assert refused.json["type"] == "Conflict"
    assert [(j["index"], j["jobName"]) for j in refused.json["jobs"]] == [
        (1, "taken"),
        (2, "twice"),
        (4, "twice"),
    ]
    assert "already exists" in refused.json["jobs"][0]["error"]
    assert "named 2 times" in refused.json["jobs"][1]["error"]
    assert api.snapshot() == before


def test_a_disabled_app_refuses_its_jobs_with_409(api: Api) -> None:
    _ready(api)
    assert api.call("POST", "/api/app/demo_app/disable").status_code == 204
    refused = api.call("POST", ROUTE, {"jobs": _jobs(2)})
    assert refused.status_code == 409
    assert "disabled" in refused.json["jobs"][0]["error"]
    assert api.registry.children(JOBS) == []


def test_a_stale_disable_node_of_a_new_name_is_removed_with_the_write(api: Api) -> None:
    _ready(api)
    api.registry.ensure("/state/disable/job/bulk_0001")
    assert api.call("POST", ROUTE, {"jobs": _jobs(3)}).status_code == 200
    assert "bulk_0001" not in api.registry.children("/state/disable/job")
    assert api.call("GET", "/api/job/bulk_0001/disable").json is False


def test_size_limits_count_bytes_and_shape(zk_client: KazooClient, zk_namespace: str) -> None:
    api = _ready(make_api(zk_client, zk_namespace))
    before = api.snapshot()
    too_many = api.call("POST", ROUTE, {"jobs": _jobs(MAX_JOBS_PER_REQUEST + 1)})
    assert too_many.status_code == 413
    assert too_many.json["type"] == "RequestTooLarge" and "at most 1000" in too_many.json["error"]
    # 1,000 jobs of 1 KiB each do not fit one transaction: refused whole, the message says
    # how many would; that many are registered by one request.
    big = _jobs(1000, jobParameter="p" * 400)
    refused = api.call("POST", ROUTE, {"jobs": big})
    assert refused.status_code == 413, refused.json
    assert f"over the {JOBS_TXN_BUDGET_BYTES}" in refused.json["error"]
    fit = int(refused.json["error"].split("the first ")[1].split()[0])
    assert 500 < fit < 1000
    assert api.snapshot() == before
    assert api.call("POST", ROUTE, {"jobs": big[:fit]}).json == {"registered": fit}
    assert api.call("POST", ROUTE, {"jobs": big[fit : fit + 1]}).json == {"registered": 1}
    for body, field in (({"jobs": []}, "jobs"), ({"jobs": {}}, "jobs"), ({"job": []}, "job")):
        refused = api.call("POST", ROUTE, body)
        assert refused.status_code == 400, body
        assert field in refused.json["fields"]
    # 1,000 ordinary jobs fit one request.
    assert api.call("POST", ROUTE, {"jobs": _jobs(1000, "more")}).json == {"registered": 1000}
    assert len(api.registry.children(JOBS)) == fit + 1001


def test_max_jobs_holds_for_the_whole_request(zk_client: KazooClient, zk_namespace: str) -> None:
    api = _ready(make_api(zk_client, zk_namespace, max_jobs="5"))
    assert api.call("POST", "/api/job/register", _job("first")).status_code == 204
    before = api.snapshot()
    refused = api.call("POST", ROUTE, {"jobs": _jobs(5)})
    assert refused.status_code == 409
    assert refused.json["quota"] == "max_jobs" and "4 more fit, not 5" in refused.json["error"]
    assert api.snapshot() == before
    assert api.call("POST", ROUTE, {"jobs": _jobs(4)}).json == {"registered": 4}


def test_unknown_calendar_or_pool_is_named_for_its_job(api: Api) -> None:
    _ready(api)
    jobs = _jobs(3)
    jobs[0]["excludeCalendars"] = ["no_such_calendar"]
    jobs[2]["pool"] = "no_such_pool"
    refused = api.call("POST", ROUTE, {"jobs": jobs})
    assert refused.status_code == 400
    listed = {j["index"]: j["fields"] for j in refused.json["jobs"]}
    assert set(listed) == {0, 2}
    assert "excludeCalendars" in listed[0] and "pool" in listed[2]
    assert api.registry.children(JOBS) == []


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def _user(api: Api, name: str, *grants: tuple[Role, str]) -> dict[str, str]:
    """A stored user with `grants` (as the access API stores them); its Basic header."""
    client, registry = api.registry.client, api.registry
    record = UserRecord(name, generate_password_hash(PASSWORD), int(time.time() * 1000))
    client.create(registry.abs(layout.access_user_path(name)), encode_user(record), makepath=True)
    for role, app in grants:
        grant = Grant(new_grant_id(), f"user:{name}", role, app)
        client.create(
            registry.abs(layout.access_grant_path(grant.id)), encode_grant(grant), makepath=True
        )
    api.client.application.extensions["ejc_authenticator"].access.refresh(registry)
    return _basic(name, PASSWORD)


def test_the_caller_needs_editor_on_every_app_of_the_request(api: Api) -> None:
    _ready(api)
    assert api.call("POST", "/api/app", {**APP, "appName": "other_app"}).status_code == 204
    ed = _user(api, "ed", (Role.EDITOR, "demo_app"), (Role.VIEWER, "other_app"))
    mixed = [_job("mine"), _job("theirs", appName="other_app")]
    refused = api.call("POST", ROUTE, {"jobs": mixed}, headers=ed)
    assert refused.status_code == 403, refused.json
    assert "other_app" in refused.json["error"]
    assert api.registry.children(JOBS) == []
    # An app the caller does not see reads as one that does not exist (400 for that job).
    hidden = api.call("POST", ROUTE, {"jobs": [_job("x", appName="nobody_app")]}, headers=ed)
    assert hidden.status_code == 400 and "appName" in hidden.json["jobs"][0]["fields"]
    assert api.call("POST", ROUTE, {"jobs": [_job("mine")]}, headers=ed).status_code == 200
    guest = api.call("POST", ROUTE, {"jobs": [_job("g")]}, headers=_basic("guest", "guest"))
    assert guest.status_code == 403
    assert api.registry.children(JOBS) == ["mine"]


def test_one_audit_record_names_the_count_and_the_jobs(
    zk_client: KazooClient, zk_namespace: str, tmp_path: Path
) -> None:
    engine = create_trace_engine(f"sqlite:///{tmp_path}/trace.db")
    upgrade_to_head(engine)
    audit = AuditLog(file_path=str(tmp_path / "audit.jsonl"), idle_wait_s=0.05)
    audit.open(engine)
    audit.start()
    try:
        registry = Registry(zk_client, zk_namespace)
        registry.ensure("/ha/election")
        node = zk_client.create(
            registry.abs("/ha/election/n_"), b"me", ephemeral=True, sequence=True
        )
        ctx = LeaderContext(
            load_settings({}, {}, {"time_zone": "UTC"}),
            registry,
            Term(1, node, zk_client.client_id[0]),
            lambda app: None,
        )
        app = create_app(ctx, RecordedActions(), audit=audit)
        api = _ready(Api(app.test_client(), registry, RecordedActions(), ctx.term))
        assert api.call("POST", ROUTE, {"jobs": _jobs(3)}).status_code == 200
        assert api.call("POST", ROUTE, {"jobs": [_job("bad", cron="x")]}).status_code == 400
        wait_for(lambda: audit.pending == 0 and audit.written >= 3, 10, message="written")
        records = api.call("GET", "/api/audit?action=job.register-many").json["items"]
        assert [(r["outcome"], r["status"]) for r in records] == [("error", 400), ("ok", 200)]
        record = records[1]
        assert record["app"] == "demo_app" and record["resource"] == "jobs"
        assert record["changes"]["before"] is None
        assert record["changes"]["after"] == {
            "count": 3,
            "apps": ["demo_app"],
            "jobNames": ["bulk_0000", "bulk_0001", "bulk_0002"],
        }
    finally:
        audit.stop(5.0)
        engine.dispose()

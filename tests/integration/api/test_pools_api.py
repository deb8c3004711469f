"""The pools API (issue 28) over a real ZooKeeper: the contract's routes, bad input that
writes nothing, the 409s and 400s that keep a job's runs placeable, and the roles."""

from __future__ import annotations

import base64
import time
from typing import Any

import pytest
from werkzeug.security import generate_password_hash

from scheduler.model.access.records import UserRecord, encode_grant, encode_user, new_grant_id
from scheduler.model.access.roles import Grant, Role
from scheduler.storage import layout
from tests.integration.api.conftest import Api
from tests.support.bodies import app_body, job_body

PASSWORD = "pool-pass-1"


def _user(api: Api, name: str, *grants: tuple[Role, str]) -> dict[str, str]:
    """A stored user with `grants`; its Basic auth header."""
    client = api.registry.client
    record = UserRecord(name, generate_password_hash(PASSWORD), int(time.time() * 1000))
    client.create(
        api.registry.abs(layout.access_user_path(name)), encode_user(record), makepath=True
    )
    for role, app in grants:
        grant = Grant(new_grant_id(), f"user:{name}", role, app)
        client.create(
            api.registry.abs(layout.access_grant_path(grant.id)), encode_grant(grant), makepath=True
        )
    api.client.application.extensions["ejc_authenticator"].access.refresh(api.registry)
    token = base64.b64encode(f"{name}:{PASSWORD}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def _pools(api: Api) -> dict[str, bytes]:
    return {k: v for k, v in api.snapshot().items() if k.startswith(layout.POOLS)}


@pytest.fixture
def db(api: Api) -> Api:
    created = api.call("POST", "/api/pool", {"poolName": "db", "size": 3})
    assert created.status_code == 201, created.get_json()
    assert created.get_json() == {"poolName": "db", "size": 3, "inUse": 0, "waiting": 0, "jobs": []}
    return api


def test_a_pool_is_created_read_listed_resized_and_deleted(db: Api) -> None:
    assert db.call("POST", "/api/app", app_body("etl")).status_code < 300
    job = job_body("load", appName="etl", pool="db", poolSlots=1, shardingTotalCount=2)
    assert db.call("POST", "/api/job/register", job).status_code < 300
    shown = db.call("GET", "/api/pool/db").get_json()
    assert shown == {"poolName": "db", "size": 3, "inUse": 0, "waiting": 0, "jobs": ["load"]}
    assert db.call("POST", "/api/pool", {"poolName": "web", "size": 1}).status_code == 201
    page = db.call("GET", "/api/pools?limit=1").get_json()
    assert [p["poolName"] for p in page["items"]] == ["db"] and page["nextCursor"]
    rest = db.call("GET", f"/api/pools?limit=1&cursor={page['nextCursor']}").get_json()
    assert [p["poolName"] for p in rest["items"]] == ["web"]
    resized = db.call("PUT", "/api/pool/db", {"size": 5})
    assert resized.status_code == 200 and resized.get_json()["size"] == 5
    assert db.call("PUT", "/api/pool", {"poolName": "db", "size": 4}).get_json()["size"] == 4
    assert db.call("GET", "/api/pool/db").get_json()["size"] == 4
    # In use by a job: refused, naming it; once the job leaves the pool, deleted.
    refused = db.call("DELETE", "/api/pool/db")
    assert refused.status_code == 409 and "load" in refused.get_json()["error"]
    left = job_body("load", appName="etl", shardingTotalCount=2, pool=None, poolSlots=None)
    assert db.call("PUT", "/api/job/update", left).status_code < 300
    assert db.call("DELETE", "/api/pool/db").status_code == 204
    assert db.call("GET", "/api/pool/db").status_code == 404
    assert db.call("DELETE", "/api/pool/db").status_code == 404
    assert list(_pools(db)) == [layout.POOLS, layout.pool_path("web")]


def test_a_resize_below_one_run_of_a_member_job_is_refused_naming_it(db: Api) -> None:
    assert db.call("POST", "/api/app", app_body("etl")).status_code < 300
    job = job_body("wide", appName="etl", pool="db", poolSlots=1, shardingTotalCount=3)
    assert db.call("POST", "/api/job/register", job).status_code < 300
    before = _pools(db)
    refused = db.call("PUT", "/api/pool/db", {"size": 2})
    assert refused.status_code == 400
    body = refused.get_json()
    assert "wide" in body["error"] and "3 slots" in body["error"]
    assert _pools(db) == before
    assert db.call("PUT", "/api/pool/db", {"size": 3}).status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "words"),
    [
        ("POST", "/api/pool", {"poolName": "db", "size": 2}, 409, "already exists"),
        ("POST", "/api/pool", {"poolName": "x", "size": 0}, 400, "size"),
        ("POST", "/api/pool", {"poolName": "x", "size": 10**9}, 400, "size"),
        ("POST", "/api/pool", {"poolName": "x", "size": "three"}, 400, "size"),
        ("POST", "/api/pool", {"poolName": "x", "size": True}, 400, "size"),
        ("POST", "/api/pool", {"poolName": "../x", "size": 1}, 400, "poolName"),
        ("POST", "/api/pool", {"poolName": "x" * 500, "size": 1}, 400, "poolName"),
        ("POST", "/api/pool", {"poolName": "x", "size": 1, "inUse": 0}, 400, "inUse"),
        ("POST", "/api/pool", {"poolName": "x", "size": 1, "other": 1}, 400, "other"),
        ("POST", "/api/pool", [1, 2], 400, ""),
        ("PUT", "/api/pool/db", {"poolName": "web", "size": 1}, 400, "poolName"),
        ("PUT", "/api/pool/none", {"size": 1}, 404, "does not exist"),
        ("PUT", "/api/pool", {"poolName": "none", "size": 1}, 404, "does not exist"),
    ],
)
def test_bad_input_is_refused_naming_the_problem_and_writes_nothing(
    db: Api, method: str, path: str, body: Any, status: int, words: str
) -> None:
    before = _pools(db)
    answer = db.call(method, path, body)
    assert answer.status_code == status, answer.get_json()
    got = answer.get_json()
    assert words in got["error"] + " " + " ".join(got.get("fields", {}) or {})
    assert _pools(db) == before


def test_max_pools_is_a_quota(db: Api) -> None:
    pools = db.client.application.extensions["ejc_pools"][0]
    pools.most = 2  # max_pools
    assert db.call("POST", "/api/pool", {"poolName": "b", "size": 1}).status_code == 201
    over = db.call("POST", "/api/pool", {"poolName": "c", "size": 1})
    assert over.status_code == 409 and "max_pools" in over.get_json()["error"]


def test_writes_need_editor_everywhere_and_reads_show_only_visible_jobs(db: Api) -> None:
    for app in ("etl", "secret"):
        assert db.call("POST", "/api/app", app_body(app)).status_code < 300
    for job, app in (("load", "etl"), ("hidden", "secret")):
        body = job_body(job, appName=app, pool="db")
        assert db.call("POST", "/api/job/register", body).status_code < 300
    editor = _user(db, "ed", (Role.EDITOR, "etl"))
    viewer = _user(db, "vi", (Role.VIEWER, "etl"))
    everywhere = _user(db, "all", (Role.EDITOR, "*"))
    for headers in (editor, viewer):
        assert (
            db.call("POST", "/api/pool", {"poolName": "x", "size": 1}, headers=headers).status_code
            == 403
        )
        assert db.call("PUT", "/api/pool/db", {"size": 9}, headers=headers).status_code == 403
        assert db.call("DELETE", "/api/pool/db", headers=headers).status_code == 403
    shown = db.call("GET", "/api/pool/db", headers=viewer).get_json()
    assert shown["jobs"] == ["load"]
    assert db.call("GET", "/api/pool/db").get_json()["jobs"] == ["hidden", "load"]
    assert db.call("GET", "/api/pools", headers=viewer).status_code == 200
    made = db.call("POST", "/api/pool", {"poolName": "x", "size": 1}, headers=everywhere)
    assert made.status_code == 201


def test_a_job_naming_a_missing_or_too_small_pool_is_refused(db: Api) -> None:
    assert db.call("POST", "/api/app", app_body("etl")).status_code < 300
    missing = db.call("POST", "/api/job/register", job_body("j1", appName="etl", pool="none"))
    assert missing.status_code == 400 and "pool" in missing.get_json().get("fields", {})
    wide = job_body("j2", appName="etl", pool="db", poolSlots=2, shardingTotalCount=2)
    too_small = db.call("POST", "/api/job/register", wide)
    assert too_small.status_code == 400, too_small.get_json()
    assert db.call("GET", "/api/pool/db").get_json()["jobs"] == []

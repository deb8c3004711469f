"""The workflow backfill API (issue 28) over a real ZooKeeper: the contract's routes, a dry run
that writes nothing, bad input refused with 400s naming the fields (nothing written), the cap,
the workflow's calendars, transitions and their 409s, roles and 404s, audit records.

The app's workflow engine is built over the term's stores and never started: a backfill stays
where the API left it, no run is made.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from werkzeug.security import generate_password_hash

from scheduler.leader.statistics.audit_log import AuditLog
from scheduler.leader.statistics.database import create_trace_engine, upgrade_to_head
from scheduler.model.access.records import UserRecord, encode_grant, encode_user, new_grant_id
from scheduler.model.access.roles import Grant, Role
from scheduler.storage import layout
from tests.integration.api.conftest import GUEST, Api, make_api
from tests.integration.api.test_audit_api import _api as audit_api
from tests.integration.api.test_audit_api import _records as audit_records
from tests.support.bodies import app_body, job_body

PASSWORD = "wf-backfill-pass-1"
RANGE = {"from": "2026-01-01T00:00:00Z", "to": "2026-01-01T05:00:00Z"}
"""Six hourly fires: 00:00 to 05:00 UTC, both ends included."""
BASE = "/api/workflow/nightly"


def _workflow(
    name: str, app: str = "etl", cron: str = "0 0 * * * ?", **extra: Any
) -> dict[str, Any]:
    return {
        "workflowName": name,
        "appName": app,
        "cron": cron,
        "nodes": [{"name": "a", "job": f"step_{app}"}],
        **extra,
    }


def _ready(api: Api) -> Api:
    for app in ("etl", "secret"):
        assert api.call("POST", "/api/app", app_body(app)).status_code < 300
        body = job_body(f"step_{app}", appName=app, cron="")
        assert api.call("POST", "/api/job/register", body).status_code < 300
    for body in (
        _workflow("nightly"),
        _workflow("manual", cron=""),
        _workflow("hidden", app="secret"),
    ):
        created = api.call("POST", "/api/workflow", body)
        assert created.status_code < 300, created.get_json()
    return api


@pytest.fixture
def wf(zk_client: KazooClient, zk_namespace: str) -> Iterator[Api]:
    yield _ready(make_api(zk_client, zk_namespace, max_backfill_fires="20"))


def _nodes(api: Api) -> dict[str, bytes]:
    return {
        path: data
        for path, data in api.snapshot().items()
        if path.startswith(
            (layout.WORKFLOW_BACKFILLS, layout.WORKFLOW_BACKFILLS_ACTIVE, layout.WORKFLOW_RUNS)
        )
    }


def _user(api: Api, name: str, *grants: tuple[Role, str]) -> dict[str, str]:
    client = api.registry.client
    client.create(
        api.registry.abs(layout.access_user_path(name)),
        encode_user(UserRecord(name, generate_password_hash(PASSWORD), int(time.time() * 1000))),
        makepath=True,
    )
    for role, app in grants:
        grant = Grant(new_grant_id(), f"user:{name}", role, app)
        client.create(
            api.registry.abs(layout.access_grant_path(grant.id)), encode_grant(grant), makepath=True
        )
    api.client.application.extensions["ejc_authenticator"].access.refresh(api.registry)
    token = base64.b64encode(f"{name}:{PASSWORD}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def test_a_dry_run_lists_the_fires_and_writes_nothing(wf: Api) -> None:
    before = wf.snapshot()
    answer = wf.call("POST", f"{BASE}/backfill", {**RANGE, "dryRun": True})
    assert answer.status_code == 200, answer.get_json()
    body = answer.get_json()
    assert body["backfillId"] is None and body["fires"] == 6
    assert body["fireTimes"] == [f"2026-01-01T0{h}:00:00+00:00" for h in range(6)]
    assert wf.snapshot() == before


def test_a_backfill_is_recorded_listed_shown_and_moved(wf: Api) -> None:
    created = wf.call("POST", f"{BASE}/backfill", {**RANGE, "firesPerMinute": 30})
    assert created.status_code == 201, created.get_json()
    body = created.get_json()
    backfill_id = body["backfillId"]
    assert body["workflowName"] == "nightly" and "jobName" not in body
    assert body["fires"] == 6 and body["status"] == "RUNNING" and body["launched"] == 0
    assert (body["succeeded"], body["failed"], body["hadRun"]) == (0, 0, 0)
    assert wf.registry.exists(layout.workflow_backfill_path("nightly", backfill_id))
    assert wf.registry.exists(layout.workflow_backfill_active_path("nightly", backfill_id))
    assert not wf.registry.exists(layout.backfill_folder("nightly"))  # no job's backfill
    listed = wf.call("GET", f"{BASE}/backfills").get_json()
    assert [item["backfillId"] for item in listed["items"]] == [backfill_id]
    paged = wf.call("GET", f"{BASE}/backfills?limit=1").get_json()  # paged as a job's
    assert [item["backfillId"] for item in paged["items"]] == [backfill_id]
    assert paged["nextCursor"] is None
    one = f"{BASE}/backfills/{backfill_id}"
    assert wf.call("GET", one).get_json()["nextFireTime"] == "2026-01-01T00:00:00+00:00"
    assert wf.call("POST", f"{one}/pause").get_json()["status"] == "PAUSED"
    assert wf.call("POST", f"{one}/resume").get_json()["status"] == "RUNNING"
    cancelled = wf.call("POST", f"{one}/cancel", {"killRunning": True})
    assert cancelled.status_code == 200 and cancelled.get_json()["status"] == "CANCELLED"
    assert not wf.registry.exists(layout.workflow_backfill_active_path("nightly", backfill_id))
    refused = wf.call("POST", f"{one}/resume")
    assert refused.status_code == 409 and "CANCELLED" in refused.get_json()["error"]
    assert wf.call("POST", f"{one}/cancel", {"kill": True}).status_code == 400


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ({"to": RANGE["to"]}, {"from"}),
        ({**RANGE, "to": "2999-01-01T00:00:00Z"}, {"to"}),
        ({**RANGE, "firesPerMinute": -1}, {"firesPerMinute"}),
        ({**RANGE, "overlapPolicy": 7}, {"overlapPolicy"}),
        ({**RANGE, "jobName": "x"}, {"jobName"}),
        ({"from": "2026-01-01T00:10:00Z", "to": "2026-01-01T00:20:00Z"}, {"from", "to"}),
        ({"from": "2025-01-01T00:00:00Z", "to": "2026-01-01T00:00:00Z"}, {"to"}),
    ],
)
def test_a_bad_request_is_a_400_naming_its_fields_and_writes_nothing(
    wf: Api, body: dict[str, Any], fields: set[str]
) -> None:
    before = wf.snapshot()
    answer = wf.call("POST", f"{BASE}/backfill", body)
    assert answer.status_code == 400, answer.get_json()
    assert set(answer.get_json()["fields"]) == fields
    assert wf.snapshot() == before


def test_no_cron_unknown_names_and_bad_ids(wf: Api) -> None:
    answer = wf.call("POST", "/api/workflow/manual/backfill", RANGE)
    assert answer.status_code == 400 and "no cron" in answer.get_json()["error"]
    assert "workflowName" in answer.get_json()["fields"]
    assert wf.call("POST", "/api/workflow/nosuch/backfill", RANGE).status_code == 404
    assert wf.call("GET", "/api/workflow/nosuch/backfills").status_code == 404
    missing = f"{BASE}/backfills/20260101T000000Z-00000000"
    assert wf.call("GET", missing).status_code == 404
    assert wf.call("POST", f"{missing}/pause").status_code == 404
    bad = wf.call("POST", f"{BASE}/backfills/not-an-id/cancel")
    assert bad.status_code == 400 and "backfillId" in bad.get_json()["fields"]
    assert _nodes(wf) == {}


def test_the_workflows_calendars_exclude_fires_and_the_cap_holds(wf: Api) -> None:
    calendar = {
        "calendarName": "quiet",
        "timeZone": "UTC",
        "excludeRanges": [{"from": "2026-01-01T01:30:00Z", "to": "2026-01-01T03:30:00Z"}],
    }
    assert wf.call("POST", "/api/calendar", calendar).status_code == 201
    updated = wf.call("PUT", "/api/workflow", _workflow("nightly", excludeCalendars=["quiet"]))
    assert updated.status_code < 300, updated.get_json()
    answer = wf.call("POST", f"{BASE}/backfill", {**RANGE, "dryRun": True}).get_json()
    assert answer["fires"] == 4 and answer["excludedFires"] == 2
    too_many = wf.call("POST", f"{BASE}/backfill", {**RANGE, "to": "2026-01-01T23:00:00Z"})
    assert too_many.status_code == 400
    assert "max_backfill_fires (20)" in too_many.get_json()["error"]
    assert _nodes(wf) == {}


def test_job_and_workflow_backfills_share_the_active_quota(
    zk_client: KazooClient, zk_namespace: str
) -> None:
    api = _ready(make_api(zk_client, zk_namespace, max_active_backfills="1"))
    hourly = job_body("hourly", appName="etl", cron="0 0 * * * ?")
    assert api.call("POST", "/api/job/register", hourly).status_code < 300
    assert api.call("POST", "/api/job/hourly/backfill", RANGE).status_code == 201
    refused = api.call("POST", f"{BASE}/backfill", RANGE)
    assert refused.status_code == 409 and "max_active_backfills" in refused.get_json()["error"]


def test_operators_of_the_app_act_viewers_read_and_others_see_nothing(wf: Api) -> None:
    operator = _user(wf, "op_etl", (Role.OPERATOR, "etl"))
    viewer = _user(wf, "view_etl", (Role.VIEWER, "etl"))
    outsider = _user(wf, "op_secret", (Role.OPERATOR, "secret"))
    made = wf.call("POST", f"{BASE}/backfill", RANGE, headers=operator)
    assert made.status_code == 201
    backfill_id = made.get_json()["backfillId"]
    assert wf.call("GET", f"{BASE}/backfills", headers=viewer).status_code == 200
    before = _nodes(wf)
    assert wf.call("POST", f"{BASE}/backfill", RANGE, headers=viewer).status_code == 403
    paused = wf.call("POST", f"{BASE}/backfills/{backfill_id}/pause", headers=viewer)
    assert paused.status_code == 403
    assert wf.call("GET", f"{BASE}/backfills", headers=outsider).status_code == 404
    hidden = wf.call("POST", "/api/workflow/hidden/backfill", RANGE, headers=operator)
    assert hidden.status_code == 404
    assert wf.call("POST", f"{BASE}/backfill", RANGE, headers=GUEST).status_code == 403
    assert _nodes(wf) == before


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


def test_each_change_is_audited_with_its_action(
    zk_client: KazooClient, zk_namespace: str, audit: AuditLog
) -> None:
    api = _ready(audit_api(zk_client, zk_namespace, audit))
    backfill_id = api.call("POST", f"{BASE}/backfill", RANGE).get_json()["backfillId"]
    for action in ("pause", "resume", "cancel"):
        assert api.call("POST", f"{BASE}/backfills/{backfill_id}/{action}").status_code == 200
    records = [
        r for r in audit_records(api, audit, 4) if str(r["resource"]).startswith("workflow/")
    ]
    assert [r["action"] for r in records[:4]] == [
        "workflow.backfill-cancel",
        "workflow.backfill-resume",
        "workflow.backfill-pause",
        "workflow.backfill",
    ]
    assert {r["resource"] for r in records[:4]} == {f"workflow/nightly/backfill/{backfill_id}"}
    assert records[3]["changes"]["after"]["fires"] == 6
    assert records[0]["changes"]["after"]["status"] == "CANCELLED"

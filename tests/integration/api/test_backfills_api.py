"""The backfill API (issue 28) over a real ZooKeeper: the contract's routes, dry runs that write
nothing, bad input refused with 400s naming the fields (and nothing written), the cap on fires,
the quota on active backfills, the transitions and their 409s, roles and 404s.

The app's backfill engine is built over the term's stores and never started (as in every API
test): a backfill stays where the API left it, no fire is launched.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient
from werkzeug.security import generate_password_hash

from scheduler.model.access.records import UserRecord, encode_grant, encode_user, new_grant_id
from scheduler.model.access.roles import Grant, Role
from scheduler.storage import layout
from tests.integration.api.conftest import GUEST, Api, make_api
from tests.support.bodies import app_body, job_body

PASSWORD = "backfill-pass-1"
HOURLY = "0 0 * * * ?"
RANGE = {"from": "2026-01-01T00:00:00Z", "to": "2026-01-01T05:00:00Z"}
"""Six hourly fires: 00:00 to 05:00 UTC, both ends included."""


def _ready(api: Api) -> Api:
    assert api.call("POST", "/api/app", app_body("app")).status_code < 300
    assert api.call("POST", "/api/app", app_body("other")).status_code < 300
    for body in (
        job_body("hourly", cron=HOURLY, shardingTotalCount=2),
        job_body("paris", cron="0 30 1 * * ?", timeZone="Europe/Paris"),
        job_body("manual", cron=""),
        job_body("hidden", appName="other", cron=HOURLY),
    ):
        created = api.call("POST", "/api/job/register", body)
        assert created.status_code < 300, created.get_json()
    return api


@pytest.fixture
def bf(zk_client: KazooClient, zk_namespace: str) -> Iterator[Api]:
    yield _ready(make_api(zk_client, zk_namespace, max_backfill_fires="20"))


def _user(api: Api, name: str, *grants: tuple[Role, str]) -> dict[str, str]:
    """A user of the access records with `grants`; its Basic auth header."""
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


def _backfill_nodes(api: Api) -> dict[str, bytes]:
    return {
        path: data
        for path, data in api.snapshot().items()
        if path.startswith((layout.BACKFILLS, layout.BACKFILLS_ACTIVE, "/workflows"))
    }


def test_a_dry_run_lists_the_fires_and_writes_nothing(bf: Api) -> None:
    before = bf.snapshot()
    answer = bf.call("POST", "/api/job/hourly/backfill", {**RANGE, "dryRun": True})
    assert answer.status_code == 200, answer.get_json()
    body = answer.get_json()
    assert body["backfillId"] is None and body["dryRun"] is True
    assert body["fires"] == 6 and body["excludedFires"] == 0
    assert body["fireTimes"] == [f"2026-01-01T0{h}:00:00+00:00" for h in range(6)]
    assert bf.snapshot() == before


def test_a_backfill_is_recorded_running_listed_and_shown_with_its_outcome(bf: Api) -> None:
    created = bf.call("POST", "/api/job/hourly/backfill", {**RANGE, "firesPerMinute": 30})
    assert created.status_code == 201, created.get_json()
    body = created.get_json()
    backfill_id = body["backfillId"]
    assert body["fires"] == 6 and body["status"] == "RUNNING" and body["launched"] == 0
    assert body["fireTimes"][0] == "2026-01-01T00:00:00+00:00"
    assert body["nextFireTime"] == "2026-01-01T00:00:00+00:00"
    assert body["firesPerMinute"] == 30 and body["succeeded"] == 0 and body["failed"] == 0
    assert bf.registry.exists(layout.backfill_path("hourly", backfill_id))
    assert bf.registry.exists(layout.backfill_active_path("hourly", backfill_id))
    second = bf.call("POST", "/api/job/hourly/backfill", RANGE).get_json()["backfillId"]
    listed = bf.call("GET", "/api/job/hourly/backfills").get_json()
    assert [item["backfillId"] for item in listed["items"]] == sorted(
        [backfill_id, second], reverse=True
    )
    shown = bf.call("GET", f"/api/job/hourly/backfills/{backfill_id}")
    assert shown.status_code == 200 and shown.get_json()["fires"] == 6
    assert bf.call("GET", "/api/job/paris/backfills").get_json()["items"] == []


def test_a_jobs_backfills_page_newest_first_with_limit_and_cursor(bf: Api) -> None:
    made = [
        bf.call("POST", "/api/job/hourly/backfill", RANGE).get_json()["backfillId"]
        for _ in range(3)
    ]
    newest_first = sorted(made, reverse=True)
    first = bf.call("GET", "/api/job/hourly/backfills?limit=2").get_json()
    assert [item["backfillId"] for item in first["items"]] == newest_first[:2]
    assert first["nextCursor"]
    rest = bf.call(
        "GET", f"/api/job/hourly/backfills?limit=2&cursor={first['nextCursor']}"
    ).get_json()
    assert [item["backfillId"] for item in rest["items"]] == newest_first[2:]
    assert rest["nextCursor"] is None
    # Without limit: every one, as one page (the shape the CLI and the console read).
    whole = bf.call("GET", "/api/job/hourly/backfills").get_json()
    assert [item["backfillId"] for item in whole["items"]] == newest_first
    assert whole["nextCursor"] is None
    for query, field in (("limit=0", "limit"), ("limit=2&cursor=nonsense", "cursor")):
        refused = bf.call("GET", f"/api/job/hourly/backfills?{query}")
        assert refused.status_code == 400 and field in refused.get_json()["fields"]
    jobs_cursor = bf.call("GET", "/api/job/jobs?limit=1").get_json()["nextCursor"]
    other = bf.call("GET", f"/api/job/hourly/backfills?limit=1&cursor={jobs_cursor}")
    assert other.status_code == 400  # another list's cursor


def test_fires_are_the_jobs_cron_in_its_zone_with_the_offset_of_each_fire(bf: Api) -> None:
    """Europe/Paris 01:30 daily across the spring change: each fire with its own offset."""
    body = {"from": "2026-03-28T00:00:00Z", "to": "2026-03-30T00:00:00Z", "dryRun": True}
    answer = bf.call("POST", "/api/job/paris/backfill", body).get_json()
    assert answer["fireTimes"] == [
        "2026-03-28T01:30:00+01:00",
        "2026-03-29T01:30:00+01:00",
        "2026-03-30T01:30:00+02:00",  # 23:30 UTC on the 29th, within the range
    ]


def test_pause_resume_and_cancel_move_the_state_and_impossible_ones_are_409(bf: Api) -> None:
    backfill_id = bf.call("POST", "/api/job/hourly/backfill", RANGE).get_json()["backfillId"]
    base = f"/api/job/hourly/backfills/{backfill_id}"
    paused = bf.call("POST", f"{base}/pause")
    assert paused.status_code == 200 and paused.get_json()["status"] == "PAUSED"
    assert bf.call("POST", f"{base}/pause").get_json()["status"] == "PAUSED"  # harmless again
    assert bf.call("POST", f"{base}/resume").get_json()["status"] == "RUNNING"
    cancelled = bf.call("POST", f"{base}/cancel", {"killRunning": True})
    assert cancelled.status_code == 200
    assert cancelled.get_json()["status"] == "CANCELLED" and cancelled.get_json()["endedAt"]
    assert not bf.registry.exists(layout.backfill_active_path("hourly", backfill_id))
    for action in ("resume", "pause"):
        refused = bf.call("POST", f"{base}/{action}")
        assert refused.status_code == 409, action
        assert "CANCELLED" in refused.get_json()["error"]
    assert bf.call("POST", f"{base}/cancel").status_code == 200  # a cancel again is harmless


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ({"to": RANGE["to"]}, {"from"}),
        ({**RANGE, "from": "2026-01-01T00:00:00"}, {"from"}),
        ({**RANGE, "to": "2999-01-01T00:00:00Z"}, {"to"}),
        ({**RANGE, "from": RANGE["to"], "to": RANGE["from"]}, {"from", "to"}),
        ({**RANGE, "firesPerMinute": 0}, {"firesPerMinute"}),
        ({**RANGE, "firesPerMinute": "fast"}, {"firesPerMinute"}),
        ({**RANGE, "dryRun": "yes"}, {"dryRun"}),
        ({**RANGE, "overlapPolicy": "SOMETIMES"}, {"overlapPolicy"}),
        ({**RANGE, "firesPerMin": 5}, {"firesPerMin"}),
        ({"from": "2026-01-01T00:10:00Z", "to": "2026-01-01T00:20:00Z"}, {"from", "to"}),
        ({"from": "2025-01-01T00:00:00Z", "to": "2026-01-01T00:00:00Z"}, {"to"}),
    ],
)
def test_a_bad_request_is_a_400_naming_its_fields_and_writes_nothing(
    bf: Api, body: dict[str, Any], fields: set[str]
) -> None:
    before = bf.snapshot()
    answer = bf.call("POST", "/api/job/hourly/backfill", body)
    assert answer.status_code == 400, answer.get_json()
    assert set(answer.get_json()["fields"]) == fields
    assert bf.snapshot() == before


def test_a_range_past_the_cap_is_refused_naming_the_count_and_the_cap(bf: Api) -> None:
    body = {"from": "2026-01-01T00:00:00Z", "to": "2026-01-01T23:00:00Z"}
    answer = bf.call("POST", "/api/job/hourly/backfill", body)
    assert answer.status_code == 400
    message = answer.get_json()["error"]
    assert "24 fires" in message and "max_backfill_fires (20)" in message
    assert _backfill_nodes(bf) == {}


@pytest.mark.parametrize(("job", "words"), [("manual", "has no cron"), ("daemon", "DAEMON job")])
def test_a_job_without_fires_to_replay_is_a_400_naming_why(bf: Api, job: str, words: str) -> None:
    if job == "daemon":
        body = job_body("daemon", cron=HOURLY, jobExecutionType="DAEMON")
        assert bf.call("POST", "/api/job/register", body).status_code < 300
    answer = bf.call("POST", f"/api/job/{job}/backfill", RANGE)
    assert answer.status_code == 400
    assert words in answer.get_json()["error"] and "jobName" in answer.get_json()["fields"]


def test_unknown_jobs_and_backfills_are_404s_and_a_bad_id_a_400(bf: Api) -> None:
    assert bf.call("POST", "/api/job/nosuch/backfill", RANGE).status_code == 404
    assert bf.call("GET", "/api/job/nosuch/backfills").status_code == 404
    missing = "/api/job/hourly/backfills/20260101T000000Z-00000000"
    assert bf.call("GET", missing).status_code == 404
    assert bf.call("POST", f"{missing}/pause").status_code == 404
    bad = bf.call("GET", "/api/job/hourly/backfills/..%2F..%2Fconfig")
    assert bad.status_code in (400, 404)
    bad = bf.call("POST", "/api/job/hourly/backfills/not-an-id/cancel")
    assert bad.status_code == 400 and "backfillId" in bad.get_json()["fields"]


def test_a_cancel_body_is_checked(bf: Api) -> None:
    backfill_id = bf.call("POST", "/api/job/hourly/backfill", RANGE).get_json()["backfillId"]
    base = f"/api/job/hourly/backfills/{backfill_id}/cancel"
    assert bf.call("POST", base, {"killRunning": "yes"}).status_code == 400
    assert bf.call("POST", base, {"kill": True}).get_json()["fields"] == {
        "kill": "is not a field of a cancel"
    }
    assert bf.call("GET", f"/api/job/hourly/backfills/{backfill_id}").get_json()["status"] == (
        "RUNNING"
    )


def test_active_backfills_are_bounded_cluster_wide(
    zk_client: KazooClient, zk_namespace: str
) -> None:
    api = _ready(make_api(zk_client, zk_namespace, max_active_backfills="2"))
    first = api.call("POST", "/api/job/hourly/backfill", RANGE).get_json()["backfillId"]
    paused = api.call("POST", "/api/job/paris/backfill", {**RANGE, "to": "2026-01-03T00:00:00Z"})
    assert paused.status_code == 201
    api.call("POST", f"/api/job/paris/backfills/{paused.get_json()['backfillId']}/pause")
    refused = api.call("POST", "/api/job/hourly/backfill", RANGE)
    assert refused.status_code == 409 and "max_active_backfills" in refused.get_json()["error"]
    api.call("POST", f"/api/job/hourly/backfills/{first}/cancel")
    assert api.call("POST", "/api/job/hourly/backfill", RANGE).status_code == 201


def test_calendars_of_the_job_exclude_fires_and_are_counted(bf: Api) -> None:
    calendar = {
        "calendarName": "quiet",
        "timeZone": "UTC",
        "excludeRanges": [{"from": "2026-01-01T01:30:00Z", "to": "2026-01-01T03:30:00Z"}],
    }
    assert bf.call("POST", "/api/calendar", calendar).status_code == 201
    body = job_body("hourly", cron=HOURLY, shardingTotalCount=2, excludeCalendars=["quiet"])
    assert bf.call("PUT", "/api/job/update", body).status_code < 300
    answer = bf.call("POST", "/api/job/hourly/backfill", {**RANGE, "dryRun": True}).get_json()
    assert answer["fires"] == 4 and answer["excludedFires"] == 2
    assert "2026-01-01T02:00:00+00:00" not in answer["fireTimes"]


def test_operators_of_the_app_act_viewers_read_and_others_see_nothing(bf: Api) -> None:
    operator = _user(bf, "op_app", (Role.OPERATOR, "app"))
    viewer = _user(bf, "view_app", (Role.VIEWER, "app"))
    outsider = _user(bf, "op_other", (Role.OPERATOR, "other"))
    made = bf.call("POST", "/api/job/hourly/backfill", RANGE, headers=operator)
    assert made.status_code == 201
    backfill_id = made.get_json()["backfillId"]
    assert bf.call("GET", "/api/job/hourly/backfills", headers=viewer).status_code == 200
    before = _backfill_nodes(bf)
    refused = bf.call("POST", "/api/job/hourly/backfill", RANGE, headers=viewer)
    assert refused.status_code == 403
    paused = bf.call("POST", f"/api/job/hourly/backfills/{backfill_id}/pause", headers=viewer)
    assert paused.status_code == 403
    hidden = bf.call("GET", "/api/job/hourly/backfills", headers=outsider)
    assert hidden.status_code == 404
    assert bf.call("POST", "/api/job/hidden/backfill", RANGE, headers=operator).status_code == 404
    assert bf.call("GET", "/api/job/hourly/backfills", headers=GUEST).status_code == 200
    assert bf.call("POST", "/api/job/hourly/backfill", RANGE, headers=GUEST).status_code == 403
    assert _backfill_nodes(bf) == before

"""The calendars API (issue 28) over a real ZooKeeper: the contract's routes, bad input that
writes nothing, the 409 of a calendar in use, the roles, and a job's references to calendars
and pools checked at registration and update."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from werkzeug.security import generate_password_hash

from scheduler.leader.statistics import create_trace_engine, upgrade_to_head
from scheduler.leader.statistics.audit_log import AuditLog
from scheduler.model.access.records import UserRecord, encode_grant, encode_user, new_grant_id
from scheduler.model.access.roles import Grant, Role
from scheduler.storage import layout
from tests.integration.api.conftest import GUEST, Api, make_api
from tests.integration.api.test_audit_api import _api as audit_api
from tests.integration.api.test_audit_api import _records as audit_records
from tests.support.bodies import app_body, job_body

PASSWORD = "calendar-pass-1"

ICS = """BEGIN:VCALENDAR
VERSION:2.0
PRODID:-//ejcloud tests//EN
BEGIN:VEVENT
UID:xmas@example
SUMMARY:Christmas
DTSTART;VALUE=DATE:20261225
DTEND;VALUE=DATE:20261227
RRULE:FREQ=YEARLY
END:VEVENT
BEGIN:VEVENT
UID:upgrade@example
SUMMARY:Database upgrade
DTSTART;TZID=Europe/Berlin:20260704T220000
DTEND;TZID=Europe/Berlin:20260705T020000
END:VEVENT
END:VCALENDAR
"""


def holidays(name: str = "holidays", **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "calendarName": name,
        "timeZone": "Europe/Berlin",
        "excludeDates": ["2026-12-24"],
        "excludeRanges": [{"from": "2026-07-01T00:00:00Z", "to": "2026-07-01T06:00:00Z"}],
        "weekly": [{"days": ["SAT"], "from": "02:00", "to": "04:00"}],
    }
    body.update(fields)
    return body


def _user(api: Api, name: str, *grants: tuple[Role, str]) -> dict[str, str]:
    """A user of the access records with `grants`; its Basic auth header."""
    hashed = generate_password_hash(PASSWORD)
    client = api.registry.client
    client.create(
        api.registry.abs(layout.access_user_path(name)),
        encode_user(UserRecord(name, hashed, int(time.time() * 1000))),
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


def _calendars(api: Api) -> dict[str, bytes]:
    return {k: v for k, v in api.snapshot().items() if k.startswith(layout.CALENDARS)}


@pytest.fixture
def apps(api: Api) -> Api:
    for app in ("app", "secret"):
        assert api.call("POST", "/api/app", app_body(app)).status_code < 300
    return api


# --- CRUD -------------------------------------------------------------------------------------


def test_a_registered_calendar_reads_back_is_listed_and_updated_by_either_put(api: Api) -> None:
    created = api.call("POST", "/api/calendar", holidays())
    assert created.status_code == 201, created.get_json()
    assert created.get_json()["excludeDates"] == ["2026-12-24"]
    shown = api.call("GET", "/api/calendar/holidays")
    assert shown.status_code == 200
    assert shown.get_json() == {
        **holidays(),
        # Instants are written back with their offset spelled out.
        "excludeRanges": [{"from": "2026-07-01T00:00:00+00:00", "to": "2026-07-01T06:00:00+00:00"}],
        "yearly": [],
        "usedBy": [],
        "usedByWorkflows": [],
    }
    assert [c["calendarName"] for c in api.call("GET", "/api/calendars").get_json()] == ["holidays"]

    updated = api.call("PUT", "/api/calendar", holidays(excludeDates=["2026-12-31"]))
    assert updated.status_code == 200, updated.get_json()
    assert api.call("GET", "/api/calendar/holidays").get_json()["excludeDates"] == ["2026-12-31"]
    # The path names it; the body may leave the name out.
    body = holidays(yearly=["01-01"])
    del body["calendarName"]
    assert api.call("PUT", "/api/calendar/holidays", body).status_code == 200
    assert api.call("GET", "/api/calendar/holidays").get_json()["yearly"] == ["01-01"]
    stored = json.loads(api.registry.get(layout.calendar_path("holidays")) or b"")
    assert stored["yearly"] == ["01-01"] and stored["timeZone"] == "Europe/Berlin"


def test_create_of_an_existing_and_update_or_delete_of_a_missing_calendar_are_refused(
    api: Api,
) -> None:
    assert api.call("POST", "/api/calendar", holidays()).status_code == 201
    again = api.call("POST", "/api/calendar", holidays(excludeDates=["2027-01-01"]))
    assert again.status_code == 409 and "already exists" in again.get_json()["error"]
    assert api.call("GET", "/api/calendar/holidays").get_json()["excludeDates"] == ["2026-12-24"]
    assert api.call("PUT", "/api/calendar", holidays("nope")).status_code == 404
    assert api.call("GET", "/api/calendar/nope").status_code == 404
    assert api.call("DELETE", "/api/calendar/nope").status_code == 404
    assert api.call("DELETE", "/api/calendar/holidays").status_code == 204
    assert api.call("GET", "/api/calendar/holidays").status_code == 404
    assert _calendars(api) in ({}, {layout.CALENDARS: b""})


def test_the_calendar_list_is_paged_like_the_other_lists(api: Api) -> None:
    for name in ("c", "a", "b"):
        assert api.call("POST", "/api/calendar", holidays(name)).status_code == 201
    first = api.call("GET", "/api/calendars?limit=2").get_json()
    assert [c["calendarName"] for c in first["items"]] == ["a", "b"]
    rest = api.call("GET", f"/api/calendars?limit=2&cursor={first['nextCursor']}").get_json()
    assert [c["calendarName"] for c in rest["items"]] == ["c"] and rest["nextCursor"] is None


def test_the_calendar_quota_refuses_one_more(zk_client: Any, zk_namespace: str) -> None:
    api = make_api(zk_client, zk_namespace, max_calendars="2")
    for name in ("a", "b"):
        assert api.call("POST", "/api/calendar", holidays(name)).status_code == 201
    refused = api.call("POST", "/api/calendar", holidays("c"))
    assert refused.status_code == 409 and "max_calendars" in refused.get_json()["error"]
    assert api.registry.get(layout.calendar_path("c")) is None


# --- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"timeZone": "UTC", "excludeDates": ["2026-12-25"]}, "calendarName"),
        (holidays("a/b"), "calendarName"),
        (holidays(timeZone="Mars/Olympus"), "timeZone"),
        (holidays(excludeDates=["2026-02-30"]), "excludeDates[0]"),
        (holidays(weekly=[{"days": ["FUNDAY"], "from": "02:00", "to": "04:00"}]), "weekly[0].days"),
        (
            holidays(excludeRanges=[{"from": "2026-07-02T00:00Z", "to": "2026-07-01T00:00Z"}]),
            "excludeRanges[0].to",
        ),
        (holidays(colour="red"), "colour"),
        ({"calendarName": "empty"}, "body"),
        (holidays(ics="not an ics text"), "ics"),
        (holidays(ics=12), "ics"),
        (holidays(ics="x" * (256 * 1024 + 1)), "ics"),
    ],
)
def test_a_bad_body_is_a_400_naming_its_field_and_writes_nothing(
    api: Api, body: dict[str, Any], field: str
) -> None:
    before = api.snapshot()
    answer = api.call("POST", "/api/calendar", body)
    assert answer.status_code == 400, answer.get_json()
    assert field in answer.get_json()["fields"]
    assert api.snapshot() == before


def test_a_body_that_is_not_an_object_or_a_bad_path_name_is_refused(api: Api) -> None:
    assert api.call("POST", "/api/calendar", ["holidays"]).status_code == 400
    assert api.call("POST", "/api/calendar", raw="{").status_code == 400
    assert api.call("GET", "/api/calendar/" + "x" * 300).status_code == 400
    mismatch = api.call("PUT", "/api/calendar/other", holidays())
    assert mismatch.status_code == 400 and "calendarName" in mismatch.get_json()["fields"]
    assert _calendars(api) in ({}, {layout.CALENDARS: b""})


# --- ics --------------------------------------------------------------------------------------


def test_an_ics_file_is_stored_as_its_converted_parts_merged_with_the_body(api: Api) -> None:
    body = {
        "calendarName": "imported",
        "timeZone": "UTC",
        "ics": ICS,
        "excludeDates": ["2026-01-01"],
    }
    created = api.call("POST", "/api/calendar", body)
    assert created.status_code == 201, created.get_json()
    shown = api.call("GET", "/api/calendar/imported").get_json()
    assert shown["yearly"] == ["12-25", "12-26"]
    assert shown["excludeDates"] == ["2026-01-01"]
    # 22:00 to 02:00 Berlin summer time (UTC+2) is 20:00 to 00:00 UTC.
    assert shown["excludeRanges"] == [
        {"from": "2026-07-04T20:00:00+00:00", "to": "2026-07-05T00:00:00+00:00"}
    ]
    assert "ics" not in json.loads(api.registry.get(layout.calendar_path("imported")) or b"")


def test_an_ics_event_that_cannot_be_converted_is_named_in_the_400(api: Api) -> None:
    weekly = ICS.replace("RRULE:FREQ=YEARLY", "RRULE:FREQ=WEEKLY;BYDAY=SA")
    answer = api.call("POST", "/api/calendar", {"calendarName": "x", "ics": weekly})
    assert answer.status_code == 400
    why = answer.get_json()["fields"]["ics"]
    assert "Christmas" in why and "xmas@example" in why and "FREQ=WEEKLY" in why
    assert api.call("GET", "/api/calendar/x").status_code == 404


# --- in use -----------------------------------------------------------------------------------


def test_a_calendar_in_use_cannot_be_deleted_and_names_its_users(apps: Api) -> None:
    api = apps
    assert api.call("POST", "/api/calendar", holidays()).status_code == 201
    for job, app in (("b-job", "app"), ("a-job", "secret")):
        body = job_body(job, appName=app, excludeCalendars=["holidays"])
        answer = api.call("POST", "/api/job/register", body)
        assert answer.status_code < 300, answer.get_json()
    refused = api.call("DELETE", "/api/calendar/holidays")
    assert refused.status_code == 409
    assert refused.get_json()["error"].startswith(
        "calendar 'holidays' is used by job 'a-job', job 'b-job'"
    )
    assert api.registry.get(layout.calendar_path("holidays")) is not None
    shown = api.call("GET", "/api/calendar/holidays").get_json()
    assert shown["usedBy"] == ["a-job", "b-job"]
    # A viewer of one app sees only that app's users.
    viewer = _user(api, "vera", (Role.VIEWER, "app"))
    assert api.call("GET", "/api/calendar/holidays", headers=viewer).get_json()["usedBy"] == [
        "b-job"
    ]
    # Once no job lists it, it goes.
    for job, app in (("b-job", "app"), ("a-job", "secret")):
        update = job_body(job, appName=app)
        update["excludeCalendars"] = []
        assert api.call("PUT", "/api/job/update", update).status_code < 300
    assert api.call("DELETE", "/api/calendar/holidays").status_code == 204


# --- roles ------------------------------------------------------------------------------------


def test_writes_need_editor_on_every_app_and_reads_any_caller(apps: Api) -> None:
    api = apps
    assert api.call("POST", "/api/calendar", holidays()).status_code == 201
    editor_of_one = _user(api, "eddie", (Role.EDITOR, "app"))
    before = api.snapshot()
    for method, path, body in (
        ("POST", "/api/calendar", holidays("other")),
        ("PUT", "/api/calendar", holidays(excludeDates=[])),
        ("PUT", "/api/calendar/holidays", holidays()),
        ("DELETE", "/api/calendar/holidays", None),
    ):
        for headers in (editor_of_one, GUEST):
            answer = api.call(method, path, body, headers=headers)
            assert answer.status_code == 403, (method, path, answer.get_json())
    assert api.snapshot() == before
    for headers in (editor_of_one, GUEST):
        assert api.call("GET", "/api/calendar/holidays", headers=headers).status_code == 200
        assert api.call("GET", "/api/calendars", headers=headers).status_code == 200
    assert api.call("GET", "/api/calendars", headers={}).status_code == 401
    everywhere = _user(api, "erin", (Role.EDITOR, "*"))
    assert api.call("POST", "/api/calendar", holidays("x"), headers=everywhere).status_code == 201


# --- a job's references -----------------------------------------------------------------------


def test_a_job_naming_an_unknown_calendar_is_refused_at_registration_and_update(apps: Api) -> None:
    api = apps
    before = api.snapshot()
    refused = api.call(
        "POST", "/api/job/register", job_body("j", excludeCalendars=["holidays", "nope"])
    )
    assert refused.status_code == 400
    why = refused.get_json()["fields"]["excludeCalendars"]
    assert "'holidays'" in why and "'nope'" in why
    assert api.snapshot() == before

    assert api.call("POST", "/api/calendar", holidays()).status_code == 201
    ok = api.call("POST", "/api/job/register", job_body("j", excludeCalendars=["holidays"]))
    assert ok.status_code < 300, ok.get_json()
    update = job_body("j", excludeCalendars=["holidays", "nope"])
    refused = api.call("PUT", "/api/job/update", update)
    assert refused.status_code == 400
    assert refused.get_json()["fields"]["excludeCalendars"] == "calendar 'nope' does not exist"
    stored = api.call("GET", "/api/job/jobs/j").get_json()
    assert stored["excludeCalendars"] == ["holidays"]


def test_a_job_naming_an_unknown_or_too_small_pool_is_refused(apps: Api) -> None:
    api = apps
    unknown = api.call("POST", "/api/job/register", job_body("j", pool="db"))
    assert unknown.status_code == 400
    assert unknown.get_json()["fields"]["pool"] == "pool 'db' does not exist"
    assert api.call("POST", "/api/pool", {"poolName": "db", "size": 3}).status_code == 201
    too_big = api.call(
        "POST", "/api/job/register", job_body("j", pool="db", poolSlots=2, shardingTotalCount=2)
    )
    assert too_big.status_code == 400
    assert "4 slots" in too_big.get_json()["fields"]["pool"]
    assert api.call("GET", "/api/job/jobs/j").status_code == 404
    fits = api.call("POST", "/api/job/register", job_body("j", pool="db", poolSlots=3))
    assert fits.status_code < 300, fits.get_json()


# --- audit ------------------------------------------------------------------------------------


@pytest.fixture
def audit(tmp_path: Path) -> Iterator[AuditLog]:
    """The term's audit log over a SQLite trace database of the test's."""
    engine = create_trace_engine(f"sqlite:///{tmp_path}/trace.db")
    upgrade_to_head(engine)
    log = AuditLog(file_path=str(tmp_path / "audit.jsonl"), idle_wait_s=0.05)
    log.open(engine)
    log.start()
    yield log
    log.stop(5.0)
    engine.dispose()


def test_each_change_is_audited_with_the_calendar_before_and_after(
    zk_client: Any, zk_namespace: str, audit: AuditLog
) -> None:
    api = audit_api(zk_client, zk_namespace, audit)
    assert api.call("POST", "/api/calendar", holidays()).status_code == 201
    assert api.call("PUT", "/api/calendar/holidays", holidays(yearly=["01-01"])).status_code == 200
    assert api.call("DELETE", "/api/calendar/holidays").status_code == 204
    assert api.call("DELETE", "/api/calendar/holidays").status_code == 404
    records = audit_records(api, audit, 4)
    assert [r["action"] for r in records[:4]] == [
        "calendar.delete",
        "calendar.delete",
        "calendar.update",
        "calendar.create",
    ]
    assert [r["resource"] for r in records[:4]] == ["calendar/holidays"] * 4
    deleted, update, created = records[1], records[2], records[3]
    assert created["changes"]["before"] is None
    assert created["changes"]["after"]["excludeDates"] == ["2026-12-24"]
    assert update["changes"]["before"]["yearly"] == [] and update["changes"]["after"]["yearly"] == [
        "01-01"
    ]
    assert deleted["changes"]["after"] is None and records[0]["outcome"] == "error"


class _WatchedLock:
    """A lock that says when someone waits for it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.asked = threading.Event()

    def __enter__(self) -> None:
        self.asked.set()
        self._lock.acquire()

    def __exit__(self, *_exc: object) -> None:
        self._lock.release()


def test_a_calendar_deleted_while_a_job_naming_it_waits_to_be_written_refuses_the_job(
    apps: Api,
) -> None:
    api = apps
    assert api.call("POST", "/api/calendar", holidays()).status_code == 201
    store = api.client.application.extensions["ejc_calendars"].store
    watched = _WatchedLock()
    store.references = watched
    answers: list[Any] = []
    with watched:  # as a delete holds it while it checks the users
        watched.asked.clear()
        register = threading.Thread(
            target=lambda: answers.append(
                api.call("POST", "/api/job/register", job_body("j", excludeCalendars=["holidays"]))
            ),
            name="test-register",
        )
        register.start()
        assert watched.asked.wait(10)  # the job passed the first check and waits to be written
        assert store.delete("holidays")
    register.join(10)
    assert answers[0].status_code == 400, answers[0].get_json()
    assert "'holidays'" in answers[0].get_json()["fields"]["excludeCalendars"]
    assert api.call("GET", "/api/job/jobs/j").status_code == 404

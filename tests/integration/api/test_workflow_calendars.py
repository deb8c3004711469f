"""A workflow's `excludeCalendars` through the API (issue 28): an unknown calendar is a 400
naming it that writes nothing; an existing one is kept and shown."""

from __future__ import annotations

import json

from scheduler.storage import layout
from tests.integration.api.conftest import Api
from tests.support.bodies import app_body, job_body


def _workflow(**fields: object) -> dict[str, object]:
    return {
        "workflowName": "nightly",
        "appName": "etl",
        "cron": "0 0 1 * * ?",
        "nodes": [{"name": "a", "job": "extract"}],
        **fields,
    }


def test_a_workflow_may_list_only_existing_calendars(api: Api) -> None:
    # Written before the term's calendar store first reads (it reads once, then keeps).
    calendar = {"calendarName": "holidays", "timeZone": "UTC", "excludeDates": ["2026-12-25"]}
    api.registry.put(layout.calendar_path("holidays"), json.dumps(calendar).encode())
    assert api.call("POST", "/api/app", app_body("etl")).status_code < 300
    assert (
        api.call("POST", "/api/job/register", job_body("extract", appName="etl")).status_code < 300
    )
    refused = api.call("POST", "/api/workflow", _workflow(excludeCalendars=["holidays", "nope"]))
    assert refused.status_code == 400
    assert "nope" in refused.json["fields"]["excludeCalendars"]
    assert api.call("GET", "/api/workflow/nightly").status_code == 404
    made = api.call("POST", "/api/workflow", _workflow(excludeCalendars=["holidays"]))
    assert made.status_code == 201 and made.json["excludeCalendars"] == ["holidays"]
    shown = api.call("GET", "/api/workflow/nightly").json
    assert shown["excludeCalendars"] == ["holidays"]
    bad = api.call("PUT", "/api/workflow", _workflow(excludeCalendars="holidays"))
    assert bad.status_code == 400 and "excludeCalendars" in bad.json["fields"]

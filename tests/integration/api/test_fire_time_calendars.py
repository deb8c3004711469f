"""The next fire times of a job with `excludeCalendars` (issue 28) skip what its calendars
exclude, as the producer does, and say which calendars applied; a job without calendars answers
as before."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from scheduler.api.fire_times import allowed_fire_times
from scheduler.model.calendar import Calendar
from scheduler.model.config import parse_cron
from scheduler.storage import layout
from tests.integration.api.conftest import Api
from tests.support.bodies import app_body, job_body


def test_the_preview_skips_the_excluded_hours(api: Api) -> None:
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    start, end = now + timedelta(hours=2), now + timedelta(hours=5)
    calendar = {
        "calendarName": "maint",
        "timeZone": "UTC",
        "excludeRanges": [{"from": start.isoformat(), "to": end.isoformat()}],
    }
    # Written before the term's calendar store first reads (it reads once, then keeps).
    api.registry.put(layout.calendar_path("maint"), json.dumps(calendar).encode())
    assert api.call("POST", "/api/app", app_body("etl")).status_code < 300
    hourly = {"appName": "etl", "cron": "0 0 * * * ?", "timeZone": "UTC"}
    body = job_body("tick", **hourly, excludeCalendars=["maint"])
    assert api.call("POST", "/api/job/register", body).status_code < 300
    assert api.call("POST", "/api/job/register", job_body("plain", **hourly)).status_code < 300
    answer = api.call("GET", "/api/job/tick/next-fire-times?count=4")
    assert answer.status_code == 200
    times = [datetime.fromisoformat(t) for t in answer.json["nextFireTimes"]]
    hours = [now + timedelta(hours=h) for h in (1, 5, 6, 7)]
    assert times == hours
    assert answer.json["excludeCalendars"] == ["maint"]
    assert answer.json["excludedFires"] == 3 and answer.json["gaveUp"] is False
    plain = api.call("GET", "/api/job/plain/next-fire-times?count=4")
    assert list(plain.json) == ["nextFireTimes"]
    assert [datetime.fromisoformat(t) for t in plain.json["nextFireTimes"]] == [
        now + timedelta(hours=h) for h in (1, 2, 3, 4)
    ]


def test_a_calendar_excluding_everything_gives_up_and_says_so() -> None:
    always = Calendar.from_json(
        {
            "calendarName": "always",
            "weekly": [
                {
                    "days": ["MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"],
                    "from": "00:00",
                    "to": "24:00",
                }
            ],
        },
        default_time_zone="UTC",
    )
    every_second = parse_cron("* * * * * ?", "UTC")
    answer = allowed_fire_times(every_second, [always], 5, datetime.now(UTC))
    assert answer == {
        "nextFireTimes": [],
        "excludeCalendars": ["always"],
        "excludedFires": 20_000,
        "gaveUp": True,
    }

"""`ejcloud calendar ...` (issue 28) against the real API over HTTP on a real ZooKeeper: the
CLI runs in-process (click's isolation), the leader's Flask app is served by werkzeug on a
loopback port of the test's own (shut down with it)."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from kazoo.client import KazooClient
from werkzeug.serving import make_server

from ejcloud_cli.__main__ import main
from scheduler.storage import layout
from tests.integration.api.conftest import Api, make_api
from tests.integration.api.test_calendars_api import ICS
from tests.support.bodies import app_body, job_body


@dataclass
class Ran:
    code: int
    out: str
    err: str


@dataclass
class Served:
    api: Api
    url: str
    home: Path

    def run(self, *args: str, stdin: str | None = None) -> Ran:
        env = {
            "EJCLOUD_SERVER": self.url,
            "EJCLOUD_USER": "root",
            "EJCLOUD_PASSWORD": "root",
            "EJCLOUD_TOKEN": None,
            "EJCLOUD_CONFIG": None,
            "XDG_CONFIG_HOME": str(self.home),
        }
        with CliRunner().isolation(input=stdin, env=env) as (out, err, _):
            code = main(list(args))
            sys.stdout.flush()
            sys.stderr.flush()
            return Ran(code, out.getvalue().decode(), err.getvalue().decode())


@pytest.fixture
def served(zk_client: KazooClient, zk_namespace: str, tmp_path: Path) -> Iterator[Served]:
    api = make_api(zk_client, zk_namespace)
    server = make_server("127.0.0.1", 0, api.client.application, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="test-calendar-api", daemon=True)
    thread.start()
    try:
        yield Served(api, f"http://127.0.0.1:{server.server_port}", tmp_path)
    finally:
        server.shutdown()
        thread.join(10)
        server.server_close()


def test_add_get_list_update_and_delete_a_calendar_with_the_cli(
    served: Served, tmp_path: Path
) -> None:
    spec = tmp_path / "holidays.json"
    spec.write_text(
        json.dumps(
            {
                "calendarName": "holidays",
                "timeZone": "Europe/Berlin",
                "excludeDates": ["2026-12-24"],
                "weekly": [{"days": ["SAT"], "from": "02:00", "to": "04:00"}],
            }
        )
    )
    added = served.run("calendar", "add", "-f", str(spec))
    assert added.code == 0, added
    assert added.out.strip() == "calendar holidays registered (1 date, 1 weekly window)"

    shown = served.run("calendar", "get", "holidays")
    assert shown.code == 0 and "Europe/Berlin" in shown.out
    assert "2026-12-24" in shown.out and "SAT 02:00" in shown.out

    listed = served.run("--json", "calendar", "list")
    assert [c["calendarName"] for c in json.loads(listed.out)] == ["holidays"]

    ics = tmp_path / "holidays.ics"
    ics.write_text(ICS)
    updated = served.run("calendar", "update", "--name", "holidays", "--ics", str(ics))
    assert updated.code == 0, updated
    stored = json.loads(served.api.registry.get(layout.calendar_path("holidays")) or b"")
    assert stored["yearly"] == ["12-25", "12-26"] and stored["excludeDates"] == []
    assert stored["timeZone"] == "UTC"  # the file replaces the calendar: the default zone

    zone = served.run("calendar", "update", "--name", "holidays", "--time-zone", "Asia/Tokyo")
    assert zone.code == 0, zone
    after = json.loads(served.run("--json", "calendar", "get", "holidays").out)
    assert after["timeZone"] == "Asia/Tokyo" and after["yearly"] == ["12-25", "12-26"]

    deleted = served.run("calendar", "delete", "holidays", "-y")
    assert deleted.code == 0 and served.run("calendar", "get", "holidays").code != 0


def test_the_cli_reports_the_servers_refusals_and_its_own(served: Served, tmp_path: Path) -> None:
    bad = tmp_path / "bad.ics"
    bad.write_text(ICS.replace("RRULE:FREQ=YEARLY", "RRULE:FREQ=MONTHLY"))
    refused = served.run("calendar", "add", "--ics", str(bad), "--name", "x")
    assert refused.code != 0 and "Christmas" in refused.err and "FREQ=MONTHLY" in refused.err
    assert served.run("calendar", "add", "--name", "x").code != 0  # nothing to send
    big = tmp_path / "big.ics"
    big.write_text("x" * (256 * 1024 + 1))
    too_big = served.run("calendar", "add", "--ics", str(big), "--name", "x")
    assert too_big.code != 0 and "larger than" in too_big.err

    assert served.run("calendar", "add", "--ics", "-", "--name", "h", stdin=ICS).code == 0
    api = served.api
    assert api.call("POST", "/api/app", app_body("app")).status_code < 300
    job = api.call("POST", "/api/job/register", job_body("nightly", excludeCalendars=["h"]))
    assert job.status_code < 300, job.get_json()
    in_use = served.run("calendar", "delete", "h", "-y")
    assert in_use.code != 0 and "used by job 'nightly'" in in_use.err
    assert served.run("calendar", "get", "h").code == 0

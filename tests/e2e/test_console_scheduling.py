"""The console's calendars, pools and backfills (issue 28) in a real Chromium against a real
replica process, the local Mesos stand-in (command tasks really run) and a real ZooKeeper, with an
SQLite event trace (the runs view).

The admin makes a calendar (JSON parts, then an .ics file added) and a pool (then resized)
through their pages, assigns both to a job through the job's form, previews a backfill (a dry
run listing its fires) and starts a real one, paced so that it is still going: it is listed with
its progress, paused, resumed and cancelled from the page, and its first run is marked as the
backfill's in the job's runs. Deleting the calendar the job uses shows the API's 409 naming the
job. The guest (viewer of every app) sees the same pages with no control that writes.

The job fires at minutes 0-4 of the hour two hours before the module started (UTC), so its cron
never fires during the test and a backfill of that hour is exactly 5 fires. The browser runs in
UTC, so the times typed into the backfill form are UTC.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from playwright.sync_api import Browser, Locator, Page, Route, expect

from deploy.zookeeper import ZooKeeperEnsemble
from tests.e2e.pipeline_support import running_system
from tests.e2e.test_console import (
    SCREENSHOTS,
    Cluster,
    ConsolePage,
    browser,  # noqa: F401 (the module-scoped fixture)
    new_tab,
    playwright,  # noqa: F401 (the module-scoped fixture)
)

pytestmark = pytest.mark.slow

APP = "sched_app"
JOB = "sched_job"
EXCLUDED = "blackout_job"
CALENDAR = "holidays"
POOL = "db"
FIRES = 5
ICS = """BEGIN:VCALENDAR\r
VERSION:2.0\r
PRODID:-//ejcloud tests//EN\r
BEGIN:VEVENT\r
UID:new-year-2031@ejcloud.test\r
SUMMARY:New year\r
DTSTART;VALUE=DATE:20310101\r
DTEND;VALUE=DATE:20310102\r
END:VEVENT\r
END:VCALENDAR\r
"""


@pytest.fixture(scope="module")
def cluster(zk: ZooKeeperEnsemble, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("console-scheduling")
    namespace = f"t-{uuid.uuid4().hex[:12]}"
    trace = f"sqlite:///{tmp}/trace.db"
    with running_system(zk.hosts, namespace, tmp, replicas=1, event_trace_rdb_url=trace) as system:
        yield Cluster(system, tmp)


@pytest.fixture(scope="module")
def hour_start() -> datetime:
    """Minute 0 of the hour two hours ago (UTC): the job's fires are its minutes 0-4."""
    return (datetime.now(UTC) - timedelta(hours=2)).replace(minute=0, second=0, microsecond=0)


def _local(moment: datetime) -> str:
    """A `datetime-local` input's value (the browser runs in UTC)."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S")


def _zulu(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def _fill_parts(page: Page, parts: str) -> None:
    page.locator("form[data-form=calendar] [name=parts]").fill(parts)


def _backfill_row(page: Page) -> tuple[str, Locator]:
    rows = page.locator("[data-table=backfills] tbody tr")
    expect(rows).to_have_count(1)
    backfill_id = rows.first.locator("[data-backfill]").get_attribute("data-backfill")
    assert backfill_id
    return backfill_id, rows.first


def test_calendars_pools_and_backfills_through_the_console(
    cluster: Cluster,
    browser: Browser,  # noqa: F811 (the fixture imported above)
    hour_start: datetime,
) -> None:
    cluster.add_app(APP)
    # A job every 2 s in a calendar's blackout: its fires are recorded as excluded meanwhile.
    now = datetime.now(UTC).replace(microsecond=0)
    blackout = {
        "calendarName": "blackout",
        "excludeRanges": [
            {"from": _zulu(now - timedelta(minutes=1)), "to": _zulu(now + timedelta(hours=1))}
        ],
    }
    assert cluster.api("POST", "/api/calendar", blackout)[0] == 201
    cluster.add_job(EXCLUDED, APP, cron="0/2 * * * * ?", excludeCalendars=["blackout"])
    cluster.add_job(JOB, APP, cron=f"0 0-{FIRES - 1} {hour_start.hour} * * ?", timeZone="UTC")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    tab = new_tab(browser, f"http://{cluster.leader.identity}", SCREENSHOTS, timezone_id="UTC")
    page = tab.page
    tab.login("root", "root")

    # --- a calendar: JSON that is not JSON is refused in the page, then a good one ---------------
    tab.open("calendars")
    page.click("[data-action=add-calendar]")
    form = page.locator("form[data-form=calendar]")
    form.locator("[name=calendarName]").fill(CALENDAR)
    form.locator("[name=timeZone]").fill("Europe/Berlin")
    _fill_parts(page, '{"excludeDates": [')
    form.locator("button[type=submit]").click()
    expect(form.locator("[data-error-for=parts]")).to_contain_text("not JSON")
    assert cluster.api("GET", f"/api/calendar/{CALENDAR}")[0] == 404  # nothing sent
    # A part the API refuses: its message shows with the parts' editor.
    _fill_parts(page, '{"weekly": [{"days": ["SAT"], "from": "04:00", "to": "04:00"}]}')
    form.locator("button[type=submit]").click()
    expect(form.locator("[data-error-for=parts]")).to_contain_text("weekly[0]")
    assert cluster.api("GET", f"/api/calendar/{CALENDAR}")[0] == 404
    _fill_parts(
        page,
        '{"excludeDates": ["2030-12-25"], '
        '"weekly": [{"days": ["SAT", "SUN"], "from": "22:00", "to": "02:00"}]}',
    )
    form.locator("button[type=submit]").click()
    expect(page).to_have_url(re.compile(rf"#/calendars/{CALENDAR}$"))
    expect(page.locator("[data-value=timeZone]")).to_have_text("Europe/Berlin")
    expect(page.locator("[data-part=excludeDates]")).to_contain_text("2030-12-25")
    weekly = "Sat, Sun 22:00 \N{EN DASH} 02:00 (into the next day)"
    expect(page.locator("[data-part=weekly]")).to_contain_text(weekly)
    status, stored = cluster.api("GET", f"/api/calendar/{CALENDAR}")
    assert status == 200, stored
    assert stored["excludeDates"] == ["2030-12-25"]
    assert stored["weekly"] == [{"days": ["SAT", "SUN"], "from": "22:00", "to": "02:00"}]

    # Edit: an .ics file's all-day event is added as an excluded date.
    page.click("[data-action=edit]")
    form = page.locator("form[data-form=calendar]")
    expect(form.locator("[name=parts]")).to_have_value(re.compile("2030-12-25"))
    ics = cluster.tmp / "new-year.ics"
    ics.write_text(ICS)
    form.locator("[name=ics]").set_input_files(str(ics))
    form.locator("button[type=submit]").click()
    expect(page).to_have_url(re.compile(rf"#/calendars/{CALENDAR}$"))
    expect(page.locator("[data-part=excludeDates]")).to_contain_text("2031-01-01")
    assert "2031-01-01" in cluster.api("GET", f"/api/calendar/{CALENDAR}")[1]["excludeDates"]
    tab.shot("scheduling-01-calendar")

    # --- a pool: added in the list, resized on its page ------------------------------------------
    tab.open("pools")
    form = page.locator("form[data-form=pool]")
    form.locator("[name=poolName]").fill(POOL)
    form.locator("[name=size]").fill("0")
    form.locator("button[type=submit]").click()
    expect(form.locator("[data-error-for=size]")).not_to_be_empty()
    assert cluster.api("GET", f"/api/pool/{POOL}")[0] == 404
    form.locator("[name=size]").fill("2")
    form.locator("button[type=submit]").click()
    row = page.locator("[data-table=pools] tbody tr", has_text=POOL)
    expect(row).to_contain_text("0 / 2")
    row.get_by_role("link", name=POOL).click()
    expect(page).to_have_url(re.compile(rf"#/pools/{POOL}$"))
    # The page has read the pool (its first answer prefills the field this fills).
    expect(page.locator("[data-value=size]")).to_have_text("2")
    resize = page.locator("form[data-form=resize]")
    resize.locator("[name=size]").fill("3")
    resize.locator("button[type=submit]").click()
    expect(page.locator("[data-value=size]")).to_have_text("3")
    assert cluster.api("GET", f"/api/pool/{POOL}")[1]["size"] == 3

    # --- the job's form: its calendars and its pool ----------------------------------------------
    tab.open(f"jobs/{JOB}/edit")
    form = page.locator("form[data-form=job]")
    box = form.locator("[data-box=scheduling]")
    expect(box).to_be_visible()
    box.locator("summary").click()
    expect(form.locator(f"[name=excludeCalendars] option[value={CALENDAR}]")).to_have_count(1)
    form.locator("[name=excludeCalendars]").select_option([CALENDAR])
    form.locator("[name=pool]").select_option(POOL)
    form.locator("[name=poolSlots]").fill("2")
    form.locator("button[type=submit]").click()
    expect(page).to_have_url(re.compile(rf"#/jobs/{JOB}$"))
    expect(page.locator("[data-value=pool]")).to_have_text(POOL)
    expect(page.locator("[data-value=excludeCalendars]")).to_have_text(CALENDAR)
    job = cluster.api("GET", f"/api/job/jobs/{JOB}")[1]
    assert (job["excludeCalendars"], job["pool"], job["poolSlots"]) == ([CALENDAR], POOL, 2)

    # --- a backfill: the dry run lists its fires first, then a real one is listed ----------------
    form = page.locator("form[data-form=backfill]")
    form.locator("[name=from]").fill(_local(hour_start))
    form.locator("[name=to]").fill(_local(hour_start + timedelta(minutes=59, seconds=59)))
    form.locator("[name=firesPerMinute]").fill("1")  # still going while the test acts on it
    start = form.locator("[data-action=backfill-start]")
    expect(start).to_be_disabled()
    form.locator("[data-action=backfill-preview]").click()
    expect(form.locator(f"[data-preview-count='{FIRES}']")).to_be_visible()
    fires = form.locator("[data-list=backfill-fires] li")
    expect(fires).to_have_count(FIRES)
    first = hour_start.strftime("%Y-%m-%d %H:%M:%S")
    expect(fires.first).to_contain_text(first)
    status, listed = cluster.api("GET", f"/api/job/{JOB}/backfills")
    assert status == 200 and not (
        listed if isinstance(listed, list) else listed.get("items", [])
    ), listed
    tab.shot("scheduling-02-backfill-preview")
    expect(start).to_be_enabled()
    start.click()
    backfill_id, row = _backfill_row(page)
    expect(row).to_contain_text("running")
    expect(row.locator("[data-fires]")).to_have_attribute("data-fires", str(FIRES))
    expect(row.locator("[data-launched='1']")).to_be_visible()
    expect(start).to_be_disabled()  # a new preview is needed for another one
    # Its first run, with its logical fire time, marked as the backfill's.
    run_row = page.locator("[data-table=recent-runs] tbody tr", has_text=f"{first} UTC")
    expect(run_row).to_have_count(1, timeout=45_000)
    expect(run_row.locator(f"[data-backfill-run='{backfill_id}']")).to_have_count(1)
    tab.shot("scheduling-03-backfill-running")
    row.locator("[data-action=backfill-pause]").click()
    expect(row).to_contain_text("paused")
    assert cluster.api("GET", f"/api/job/{JOB}/backfills/{backfill_id}")[1]["status"] == "PAUSED"
    row.locator("[data-action=backfill-resume]").click()
    expect(row).to_contain_text("running")
    row.locator("[data-action=backfill-cancel]").click()
    page.locator("dialog.confirm [data-action=confirm]").click()
    expect(row).to_contain_text("cancelled")
    expect(row.locator("[data-action^=backfill-]")).to_have_count(0)
    assert cluster.api("GET", f"/api/job/{JOB}/backfills/{backfill_id}")[1]["status"] == "CANCELLED"
    # The run's own page names its fire and its backfill.
    run_row.get_by_role("link", name="details").click()
    expect(page.locator(f"[data-backfill-run='{backfill_id}']")).to_be_visible()
    expect(page.locator("dl.fields")).to_contain_text(f"{first} UTC")

    # --- where the calendar and the pool are used ------------------------------------------------
    tab.open(f"pools/{POOL}")
    expect(page.locator("[data-list=pool-jobs]")).to_contain_text(JOB)
    tab.open(f"calendars/{CALENDAR}")
    expect(page.locator("[data-list=calendar-users]")).to_contain_text(JOB)
    page.click("[data-action=delete]")
    page.locator("dialog.confirm [data-action=confirm]").click()
    refused = page.locator("[data-error=delete]")
    expect(refused).to_contain_text(JOB)
    assert cluster.api("GET", f"/api/calendar/{CALENDAR}")[0] == 200  # still there
    tab.shot("scheduling-04-calendar-in-use")

    # --- fires a calendar excluded: in the job's skipped fires and among its runs ----------------
    tab.open(f"jobs/{EXCLUDED}")
    skipped = page.locator("[data-table=skipped-fires] tbody tr", has_text="fire_excluded")
    expect(skipped.first).to_contain_text("blackout")
    excluded_run = page.locator("[data-table=recent-runs] tbody tr", has_text="fire_excluded")
    expect(excluded_run.first).to_contain_text("blackout")
    expect(excluded_run.first.get_by_role("link", name="details")).to_have_count(0)
    tab.shot("scheduling-05-excluded-fires")
    tab.assert_clean(
        {
            ("/api/session", 401),
            ("/api/calendar", 400),
            ("/api/pool", 400),
            (f"/api/calendar/{CALENDAR}", 409),
        }
    )

    # --- the guest sees it all and no control that writes ----------------------------------------
    guest = new_tab(browser, f"http://{cluster.leader.identity}", SCREENSHOTS, timezone_id="UTC")
    _guest_sees_no_write_control(guest)


def _guest_sees_no_write_control(tab: ConsolePage) -> None:
    page = tab.page
    tab.login("guest", "guest")
    tab.open("calendars")
    expect(page.locator("[data-table=calendars]")).to_contain_text(CALENDAR)
    expect(page.locator("[data-action=add-calendar]")).to_have_count(0)
    tab.open(f"calendars/{CALENDAR}")
    expect(page.locator("[data-part=excludeDates]")).to_contain_text("2030-12-25")
    expect(page.locator("[data-action=edit], [data-action=delete]")).to_have_count(0)
    tab.open("calendars/new")
    expect(page.locator("form[data-form=calendar]")).to_have_count(0)
    tab.open("pools")
    expect(page.locator("[data-table=pools]")).to_contain_text(POOL)
    expect(page.locator("form[data-form=pool]")).to_have_count(0)
    tab.open(f"pools/{POOL}")
    expect(page.locator("[data-value=size]")).to_have_text("3")
    expect(page.locator("form[data-form=resize]")).to_be_hidden()
    expect(page.locator("[data-action=delete]")).to_have_count(0)
    tab.open(f"jobs/{JOB}")
    expect(page.locator("[data-table=backfills] tbody tr")).to_have_count(1)
    expect(page.locator("[data-section=skipped-fires]")).to_be_visible()
    expect(page.locator("[data-value=pool]")).to_have_text(POOL)
    expect(page.locator("form[data-form=backfill]")).to_have_count(0)
    expect(page.locator("[data-action^=backfill-]")).to_have_count(0)
    tab.assert_clean({("/api/session", 401)})


def test_the_job_form_takes_no_input_until_the_stored_job_has_filled_it(
    cluster: Cluster,
    browser: Browser,  # noqa: F811 (the fixture imported above)
) -> None:
    """The form lists the calendars before the stored job has come; a calendar picked then was
    unpicked when the job came and filled the form, and the save dropped it (seen once in CI,
    under load). The form now takes no input until it is filled."""
    app, job, calendar = "race_app", "race_job", "race_cal"
    cluster.add_app(app)
    body = {"calendarName": calendar, "excludeDates": ["2030-01-01"]}
    assert cluster.api("POST", "/api/calendar", body)[0] == 201
    cluster.add_job(job, app, cron="0 0 3 * * ?")
    tab = new_tab(browser, f"http://{cluster.leader.identity}", SCREENSHOTS, timezone_id="UTC")
    page = tab.page
    tab.login("root", "root")
    held: list[Route] = []
    stored = re.compile(rf".*/api/job/jobs/{job}$")

    def hold(route: Route) -> None:
        held.append(route)  # its answer waits until let through

    page.route(stored, hold)
    tab.open(f"jobs/{job}/edit")
    form = page.locator("form[data-form=job]")
    calendars = form.locator("[name=excludeCalendars]")
    expect(calendars.locator(f"option[value={calendar}]")).to_have_count(1)
    expect(form).to_have_attribute("aria-busy", "true")
    expect(calendars).to_be_disabled()
    assert len(held) == 1
    held[0].continue_()
    page.unroute(stored)  # (after: unroute lets a held request through itself)
    expect(calendars).to_be_enabled()
    expect(form).not_to_have_attribute("aria-busy", "true")
    form.locator("[data-box=scheduling] summary").click()
    calendars.select_option([calendar])
    form.locator("button[type=submit]").click()
    expect(page).to_have_url(re.compile(rf"#/jobs/{job}$"))
    assert cluster.api("GET", f"/api/job/jobs/{job}")[1]["excludeCalendars"] == [calendar]

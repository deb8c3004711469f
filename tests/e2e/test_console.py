"""The web console in a real browser (Playwright driving Debian's chromium) against real replica
processes, the local Mesos stand-in and a real ZooKeeper.

The console is opened on the LEADER: it sends its session cookie only to the origin that served it,
so a standby's page says it is a standby and links to the leader's console (see
test_console_trust.py for what never leaves the page). A screenshot of each view is written to
`data/screenshots/console/` (printed in the output) for a person to look at; a phone-sized and a
dark-mode one too.

Endpoints that other work adds (next fire times, kill, runs, run logs) are checked precisely
whichever applies: the leader's OpenAPI document says whether it serves them, and the console
must then show them, or else its "not available on this server" note.
"""

from __future__ import annotations

import base64
import io
import json
import re
import tarfile
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import (
    Browser,
    ConsoleMessage,
    Page,
    Playwright,
    Response,
    expect,
    sync_playwright,
)

from deploy.zookeeper import ZooKeeperEnsemble
from tests.e2e.pipeline_support import System, running_system
from tests.support.http import exchange
from tests.support.replicas import ROOT, ReplicaProcess, http_get
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS = ROOT / "data" / "screenshots" / "console"
WAIT_MS = 20_000
RUN_WAIT_MS = 60_000
PHONE = {"width": 390, "height": 844}
LAPTOP = {"width": 1366, "height": 900}
HELLO_SH = """#!/bin/sh
echo "console-marker shard $EJC_SHARDING_ITEM"
echo "console-err shard $EJC_SHARDING_ITEM" >&2
"""
expect.set_options(timeout=WAIT_MS)
_FAILED_LOAD = re.compile(r"^Failed to load resource: the server responded with a status of (\d+)")


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


ADMIN = basic("root", "root")


def call(
    replica: ReplicaProcess,
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], Any]:
    """One request to `replica` (a redirect is followed, as urllib does): (status, headers,
    JSON)."""
    data = None if body is None else json.dumps(body).encode()
    sent = dict(headers or {})
    if body is not None:
        sent["Content-Type"] = "application/json"
    answer = exchange(method, f"http://{replica.identity}{path}", data=data, headers=sent)
    return answer.status, dict(answer.headers), answer.json()


@dataclass
class Cluster:
    system: System
    tmp: Path

    @property
    def leader(self) -> ReplicaProcess:
        leader = self.system.leader()
        assert leader is not None
        return leader

    @property
    def standby(self) -> ReplicaProcess:
        leader = self.leader
        return next(r for r in self.system.replicas if r is not leader)

    def api(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        status, _, answer = call(self.leader, method, path, body, {"Authorization": ADMIN})
        return status, answer

    def serves(self, method: str, template: str) -> bool:
        """Whether the leader's OpenAPI document lists `method template` (names in braces may
        differ)."""
        status, doc = self.api("GET", "/api/openapi.json")
        assert status == 200
        wanted = re.sub(r"\{[^}]*\}", "{}", template)
        return any(
            re.sub(r"\{[^}]*\}", "{}", path) == wanted and method.lower() in ops
            for path, ops in doc["paths"].items()
        )

    def app_archive(self, name: str) -> str:
        """A tarball holding hello.sh (prints a marker to stdout and to stderr)."""
        archive = self.tmp / f"{name}.tar.gz"
        with tarfile.open(archive, "w:gz") as tar:
            data = HELLO_SH.encode()
            info = tarfile.TarInfo("hello.sh")
            info.size = len(data)
            info.mode = 0o755
            tar.addfile(info, io.BytesIO(data))
        return str(archive)

    def add_app(self, name: str) -> None:
        status, body = self.api(
            "POST",
            "/api/app",
            {
                "appName": name,
                "appURL": self.app_archive(name),
                "bootstrapScript": "true",
                "cpuCount": 0.1,
                "memoryMB": 32,
            },
        )
        assert status == 204, body

    def add_job(self, name: str, app: str, **extra: Any) -> None:
        status, body = self.api(
            "POST",
            "/api/job/register",
            {
                "jobName": name,
                "appName": app,
                "jobType": "SCRIPT",
                "jobExecutionType": "TRANSIENT",
                "scriptCommandLine": "sh hello.sh",
                "cron": "0 0 3 * * ?",
                "shardingTotalCount": 1,
                "cpuCount": 0.1,
                "memoryMB": 16,
                **extra,
            },
        )
        assert status == 204, body


@pytest.fixture(scope="module")
def cluster(zk: ZooKeeperEnsemble, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("console")
    namespace = f"t-{uuid.uuid4().hex[:12]}"
    with running_system(zk.hosts, namespace, tmp, replicas=2) as system:
        yield Cluster(system, tmp)


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    manager = sync_playwright().start()
    try:
        yield manager
    finally:
        manager.stop()


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
    try:
        yield launched
    finally:
        launched.close()


@pytest.fixture
def screenshots(capsys: pytest.CaptureFixture[str]) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with capsys.disabled():
        print(f"\nconsole screenshots: {SCREENSHOTS}")
    return SCREENSHOTS


@dataclass
class ConsolePage:
    """One browser tab on the console, recording console errors, page errors and failed
    responses."""

    page: Page
    base: str
    shots: Path
    errors: list[tuple[str, str]] = field(default_factory=list)
    failed: list[tuple[str, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.page.set_default_timeout(WAIT_MS)
        self.page.on("console", self._on_console)
        self.page.on("pageerror", lambda exc: self.errors.append((f"page error: {exc}", "")))
        self.page.on("response", self._on_response)

    def _on_console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.errors.append((message.text, str(message.location.get("url", ""))))

    def _on_response(self, response: Response) -> None:
        if response.status >= 400:
            self.failed.append((response.url, response.status))

    def open(self, route: str = "") -> None:
        self.page.goto(f"{self.base}/#/{route}")

    def login(self, user: str, password: str) -> None:
        self.open()
        self.page.fill("#login-user", user)
        self.page.fill("#login-password", password)
        self.page.click("form#login button[type=submit]")
        role = "root" if user == "root" else "guest"
        expect(self.page.locator(f"#who [data-role={role}]")).to_be_visible()

    def shot(self, name: str) -> None:
        self.page.wait_for_timeout(300)  # let the last poll's text settle before the picture
        self.page.evaluate("window.scrollTo(0, 0)")
        self.page.screenshot(path=self.shots / f"{name}.png", full_page=True)

    def assert_clean(self, expected: set[tuple[str, int]], gone: str | None = None) -> None:
        """No console or page error, except the browser's note of an API refusal the test
        caused on purpose: (path ending, status) in `expected`, and failed requests to the
        replica `gone` (`host:port`) that the test stopped."""
        allowed = {
            url
            for url, status in self.failed
            if any(urllib.parse.urlsplit(url).path.endswith(p) and status == s for p, s in expected)
        }
        unexpected = []
        for text, url in self.errors:
            match = _FAILED_LOAD.match(text)
            if match and url in allowed:
                continue
            if gone and urllib.parse.urlsplit(url).netloc == gone:
                continue  # refused while stopping (503), then not there at all
            unexpected.append(f"{text} ({url})")
        assert not unexpected, "console errors:\n" + "\n".join(unexpected)


def new_tab(browser: Browser, base: str, shots: Path, **options: Any) -> ConsolePage:
    context = browser.new_context(viewport=options.pop("viewport", LAPTOP), **options)
    return ConsolePage(context.new_page(), base, shots)


def test_admin_works_the_whole_cycle_on_the_leader(
    cluster: Cluster, browser: Browser, screenshots: Path
) -> None:
    standby = cluster.standby
    tab = new_tab(browser, f"http://{cluster.leader.identity}", screenshots)
    page = tab.page
    try:
        # Log in; the overview shows both replicas, from each one's own /health (the other's
        # public part, read without credentials).
        tab.open()
        expect(page.locator("form#login")).to_be_visible()
        tab.shot("00-login")
        tab.login("root", "root")
        replicas = page.locator("[data-table=replicas] tbody tr")
        expect(replicas).to_have_count(2)
        leader_row = replicas.filter(has_text=cluster.leader.identity)
        expect(leader_row).to_contain_text("leader")
        expect(leader_row).to_contain_text("CONNECTED")
        expect(leader_row).to_contain_text("connected")  # its Mesos connection
        expect(leader_row).to_contain_text("since")  # its term start
        expect(replicas.filter(has_text=standby.identity)).to_contain_text("standby")
        expect(leader_row).to_contain_text("(this page)")
        expect(page.locator("#who")).to_contain_text(
            f"leader {cluster.leader.identity} (this replica)"
        )
        tab.shot("01-overview")

        # An app through the form.
        tab.open("apps")
        page.click("[data-action=add-app]")
        form = page.locator("form[data-form=app]")
        form.locator("[name=appName]").fill("console_app")
        form.locator("[name=appURL]").fill(cluster.app_archive("console_app"))
        form.locator("[name=bootstrapScript]").fill("true")
        form.locator("[name=cpuCount]").fill("0.1")
        form.locator("[name=memoryMB]").fill("32")
        form.locator("button[type=submit]").click()
        expect(page).to_have_url(re.compile(r"#/apps/console_app$"))
        expect(page.locator("h1")).to_contain_text("console_app")
        assert cluster.api("GET", "/api/app/console_app")[0] == 200

        # A job through the form: first with a cron the API refuses, whose message shows next
        # to the cron field, then a good one with its next fire times previewed.
        tab.open("jobs/new")
        form = page.locator("form[data-form=job]")
        # Its defaults are the API's (issue 30: misfire was on in the form, off in the API).
        expect(form.locator("[name=misfire]")).not_to_be_checked()
        form.locator("[name=jobName]").fill("console_job")
        form.locator("[name=appName]").select_option("console_app")
        form.locator("[name=jobType]").select_option("SCRIPT")
        form.locator("[name=scriptCommandLine]").fill("sh hello.sh")
        form.locator("[name=cpuCount]").fill("0.1")
        form.locator("[name=memoryMB]").fill("16")
        form.locator("[name=cron]").fill("every ten seconds")
        with page.expect_response(lambda r: r.url.endswith("/api/job/register")) as refused:
            form.locator("button[type=submit]").click()
        assert refused.value.status == 400
        problem = refused.value.json()["fields"]["cron"]
        cron_error = form.locator("[data-error-for=cron]")
        expect(cron_error).to_have_text(problem)
        expect(form.locator(".field[data-field=cron]")).to_have_class(re.compile("invalid"))
        assert cluster.api("GET", "/api/job/jobs/console_job")[0] == 404  # nothing written
        tab.shot("04-job-form-refused")

        form.locator("[name=cron]").fill("0 0 3 * * ?")
        expect(cron_error).to_have_text("")  # editing the field clears its message
        preview = form.locator("[data-preview=cron]")
        if cluster.serves("GET", "/api/cron/next-fire-times"):
            expect(preview).to_have_attribute("data-state", "times")
            expect(preview.locator("li")).to_have_count(5)
            expect(preview.locator("li").first).to_contain_text("03:00:00")
        else:
            expect(preview).to_have_attribute("data-state", "unavailable")
            expect(preview).to_contain_text("not available on this server")
        tab.shot("04-job-form")
        form.locator("button[type=submit]").click()
        expect(page).to_have_url(re.compile(r"#/jobs/console_job$"))
        status, stored = cluster.api("GET", "/api/job/jobs/console_job")
        assert status == 200 and stored["cron"] == "0 0 3 * * ?"
        assert stored["scriptCommandLine"] == "sh hello.sh"
        if cluster.serves("GET", "/api/job/{jobName}/next-fire-times"):
            expect(page.locator("[data-list=next-fire-times] li")).to_have_count(10)
        else:
            expect(page.locator("main")).to_contain_text("Not available on this server")

        # Another job of the app, so deleting the app has something to name.
        cluster.add_job("console_job2", "console_app")
        tab.open("apps")
        expect(page.locator("[data-table=apps]")).to_contain_text("console_app")
        tab.shot("02-apps")
        tab.open("apps/console_app")
        expect(page.locator("main")).to_contain_text("console_job2")
        tab.shot("03-app-detail")
        tab.open("jobs?app=console_app")
        expect(page.locator("[data-table=jobs] tbody tr")).to_have_count(2)
        page.fill("input[name=q]", "job2")
        expect(page.locator("[data-table=jobs] tbody tr")).to_have_count(1)
        assert "q=job2" in page.url and "app=console_app" in page.url  # filters are in the link
        page.fill("input[name=q]", "")
        tab.shot("05-jobs")

        # Trigger it and watch the run appear and succeed.
        tab.open("jobs/console_job")
        page.click("[data-action=trigger]")
        expect(page.locator(".toast", has_text="triggered")).to_be_visible()
        recent = page.locator("[data-table=recent-runs]")
        expect(recent.locator(".badge", has_text="success")).to_have_count(1, timeout=RUN_WAIT_MS)
        tab.shot("06-job-detail")

        tab.open("runs?job=console_job")
        runs = page.locator("[data-table=runs] tbody tr")
        expect(runs).to_have_count(1)
        expect(runs.first).to_contain_text("success")
        tab.shot("07-runs")
        runs.first.locator("a[data-task]").click()
        expect(page).to_have_url(re.compile(r"#/runs/console_job/"))
        trail = page.locator("[data-table=trail]")
        expect(trail).to_contain_text("staging")
        expect(trail).to_contain_text("finished")
        if cluster.serves("GET", "/api/job/{jobName}/runs/{taskId}/log"):
            expect(page.locator("pre.log")).to_contain_text("console-marker shard 0")
            page.click("button[data-stream=stderr]")
            expect(page.locator("pre.log")).to_contain_text("console-err shard 0")
            expect(page.locator("pre.log")).not_to_contain_text("console-marker")
        else:
            expect(page.locator("main")).to_contain_text("Logs are not available on this server")
        tab.shot("08-run-detail")

        tab.open("stats")
        expect(page.locator("[data-chart=results] canvas")).to_have_count(1)
        # Issue 30: the totals say which period each count covers, and "Registered now" is the
        # jobs registered now, not the latest daily sample (0 on a young cluster).
        fields = page.locator("main")
        expect(fields).to_contain_text("Last 60 minutes")
        expect(fields).to_contain_text(re.compile(r"Last whole hour \(\d\d:00-\d\d:00 UTC\)"))
        registered = len(cluster.api("GET", "/api/job/jobs")[1])
        expect(fields).to_contain_text(re.compile(rf"Registered now\s*{registered} jobs"))
        tab.shot("09-statistics")

        # Edit the job and the app: the forms come filled in, and save what changed.
        tab.open("jobs/console_job/edit")
        form = page.locator("form[data-form=job]")
        expect(form.locator("[name=cron]")).to_have_value("0 0 3 * * ?")
        expect(form.locator("[name=jobName]")).to_have_attribute("readonly", "")
        form.locator("[name=description]").fill("edited in the console")
        form.locator("button[type=submit]").click()
        expect(page).to_have_url(re.compile(r"#/jobs/console_job$"))
        status, stored = cluster.api("GET", "/api/job/jobs/console_job")
        assert stored["description"] == "edited in the console"
        assert stored["cron"] == "0 0 3 * * ?" and stored["scriptCommandLine"] == "sh hello.sh"
        tab.open("apps/console_app/edit")
        form = page.locator("form[data-form=app]")
        expect(form.locator("[name=memoryMB]")).to_have_value("32")
        form.locator("[name=memoryMB]").fill("48")
        form.locator("button[type=submit]").click()
        expect(page).to_have_url(re.compile(r"#/apps/console_app$"))
        assert cluster.api("GET", "/api/app/console_app")[1]["memoryMB"] == 48

        # Disable, then delete with a confirmation that says what goes with it.
        tab.open("jobs/console_job")
        toggle = page.locator("[data-action=toggle]")
        expect(toggle).to_have_text("Disable")
        toggle.click()
        expect(page.locator("h1 .badge")).to_have_text("disabled")
        expect(toggle).to_have_text("Enable")
        assert cluster.api("GET", "/api/job/console_job/disable") == (200, True)
        page.click("[data-action=delete]")
        dialog = page.locator("dialog.confirm")
        expect(dialog).to_contain_text("Delete job console_job?")
        dialog.locator("[data-action=cancel]").click()
        expect(dialog).to_have_count(0)
        assert cluster.api("GET", "/api/job/jobs/console_job")[0] == 200  # cancel kept it
        page.click("[data-action=delete]")
        page.locator("dialog.confirm [data-action=confirm]").click()
        expect(page).to_have_url(re.compile(r"#/jobs$"))
        expect(page.locator("[data-table=jobs]")).to_contain_text("console_job2")
        expect(
            page.locator("[data-table=jobs] a", has_text=re.compile("^console_job$"))
        ).to_have_count(0)
        assert cluster.api("GET", "/api/job/jobs/console_job")[0] == 404

        tab.open("apps/console_app")
        expect(page.locator("main")).to_contain_text("console_job2")
        page.click("[data-action=delete]")
        dialog = page.locator("dialog.confirm")
        expect(dialog).to_contain_text("Delete app console_app?")
        expect(dialog).to_contain_text("console_job2")  # the job that goes with it
        tab.shot("10-delete-app-confirmation")
        dialog.locator("[data-action=confirm]").click()
        expect(page).to_have_url(re.compile(r"#/apps$"))
        expect(page.locator("h1")).to_have_text("Apps")
        expect(page.locator("main")).not_to_contain_text("console_app", timeout=RUN_WAIT_MS)
        assert cluster.api("GET", "/api/app/console_app")[0] == 404
        assert cluster.api("GET", "/api/job/jobs/console_job2")[0] == 404

        tab.assert_clean({("/api/job/register", 400), ("/api/cron/next-fire-times", 400)})
    finally:
        page.context.close()


def test_phone_and_dark_mode_render_every_view_without_errors(
    cluster: Cluster, browser: Browser, screenshots: Path
) -> None:
    cluster.add_app("look_app")
    cluster.add_job("look_job", "look_app")
    base = f"http://{cluster.leader.identity}"
    for name, options in (
        ("phone", {"viewport": PHONE, "is_mobile": True, "has_touch": True}),
        ("dark", {"color_scheme": "dark"}),
    ):
        tab = new_tab(browser, base, screenshots, **options)
        try:
            tab.login("root", "root")
            expect(tab.page.locator("[data-table=replicas] tbody tr")).to_have_count(2)
            tab.shot(f"{name}-overview")
            tab.open("jobs/look_job")
            expect(tab.page.locator("[data-action=trigger]")).to_be_visible()
            tab.shot(f"{name}-job-detail")
            tab.open("jobs/new")
            expect(tab.page.locator("form[data-form=job]")).to_be_visible()
            tab.shot(f"{name}-job-form")
            tab.open("stats")
            expect(tab.page.locator("[data-chart=results] canvas")).to_have_count(1)
            tab.shot(f"{name}-statistics")
            tab.open("access")
            expect(tab.page.locator("form[data-form=token]")).to_be_visible()
            tab.shot(f"{name}-access")
            tab.open("audit")
            expect(tab.page.locator("[data-table=audit]")).to_contain_text("app.create")
            tab.shot(f"{name}-audit")
            if name == "phone":
                # Nothing wider than the screen but the tables, which scroll in their box.
                width = tab.page.evaluate("document.documentElement.scrollWidth")
                assert width <= PHONE["width"], width
            else:
                background = tab.page.evaluate("getComputedStyle(document.body).backgroundColor")
                assert background == "rgb(15, 20, 26)", background
            tab.assert_clean(set())
        finally:
            tab.page.context.close()


def test_guest_sees_everything_and_no_write_control(
    cluster: Cluster, browser: Browser, screenshots: Path
) -> None:
    cluster.add_app("guest_app")
    # The webhook's path holds a token: a guest is shown only its scheme, host and port.
    cluster.add_job("guest_job", "guest_app", notifyWebhookUrl="https://8.8.8.8/T0/s3cret?k=s3cret")
    tab = new_tab(browser, f"http://{cluster.leader.identity}", screenshots)
    page = tab.page
    try:
        tab.login("guest", "guest")
        expect(page.locator("#who")).to_contain_text("read-only")
        checks = [
            ("apps", "[data-table=apps]", "guest_app"),
            ("apps/guest_app", "main", "guest_job"),
            ("jobs", "[data-table=jobs]", "guest_job"),
            ("jobs/guest_job", "main", "0 0 3 * * ?"),
            ("runs", "h1", "Runs"),
            ("jobs/new", "main", "Read-only"),
            ("apps/new", "main", "Read-only"),
        ]
        for route, where, text in checks:
            tab.open(route)
            expect(page.locator(where).first).to_contain_text(text)
            page.wait_for_timeout(500)  # one more poll: controls would be drawn by now
            assert page.locator("[data-action]").count() == 0, route
            assert page.locator("form[data-form]").count() == 0, route
            assert page.locator("main button").count() == 0, route
            if route == "jobs/guest_job":
                tab.shot("guest-job-detail")
                expect(page.locator("main")).to_contain_text("https://8.8.8.8/...")
                expect(page.locator("main")).to_contain_text("(path hidden from your role)")
                assert "s3cret" not in page.content()

        # The server enforces the role whatever the page shows: a write sent from the page with
        # the guest's session is refused, and nothing is queued.
        answer = page.evaluate(
            """async () => {
                const res = await fetch("/api/job/trigger", {
                    method: "POST", credentials: "same-origin",
                    headers: {"Content-Type": "application/json"},
                    body: JSON.stringify({jobName: "guest_job"}),
                });
                return [res.status, await res.json()];
            }"""
        )
        assert answer[0] == 403, answer
        assert answer[1]["type"] == "Forbidden"
        status, ready = cluster.api("GET", "/api/job/tasks/ready")
        assert status == 200 and all(row["jobName"] != "guest_job" for row in ready)
        tab.assert_clean({("/api/job/trigger", 403)})
    finally:
        page.context.close()


def test_replicas_serve_the_console_and_grant_cors_only_to_replica_origins(
    cluster: Cluster,
) -> None:
    leader, standby = cluster.leader, cluster.standby
    for replica in (leader, standby):
        status, headers, body = http_get(f"http://{replica.identity}/")
        assert status == 200
        assert headers["Content-Type"] == "text/html; charset=utf-8"
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert headers["X-Frame-Options"] == "DENY"
        policy = headers["Content-Security-Policy"]
        assert "script-src 'self';" in policy and "'unsafe-inline'" not in policy
        assert f"http://{leader.identity}" in policy and f"http://{standby.identity}" in policy
        assert b'<script type="module" src="/console/js/main.js">' in body
        status, headers, _ = http_get(f"http://{replica.identity}/console/js/api.js")
        assert status == 200 and headers["Content-Type"] == "text/javascript; charset=utf-8"
        status, headers, body = http_get(f"http://{replica.identity}/console/../scheduler.py")
        assert status == 404 and json.loads(body)["type"] == "NotFound"

    cluster.add_app("cors_app")
    cluster.add_job("cors_job", "cors_app")
    own = f"http://{standby.identity}"
    foreign = "http://127.0.0.1:1"
    preflight = {"Access-Control-Request-Method": "POST"}
    status, headers, _ = call(
        leader, "OPTIONS", "/api/job/trigger", None, {"Origin": own, **preflight}
    )
    assert status == 204
    assert headers["Access-Control-Allow-Origin"] == own
    assert "Authorization" in headers["Access-Control-Allow-Headers"]
    status, headers, _ = call(
        leader, "OPTIONS", "/api/job/trigger", None, {"Origin": foreign, **preflight}
    )
    assert "Access-Control-Allow-Origin" not in headers

    # The write guard takes a replica's origin as its own, and still refuses any other.
    trigger = {"jobName": "cors_job"}
    status, _, body = call(
        leader, "POST", "/api/job/trigger", trigger, {"Origin": foreign, "Authorization": ADMIN}
    )
    assert status == 403 and body["type"] == "CrossOriginRefused"
    status, ready = cluster.api("GET", "/api/job/tasks/ready")
    assert status == 200 and all(row["jobName"] != "cors_job" for row in ready)
    status, headers, _ = call(
        leader, "POST", "/api/job/trigger", trigger, {"Origin": own, "Authorization": ADMIN}
    )
    assert status == 204
    assert headers["Access-Control-Allow-Origin"] == own
    assert "identify" in headers["Access-Control-Expose-Headers"]

    # Each replica's /health answers the other replicas' pages too (the overview reads them).
    status, headers, body = call(
        standby,
        "GET",
        "/health",
        None,
        {"Origin": f"http://{leader.identity}", "Authorization": ADMIN},
    )
    assert status == 200
    assert headers["Access-Control-Allow-Origin"] == f"http://{leader.identity}"
    assert set(body["replicas"]) == {leader.identity, standby.identity}
    status, headers, body = call(standby, "GET", "/health", None, {"Origin": foreign})
    assert status == 200 and "Access-Control-Allow-Origin" not in headers
    assert "replicas" not in body  # without credentials only the public part


def test_a_standby_page_links_to_the_leader_and_takes_over_the_session_when_it_leads(
    cluster: Cluster, browser: Browser, screenshots: Path
) -> None:
    """A standby's page says it is a standby and links to the vouched leader's console; logged
    in there, the session (a cookie of the same host) is accepted by the standby too once it
    leads: the session survives the leader change and writes go to the new leader."""
    old_leader, standby = cluster.leader, cluster.standby
    # Two tabs of one browser context, so they share its cookies as a user's tabs do.
    standby_tab = new_tab(browser, f"http://{standby.identity}", screenshots)
    context = standby_tab.page.context
    leader_tab = ConsolePage(context.new_page(), f"http://{old_leader.identity}", screenshots)
    page = standby_tab.page
    try:
        standby_tab.open()
        expect(page.locator("[data-standby]")).to_contain_text("This replica is a standby")
        link = page.locator("a[data-leader-console]")
        expect(link).to_have_attribute("href", f"http://{old_leader.identity}/")
        expect(page.locator("form#login")).to_have_count(0)  # no login on a standby
        standby_tab.shot("11-standby")
        leader_tab.login("root", "root")
        old_leader.stop()
        # The standby leads: its page logs in with the cookie the leader's page got.
        expect(page.locator("#who")).to_contain_text(
            f"leader {standby.identity} (this replica)", timeout=RUN_WAIT_MS
        )
        expect(page.locator("#who [data-role=root]")).to_be_visible()
        standby_tab.open("apps")
        page.click("[data-action=add-app]")
        form = page.locator("form[data-form=app]")
        form.locator("[name=appName]").fill("after_failover")
        form.locator("[name=appURL]").fill(cluster.app_archive("after_failover"))
        form.locator("[name=bootstrapScript]").fill("true")
        form.locator("button[type=submit]").click()
        expect(page).to_have_url(re.compile(r"#/apps/after_failover$"))
        assert (
            call(standby, "GET", "/api/app/after_failover", None, {"Authorization": ADMIN})[0]
            == 200
        )
        standby_tab.assert_clean(set(), gone=old_leader.identity)
    finally:
        context.close()
        # The module's cluster has two replicas again for whatever runs next.
        if not old_leader.alive():
            old_leader.start()
            wait_for(lambda: (old_leader.health() or {}).get("role") == "standby", 30)

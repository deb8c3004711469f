"""The console for many teams (issue 26), in a real Chromium against a real replica process and a
real ZooKeeper, with an SQLite event trace for the audit log.

Two teams' apps (`team_a_app` with `a_job`, `team_b_app` with `b_job`); Alice is an editor of
team A, Ann its app-admin. Logged in with her password, and with a token of her app, Alice sees
only team A's app and job, a job's controls up to editor (no app deletion, which is app-admin's),
nothing of team B (a link to B's job shows the API's not-found message and no control) and no
Access or Audit page. The settings' admin makes a token in the Access page (its hostile name shown
as text, never as markup): the secret is shown once, copies to the clipboard, works as a Bearer
token, and is gone from the page when dismissed; revoking it in the page stops it; the Audit page
lists the creation and the revocation. Ann's Access page has no users, offers roles up to
app-admin on team A only, and her grant made there is in force; her Audit page shows team A's
records only.

One replica for the module (no Mesos: nothing here runs a task), one browser.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, Playwright, expect, sync_playwright

from deploy.zookeeper import ZooKeeperEnsemble
from tests.e2e.test_console import CHROMIUM, SCREENSHOTS, ConsolePage, new_tab
from tests.support.http import exchange
from tests.support.replicas import ReplicaProcess
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

PASSWORD = "alice-password-1"
ROOT_AUTH = "Basic " + base64.b64encode(b"root:root").decode()
ALICE_AUTH = "Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
TOKEN_TEXT = re.compile(r"^ejc_([0-9a-f]{12})_[0-9a-f]{48}$")
HOSTILE = '<img src=x onerror="window.pwned=1"> ci & <b>bold</b>'


def call(
    replica: ReplicaProcess, method: str, path: str, auth: str | None, body: Any = None
) -> tuple[int, Any]:
    """One request to `replica` (a redirect is followed, as urllib does): (status, JSON or
    None)."""
    data = None if body is None else json.dumps(body).encode()
    headers = {}
    if auth is not None:
        headers["Authorization"] = auth
    if data is not None:
        headers["Content-Type"] = "application/json"
    answer = exchange(method, f"http://{replica.identity}{path}", data=data, headers=headers)
    return answer.status, answer.json()


@dataclass
class Teams:
    replica: ReplicaProcess
    tmp: Path
    alice_token: str

    def admin(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return call(self.replica, method, path, ROOT_AUTH, body)


def _app(tmp: Path, name: str) -> dict[str, Any]:
    return {
        "appName": name,
        "appURL": str(tmp / f"{name}.tar.gz"),
        "bootstrapScript": "true",
        "cpuCount": 0.1,
        "memoryMB": 32,
    }


def _job(name: str, app: str) -> dict[str, Any]:
    return {
        "jobName": name,
        "appName": app,
        "jobType": "SCRIPT",
        "jobExecutionType": "TRANSIENT",
        "scriptCommandLine": "true",
        "cron": "0 0 0 1 1 ? 2099",
        "shardingTotalCount": 1,
        "cpuCount": 0.1,
        "memoryMB": 16,
    }


@pytest.fixture(scope="module")
def teams(zk: ZooKeeperEnsemble, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Teams]:
    tmp = tmp_path_factory.mktemp("console-access")
    replica = ReplicaProcess(
        zk.hosts,
        tmp,
        zk_namespace=f"t-{uuid.uuid4().hex[:12]}",
        event_trace_rdb_url=f"sqlite:///{tmp}/trace.db",
    ).start()
    try:
        wait_for(replica.is_leader, 30, message="a leader")
        for app, job in (("team_a_app", "a_job"), ("team_b_app", "b_job")):
            assert call(replica, "POST", "/api/app", ROOT_AUTH, _app(tmp, app))[0] == 204
            assert call(replica, "POST", "/api/job/register", ROOT_AUTH, _job(job, app))[0] == 204
        user = {"name": "alice", "password": PASSWORD}
        assert call(replica, "POST", "/api/access/users", ROOT_AUTH, user)[0] == 201
        # Ann is team A's app-admin.
        user = {"name": "ann", "password": PASSWORD}
        assert call(replica, "POST", "/api/access/users", ROOT_AUTH, user)[0] == 201
        for name, role in (("alice", "editor"), ("ann", "app-admin")):
            grant = {"principal": f"user:{name}", "role": role, "app": "team_a_app"}
            assert call(replica, "POST", "/api/access/grants", ROOT_AUTH, grant)[0] == 201
        # Team A's CI token, made by the admin: editor of team A only.
        made = {"name": "team-a-ci", "role": "editor", "app": "team_a_app"}
        status, token = call(replica, "POST", "/api/access/tokens", ROOT_AUTH, made)
        assert status == 201, token
        wait_for(
            lambda: call(replica, "GET", "/api/job/jobs/a_job", ALICE_AUTH)[0] == 200,
            10,
            message="alice's grant in force",
        )
        yield Teams(replica, tmp, token["token"])
    finally:
        replica.stop()


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


def login_with_token(tab: ConsolePage, token: str) -> None:
    tab.open()
    tab.page.click("[data-login-tab=token]")
    tab.page.fill("#login-token", token)
    tab.page.click("form#login button[type=submit]")


def test_an_editor_sees_only_its_app_and_the_controls_of_its_role(
    teams: Teams, browser: Browser
) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    token_id = TOKEN_TEXT.fullmatch(teams.alice_token).group(1)  # type: ignore[union-attr]
    for how in ("password", "token"):
        tab = new_tab(browser, f"http://{teams.replica.identity}", SCREENSHOTS)
        page = tab.page
        try:
            if how == "password":
                tab.login("alice", PASSWORD)
                expect(page.locator("#who [data-principal='user:alice']")).to_be_visible()
            else:
                login_with_token(tab, teams.alice_token)
                expect(page.locator(f"#who [data-principal='token:{token_id}']")).to_be_visible()
            expect(page.locator("#who")).to_contain_text("editor of team_a_app")
            # No Access or Audit entry: those are for app-admins and cluster-admins.
            expect(page.locator("#nav a[data-nav=apps]")).to_be_visible()
            expect(page.locator("#nav a[data-nav=access]")).to_be_hidden()
            expect(page.locator("#nav a[data-nav=audit]")).to_be_hidden()

            tab.open("jobs")
            rows = page.locator("[data-table=jobs] tbody tr")
            expect(rows).to_have_count(1)
            expect(rows.first).to_contain_text("a_job")
            expect(page.locator("[data-action=add-job]")).to_be_visible()  # an editor adds jobs
            tab.open("apps")
            expect(page.locator("[data-table=apps] tbody tr")).to_have_count(1)
            expect(page.locator("[data-table=apps]")).to_contain_text("team_a_app")
            assert page.locator("[data-action=add-app]").count() == 0  # cluster-admins only
            assert "team_b_app" not in page.content() and "b_job" not in page.content()
            # The views of the whole cluster draw from its filtered lists without an error.
            tab.open("runs")
            expect(page.locator("[data-table=runs], main .empty").first).to_be_visible()
            tab.open("stats")
            expect(page.locator("[data-chart=results] canvas")).to_have_count(1)
            assert "b_job" not in page.content()

            # Its own job: every control of an editor; its app: no deletion (app-admin's).
            tab.open("jobs/a_job")
            for action in ("edit", "trigger", "toggle", "delete"):
                expect(page.locator(f"[data-action={action}]")).to_be_visible()
            tab.open("apps/team_a_app")
            expect(page.locator("[data-action=edit]")).to_be_visible()
            expect(page.locator("[data-action=toggle]")).to_be_visible()
            page.wait_for_timeout(500)  # one more poll: a control would be drawn by now
            assert page.locator("[data-action=delete]").count() == 0
            tab.open("jobs/new")
            options = page.locator("form[data-form=job] [name=appName] option")
            expect(options).to_have_count(2)  # "choose an app" and team A's
            expect(options.nth(1)).to_have_text("team_a_app")

            # Team B's job and app, by link: the API's not-found message, and no control.
            for route in ("jobs/b_job", "apps/team_b_app"):
                tab.open(route)
                expect(page.locator("main .error")).to_contain_text("b_")
                page.wait_for_timeout(500)
                assert page.locator("[data-action]").count() == 0, route
            tab.open("access")
            expect(page.locator("main")).to_contain_text("Only cluster-admins")
            assert page.locator("form[data-form]").count() == 0
            tab.shot(f"access-editor-{how}")
            tab.assert_clean({("/api/job/jobs/b_job", 404), ("/api/app/team_b_app", 404)})
        finally:
            page.context.close()


def _row(page: Page, table: str, text: str) -> Any:
    return page.locator(f"[data-table={table}] tbody tr", has_text=text)


def test_an_admin_makes_a_token_whose_secret_is_shown_once_and_audited(
    teams: Teams, browser: Browser
) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    base = f"http://{teams.replica.identity}"
    tab = new_tab(browser, base, SCREENSHOTS)
    page = tab.page
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=base)
    try:
        tab.login("root", "root")
        expect(page.locator("#nav a[data-nav=access]")).to_be_visible()
        tab.open("access")
        expect(_row(page, "users", "alice")).to_have_count(1)
        expect(_row(page, "grants", "user:alice")).to_contain_text("editor")
        form = page.locator("form[data-form=token]")
        form.locator("[name=name]").fill(HOSTILE)
        form.locator("[name=app]").select_option("team_a_app")
        form.locator("[name=role]").select_option("operator")
        form.locator("[name=expiresInSeconds]").select_option("86400")
        form.locator("button[type=submit]").click()

        secret = page.locator("[data-token-secret]")
        expect(secret).to_have_value(TOKEN_TEXT)
        token = secret.input_value()
        token_id = TOKEN_TEXT.fullmatch(token).group(1)  # type: ignore[union-attr]
        expect(page.locator(".secret")).to_contain_text("only time it is shown")
        page.click("[data-action=copy-token]")
        expect(page.locator(".toast", has_text="copied")).to_be_visible()
        assert page.evaluate("navigator.clipboard.readText()") == token
        row = _row(page, "tokens", token_id)
        expect(row).to_contain_text("operator")
        tab.shot("access-token-made")
        # The hostile name is text: no element from it, no script run.
        assert row.locator("td").nth(1).inner_text() == HOSTILE
        assert page.locator("[data-table=tokens] img, [data-table=tokens] b").count() == 0
        assert page.evaluate("window.pwned") is None

        # The token works with its role on its app, and sees nothing of team B.
        bearer = f"Bearer {token}"
        assert call(teams.replica, "GET", "/api/job/jobs/a_job", bearer)[0] == 200
        assert call(teams.replica, "GET", "/api/job/jobs/b_job", bearer)[0] == 404

        # Dismissed, the secret is nowhere in the page, nor after a reload.
        page.click("[data-action=dismiss-token]")
        expect(secret).to_have_count(0)
        assert token not in page.content()
        page.reload()
        expect(_row(page, "tokens", token_id)).to_have_count(1)
        assert token not in page.content()

        # Revoked in the page: it stops working.
        _row(page, "tokens", token_id).locator("[data-action=revoke-token]").click()
        page.locator("dialog.confirm [data-action=confirm]").click()
        expect(_row(page, "tokens", token_id)).to_have_count(0)
        wait_for(
            lambda: call(teams.replica, "GET", "/api/job/jobs/a_job", bearer)[0] == 401,
            5,
            message="the revoked token refused",
        )

        # The audit page: both changes by the admin, newest first (the refused requests of the
        # revoked token come after them); a filter narrows it.
        tab.open("audit")
        records = page.locator("[data-table=audit] tbody tr")
        revoked = records.filter(has_text="token.revoke").filter(has_text=token_id)
        created = records.filter(has_text="token.create").filter(has_text=token_id)
        expect(revoked).to_have_count(1)
        expect(created).to_have_count(1)
        expect(revoked).to_contain_text("user:root")
        expect(created).to_contain_text("user:root")
        texts = records.all_inner_texts()
        order = [n for n, text in enumerate(texts) if token_id in text and "token." in text]
        assert "token.revoke" in texts[order[0]] and "token.create" in texts[order[-1]], texts
        tab.shot("audit")
        page.fill("[data-form=audit-filters] [name=action]", "token.create")
        page.click("[data-form=audit-filters] button[type=submit]")
        expect(records.filter(has_text="token.revoke")).to_have_count(0)
        expect(records.filter(has_text=token_id)).to_have_count(1)
        assert "action=token.create" in page.url
        tab.assert_clean(set())
    finally:
        page.context.close()


def test_an_app_admin_manages_its_apps_grants_and_reads_its_audit(
    teams: Teams, browser: Browser
) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    tab = new_tab(browser, f"http://{teams.replica.identity}", SCREENSHOTS)
    page = tab.page
    try:
        tab.login("ann", PASSWORD)
        expect(page.locator("#who")).to_contain_text("app-admin of team_a_app")
        expect(page.locator("#nav a[data-nav=access]")).to_be_visible()
        tab.open("apps/team_a_app")
        expect(page.locator("[data-action=delete]")).to_be_visible()  # an app-admin's
        tab.open("access")
        form = page.locator("form[data-form=grant]")
        # Team A only (never `*`), roles up to app-admin; no users section.
        expect(form.locator("[name=app] option")).to_have_count(1)
        expect(form.locator("[name=app] option")).to_have_text(["team_a_app"])
        expect(form.locator("[name=role] option")).to_have_text(
            ["viewer", "operator", "editor", "app-admin"]
        )
        assert page.locator("[data-table=users], form[data-form=user]").count() == 0
        expect(_row(page, "grants", "user:alice")).to_contain_text("editor")

        form.locator("[name=principal]").fill("alice")
        form.locator("[name=role]").select_option("operator")
        form.locator("button[type=submit]").click()
        expect(_row(page, "grants", "user:alice")).to_have_count(2)
        status, grants = teams.admin("GET", "/api/access/grants?principal=user:alice")
        assert status == 200
        assert {(g["role"], g["app"]) for g in grants["items"]} == {
            ("editor", "team_a_app"),
            ("operator", "team_a_app"),
        }
        tab.shot("access-app-admin")
        # Revoked in the page, the new grant is gone.
        added = _row(page, "grants", "user:alice").filter(has_text="operator")
        added.locator("[data-action=revoke-grant]").click()
        page.locator("dialog.confirm [data-action=confirm]").click()
        expect(_row(page, "grants", "user:alice")).to_have_count(1)

        # The audit page: the grant and its revocation, and nothing of team B.
        tab.open("audit")
        records = page.locator("[data-table=audit] tbody tr")
        by_ann = records.filter(has=page.locator("td[data-label=Actor]", has_text="user:ann"))
        expect(by_ann.filter(has_text="grant.create")).to_have_count(1)
        expect(by_ann.filter(has_text="grant.revoke")).to_have_count(1)
        assert "team_b_app" not in page.content() and "b_job" not in page.content()
        tab.assert_clean(set())
    finally:
        page.context.close()

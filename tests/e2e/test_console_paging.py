"""The console's job list pages (issue 23): a real replica with more jobs than one page, written
straight into ZooKeeper, in a real Chromium; "More jobs" loads the next page."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from playwright.sync_api import Browser, expect, sync_playwright

from deploy.zookeeper import ZooKeeperEnsemble
from scheduler.model.config.job import JobConfig
from tests.e2e.test_cli_paging import JOB_APP
from tests.e2e.test_console import CHROMIUM, new_tab
from tests.integration.api.conftest import JOB
from tests.support.replicas import ReplicaProcess
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

COUNT = 130  # a page of 100, then 30


@pytest.fixture
def replica(
    zk: ZooKeeperEnsemble, zk_namespace: str, tmp_path: Path, zk_client: KazooClient
) -> Iterator[ReplicaProcess]:
    root = f"/{zk_namespace}/config"
    zk_client.ensure_path(f"{root}/job")
    zk_client.ensure_path(f"{root}/app")
    zk_client.create(f"{root}/app/demo_app", JOB_APP)
    template = {**JOB, "jobName": "template", "cron": "0 0 3 * * ?"}
    body = JobConfig.from_json(template, default_time_zone="UTC").to_bytes()
    txn = zk_client.transaction()
    for n in range(COUNT):
        name = f"job{n:03d}"
        txn.create(f"{root}/job/{name}", body.replace(b"template", name.encode()))
    txn.commit()
    started = ReplicaProcess(zk.hosts, tmp_path, zk_namespace=zk_namespace).start()
    try:
        wait_for(started.is_leader, 20, message="a leader")
        yield started
    finally:
        started.stop()


@pytest.fixture
def browser() -> Iterator[Browser]:
    manager = sync_playwright().start()
    try:
        launched = manager.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()
    finally:
        manager.stop()


def test_the_job_list_shows_a_page_and_loads_more_on_demand(
    replica: ReplicaProcess, browser: Browser, tmp_path: Path
) -> None:
    tab = new_tab(browser, f"http://{replica.identity}", tmp_path)
    tab.login("root", "root")
    tab.open("jobs")
    page = tab.page
    rows = page.locator("[data-table=jobs] tbody tr")
    expect(rows).to_have_count(100)
    expect(page.locator("h1")).to_contain_text("100 loaded, more on the server")
    expect(rows.first).to_contain_text("job000")
    more = page.locator("[data-more=jobs]")
    expect(more).to_be_visible()
    more.click()
    expect(rows).to_have_count(COUNT)
    expect(rows.last).to_contain_text(f"job{COUNT - 1:03d}")
    expect(more).to_have_count(0)
    expect(page.locator("h1")).to_contain_text(f"({COUNT})")
    # (The session probe before the login answers 401: not this test's concern.)
    tab.assert_clean({("/api/session", 401)})

"""The console's lists page, in a real Chromium against a real replica: the job list (issue 23:
more jobs than one page, written straight into ZooKeeper; "More jobs" loads the next page) and
the runs view (issue 30: 50 runs a page, with Newer and Older, over runs written straight into
the replica's trace database)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from playwright.sync_api import Browser, expect, sync_playwright
from sqlalchemy import create_engine, inspect
from sqlalchemy.orm import Session

from deploy.zookeeper import ZooKeeperEnsemble
from scheduler.leader.statistics.models import StatusTraceLog
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


RUNS = 120  # pages of 50, 50 and 20


def _write_runs(trace_db: Path, job: str, count: int) -> None:
    """`count` ended runs of `job` straight into the replica's trace database (each a
    TASK_STAGING and a TASK_FINISHED row a second apart, newest last)."""
    engine = create_engine(f"sqlite:///{trace_db}")
    start = datetime(2026, 11, 26, 8, 0, 0)
    with Session(engine) as session:
        for n in range(count):
            task_id = f"{job}@-@0@-@READY@-@agent-S0@-@{uuid.UUID(int=n)}"
            for offset, state in ((0, "TASK_STAGING"), (1, "TASK_FINISHED")):
                session.add(
                    StatusTraceLog(
                        id=str(uuid.uuid4()),
                        job_name=job,
                        original_task_id=task_id,
                        task_id=task_id,
                        slave_id="agent-S0",
                        source="CLOUD_SCHEDULER",
                        execution_type="READY",
                        sharding_item="[0]",
                        state=state,
                        message="launched" if offset == 0 else "",
                        creation_time=start + timedelta(minutes=n, seconds=offset),
                    )
                )
        session.commit()
    engine.dispose()


def test_the_runs_view_shows_fifty_runs_a_page_with_newer_and_older(
    replica: ReplicaProcess, browser: Browser, tmp_path: Path
) -> None:
    trace_db = Path(replica.settings["data_dir"]) / "ejcloud-trace.db"
    wait_for(trace_db.exists, 20, message="the leader made its trace database")
    wait_for(
        lambda: (
            "JOB_STATUS_TRACE_LOG"
            in inspect(create_engine(f"sqlite:///{trace_db}")).get_table_names()
        ),
        20,
        message="the trace tables exist",
    )
    _write_runs(trace_db, "job000", RUNS)
    tab = new_tab(browser, f"http://{replica.identity}", tmp_path)
    tab.login("root", "root")
    tab.open("runs?job=job000")
    page = tab.page
    rows = page.locator("[data-table=runs] tbody tr")
    pager = page.locator("[data-pager=runs]")
    expect(rows).to_have_count(50)
    expect(pager).to_contain_text(f"Runs 1-50 of the latest {RUNS} (page 1 of 3)")
    expect(pager.locator("[data-page=newer]")).to_be_disabled()
    # Newest first: the first row is the last run written (minute 119 after 08:00).
    first_task = rows.first.locator("a[data-task]")
    expect(first_task).to_have_attribute("data-task", re.compile(str(uuid.UUID(int=RUNS - 1))))
    pager.locator("[data-page=older]").click()
    expect(pager).to_contain_text(f"Runs 51-100 of the latest {RUNS} (page 2 of 3)")
    expect(first_task).to_have_attribute("data-task", re.compile(str(uuid.UUID(int=RUNS - 51))))
    assert "page=1" in page.url
    pager.locator("[data-page=older]").click()
    expect(rows).to_have_count(RUNS - 100)
    expect(pager.locator("[data-page=older]")).to_be_disabled()
    pager.locator("[data-page=newer]").click()
    expect(rows).to_have_count(50)
    expect(pager).to_contain_text("(page 2 of 3)")
    tab.assert_clean({("/api/session", 401)})

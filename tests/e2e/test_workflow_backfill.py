"""A workflow's backfill (issue 28) end to end: two scheduler replica processes, the local Mesos
stand-in, real executors and command tasks, one cluster for the module; the `ejcloud` CLI for
the user's side.

Each workflow (node a, then node b, FORBID) fires at the first minutes of the hour two hours
before the module started (UTC), so its cron never fires while the tests run: every run seen is
a backfill's. Each node runs wfb.sh, which appends a line per start and end with the job, the
fire time and the backfill id its shard was given (EJC_FIRE_TIME, EJC_BACKFILL_ID), so the
tests read what really ran, for which fire and in which order: 5 fires make 5 runs in order
(and a second backfill of the range runs none again), and 6 fires make 6 runs, each node once,
in order, with the leader SIGKILLed in the middle.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from deploy.zookeeper import ZooKeeperEnsemble
from tests.e2e.pipeline_support import System, running_system, strike_leader
from tests.e2e.test_cli import Cli
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

APP = "wfb_app"
FIRES = 5
STRUCK_FIRES = 6
WFB_SH = """#!/bin/sh
out="{out}"
echo "start $EJC_JOB_NAME ${{EJC_FIRE_TIME:-none}} ${{EJC_BACKFILL_ID:-none}}" >> "$out"
echo "end $EJC_JOB_NAME ${{EJC_FIRE_TIME:-none}} ${{EJC_BACKFILL_ID:-none}}" >> "$out"
"""


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


@dataclass
class Bed:
    system: System
    record: Path
    namespace: str
    zk_hosts: str
    hour: datetime  # minute 0 of the past hour (UTC) whose first minutes are the fires

    @property
    def start(self) -> str:
        return self.hour.isoformat().replace("+00:00", "Z")

    @property
    def end(self) -> str:
        return (self.hour + timedelta(minutes=59)).isoformat().replace("+00:00", "Z")

    def fires(self, count: int) -> list[datetime]:
        return [self.hour + timedelta(minutes=m) for m in range(count)]

    def workflow(self, name: str, jobs: tuple[str, str], fires: int) -> None:
        """Jobs `jobs` (no cron, one shard) and workflow `name`: jobs[0], then jobs[1]."""
        for job in jobs:
            body = {
                "jobName": job,
                "appName": APP,
                "jobType": "SCRIPT",
                "jobExecutionType": "TRANSIENT",
                "scriptCommandLine": "sh wfb.sh",
                "cron": "",
                "shardingTotalCount": 1,
                "cpuCount": 0.1,
                "memoryMB": 16,
            }
            status, answer = self.system.api("POST", "/api/job/register", body)
            assert status == 204, answer
        flow = {
            "workflowName": name,
            "appName": APP,
            "cron": f"0 0-{fires - 1} {self.hour.hour} * * ?",
            "timeZone": "UTC",
            "overlapPolicy": "FORBID",
            "nodes": [
                {"name": "a", "job": jobs[0]},
                {"name": "b", "job": jobs[1], "dependsOn": ["a"]},
            ],
        }
        status, answer = self.system.api("POST", "/api/workflow", flow)
        assert status < 300, answer

    def runs(self, name: str) -> list[dict[str, Any]]:
        status, answer = self.system.api("GET", f"/api/workflow/{name}/runs?limit=50")
        assert status == 200, answer
        return sorted(answer["items"], key=lambda r: r["fireTime"])

    def starts(self, jobs: tuple[str, ...]) -> list[tuple[str, datetime, str]]:
        """(job, fire time, backfill id) of each shard start of `jobs`, in the order they ran."""
        lines = [ln.split() for ln in self.record.read_text().splitlines()]
        return [
            (job, _instant(fire), bf)
            for event, job, fire, bf in lines
            if event == "start" and job in jobs
        ]


@pytest.fixture(scope="module")
def bed(zk: ZooKeeperEnsemble, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    tmp = tmp_path_factory.mktemp("wfbackfill")
    namespace = f"t-{uuid.uuid4().hex[:12]}"
    hour = (datetime.now(UTC) - timedelta(hours=2)).replace(minute=0, second=0, microsecond=0)
    with running_system(zk.hosts, namespace, tmp, replicas=2) as system:
        record = Path(system.make_app(APP, script=WFB_SH, file="wfb.sh"))
        yield Bed(system, record, namespace, zk.hosts, hour)


def test_a_workflow_backfill_of_5_past_fires_makes_5_runs_in_order(
    bed: Bed, tmp_path: Path
) -> None:
    system = bed.system
    start, end, fires = bed.start, bed.end, bed.fires(FIRES)
    bed.workflow("wfb_flow", ("wfb_a", "wfb_b"), FIRES)
    leader = system.leader()
    assert leader is not None
    cli = Cli(
        tmp_path / "home",
        EJCLOUD_SERVER=f"http://{leader.identity}",
        EJCLOUD_USER="root",
        EJCLOUD_PASSWORD="root",
    )

    # The dry run lists the fires and records nothing.
    out = cli.ok("workflow", "backfill", "wfb_flow", "--from", start, "--to", end, "--dry-run")
    head, *times = out.splitlines()
    assert head == f"workflow wfb_flow: {FIRES} fires; dry run, nothing was recorded"
    assert [_instant(t) for t in times] == fires

    made = cli.json("workflow", "backfill", "wfb_flow", "--from", start, "--to", end)
    backfill_id = made["backfillId"]
    assert made["fires"] == FIRES

    wait_for(
        lambda: len([r for r in bed.runs("wfb_flow") if r["state"] == "succeeded"]) == FIRES,
        40,
        interval_s=0.25,
        message="the backfill's five runs succeeded",
    )
    found = bed.runs("wfb_flow")
    assert len(found) == FIRES
    assert [datetime.fromtimestamp(r["fireTime"], UTC) for r in found] == fires
    assert {r["backfillId"] for r in found} == {backfill_id}
    # Runs one after the other (FORBID): each started after the one before ended.
    for before, after in itertools.pairwise(found):
        assert after["startedAt"] >= before["endedAt"], (before, after)

    # What really ran: a then b for each fire, in fire order, with the fire and the id.
    starts = bed.starts(("wfb_a", "wfb_b"))
    assert starts == [(job, fire, backfill_id) for fire in fires for job in ("wfb_a", "wfb_b")]

    status, shown = system.api("GET", f"/api/workflow/wfb_flow/backfills/{backfill_id}")
    assert status == 200, shown
    assert shown["status"] == "DONE" and shown["succeeded"] == FIRES and shown["failed"] == 0
    header, row = cli.ok("workflow", "backfills", "wfb_flow").splitlines()
    assert header.split()[:5] == ["ID", "STATUS", "FIRES", "LAUNCHED", "OK/FAILED/HAD_RUN"]
    assert row.split()[:5] == [backfill_id, "DONE", str(FIRES), str(FIRES), f"{FIRES}/0/0"]

    # A second backfill of the same range: every fire has its run, none runs again.
    again = cli.json("workflow", "backfill", "wfb_flow", "--from", start, "--to", end)
    wait_for(
        lambda: (
            system.api("GET", f"/api/workflow/wfb_flow/backfills/{again['backfillId']}")[1].get(
                "hadRun"
            )
            == FIRES
        ),
        20,
        message="the second backfill found every fire's run",
    )
    assert len(bed.runs("wfb_flow")) == FIRES


def test_a_workflow_backfill_goes_on_once_each_in_order_after_its_leader_is_killed(
    bed: Bed,
) -> None:
    fires = bed.fires(STRUCK_FIRES)
    bed.workflow("wfb_struck", ("wfb_c", "wfb_d"), STRUCK_FIRES)
    body = {"from": bed.start, "to": bed.end}
    status, made = bed.system.api("POST", "/api/workflow/wfb_struck/backfill", body)
    assert status == 201, made
    backfill_id = made["backfillId"]
    wait_for(
        lambda: len([r for r in bed.runs("wfb_struck") if r["state"] == "succeeded"]) >= 2,
        30,
        interval_s=0.1,
        message="two runs of the backfill succeeded",
    )
    made_before = len(bed.runs("wfb_struck"))
    assert made_before < STRUCK_FIRES, "the backfill ran too fast to kill its leader in the middle"
    strike_leader(bed.system, bed.zk_hosts, bed.namespace, "SIGKILL", 0)
    wait_for(
        lambda: (
            len([r for r in bed.runs("wfb_struck") if r["state"] == "succeeded"]) == STRUCK_FIRES
        ),
        60,
        interval_s=0.25,
        message="every fire's run succeeded under the new leader",
    )
    found = bed.runs("wfb_struck")
    assert [datetime.fromtimestamp(r["fireTime"], UTC) for r in found] == fires
    assert {r["backfillId"] for r in found} == {backfill_id}
    # Each node of each fire started once, in fire order.
    starts = bed.starts(("wfb_c", "wfb_d"))
    assert starts == [(job, fire, backfill_id) for fire in fires for job in ("wfb_c", "wfb_d")]
    status, shown = bed.system.api("GET", f"/api/workflow/wfb_struck/backfills/{backfill_id}")
    assert status == 200, shown
    assert (shown["status"], shown["succeeded"], shown["failed"]) == ("DONE", STRUCK_FIRES, 0)
    print(f"\nleader killed after {made_before} of {STRUCK_FIRES} runs were made")

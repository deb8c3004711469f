"""A workflow's backfill (issue 28) end to end: a scheduler replica process, the local Mesos
stand-in, real executors and command tasks; the `ejcloud` CLI for the user's side.

The workflow `wfb_flow` (node a, then node b) fires at minutes 0-4 of the hour two hours before
the test started (UTC), so its cron never fires while the test runs: every run seen is the
backfill's. Each node runs wfb.sh, which appends a line per start and end with the job, the
fire time and the backfill id its shard was given (EJC_FIRE_TIME, EJC_BACKFILL_ID), so the
test reads what really ran, for which fire and in which order.
"""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from deploy.zookeeper import ZooKeeperEnsemble
from tests.e2e.pipeline_support import running_system
from tests.e2e.test_cli import Cli
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

APP = "wfb_app"
FIRES = 5
WFB_SH = """#!/bin/sh
out="{out}"
echo "start $EJC_JOB_NAME ${{EJC_FIRE_TIME:-none}} ${{EJC_BACKFILL_ID:-none}}" >> "$out"
echo "end $EJC_JOB_NAME ${{EJC_FIRE_TIME:-none}} ${{EJC_BACKFILL_ID:-none}}" >> "$out"
"""


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def test_a_workflow_backfill_of_5_past_fires_makes_5_runs_in_order(
    zk: ZooKeeperEnsemble, tmp_path: Path
) -> None:
    hour = (datetime.now(UTC) - timedelta(hours=2)).replace(minute=0, second=0, microsecond=0)
    start = hour.isoformat().replace("+00:00", "Z")
    end = (hour + timedelta(minutes=59)).isoformat().replace("+00:00", "Z")
    fires = [hour + timedelta(minutes=m) for m in range(FIRES)]
    with running_system(zk.hosts, f"t-{uuid.uuid4().hex[:12]}", tmp_path, replicas=1) as system:
        record = Path(system.make_app(APP, script=WFB_SH, file="wfb.sh"))
        for job in ("wfb_a", "wfb_b"):
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
            status, answer = system.api("POST", "/api/job/register", body)
            assert status == 204, answer
        flow = {
            "workflowName": "wfb_flow",
            "appName": APP,
            "cron": f"0 0-{FIRES - 1} {hour.hour} * * ?",
            "timeZone": "UTC",
            "overlapPolicy": "FORBID",
            "nodes": [
                {"name": "a", "job": "wfb_a"},
                {"name": "b", "job": "wfb_b", "dependsOn": ["a"]},
            ],
        }
        status, answer = system.api("POST", "/api/workflow", flow)
        assert status < 300, answer
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

        def runs() -> list[dict[str, Any]]:
            status, answer = system.api("GET", "/api/workflow/wfb_flow/runs?limit=50")
            assert status == 200, answer
            return list(answer["items"])

        wait_for(
            lambda: len([r for r in runs() if r["state"] == "succeeded"]) == FIRES,
            40,
            interval_s=0.25,
            message="the backfill's five runs succeeded",
        )
        found = sorted(runs(), key=lambda r: r["fireTime"])
        assert len(found) == FIRES
        assert [datetime.fromtimestamp(r["fireTime"], UTC) for r in found] == fires
        assert {r["backfillId"] for r in found} == {backfill_id}
        # Runs one after the other (FORBID): each started after the one before ended.
        for before, after in itertools.pairwise(found):
            assert after["startedAt"] >= before["endedAt"], (before, after)

        # What really ran: a then b for each fire, in fire order, with the fire and the id.
        lines = [ln.split() for ln in record.read_text().splitlines()]
        starts = [(job, _instant(fire), bf) for event, job, fire, bf in lines if event == "start"]
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
        assert len(runs()) == FIRES

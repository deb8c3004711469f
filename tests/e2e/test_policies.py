"""Job run policies end to end: replica processes, the local Mesos stand-in with two agents, real
command tasks and executor tasks. Timeouts, maxRetries, ALLOW and REPLACE, kill (API and CLI),
disable dropping failover relaunches, next fire times (API and CLI), failure webhooks received
by a small HTTP server on 127.0.0.1."""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from deploy.zookeeper import ZooKeeperEnsemble
from executor.package import build_app_archive
from tests.e2e.pipeline_support import Runs, System, running_system
from tests.e2e.test_cli import Cli
from tests.support.waiting import wait_for
from tests.support.webhook_receiver import Receiver

NEVER = "0 0 0 1 1 ? 2099"
# record.sh with the sharding context (the argument the scheduler appends), then exit 3.
FAIL_AFTER_RECORDING = "sh -c 'sh record.sh \"$0\"; exit 3'"
TEST_APP = Path(__file__).resolve().parents[1] / "integration" / "executor" / "testapp"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    got = Receiver()
    yield got
    got.close()


@pytest.fixture
def system(
    zk: ZooKeeperEnsemble, zk_namespace: str, tmp_path: Path, receiver: Receiver
) -> Iterator[System]:
    setting = receiver.url.replace("/hook?", "/setting?")
    with running_system(
        zk.hosts,
        zk_namespace,
        tmp_path,
        notify_webhook_url=setting,
        notify_webhook_allowed_targets="127.0.0.1/32",  # the test receivers are on loopback
    ) as system:
        yield system


def traces(system: System, job: str, state: str) -> list[dict[str, Any]]:
    status, body = system.api(
        "GET", f"/api/job/events/statusTraces?jobName={job}&state={state}&per_page=100"
    )
    assert status == 200, body
    return list(body["rows"])


def started_ids(runs: Runs, item: int = 0) -> list[str]:
    """Task ids of the runs of `item` that started, in order."""
    return [
        json.loads(p[3])["taskId"] for p in runs.lines() if p[0] == "start" and p[1] == str(item)
    ]


def mesos_states(system: System, job: str) -> dict[str, str]:
    return {
        t["id"]: t["state"]
        for f in system.master_state()["frameworks"]
        for t in f.get("tasks", []) + f.get("completed_tasks", [])
        if t["id"].startswith(f"{job}@-@")
    }


def running_of(system: System, job: str) -> list[dict[str, Any]]:
    return [
        t
        for t in system.running()
        if t["metaInfo"]["jobName"] == job and t["state"] == "TASK_RUNNING"
    ]


def stays(predicate: Any, seconds: float, message: str) -> None:
    """`predicate` holds at every check for `seconds` (a bounded watch, not a sleep)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert predicate(), message
        time.sleep(0.1)


def test_a_hung_run_times_out_and_the_next_fire_runs(system: System) -> None:
    runs = Runs(Path(system.make_app()))
    # A command task: Mesos stops it at its max_completion_time.
    system.script_job("hangs", "0/4 * * * * ?", shards=1, env="SLEEP_S=300", timeoutSeconds=2)
    wait_for(lambda: len(runs.starts(0)) >= 2, 30, message="the fire after the hung one")
    first, second = runs.starts(0)[:2]
    assert second - first >= 3.5  # the next fire, not a relaunch (failover is off)
    failed = wait_for(
        lambda: traces(system, "hangs", "TASK_FAILED"), 10, message="the failed status trace"
    )
    assert {row["message"] for row in failed} == {"timed out after 2 s"}
    wait_for(lambda: traces(system, "hangs", "RUN_TIMED_OUT"), 10, message="the timeout row")
    assert all(len(running_of(system, "hangs")) <= 1 for _ in range(3))
    # An executor task (a SIMPLE job) times out the same way; it fails over like any failure,
    # and with maxRetries 0 it is reported failed for good.
    archive = build_app_archive(TEST_APP, system.tmp / "testapp.tar.gz", python=sys.executable)
    out = system.tmp / "simple-out"
    out.mkdir()
    app = {
        "appName": "testapp",
        "appURL": archive.app_url,
        "bootstrapScript": "bin/start.sh",
        "cpuCount": 0.1,
        "memoryMB": 64,
    }
    assert system.api("POST", "/api/app", app)[0] == 204
    job = {
        "jobName": "hangs_py",
        "appName": "testapp",
        "jobType": "SIMPLE",
        "jobClass": "testjobs.simple:hang",
        "jobExecutionType": "TRANSIENT",
        "jobParameter": str(out),
        "cron": NEVER,
        "shardingTotalCount": 1,
        "cpuCount": 0.1,
        "memoryMB": 32,
        "failover": True,
        "maxRetries": 0,
        "timeoutSeconds": 2,
    }
    assert system.api("POST", "/api/job/register", job)[0] == 204
    assert system.api("POST", "/api/job/trigger", raw="hangs_py")[0] == 204
    failed = wait_for(
        lambda: traces(system, "hangs_py", "TASK_FAILED"), 60, message="the executor's timeout"
    )
    assert failed[0]["message"] == "timed out after 2 s"
    assert (out / "hangs_py-0.stopped").read_text() == "finally ran"  # SIGTERM came first
    gave_up = wait_for(
        lambda: traces(system, "hangs_py", "RUN_TIMED_OUT"), 10, message="reported failed for good"
    )
    # One row for the timed-out run, which says it is not relaunched; no RUN_FAILED beside it
    # (issue 30: the two were written in the same millisecond).
    assert len(gave_up) == 1 and "maxRetries is 0" in gave_up[0]["message"]
    assert gave_up[0]["message"].startswith("timed out after 2 s; not relaunched")
    assert traces(system, "hangs_py", "RUN_FAILED") == []
    assert system.api("GET", "/api/job/tasks/failover")[1] == []


def test_max_retries_2_gives_exactly_3_launches_and_failures_reach_the_webhooks(
    system: System, receiver: Receiver
) -> None:
    runs = Runs(Path(system.make_app()))
    system.script_job(
        "doomed",
        NEVER,
        shards=1,
        failover=True,
        maxRetries=2,
        scriptCommandLine=FAIL_AFTER_RECORDING,
        notifyWebhookUrl=receiver.url,
    )
    assert system.api("POST", "/api/job/trigger", raw="doomed")[0] == 204
    webhook = wait_for(lambda: receiver.of("run_failed"), 30, message="the run_failed webhook")
    ids = started_ids(runs)
    assert len(ids) == 3, ids
    assert ["@-@READY@-@" in ids[0], "@-@FAILOVER@-@" in ids[1], "@-@FAILOVER@-@" in ids[2]] == [
        True
    ] * 3
    body = webhook[0]
    assert (body["jobName"], body["shardingItem"], body["taskId"]) == ("doomed", 0, ids[2])
    assert "not relaunched: failed 3 times, maxRetries is 2" in body["reason"]
    assert receiver.paths[receiver.bodies.index(body)].startswith("/hook?")  # the job's own
    wait_for(
        lambda: system.running() == [] and system.api("GET", "/api/job/tasks/failover")[1] == [],
        10,
        message="idle",
    )
    stays(lambda: len(started_ids(runs)) == 3, 3, "no fourth launch")
    wait_for(lambda: len(traces(system, "doomed", "RUN_FAILED")) == 1, 10, message="one row")
    # A fire skipped while the job runs (FORBID, misfire off) goes to the setting's webhook.
    system.script_job("busy", "0/2 * * * * ?", shards=1, env="SLEEP_S=5", misfire=False)
    skipped = wait_for(lambda: receiver.of("fire_skipped"), 30, message="a skipped fire")
    assert skipped[0]["jobName"] == "busy" and skipped[0]["shardingItem"] is None
    assert "the job is still running (overlapPolicy FORBID)" in skipped[0]["reason"]
    assert receiver.paths[receiver.bodies.index(skipped[0])].startswith("/setting?")
    wait_for(lambda: traces(system, "busy", "FIRE_SKIPPED"), 10, message="its trace row")
    metrics = wait_for(lambda: system.leader().metrics(), 5, message="metrics")  # type: ignore[union-attr]
    assert metrics["ejc_runs_failed_total"] >= 1 and metrics["ejc_fires_skipped_total"] >= 1
    assert metrics['ejc_webhook_deliveries_total{outcome="delivered"}'] >= 2


def test_allow_runs_two_fires_of_a_shard_at_once_and_replace_kills_the_old_run_first(
    system: System,
) -> None:
    runs = Runs(Path(system.make_app()))
    system.script_job("beside", NEVER, shards=1, env="SLEEP_S=6", overlapPolicy="ALLOW")
    assert system.api("POST", "/api/job/trigger", raw="beside")[0] == 204
    wait_for(lambda: len(running_of(system, "beside")) == 1, 20, message="the first run")
    assert system.api("POST", "/api/job/trigger", raw="beside")[0] == 204
    wait_for(lambda: len(running_of(system, "beside")) == 2, 20, message="two at once")
    (_a_start, a_end), (b_start, _) = wait_for(
        lambda: runs.intervals(0) if len(runs.ends(0)) >= 1 and len(runs.starts(0)) == 2 else None,
        20,
        message="both ran",
    )
    assert b_start < a_end  # the second ran beside the first

    replaced = Runs(Path(system.make_app("rep_app")))
    system.script_job(
        "swap", NEVER, shards=1, app="rep_app", env="SLEEP_S=300", overlapPolicy="REPLACE",
        failover=True,
    )  # fmt: skip
    assert system.api("POST", "/api/job/trigger", raw="swap")[0] == 204
    old = wait_for(lambda: running_of(system, "swap"), 20, message="the old run")[0]["id"]
    # RUNNING in Mesos comes before the script's start line: replacing the run sooner would kill
    # it before it wrote one, and the count of starts below would never reach two.
    wait_for(lambda: started_ids(replaced) == [old], 20, message="the old run started")
    live: list[int] = []
    stop = threading.Event()

    def watch() -> None:  # how many runs of the shard live at each moment
        while not stop.is_set():
            live.append(len([t for t in system.running() if t["metaInfo"]["jobName"] == "swap"]))
            stop.wait(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        assert system.api("POST", "/api/job/trigger", raw="swap")[0] == 204
        new = wait_for(
            lambda: [t for t in running_of(system, "swap") if t["id"] != old],
            30,
            message="the new run",
        )
    finally:
        stop.set()
        watcher.join(5)
    assert max(live) <= 1, live  # never both at once (a look may fall between the two runs)
    assert mesos_states(system, "swap")[old] == "TASK_KILLED"
    assert "@-@READY@-@" in new[0]["id"]
    # The new task is RUNNING in Mesos before its script has written its start line.
    wait_for(lambda: len(started_ids(replaced)) == 2, 20, message="the new run started")
    # A run replaced is no failure: nothing fails over.
    assert system.api("GET", "/api/job/tasks/failover")[1] == []
    assert not traces(system, "swap", "RUN_FAILED")


def test_kill_is_not_a_failure_and_next_fire_times_through_api_and_cli(
    system: System, tmp_path: Path
) -> None:
    runs = Runs(Path(system.make_app()))
    system.script_job("long", "0 0 0 * * ?", shards=3, env="SLEEP_S=300", failover=True)
    assert system.api("POST", "/api/job/trigger", raw="long")[0] == 204
    wait_for(lambda: len(running_of(system, "long")) == 3, 20, message="3 running")
    # RUNNING in Mesos comes before each script's start line: wait for all three, so that a
    # relaunch after the kills would show as a fourth start.
    wait_for(lambda: len(runs.starts()) == 3, 20, message="3 scripts started")
    one = running_of(system, "long")[0]["id"]
    status, body = system.api("POST", f"/api/job/tasks/{one}/kill")
    assert (status, body) == (202, {"taskIds": [one]})
    wait_for(lambda: mesos_states(system, "long")[one] == "TASK_KILLED", 20, message="killed")
    # The master knows of the kill before the leader has processed its status update.
    wait_for(lambda: len(running_of(system, "long")) == 2, 20, message="the leader saw the kill")
    leader = system.leader()
    assert leader is not None
    cli = Cli(
        tmp_path / "home",
        EJCLOUD_SERVER=leader.identity,
        EJCLOUD_USER="root",
        EJCLOUD_PASSWORD="root",
    )
    assert cli.ok("job", "kill", "long").strip() == "job long: kill sent to 2 running tasks"
    wait_for(lambda: running_of(system, "long") == [], 20, message="all killed")
    assert set(mesos_states(system, "long").values()) == {"TASK_KILLED"}
    # Killed by a user: no failover relaunch, no failure reported.
    stays(
        lambda: system.api("GET", "/api/job/tasks/failover")[1] == [] and len(runs.starts()) == 3,
        3,
        "nothing relaunched",
    )
    assert not traces(system, "long", "RUN_FAILED")
    assert cli("job", "kill", "long").returncode == 7  # nothing is running any more
    assert cli("job", "kill", "nope").returncode == 4

    # Next fire times: the job's (its daily cron at midnight), a preview, and the CLI's view.
    status, body = system.api("GET", "/api/job/long/next-fire-times?count=3")
    assert status == 200
    times = [datetime.fromisoformat(t) for t in body["nextFireTimes"]]
    assert [(t.hour, t.minute, t.second) for t in times] == [(0, 0, 0)] * 3
    assert [b - a for a, b in itertools.pairwise(times)] == [timedelta(days=1)] * 2
    status, preview = system.api(
        "GET", "/api/cron/next-fire-times?cron=0/10%20*%20*%20*%20*%20%3F&timeZone=UTC&count=2"
    )
    assert status == 200 and all(t.endswith("+00:00") for t in preview["nextFireTimes"])
    assert cli.ok("job", "next", "long", "-n", "3").split() == body["nextFireTimes"]
    assert cli.json("job", "next", "long", "-n", "2") == {
        "nextFireTimes": body["nextFireTimes"][:2]
    }


def test_disabling_a_job_drops_its_failover_so_enabling_launches_nothing_stale(
    system: System,
) -> None:
    runs = Runs(Path(system.make_app()))
    system.script_job(
        "flaky", NEVER, shards=1, failover=True, scriptCommandLine="sh record.sh; exit 3"
    )
    assert system.api("POST", "/api/job/trigger", raw="flaky")[0] == 204
    # Failing again and again: after the third failure the relaunch waits 2 s (back-off).
    wait_for(lambda: len(runs.starts(0)) >= 3, 30, message="three failures")
    wait_for(
        lambda: system.api("GET", "/api/job/tasks/failover")[1], 10, message="a queued relaunch"
    )
    assert system.api("POST", "/api/job/flaky/disable")[0] == 204
    assert system.api("GET", "/api/job/tasks/failover")[1] == []
    wait_for(lambda: running_of(system, "flaky") == [], 10, message="nothing runs")
    before = len(runs.starts(0))
    assert system.api("POST", "/api/job/flaky/enable")[0] == 204
    stays(lambda: len(runs.starts(0)) == before, 4, "no stale FAILOVER launch on enable")

"""Run policies through the API on a real ZooKeeper: next fire times, kill, policy fields,
disable dropping failover relaunches, triggers under the overlap policy."""

from __future__ import annotations

import itertools
import json
from datetime import datetime, timedelta
from typing import Any

import pytest

from scheduler.storage.state import FailoverQueue, RunningStore, RunningTask
from tests.integration.api.conftest import APP, JOB, Api

TASK = "demo_job@-@{item}@-@READY@-@agent-1@-@0000-{item}"


def setup(api: Api, **job: Any) -> None:
    assert api.call("POST", "/api/app", APP).status_code == 204
    response = api.call("POST", "/api/job/register", {**JOB, **job})
    assert response.status_code == 204, response.json


def running(api: Api, *items: int) -> list[str]:
    store = RunningStore(api.registry, api.term.fence)
    ids = [TASK.format(item=i) for i in items]
    for task_id in ids:
        store.add(RunningTask(task_id, "agent-1", state="TASK_RUNNING"))
    return ids


def test_job_next_fire_times_are_iso_times_with_the_jobs_offset(api: Api) -> None:
    setup(api, cron="0/10 * * * * ?", timeZone="Asia/Kolkata")
    answer = api.call("GET", "/api/job/demo_job/next-fire-times")
    assert answer.status_code == 200 and list(answer.json) == ["nextFireTimes"]
    times = [datetime.fromisoformat(t) for t in answer.json["nextFireTimes"]]
    assert len(times) == 5
    assert all(t.utcoffset() == timedelta(hours=5, minutes=30) for t in times)
    assert all(t.second % 10 == 0 for t in times)
    assert [b - a for a, b in itertools.pairwise(times)] == [timedelta(seconds=10)] * 4
    assert answer.json["nextFireTimes"][0].endswith("+05:30")
    three = api.call("GET", "/api/job/demo_job/next-fire-times?count=3").json["nextFireTimes"]
    assert (
        len(three) == 3
        and len(
            api.call("GET", "/api/job/demo_job/next-fire-times?count=100").json["nextFireTimes"]
        )
        == 100
    )


def test_a_job_without_a_cron_has_no_next_fire_time(api: Api) -> None:
    setup(api, cron="")
    answer = api.call("GET", "/api/job/demo_job/next-fire-times")
    assert answer.status_code == 200 and answer.json == {"nextFireTimes": []}


@pytest.mark.parametrize("count", ["0", "101", "abc", "-1", "1.5", ""])
def test_next_fire_times_count_out_of_range_is_refused_by_name(api: Api, count: str) -> None:
    setup(api)
    for path in ("/api/job/demo_job/next-fire-times", "/api/cron/next-fire-times?cron=@daily"):
        sep = "&" if "?" in path else "?"
        answer = api.call("GET", f"{path}{sep}count={count}")
        assert answer.status_code == 400 and "count" in answer.json["fields"], answer.json


def test_next_fire_times_of_an_unknown_job_is_404(api: Api) -> None:
    assert api.call("GET", "/api/job/nope/next-fire-times").status_code == 404


def test_cron_preview_in_a_zone_and_its_refusals(api: Api) -> None:
    ok = api.call(
        "GET", "/api/cron/next-fire-times?cron=0 0 9 * * ?&timeZone=America/New_York&count=2"
    )
    assert ok.status_code == 200
    first, second = (datetime.fromisoformat(t) for t in ok.json["nextFireTimes"])
    assert (first.hour, first.minute, second - first) == (9, 0, timedelta(days=1))
    assert first.utcoffset() in (timedelta(hours=-5), timedelta(hours=-4))
    crontab = api.call("GET", "/api/cron/next-fire-times?cron=*/15 * * * *&timeZone=UTC")
    assert crontab.json["nextFireTimes"][0].endswith("+00:00")
    # A Quartz cron that lost its seconds field is refused with the 6-field form suggested.
    lost = api.call("GET", "/api/cron/next-fire-times?cron=0/10 * * * ?")
    assert lost.status_code == 400 and "'0 0/10 * * * ?'" in lost.json["fields"]["cron"]
    assert api.call("GET", "/api/cron/next-fire-times").json["fields"] == {"cron": "is required"}
    zone = api.call("GET", "/api/cron/next-fire-times?cron=@daily&timeZone=Mars/Base")
    assert zone.status_code == 400 and "timeZone" in zone.json["fields"]
    never = api.call("GET", "/api/cron/next-fire-times?cron=0 0 0 1 1 ? 2099&count=3")
    assert never.status_code == 200 and len(never.json["nextFireTimes"]) == 1
    long = api.call("GET", "/api/cron/next-fire-times?cron=" + "1" * 300)
    assert long.status_code == 400 and "cron" in long.json["fields"]


def test_policy_fields_are_stored_next_to_the_originals_and_misspellings_refused(
    api: Api,
) -> None:
    policies = {
        "timeoutSeconds": 30,
        "maxRetries": 2,
        "overlapPolicy": "ALLOW",
        "notifyWebhookUrl": "http://8.8.8.8:9/hook",  # public: internal targets are refused
    }
    setup(api, failover=True, **policies)
    stored = json.loads(api.registry.get("/config/job/demo_job") or b"")
    assert list(stored)[-4:] == list(policies) and stored["jobName"] == "demo_job"
    assert {k: stored[k] for k in policies} == policies
    assert {k: api.call("GET", "/api/job/jobs/demo_job").json[k] for k in policies} == policies
    before = api.snapshot()
    typo = api.call("PUT", "/api/job/update", {"jobName": "demo_job", "maxRetry": 1})
    assert typo.status_code == 400 and typo.json["fields"] == {
        "maxRetry": "is not a field of a job"
    }
    bad = api.call(
        "PUT",
        "/api/job/update",
        {"jobName": "demo_job", "notifyWebhookUrl": "file:///etc/passwd", "maxRetries": -1},
    )
    assert bad.status_code == 400 and set(bad.json["fields"]) == {"notifyWebhookUrl", "maxRetries"}
    assert api.snapshot() == before
    reset = api.call("PUT", "/api/job/update", {"jobName": "demo_job", "overlapPolicy": None})
    assert reset.status_code == 204
    assert "overlapPolicy" not in api.call("GET", "/api/job/jobs/demo_job").json


def test_kill_a_job_marks_and_kills_each_running_task(api: Api) -> None:
    setup(api)
    ids = running(api, 0, 2)
    answer = api.call("POST", "/api/job/demo_job/kill")
    assert answer.status_code == 202 and sorted(answer.json["taskIds"]) == ids
    assert sorted(arg for name, arg in api.actions.calls if name == "kill_task") == ids
    tasks = api.call("GET", "/api/job/tasks/running").json
    assert {t["killReason"] for t in tasks} == {"user"}
    nothing = api.call("POST", "/api/job/nope/kill")
    assert nothing.status_code == 404


def test_kill_one_task(api: Api) -> None:
    setup(api)
    first, second = running(api, 0, 1)
    answer = api.call("POST", f"/api/job/tasks/{first}/kill")
    assert answer.status_code == 202 and answer.json == {"taskIds": [first]}
    tasks = {t["id"]: t for t in api.call("GET", "/api/job/tasks/running").json}
    assert tasks[first]["killReason"] == "user" and "killReason" not in tasks[second]
    gone = api.call("POST", "/api/job/tasks/demo_job@-@1@-@READY@-@agent-1@-@other/kill")
    assert gone.status_code == 404 and "is not running" in gone.json["error"]
    bad = api.call("POST", "/api/job/tasks/not-a-task/kill")
    assert bad.status_code == 400 and "taskId" in bad.json["fields"]
    assert [arg for name, arg in api.actions.calls if name == "kill_task"] == [first]


def test_disabling_a_job_or_its_app_drops_its_failover_relaunches(api: Api) -> None:
    setup(api, failover=True)
    queue = FailoverQueue(api.registry, api.term.fence)
    queue.add(TASK.format(item=1))
    assert len(api.call("GET", "/api/job/tasks/failover").json) == 1
    assert api.call("POST", "/api/job/demo_job/disable").status_code == 204
    assert api.call("GET", "/api/job/tasks/failover").json == []
    assert api.call("POST", "/api/job/demo_job/enable").status_code == 204
    queue.add(TASK.format(item=2))
    assert api.call("POST", "/api/app/demo_app/disable").status_code == 204
    assert api.call("GET", "/api/job/tasks/failover").json == []
    assert api.registry.children("/state/failover_backoff") == []


def test_trigger_follows_the_overlap_policy_while_the_job_runs(api: Api) -> None:
    setup(api, misfire=False)
    running(api, 0)
    refused = api.call("POST", "/api/job/trigger", raw="demo_job")
    assert refused.status_code == 409 and "overlapPolicy FORBID" in refused.json["error"]
    assert api.call("GET", "/api/job/tasks/ready").json == []
    for policy in ("ALLOW", "REPLACE"):
        changed = api.call(
            "PUT", "/api/job/update", {"jobName": "demo_job", "overlapPolicy": policy}
        )
        assert changed.status_code == 204
        assert api.call("POST", "/api/job/trigger", raw="demo_job").status_code == 204
    assert (
        api.call("PUT", "/api/job/update", {"jobName": "demo_job", "misfire": True}).status_code
        == 204
    )
    assert api.call("POST", "/api/job/trigger", raw="demo_job").status_code == 204
    assert api.call("GET", "/api/job/tasks/ready").json == [{"jobName": "demo_job", "times": "2"}]

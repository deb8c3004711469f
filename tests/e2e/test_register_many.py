"""Jobs registered by `POST /api/job/register-many` (issue 29) are scheduled by a real leader
process as a single registration's are: the config listener follows `/config/job`, the producer
fires their crons (no Mesos here: a fired run waits in the ready queue)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from deploy.zookeeper import ZooKeeperEnsemble
from tests.support.bodies import app_body, job_body
from tests.support.http import exchange
from tests.support.replicas import ReplicaProcess
from tests.support.waiting import wait_for

AUTH = "Basic " + base64.b64encode(b"root:root").decode()


def _call(replica: ReplicaProcess, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Authorization": AUTH}
    if data is not None:
        headers["Content-Type"] = "application/json"
    answer = exchange(
        method, f"http://{replica.identity}{path}", data=data, headers=headers, timeout_s=30
    )
    return answer.status, answer.json()


def _ready_jobs(replica: ReplicaProcess) -> set[str]:
    status, body = _call(replica, "GET", "/api/job/tasks/ready?limit=1000")
    assert status == 200, body
    return {entry["jobName"] for entry in body["items"]}


def test_jobs_registered_many_at_once_are_scheduled_by_the_leader(
    zk: ZooKeeperEnsemble, zk_namespace: str, tmp_path: Path
) -> None:
    replica = ReplicaProcess(zk.hosts, tmp_path, zk_namespace=zk_namespace).start()
    try:
        wait_for(replica.is_leader, 30, message="the replica leads")
        assert _call(replica, "POST", "/api/app", app_body("many_app"))[0] == 204
        # 1,000 jobs in one request: 995 that fire once a year, 5 every second.
        yearly = [
            job_body(f"yearly_{n:04d}", appName="many_app", cron="0 0 0 1 1 ?") for n in range(995)
        ]
        every_second = [
            job_body(f"often_{n}", appName="many_app", cron="* * * * * ?", misfire=True)
            for n in range(5)
        ]
        status, body = _call(
            replica, "POST", "/api/job/register-many", {"jobs": yearly + every_second}
        )
        assert (status, body) == (200, {"registered": 1000})
        # Each every-second job fires into the ready queue; no yearly one does.
        often = {f"often_{n}" for n in range(5)}
        wait_for(lambda: often <= _ready_jobs(replica), 20, message="the jobs fire")
        assert _ready_jobs(replica) == often
        status, page = _call(replica, "GET", "/api/job/jobs?limit=1")
        assert status == 200 and page["items"][0]["jobName"] == "often_0"
    finally:
        replica.stop()

"""The lists of a caller who sees some apps (issue 26), filtered by each job's app as the term's
`JobApps` keeps it, over a real ZooKeeper: right at once after the API's own writes (a job
moved to another app, deleted, registered), right once another client's write has reached this
session, equal to the admin's lists cut to the caller's apps, and without a read of a job's
config per request.

Jobs `a_job` (app `a_app`) and `b_job` (`b_app`), each with a pending run and a running task;
the caller is an API token of a viewer of `a_app`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from kazoo.client import KazooClient

from deploy.zookeeper import ZooKeeperEnsemble
from scheduler.api.term_access import TermAccess
from scheduler.model.access.records import (
    TokenRecord,
    UserRecord,
    encode_grant,
    encode_token,
    encode_user,
    new_grant_id,
)
from scheduler.model.access.roles import Grant, Role
from scheduler.model.access.tokens import new_token, secret_digest
from scheduler.model.config.job import JobConfig
from scheduler.model.task_id import TaskId, TaskType
from scheduler.storage import layout
from scheduler.storage.registry import Registry
from scheduler.storage.state import RunningTask
from tests.integration.api.conftest import ADMIN, Api, make_api
from tests.support.bodies import app_body, job_body
from tests.support.held_watches import watches_held
from tests.support.waiting import wait_for


def _put(registry: Registry, path: str, data: bytes) -> None:
    registry.client.create(registry.abs(path), data, makepath=True)


@dataclass
class Lists:
    api: Api
    viewer: dict[str, str]  # a viewer of a_app, through an API token

    @property
    def access(self) -> TermAccess:
        found: TermAccess = self.api.client.application.extensions["ejc_term_access"]
        return found

    def get(self, path: str, headers: dict[str, str]) -> Any:
        answer = self.api.client.get(path, headers=headers)
        assert answer.status_code == 200, (path, answer.get_data(as_text=True))
        return answer.json

    def seen(self, headers: dict[str, str] | None = None) -> dict[str, object]:
        """What each list filtered by a job's app shows the caller (the viewer by default)."""
        who = self.viewer if headers is None else headers
        counts = self.get("/api/job/statistics/jobs/type", who)
        return {
            "jobs": sorted(job["jobName"] for job in self.get("/api/job/jobs", who)),
            "page": sorted(
                job["jobName"] for job in self.get("/api/job/jobs?limit=50", who)["items"]
            ),
            "ready": sorted(entry["jobName"] for entry in self.get("/api/job/tasks/ready", who)),
            "running": sorted(
                TaskId.parse(task["id"]).job_name
                for task in self.get("/api/job/tasks/running", who)
            ),
            "scripts": counts["scriptJobCount"],
        }

    def add_job(self, name: str, app: str) -> None:
        """Register `name` under `app` (as the admin), with a pending run and a running task."""
        body = job_body(name, appName=app, misfire=True)
        answer = self.api.call("POST", "/api/job/register", json=body)
        assert answer.status_code == 204, answer.get_data(as_text=True)
        assert self.api.call("POST", "/api/job/trigger", raw=name).status_code == 204
        task = str(TaskId.new(name, 0, TaskType.READY, "S0"))
        self.access.running.add(RunningTask(task, "S0", state="TASK_RUNNING"))


def _only(*names: str, running: tuple[str, ...] | None = None) -> dict[str, object]:
    """What the viewer's lists hold when it sees the jobs `names` (and the running tasks of
    `running`, which outlive a deregistration until the pipeline kills them)."""
    listed = sorted(names)
    return {
        "jobs": listed,
        "page": listed,
        "ready": listed,
        "running": listed if running is None else sorted(running),
        "scripts": len(listed),
    }


@pytest.fixture
def lists(zk_client: KazooClient, zk_namespace: str) -> Iterator[Lists]:
    api = make_api(zk_client, zk_namespace)
    for app in ("a_app", "b_app"):
        assert api.call("POST", "/api/app", json=app_body(app)).status_code == 204
    registry = api.registry
    now_ms = int(time.time() * 1000)
    _put(registry, layout.access_user_path("ann"), encode_user(UserRecord("ann", "x", now_ms)))
    grant = Grant(new_grant_id(), "user:ann", Role.VIEWER, "a_app")
    _put(registry, layout.access_grant_path(grant.id), encode_grant(grant))
    text, parts = new_token()
    token = TokenRecord(
        parts.id, "ci", "user:ann", Role.VIEWER, "a_app", secret_digest(parts.secret), now_ms, None
    )
    _put(registry, layout.access_token_path(parts.id), encode_token(token))
    api.client.application.extensions["ejc_authenticator"].access.refresh(registry)
    found = Lists(api, {"Authorization": f"Bearer {text}"})
    found.add_job("a_job", "a_app")
    found.add_job("b_job", "b_app")
    yield found


@pytest.fixture
def other(zk: ZooKeeperEnsemble) -> Iterator[KazooClient]:
    """Another ZooKeeper client (another session): its writes reach the API by watches."""
    client = KazooClient(hosts=zk.hosts, timeout=4)
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


def _write_as_other(other: KazooClient, registry: Registry, name: str, app: str) -> None:
    job = JobConfig.from_json(job_body(name, appName=app, misfire=True), default_time_zone="UTC")
    path = registry.abs(layout.job_path(name))
    data = json.dumps(job.to_json()).encode()
    if other.exists(path):
        other.set(path, data)
    else:
        other.create(path, data, makepath=True)


def test_the_viewers_lists_are_the_admins_cut_to_its_app_without_a_read_per_request(
    lists: Lists, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert lists.seen() == _only("a_job")
    admin_jobs = lists.get("/api/job/jobs", ADMIN)
    assert lists.get("/api/job/jobs", lists.viewer) == [
        job for job in admin_jobs if job["appName"] == "a_app"
    ]
    # From now on every config the API reads is noted: only those of jobs the lists show.
    config = lists.access.config
    read: list[str] = []
    jobs_named, job = config.jobs_named, config.job

    def noting_jobs_named(names: Sequence[str]) -> list[JobConfig]:
        read.extend(names)
        return jobs_named(names)

    def noting_job(name: str) -> JobConfig | None:
        read.append(name)
        return job(name)

    monkeypatch.setattr(config, "jobs_named", noting_jobs_named)
    monkeypatch.setattr(config, "job", noting_job)
    monkeypatch.setattr(config, "jobs", lambda *_: pytest.fail("every job read"))
    reads = lists.access.job_apps.reads
    for _ in range(3):
        assert lists.seen() == _only("a_job")
    assert lists.access.job_apps.reads == reads  # each job's app known: no config read
    assert set(read) == {"a_job"}  # the configs shown (job list, counts), never b_job's


def test_the_apis_own_move_deletion_and_registration_are_filtered_at_once(
    lists: Lists, zk_client: KazooClient
) -> None:
    assert lists.seen() == _only("a_job")
    # kazoo's watch thread held: no callback helps, what the API wrote is answered at once.
    with watches_held(zk_client, lists.api.registry):
        moved = lists.api.call(
            "PUT", "/api/job/update", json={"jobName": "b_job", "appName": "a_app"}
        )
        assert moved.status_code == 204, moved.get_data(as_text=True)
        assert lists.seen() == _only("a_job", "b_job")
        back = lists.api.call(
            "PUT", "/api/job/update", json={"jobName": "b_job", "appName": "b_app"}
        )
        assert back.status_code == 204
        assert lists.seen() == _only("a_job")
        gone = lists.api.call("DELETE", "/api/job/a_job/deregister")
        assert gone.status_code == 204
        assert lists.seen() == _only()  # its running task too: a deleted job's app is unknown
        lists.add_job("c_job", "a_app")
        assert lists.seen() == _only("c_job")


def test_another_clients_writes_are_filtered_once_they_reach_the_api(
    lists: Lists, other: KazooClient
) -> None:
    registry = lists.api.registry
    assert lists.seen() == _only("a_job")
    _write_as_other(other, registry, "b_job", "a_app")
    wait_for(lambda: lists.seen() == _only("a_job", "b_job"), 10, message="b_job moved in")
    _write_as_other(other, registry, "b_job", "b_app")
    wait_for(lambda: lists.seen() == _only("a_job"), 10, message="b_job moved out")
    other.delete(registry.abs(layout.job_path("a_job")))
    wait_for(lambda: lists.seen()["jobs"] == [], 10, message="a_job deleted")
    assert lists.seen() == _only()  # its pending run and running task too: its app is unknown
    # A job another client registers is read at the viewer's first listing once this session
    # knows its name: the names come from memory while their child watch is set, and the watch's
    # event from the server may arrive after the other client's answer (ZooKeeper promises no
    # session another's write without a sync). Its app is not waited for: no cache of it yet.
    _write_as_other(other, registry, "d_job", "a_app")
    config = lists.access.config
    wait_for(lambda: "d_job" in config.job_names(), 10, message="the API knowing d_job's name")
    assert lists.seen()["jobs"] == ["d_job"]


def test_a_move_by_another_client_is_never_listed_staler_than_a_read(
    lists: Lists, other: KazooClient, zk_client: KazooClient
) -> None:
    """With kazoo's watch thread held, once this session has read another client's move of
    `a_job` out of `a_app`, no list shows it to the viewer of `a_app` any more."""
    registry = lists.api.registry
    assert lists.seen() == _only("a_job")
    with watches_held(zk_client, registry):
        _write_as_other(other, registry, "a_job", "b_app")
        wait_for(
            lambda: b'"b_app"' in (registry.get(layout.job_path("a_job")) or b""),
            10,
            message="this session reading the move",
        )
        assert lists.seen() == _only()

"""`/metrics` with `metrics_require_auth` (issue 26), through the replica's WSGI front (no
socket) with the process's real authenticator and the access records and job configurations in
a real ZooKeeper.

Public by default, as a scraper expects; when the setting is on, credentials the API would take
are needed (401 otherwise), and a caller who does not see every app gets only the per-job series
of its apps' jobs (not the `_other` series, which mixes any app's jobs).
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterable
from typing import Any

from kazoo.client import KazooClient

from scheduler.edge.authenticator import authenticator_for
from scheduler.edge.http import ReplicaHttp, metrics_access_for
from scheduler.edge.job_series import MetricsRegistry
from scheduler.edge.metrics import OTHER_JOBS, SchedulerMetrics
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
from scheduler.model.settings import Settings, load_settings
from scheduler.storage import layout
from scheduler.storage.registry import Registry
from tests.support.bodies import job_body

PORT = 8899
ROOT = {"HTTP_AUTHORIZATION": "Basic " + base64.b64encode(b"root:root").decode()}
GUEST = {"HTTP_AUTHORIZATION": "Basic " + base64.b64encode(b"guest:guest").decode()}


def _put(registry: Registry, path: str, data: bytes) -> None:
    registry.client.create(registry.abs(path), data, makepath=True)


def _world(registry: Registry) -> dict[str, str]:
    """Jobs a_job (a_app) and b_job (b_app) stored; user ann, viewer on a_app, with a token.
    Returns the token's environ header."""
    for team in ("a", "b"):
        job = JobConfig.from_json(
            job_body(f"{team}_job", appName=f"{team}_app"), default_time_zone="UTC"
        )
        _put(registry, layout.job_path(job.job_name), json.dumps(job.to_json()).encode())
    now_ms = int(time.time() * 1000)
    _put(registry, layout.access_user_path("ann"), encode_user(UserRecord("ann", "x", now_ms)))
    grant = Grant(new_grant_id(), "user:ann", Role.VIEWER, "a_app")
    _put(registry, layout.access_grant_path(grant.id), encode_grant(grant))
    text, parts = new_token()
    token = TokenRecord(
        parts.id, "ci", "user:ann", Role.VIEWER, "a_app", secret_digest(parts.secret), now_ms, None
    )
    _put(registry, layout.access_token_path(parts.id), encode_token(token))
    return {"HTTP_AUTHORIZATION": f"Bearer {text}"}


def _front(settings: Settings, registry: Registry) -> ReplicaHttp:
    metrics = MetricsRegistry()  # the replica's own kind
    counted = SchedulerMetrics(metrics)
    for job in ("a_job", "b_job", OTHER_JOBS):
        counted.runs.inc(job, "success")
        counted.run_duration.observe(job, 1.0)
    authenticator_for(settings).access.refresh(registry)
    return ReplicaHttp(
        "127.0.0.1",
        PORT,
        health=lambda: {"reason": None, "role": "standby"},
        metrics=metrics,
        leader_address=lambda: None,
        is_acting_leader=lambda: False,
        metrics_access=metrics_access_for(settings, lambda: registry),
    )


def _scrape(front: ReplicaHttp, extra: dict[str, str] | None = None) -> tuple[int, str]:
    environ: dict[str, Any] = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": "/metrics",
        "QUERY_STRING": "",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REQUEST_URI": "/metrics",
        "REMOTE_ADDR": "127.0.0.1",
        "HTTP_HOST": f"localhost:{PORT}",
        "wsgi.url_scheme": "http",
        **(extra or {}),
    }
    got: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        got["status"] = int(status.split()[0])

    body: Iterable[bytes] = front(environ, start_response)
    return got["status"], b"".join(body).decode()


def _jobs(text: str) -> set[str]:
    """The jobs with series in the runs counter or the run-duration histogram."""
    return {
        line.split('job_name="', 1)[1].split('"', 1)[0]
        for line in text.splitlines()
        if line.startswith(("ejc_job_runs_total{", "ejc_job_run_duration_seconds_"))
    }


def test_metrics_stay_public_by_default(zk_client: KazooClient, zk_namespace: str) -> None:
    registry = Registry(zk_client, zk_namespace)
    _world(registry)
    settings = load_settings({}, {}, {"time_zone": "UTC"})
    assert metrics_access_for(settings, lambda: registry) is None
    status, text = _scrape(_front(settings, registry))
    assert status == 200
    assert _jobs(text) == {"a_job", "b_job", OTHER_JOBS}


def test_metrics_require_auth_needs_credentials_and_shows_only_the_callers_jobs(
    zk_client: KazooClient, zk_namespace: str
) -> None:
    registry = Registry(zk_client, zk_namespace)
    token = _world(registry)
    # No time_zone: the system's, as a replica's settings usually have it.
    settings = load_settings({}, {}, {"metrics_require_auth": "true"})
    front = _front(settings, registry)

    status, text = _scrape(front)
    assert status == 401 and json.loads(text)["type"] == "Unauthorized"
    wrong = {"HTTP_AUTHORIZATION": "Bearer ejc_000000000000_" + "0" * 64}
    assert _scrape(front, wrong)[0] == 401

    status, text = _scrape(front, token)
    assert status == 200
    assert _jobs(text) == {"a_job"}
    assert "ejc_job_runs" in text  # the family is there, with the caller's series alone
    assert 'ejc_job_run_duration_seconds_count{job_name="a_job"} 1.0' in text

    for everyone in (ROOT, GUEST):
        status, text = _scrape(front, everyone)
        assert status == 200 and _jobs(text) == {"a_job", "b_job", OTHER_JOBS}

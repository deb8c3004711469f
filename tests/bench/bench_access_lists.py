"""Lists for a caller who sees some apps (issue 26): what the filtering costs.

The API's job list, its events and its job counts answer such a caller with the jobs of its apps
alone; a job's app is in its configuration, which the term's `JobApps` (storage/job_apps.py)
reads once per job and keeps by watches, so a request keeps the visible names without reading
(the first request of a term reads them all), then reads the visible ones' configs as the list
streams, as an admin's request reads every one. A caller with a role on every app (the settings'
admin and guest, a grant on `*`) needs no filtering. Before the index, each request read every
job's config first: a page of 50 of 1,000 jobs took p50 231 ms for the token against 22 ms for
the admin (load average 0.1-1.5); with it, 22 ms against 18 ms (same machine, load 2.3-2.8).
This measures both on the same data, in process (Flask test client, the real authenticator and
access follower) over a real ZooKeeper: N jobs in 10 apps, an API token of a viewer of one app
(N/10 jobs visible) against the settings' admin (Basic, cached after its first check). Prints
p50 and p99 of each route for each caller; asserts nothing about time.

Run: `./dev.sh bench access_lists [--jobs N] [--requests N]`.
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from kazoo.client import KazooClient

from deploy.zookeeper import ZooKeeperEnsemble
from scheduler.api import create_app
from scheduler.leader.mesos.operator_actions import RecordedActions
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
from scheduler.model.config.app import AppConfig
from scheduler.model.config.job import JobConfig
from scheduler.model.settings import load_settings
from scheduler.replica.term import LeaderContext, Term
from scheduler.storage import layout
from scheduler.storage.registry import Registry
from tests.support.bodies import app_body, job_body

APPS = 10
ROUTES = ("/api/job/jobs", "/api/job/jobs?limit=50", "/api/job/statistics/jobs/type")
ROOT = {"Authorization": "Basic " + base64.b64encode(b"root:root").decode()}


def _seed(client: KazooClient, registry: Registry, jobs: int) -> dict[str, str]:
    """Apps, jobs, a viewer of app_0 and its token, written as the API and the access records
    store them; the token's header."""

    def put(path: str, data: bytes) -> None:
        client.create(registry.abs(path), data, makepath=True)

    for a in range(APPS):
        app = AppConfig.from_json(app_body(f"app_{a}"))
        put(layout.app_path(app.app_name), json.dumps(app.to_json()).encode())
    for i in range(jobs):
        body = job_body(f"job_{i:05d}", appName=f"app_{i % APPS}")
        job = JobConfig.from_json(body, default_time_zone="UTC")
        put(layout.job_path(job.job_name), json.dumps(job.to_json()).encode())
    now_ms = int(time.time() * 1000)
    put(layout.access_user_path("viewer"), encode_user(UserRecord("viewer", "x", now_ms)))
    grant = Grant(new_grant_id(), "user:viewer", Role.VIEWER, "app_0")
    put(layout.access_grant_path(grant.id), encode_grant(grant))
    text, parts = new_token()
    token = TokenRecord(
        parts.id,
        "ci",
        "user:viewer",
        Role.VIEWER,
        "app_0",
        secret_digest(parts.secret),
        now_ms,
        None,
    )
    put(layout.access_token_path(parts.id), encode_token(token))
    return {"Authorization": f"Bearer {text}"}


def _quantiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return statistics.median(ordered), p99


def run(jobs: int, requests: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        zk = ZooKeeperEnsemble(Path(tmp) / "zk", size=1)
        zk.start()
        client = KazooClient(hosts=zk.hosts, timeout=10)
        client.start(timeout=15)
        try:
            registry = Registry(client, f"bench-{uuid.uuid4().hex[:8]}")
            registry.ensure("/ha/election")
            node = client.create(
                registry.abs("/ha/election/n_"), b"me", ephemeral=True, sequence=True
            )
            settings = load_settings({}, {}, {"time_zone": "UTC"})
            ctx = LeaderContext(
                settings, registry, Term(1, node, client.client_id[0]), lambda a: None
            )
            app = create_app(ctx, RecordedActions())
            token = _seed(client, registry, jobs)
            app.extensions["ejc_authenticator"].access.refresh(registry)
            test = app.test_client()
            callers = {"admin (every app)": ROOT, f"token (1 of {APPS} apps)": token}
            for route in ROUTES:
                times: dict[str, list[float]] = {name: [] for name in callers}
                sizes: dict[str, int] = {}
                for _ in range(requests):  # interleaved: the same load for both
                    for name, headers in callers.items():
                        start = time.perf_counter()
                        response = test.get(route, headers=headers)
                        body = response.get_data()
                        times[name].append(time.perf_counter() - start)
                        assert response.status_code == 200, (route, name, body[:200])
                        sizes[name] = len(body)
                for name, samples in times.items():
                    p50, p99 = _quantiles(samples)
                    print(
                        f"{route:36s} {name:22s} p50 {p50 * 1000:7.1f} ms  "
                        f"p99 {p99 * 1000:7.1f} ms  ({sizes[name]} bytes)",
                        flush=True,
                    )
        finally:
            client.stop()
            client.close()
            zk.stop()


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="bench access_lists")
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=30)
    args = parser.parse_args(argv)
    print(f"{args.jobs} jobs in {APPS} apps, {args.requests} requests per route and caller")
    run(args.jobs, args.requests)

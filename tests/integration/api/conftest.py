"""The leader's Flask app on a real ZooKeeper, with a real election node as its fence."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from flask.testing import FlaskClient
from kazoo.client import KazooClient

from scheduler.api import create_app
from scheduler.leader.mesos.operator_actions import RecordedActions
from scheduler.model.settings import load_settings
from scheduler.replica.term import LeaderContext, Term
from scheduler.storage.registry import Registry

ADMIN = {"Authorization": "Basic " + base64.b64encode(b"root:root").decode()}
GUEST = {"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()}


@dataclass
class Api:
    client: FlaskClient
    registry: Registry
    actions: RecordedActions
    term: Term

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: str | None = None,
        headers: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> Any:
        hdrs = dict(ADMIN if headers is None else headers)
        if raw is not None:
            # As the original's console and documented curl calls send a raw job name.
            kwargs.setdefault("content_type", "application/json")
            return self.client.open(path, method=method, data=raw, headers=hdrs, **kwargs)
        if body is not None:
            return self.client.open(path, method=method, json=body, headers=hdrs, **kwargs)
        return self.client.open(path, method=method, headers=hdrs, **kwargs)

    def snapshot(self) -> dict[str, bytes]:
        """Every node under the namespace except the election, with its data."""
        out: dict[str, bytes] = {}

        def walk(path: str) -> None:
            for child in self.registry.children(path):
                full = f"{path.rstrip('/')}/{child}"
                if full.startswith("/ha"):
                    continue
                out[full] = self.registry.get(full) or b""
                walk(full)

        walk("/")
        return out


def make_api(zk_client: KazooClient, namespace: str, **settings: str) -> Api:
    registry = Registry(zk_client, namespace)
    registry.ensure("/ha/election")
    node = zk_client.create(registry.abs("/ha/election/n_"), b"me", ephemeral=True, sequence=True)
    term = Term(1, node, zk_client.client_id[0])
    ctx = LeaderContext(
        load_settings({}, {}, {"time_zone": "UTC", **settings}), registry, term, lambda app: None
    )
    actions = RecordedActions()
    app = create_app(ctx, actions)
    return Api(app.test_client(), registry, actions, term)


@pytest.fixture
def api(zk_client: KazooClient, zk_namespace: str) -> Iterator[Api]:
    yield make_api(zk_client, zk_namespace)


APP = {
    "appName": "demo_app",
    "appURL": "http://example.invalid/demo.tar.gz",
    "bootstrapScript": "bin/start.sh",
    "cpuCount": 0.5,
    "memoryMB": 64,
}

JOB = {
    "jobName": "demo_job",
    "jobClass": "demo.jobs:run",
    "jobType": "SIMPLE",
    "jobExecutionType": "TRANSIENT",
    "cron": "0/5 * * * * ?",
    "shardingTotalCount": 3,
    "shardingItemParameters": "0=a,1=b,2=c",
    "appName": "demo_app",
    "cpuCount": 0.1,
    "memoryMB": 32,
}

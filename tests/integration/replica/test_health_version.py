"""What a replica says of itself (issue 30): `/health` names its version to authenticated
callers (a rolling upgrade is followed replica by replica, docs/upgrading.md), never to
anonymous ones; a standby's `/metrics` says it is a standby and which replica leads; its
per-job series are bounded by `metrics_max_jobs`."""

from __future__ import annotations

import base64
import importlib.metadata
import json
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from deploy.zookeeper import ZooKeeperEnsemble, free_port
from scheduler.edge.metrics import OTHER_JOBS
from scheduler.model.job_events import JobEvent, JobEventKind
from scheduler.model.settings import load_settings
from scheduler.replica.replica import Replica
from scheduler.replica.term import BuiltTerm
from scheduler.wiring.replica import build_replica
from tests.support.replicas import http_get
from tests.support.waiting import wait_for


def _make(zk: ZooKeeperEnsemble, zk_namespace: str, **more: str) -> Replica:
    settings = load_settings(
        {},
        {},
        {
            "zk_servers": zk.hosts,
            "zk_namespace": zk_namespace,
            "hostname": "127.0.0.1",
            "http_bind_address": "127.0.0.1",
            "http_port": str(free_port()),
            "zk_session_timeout_seconds": "3",
            **more,
        },
    )
    made = build_replica(settings, lambda ctx: BuiltTerm([]))
    made.start()
    return made


@pytest.fixture
def replica(zk: ZooKeeperEnsemble, zk_namespace: str) -> Iterator[Replica]:
    made = _make(zk, zk_namespace)
    try:
        wait_for(made.is_acting_leader, 10, message="the replica leads")
        yield made
    finally:
        made.stop(timeout_s=10)


def test_health_names_the_installed_version_to_authenticated_callers_only(
    replica: Replica,
) -> None:
    url = f"http://{replica.settings.identity}/health"
    root = {"Authorization": "Basic " + base64.b64encode(b"root:root").decode()}
    status, _, body = http_get(url, headers=root)
    assert status == 200
    assert json.loads(body)["version"] == importlib.metadata.version("ejcloud")
    status, _, body = http_get(url)
    assert status == 200
    public = json.loads(body)
    assert public["role"] == "leader"
    assert "version" not in public


def test_a_standby_says_in_its_metrics_that_it_is_one_and_names_the_leader(
    replica: Replica, zk: ZooKeeperEnsemble, zk_namespace: str
) -> None:
    standby = _make(zk, zk_namespace)
    try:
        wait_for(
            lambda: standby.health().get("leader") == replica.settings.identity,
            15,
            message="the standby sees the leader",
        )
        status, _, body = http_get(f"http://{standby.settings.identity}/metrics")
        assert status == 200
        text = body.decode()
        first = text.splitlines()[0]
        assert first == (
            "# ejcloud: this replica is a standby: the job, fire and launch series are the "
            f"leader's; the leader is {replica.settings.identity}"
        )
        names = {family.name for family in text_string_to_metric_families(text)}
        assert "ejc_replica_role" in names  # still valid Prometheus text
        status, _, body = http_get(f"http://{replica.settings.identity}/metrics")
        assert status == 200
        assert "this replica is a standby" not in body.decode()
    finally:
        standby.stop(timeout_s=10)


def test_metrics_max_jobs_bounds_the_jobs_with_series_of_their_own(
    zk: ZooKeeperEnsemble, zk_namespace: str
) -> None:
    made = _make(zk, zk_namespace, metrics_max_jobs="1")
    try:
        for job in ("first", "second"):
            made.scheduler_metrics.on_job_event(
                JobEvent(JobEventKind.FIRE_SKIPPED, job, 1.0, "misfire off", fires=2)
            )
        status, _, body = http_get(f"http://{made.settings.identity}/metrics")
        assert status == 200
        skipped = {
            sample.labels["job_name"]: sample.value
            for family in text_string_to_metric_families(body.decode())
            if family.name == "ejc_job_fires_skipped"
            for sample in family.samples
        }
        assert skipped == {"first": 2.0, OTHER_JOBS: 2.0}
    finally:
        made.stop(timeout_s=10)

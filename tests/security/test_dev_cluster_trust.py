"""The local development cluster (`python -m deploy.cluster`, what `./dev.sh run` runs) runs
without zk_digest on purpose: its replicas say so in no warning, and they vouch for each other
by challenge (issue 23). A real cluster run: ZooKeeper, the stand-in and two replicas."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_local_cluster import ClusterRun, assert_nothing_left, free_ports, health
from tests.support.waiting import wait_for


@pytest.fixture
def run(tmp_path: Path) -> Iterator[ClusterRun]:
    started = ClusterRun(tmp_path / "data", free_ports(4))
    yield started
    started.close()
    assert_nothing_left(started.data_dir)


def test_the_dev_clusters_replicas_do_not_warn_and_vouch_for_each_other(run: ClusterRun) -> None:
    leader = run.leader()
    standby = next(a for a in run.addresses if a != leader)
    wait_for(
        lambda: health(standby)["leader"] == leader and health(standby)["leaderVouched"],
        30,
        message="the standby vouches for the leader",
    )
    for address in run.addresses:
        body = health(address)
        assert body["warnings"] == [], body["warnings"]
        assert set(body["replicas"]) == set(run.addresses)
    logs = sorted((run.data_dir / "logs").glob("scheduler-*.log"))
    assert len(logs) == 2
    for log in logs:
        text = log.read_text()
        assert "zk_digest is not set (local development cluster" in text
        assert "zk_digest is not set: every node" not in text

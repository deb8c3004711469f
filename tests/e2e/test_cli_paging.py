"""`ejcloud job list` and `app list` walk the server's pages (issue 23): a real replica whose
unpaged answer is capped at 100 items, and more jobs than that written straight into ZooKeeper."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from deploy.zookeeper import ZooKeeperEnsemble
from scheduler.model.config.job import JobConfig
from tests.e2e.test_cli import ADMIN, Cli
from tests.integration.api.conftest import APP, JOB
from tests.support.replicas import ReplicaProcess
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

COUNT = 1_234


@pytest.fixture
def leader(
    zk: ZooKeeperEnsemble, zk_namespace: str, tmp_path: Path, zk_client: KazooClient
) -> Iterator[ReplicaProcess]:
    # The jobs are there before the replica starts: its term loads them at once.
    root = f"/{zk_namespace}/config"
    zk_client.ensure_path(f"{root}/job")
    zk_client.ensure_path(f"{root}/app")
    zk_client.create(f"{root}/app/demo_app", JOB_APP)
    body = JobConfig.from_json({**JOB, "jobName": "template"}, default_time_zone="UTC").to_bytes()
    for start in range(0, COUNT, 500):
        txn = zk_client.transaction()
        for n in range(start, min(start + 500, COUNT)):
            name = f"job{n:05d}"
            txn.create(f"{root}/job/{name}", body.replace(b"template", name.encode()))
        txn.commit()
    replica = ReplicaProcess(
        zk.hosts, tmp_path, zk_namespace=zk_namespace, max_list_items=100
    ).start()
    try:
        wait_for(replica.is_leader, 20, message="a leader")
        yield replica
    finally:
        replica.stop()


JOB_APP = (
    b'{"appName":"demo_app","appURL":"http://example.invalid/demo.tar.gz",'
    b'"bootstrapScript":"bin/start.sh","cpuCount":0.5,"memoryMB":64.0}'
)


def test_the_cli_lists_every_job_a_page_at_a_time(leader: ReplicaProcess, tmp_path: Path) -> None:
    cli = Cli(
        tmp_path / "home",
        EJCLOUD_SERVER=f"http://{leader.identity}",
        EJCLOUD_USER=ADMIN[0],
        EJCLOUD_PASSWORD=ADMIN[1],
    )
    names = [job["jobName"] for job in cli.json("job", "list")]
    # More than the unpaged answer's 100: the CLI walked three pages of 500.
    assert names == [f"job{n:05d}" for n in range(COUNT)]
    assert [j["jobName"] for j in cli.json("job", "list", "--limit", "3")] == [
        "job00000",
        "job00001",
        "job00002",
    ]
    assert len(cli.json("job", "list", "--app", "demo_app", "--limit", "700")) == 700
    assert cli.json("job", "list", "--app", "other") == []
    table = cli.ok("job", "list", "--limit", "2").splitlines()
    assert [row.split()[0] for row in table] == ["NAME", "job00000", "job00001"]
    assert [a["appName"] for a in cli.json("app", "list")] == [APP["appName"]]

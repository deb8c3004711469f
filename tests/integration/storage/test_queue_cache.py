"""The launcher's watch-driven view of the queues, on a real ZooKeeper."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from kazoo.client import KazooClient

from deploy.zookeeper import ZooKeeperEnsemble
from scheduler.model.config.job import JobConfig
from scheduler.model.task_id import TaskId, TaskType
from scheduler.storage.config_store import ConfigStore
from scheduler.storage.queue_cache import QueueCache
from scheduler.storage.registry import Registry
from scheduler.storage.state import RunningTask
from scheduler.storage.term_stores import TermStores
from tests.support.bodies import job_body
from tests.support.tcpproxy import TcpProxy
from tests.support.waiting import wait_for


def _job(name: str, app: str = "app", cron: str = "0 0 3 * * ?") -> dict[str, object]:
    return job_body(name, appName=app, cron=cron, shardingTotalCount=2)


class _Changes:
    """Counts the cache's change notifications (called on kazoo's thread)."""

    def __init__(self) -> None:
        self.seen = threading.Event()

    def __call__(self) -> None:
        self.seen.set()


@pytest.fixture
def cache(registry: Registry) -> Iterator[tuple[QueueCache, _Changes]]:
    changes = _Changes()
    view = QueueCache(registry, ConfigStore(registry, None, "UTC"), changes)
    yield view, changes
    view.stop()


def _synced(view: QueueCache, check: Callable[[], bool], what: str) -> None:
    """Sync until `check()` holds: the change is seen within a watch's latency."""

    def done() -> bool:
        view.sync()
        return check()

    wait_for(done, 10, message=what)


def test_the_view_follows_every_queue_written_by_another_writer(
    stores: TermStores, cache: tuple[QueueCache, _Changes]
) -> None:
    view, changes = cache
    stores.ready.add_transient("a", misfire=True)
    stores.ready.add_transient("a", misfire=True)
    running = TaskId.new("r", 0, TaskType.READY, "agent-1")
    stores.running.add(RunningTask(str(running), "agent-1"))
    failed = TaskId.new("f", 1, TaskType.READY, "agent-1")
    stores.failover.add(str(failed))
    stores.disabled.disable_job("off")
    view.sync()
    assert {job: count for job, (count, _v) in view.ready().items()} == {"a": 2}
    assert view.running() == {"r": [str(running)]}
    [entry] = view.failover()
    assert (entry.job_name, entry.item, entry.original) == ("f", 1, str(failed))
    assert 0 < entry.not_before <= time.time()  # a first failure is relaunched at once

    changes.seen.clear()
    stores.ready.take("a")
    stores.ready.add_transient("b", misfire=False)
    stores.running.remove(str(running))
    stores.failover.remove("f", 1)
    stores.disabled.disable_app("app")
    assert changes.seen.wait(10), "no watch fired"
    _synced(
        view,
        lambda: (
            {j: c for j, (c, _v) in view.ready().items()} == {"a": 1, "b": 1}
            and view.running() == {}
            and view.failover() == []
            and view.is_disabled(JobConfig.from_json(_job("x"), default_time_zone="UTC"))
        ),
        "the second round of changes",
    )
    stores.ready.take("a")
    _synced(view, lambda: "a" not in view.ready(), "the take of a's last run")


def test_a_round_reads_what_changed_not_what_is_stored(
    stores: TermStores, cache: tuple[QueueCache, _Changes]
) -> None:
    view, changes = cache
    for i in range(200):
        stores.ready.add_transient(f"job{i:03d}", misfire=True)
    view.sync()
    assert len(view.ready()) == 200
    before = view.reads
    view.sync()
    assert view.reads == before  # nothing changed: nothing read
    changes.seen.clear()
    stores.ready.add_transient("job007", misfire=True)
    assert changes.seen.wait(10)
    _synced(view, lambda: view.ready()["job007"][0] == 2, "job007's second run")
    assert view.reads - before <= 2  # that node (and the list, were a job added), not 200


def test_configuration_is_read_once_and_again_after_it_changes(
    registry: Registry, stores: TermStores, cache: tuple[QueueCache, _Changes]
) -> None:
    view, _changes = cache
    registry.create("/config/job/j", json.dumps(_job("j")).encode())
    view.sync()
    first = view.jobs(["j", "missing"])
    assert first["missing"] is None
    job = first["j"]
    assert job is not None and job.cron == "0 0 3 * * ?"
    reads = view.reads
    assert view.jobs(["j"])["j"] == job
    assert view.reads == reads  # from the view
    registry.put("/config/job/j", json.dumps(_job("j", cron="0 0 4 * * ?")).encode())

    def updated() -> bool:
        view.sync()
        got = view.jobs(["j"])["j"]
        return got is not None and got.cron == "0 0 4 * * ?"

    wait_for(updated, 10, message="the changed cron")
    registry.put("/config/job/j", b"{not json")

    def unreadable() -> bool:
        view.sync()
        return view.jobs(["j"])["j"] is None

    wait_for(unreadable, 10, message="the unreadable job")


def test_the_originals_daemon_nodes_are_read_for_their_task_id(
    registry: Registry, cache: tuple[QueueCache, _Changes]
) -> None:
    view, _changes = cache
    task = TaskId.new("d", 0, TaskType.READY, "agent-1")
    registry.create("/state/running/d/d@-@0", str(task).encode())
    registry.create("/state/running/d/junk", b"not a task id")
    view.sync()
    assert view.running() == {"d": [str(task)]}


def test_the_view_is_read_again_after_the_connection_was_lost(
    zk: ZooKeeperEnsemble, zk_namespace: str, stores: TermStores
) -> None:
    # kazoo drops every watch when its connection drops: changes made meanwhile by another
    # client would never be seen if the view only waited for watches.
    host, port = zk.servers[0].address.split(":")
    proxy = TcpProxy(host, int(port))
    client = KazooClient(hosts=proxy.address, timeout=10)
    client.start(timeout=15)
    try:
        registry = Registry(client, zk_namespace, timeout_s=2.0)
        view = QueueCache(registry, ConfigStore(registry, None, "UTC"))
        stores.ready.add_transient("before", misfire=True)
        view.sync()
        assert set(view.ready()) == {"before"}
        proxy.cut()
        wait_for(lambda: client.state == "SUSPENDED", 10, message="the cut")
        stores.ready.add_transient("during", misfire=True)
        stores.ready.take("before")
        proxy.restore()
        wait_for(lambda: client.state == "CONNECTED", 20, message="the reconnection")
        _synced(view, lambda: set(view.ready()) == {"during"}, "the changes made while cut off")
        view.stop()
    finally:
        proxy.close()
        client.stop()
        client.close()


def test_a_new_session_reads_everything_again(
    zk: ZooKeeperEnsemble, zk_namespace: str, stores: TermStores
) -> None:
    client = KazooClient(hosts=zk.hosts, timeout=4)
    client.start(timeout=15)
    try:
        registry = Registry(client, zk_namespace)
        view = QueueCache(registry, ConfigStore(registry, None, "UTC"))
        stores.ready.add_transient("one", misfire=True)
        view.sync()
        client.stop()  # the session ends; the same client starts a new one
        stores.ready.add_transient("two", misfire=True)
        client.start(timeout=15)
        view.sync()
        assert set(view.ready()) == {"one", "two"}
        view.stop()
    finally:
        client.stop()
        client.close()

"""`WatchedChildren` and the job names `ConfigStore` answers from it, on a real ZooKeeper: read
once and answered from memory while the read's child watch is set; a change by another client
is seen once its event is in; this process's own writes are seen at once (read-your-writes)."""

from __future__ import annotations

from kazoo.client import KazooClient

from deploy.zookeeper import ZooKeeperEnsemble
from scheduler.model.config.job import JobConfig
from scheduler.storage.config_store import ConfigStore
from scheduler.storage.registry import Registry
from scheduler.storage.transactions import Fence
from scheduler.storage.watched_children import WatchedChildren
from tests.support.bodies import job_body
from tests.support.waiting import wait_for


def test_names_come_from_memory_until_a_change_drops_them(
    registry: Registry, zk: ZooKeeperEnsemble, zk_namespace: str
) -> None:
    for name in ("b", "a", "c"):
        registry.put(f"/w/{name}", b"")
    watched = WatchedChildren(registry, "/w")
    assert watched.names() == ("a", "b", "c")
    wait_for(lambda: registry.child_watch_set("/w", watched._on_event), 5, message="watch set")
    for _ in range(20):
        assert watched.names() == ("a", "b", "c")
    assert watched.reads == 1
    # Another client adds one: the event drops the copy; the next ask reads again.
    other = KazooClient(hosts=zk.hosts)
    other.start(timeout=15)
    try:
        other.create(registry.abs("/w/d"), b"")
        wait_for(lambda: "d" in watched.names(), 10, message="the other client's child")
        assert watched.reads == 2
        other.delete(registry.abs("/w/a"))
        wait_for(lambda: "a" not in watched.names(), 10, message="the other client's delete")
    finally:
        other.stop()
        other.close()
    # forget() makes the next ask read, whatever the watch says.
    reads = watched.reads
    watched.forget()
    assert watched.names() == ("b", "c", "d")
    assert watched.reads == reads + 1


def test_a_folder_that_does_not_exist_is_created_empty(registry: Registry) -> None:
    watched = WatchedChildren(registry, "/none/here")
    assert watched.names() == ()
    registry.put("/none/here/x", b"")
    wait_for(lambda: watched.names() == ("x",), 10, message="the new child")


def test_the_job_names_see_this_process_s_writes_at_once(registry: Registry, fence: Fence) -> None:
    store = ConfigStore(registry, fence, "UTC")
    assert list(store.job_names()) == []
    job = JobConfig.from_json(job_body("j1"), default_time_zone="UTC")
    store.add_job(job)
    assert list(store.job_names()) == ["j1"]  # no wait: the write dropped the copy
    store.add_jobs([("j0", job_body_bytes("j0")), ("j2", job_body_bytes("j2"))])
    assert list(store.job_names()) == ["j0", "j1", "j2"]
    store.delete_job("j1")
    assert list(store.job_names()) == ["j0", "j2"]


def job_body_bytes(name: str) -> bytes:
    return JobConfig.from_json(job_body(name), default_time_zone="UTC").to_bytes()

"""PoolStore (issue 28) over a real ZooKeeper: read once, kept by its own fenced writes, quota,
conflicts, a bad stored node skipped, a deposed leader refused, the running record's pool
fields read back (and absent from an old record)."""

from __future__ import annotations

import json
import threading

import pytest
from kazoo.client import KazooClient

from scheduler.model.errors import Conflict, NotFound, NotLeader, QuotaExceeded
from scheduler.model.pools import PoolConfig, PoolCounts
from scheduler.storage.layout import POOLS, pool_path
from scheduler.storage.pool_store import PoolStore
from scheduler.storage.registry import Registry
from scheduler.storage.state import RunningTask
from scheduler.storage.transactions import Fence


def test_pools_are_saved_read_back_by_a_new_store_and_deleted(
    registry: Registry, fence: Fence
) -> None:
    store = PoolStore(registry, fence, max_pools=10)
    changes: list[int] = []
    store.listeners.append(lambda: changes.append(1))
    store.save(PoolConfig("db", 3), create=True)
    store.save(PoolConfig("web", 1), create=True)
    store.save(PoolConfig("db", 5), create=False)
    assert store.sizes() == {"db": 5, "web": 1}
    assert json.loads(registry.get(pool_path("db")) or b"") == {"poolName": "db", "size": 5}
    # A new term's store reads them all (and a node it cannot read is skipped, not fatal).
    registry.create(pool_path("bad"), b"{not json")
    registry.create(pool_path("other"), json.dumps({"poolName": "x", "size": 1}).encode())
    fresh = PoolStore(registry, fence, max_pools=10)
    assert fresh.names() == ["db", "web"]
    assert fresh.get("db") == PoolConfig("db", 5) and fresh.get("none") is None
    assert fresh.delete("web") and not fresh.delete("web")
    assert registry.get(pool_path("web")) is None
    assert fresh.all() == [PoolConfig("db", 5)]
    assert len(changes) == 3


def test_conflicts_not_found_and_the_quota_write_nothing(registry: Registry, fence: Fence) -> None:
    store = PoolStore(registry, fence, max_pools=1)
    store.save(PoolConfig("db", 3), create=True)
    with pytest.raises(Conflict, match="already exists"):
        store.save(PoolConfig("db", 4), create=True)
    with pytest.raises(NotFound, match="does not exist"):
        store.save(PoolConfig("web", 4), create=False)
    with pytest.raises(QuotaExceeded, match="max_pools"):
        store.save(PoolConfig("web", 4), create=True)
    assert registry.children(POOLS) == ["db"]
    assert store.sizes() == {"db": 3}


def test_a_deposed_leader_cannot_write_a_pool(
    registry: Registry, fence: Fence, zk_client: KazooClient
) -> None:
    store = PoolStore(registry, fence, max_pools=10)
    store.save(PoolConfig("db", 3), create=True)
    zk_client.delete(fence.node_path)  # another leader now
    with pytest.raises(NotLeader):
        store.save(PoolConfig("db", 1), create=False)
    with pytest.raises(NotLeader):
        store.delete("db")
    assert json.loads(registry.get(pool_path("db")) or b"")["size"] == 3


def test_counts_are_the_launchers_last_else_zeros_with_the_size(
    registry: Registry, fence: Fence
) -> None:
    store = PoolStore(registry, fence, max_pools=10)
    assert store.all_counts() == {}  # never reads ZooKeeper before the pools are read
    store.save(PoolConfig("db", 3), create=True)
    assert store.counts("db") == PoolCounts("db", 3, 0, 0)
    assert store.counts("none") == PoolCounts("none", 0, 0, 0)
    store.note_counts({"db": PoolCounts("db", 3, 2, 4)})
    assert store.counts("db").to_json() == {"poolName": "db", "size": 3, "inUse": 2, "waiting": 4}
    assert store.all_counts() == {"db": PoolCounts("db", 3, 2, 4)}


def test_threads_saving_at_once_each_get_their_pool(registry: Registry, fence: Fence) -> None:
    store = PoolStore(registry, fence, max_pools=1000)
    errors: list[BaseException] = []

    def save(i: int) -> None:
        try:
            store.save(PoolConfig(f"p{i}", i + 1), create=True)
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            errors.append(exc)

    threads = [threading.Thread(target=save, args=(i,)) for i in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors
    assert PoolStore(registry, fence, 1000).sizes() == {f"p{i}": i + 1 for i in range(20)}


def test_a_running_record_keeps_its_pool_and_an_old_record_has_none() -> None:
    task = RunningTask("j@-@0@-@READY@-@a1@-@x", "a1", pool="db", pool_slots=2)
    data = task.to_json()
    assert (data["pool"], data["poolSlots"]) == ("db", 2)
    back = RunningTask.from_json(json.loads(json.dumps(data)))
    assert (back.pool, back.pool_slots) == ("db", 2)
    old = RunningTask.from_json({"id": task.task_id, "slaveId": "a1"})
    assert (old.pool, old.pool_slots) == (None, 0)
    assert "pool" not in old.to_json()
    for bad in ({"pool": 3, "poolSlots": 1}, {"pool": "db", "poolSlots": True}, {"pool": "db"}):
        assert RunningTask.from_json({"id": task.task_id, **bad}).pool is None

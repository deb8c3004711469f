"""`Registry.add_recursive_watch` (ZooKeeper's addWatch, persistent recursive) on a real
ZooKeeper: every change below the path arrives, from any client, without being set again; one-
shot watches on the same nodes keep working; removing the last callback removes the server's
watch; a dropped connection drops it (the caller sets it again)."""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.serialization import Watch
from kazoo.protocol.states import EventType, KazooState

from deploy.zookeeper import ZooKeeperEnsemble
from scheduler.storage.registry import Registry
from tests.support.tcpproxy import proxied_client
from tests.support.waiting import wait_for


class _Events:
    def __init__(self) -> None:
        self.got: queue.Queue[tuple[str, str]] = queue.Queue()

    def __call__(self, event: Any) -> None:
        self.got.put((str(event.type), str(event.path)))

    def next(self, timeout_s: float = 10.0) -> tuple[str, str]:
        return self.got.get(timeout=timeout_s)

    def none_within(self, timeout_s: float) -> bool:
        try:
            self.got.get(timeout=timeout_s)
        except queue.Empty:
            return True
        return False


def test_every_change_below_the_path_arrives_until_removed(
    registry: Registry, zk: ZooKeeperEnsemble
) -> None:
    registry.ensure("/w")
    events = _Events()
    registry.add_recursive_watch("/w", events)
    root = registry.abs("/w")
    other = KazooClient(hosts=zk.hosts)
    other.start(timeout=15)
    try:
        other.create(f"{root}/a", b"1")
        assert events.next() == (EventType.CREATED, f"{root}/a")
        other.set(f"{root}/a", b"2")
        assert events.next() == (EventType.CHANGED, f"{root}/a")
        other.set(f"{root}/a", b"3")  # still set: no new watch was placed
        assert events.next() == (EventType.CHANGED, f"{root}/a")
        other.create(f"{root}/a/deep", b"")
        assert events.next() == (EventType.CREATED, f"{root}/a/deep")
        other.delete(f"{root}/a", recursive=True)
        assert sorted([events.next(), events.next()]) == [
            (EventType.DELETED, f"{root}/a"),
            (EventType.DELETED, f"{root}/a/deep"),
        ]
        # A one-shot watch on a node below still fires once, besides the persistent one.
        other.create(f"{root}/b", b"")
        assert events.next() == (EventType.CREATED, f"{root}/b")
        once = _Events()
        registry.watch_data("/w/b", once)
        other.set(f"{root}/b", b"x")
        assert events.next() == (EventType.CHANGED, f"{root}/b")
        assert once.next() == (EventType.CHANGED, f"{root}/b")
        # ... and a one-shot child watch, when its node is deleted: kazoo's own reader still
        # reads a notification the persistent watch took when kazoo watches its node too.
        other.create(f"{root}/c", b"")
        assert events.next() == (EventType.CREATED, f"{root}/c")
        gone = _Events()
        registry.watch_children("/w/c", gone)
        other.delete(f"{root}/c")
        assert events.next() == (EventType.DELETED, f"{root}/c")
        assert gone.next() == (EventType.DELETED, f"{root}/c")
        # Nodes outside the path are not reported.
        other.create(registry.abs("/wx"), b"")
        registry.remove_recursive_watch("/w", events)
        other.set(f"{root}/b", b"y")
        assert events.none_within(1.0)
    finally:
        other.stop()
        other.close()


class _Arrivals:
    """Counts the watch notifications the server sends a client, whatever watch they are for
    (its connection's reader wrapped, after the registry's own wrapper)."""

    def __init__(self, client: KazooClient) -> None:
        self.paths: list[str] = []
        self._connection = client._connection
        self._reader = self._connection._read_watch_event

        def counting(buffer: bytes, offset: int) -> Any:
            self.paths.append(Watch.deserialize(buffer, offset)[0].path)
            return self._reader(buffer, offset)

        self._connection._read_watch_event = counting

    def close(self) -> None:
        self._connection._read_watch_event = self._reader


def _watched(registry: Registry, path: str) -> tuple[str, _Events]:
    """`path` made, with a recursive watch (nodes created and deleted) recording its events;
    the path's absolute form and the recorder."""
    registry.ensure(path)
    events = _Events()
    registry.add_recursive_watch(path, events, changes=False)
    return registry.abs(path), events


def test_removing_the_last_callback_stops_the_servers_notifications(
    registry: Registry, zk_client: KazooClient
) -> None:
    # (ZooKeeper 3.8 refused the removal type 3.9 added with MarshallingError: the server went
    # on sending the session every change below the path, a leader's past term's running tasks
    # and jobs, until the session ended.) The server sends a session's notifications before
    # its answers to the requests after them, so each write's answer closes the count.
    root, events = _watched(registry, "/s")
    arrivals = _Arrivals(zk_client)
    try:
        registry.put("/s/a", b"1")
        assert arrivals.paths == [f"{root}/a"]
        registry.remove_recursive_watch("/s", events)
        registry.put("/s/b", b"1")
        registry.put("/s/a", b"2")
        registry.delete("/s/a")
        assert arrivals.paths == [f"{root}/a"]
    finally:
        arrivals.close()
    assert events.next() == (EventType.CREATED, f"{root}/a")
    assert events.none_within(0.2)


def test_a_one_shot_watch_on_the_path_keeps_the_servers_watch_and_still_fires(
    registry: Registry,
) -> None:
    # The removal request takes every watch of the session on the path: not sent while kazoo
    # holds one there, whose notification would otherwise never come.
    root, events = _watched(registry, "/o")
    once = _Events()
    registry.watch_children("/o", once)
    registry.remove_recursive_watch("/o", events)
    registry.put("/o/a", b"1")
    assert once.next() == (EventType.CHILD, root)
    assert events.none_within(0.2)


def test_a_dropped_connection_drops_the_watch_and_it_can_be_set_again(
    zk: ZooKeeperEnsemble, zk_namespace: str, zk_client: KazooClient
) -> None:
    with proxied_client(zk, 20) as (proxy, client):
        registry = Registry(client, zk_namespace, timeout_s=3.0)
        writer = Registry(zk_client, zk_namespace)
        registry.ensure("/w")
        events = _Events()
        registry.add_recursive_watch("/w", events)
        writer.put("/w/a", b"1")
        assert events.next()[1] == registry.abs("/w/a")
        proxy.cut()
        wait_for(lambda: client.state == KazooState.SUSPENDED, 20, message="suspended")
        proxy.restore()
        wait_for(lambda: client.state == KazooState.CONNECTED, 20, message="same session back")
        writer.put("/w/a", b"2")
        assert events.none_within(1.0)  # the server forgot it with the connection
        registry.add_recursive_watch("/w", events)
        writer.put("/w/a", b"3")
        assert events.next() == (EventType.CHANGED, registry.abs("/w/a"))


def test_a_callback_without_changes_gets_only_nodes_created_and_deleted(
    registry: Registry,
) -> None:
    registry.ensure("/w")
    every, nodes = _Events(), _Events()
    registry.add_recursive_watch("/w", every)
    registry.add_recursive_watch("/w", nodes, changes=False)
    root = registry.abs("/w")
    try:
        registry.create("/w/a", b"1")
        registry.put("/w/a", b"2")
        registry.delete("/w/a")
        assert [every.next() for _ in range(3)] == [
            (EventType.CREATED, f"{root}/a"),
            (EventType.CHANGED, f"{root}/a"),
            (EventType.DELETED, f"{root}/a"),
        ]
        assert [nodes.next() for _ in range(2)] == [
            (EventType.CREATED, f"{root}/a"),
            (EventType.DELETED, f"{root}/a"),
        ]
        assert nodes.none_within(0.5)
    finally:
        registry.remove_recursive_watch("/w", every)
        registry.remove_recursive_watch("/w", nodes)


def test_an_inline_callback_runs_on_the_connection_thread_in_order_and_a_failing_one_is_logged(
    registry: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    # Called by kazoo's connection thread as it reads each notification, before the answer
    # to the write that caused them; one that raises is logged and the connection goes on.
    registry.ensure("/w")
    seen: list[tuple[str, str, str]] = []

    def record(event: Any) -> None:
        seen.append((threading.current_thread().name, str(event.type), str(event.path)))

    def broken(event: Any) -> None:
        raise RuntimeError("a bug in a watch")

    registry.add_recursive_watch("/w", record, changes=False, inline=True)
    registry.add_recursive_watch("/w", broken, inline=True)
    root = registry.abs("/w")
    try:
        with caplog.at_level(logging.ERROR, logger="scheduler.storage.registry"):
            registry.create("/w/a", b"1")
            # Already applied when the create's answer came: no wait needed.
            assert [s[1:] for s in seen] == [(EventType.CREATED, f"{root}/a")]
            registry.put("/w/a", b"2")  # a data change: not handed to `record`
            registry.delete("/w/a")
            assert [s[1:] for s in seen] == [
                (EventType.CREATED, f"{root}/a"),
                (EventType.DELETED, f"{root}/a"),
            ]
        assert seen and all("zk_loop" in name for name, _kind, _path in seen)
        failures = [r for r in caplog.records if "persistent watch's callback failed" in r.message]
        assert len(failures) == 3  # created, changed, deleted: each logged, none lost
    finally:
        registry.remove_recursive_watch("/w", record)
        registry.remove_recursive_watch("/w", broken)

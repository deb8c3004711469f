"""Registry against a real ZooKeeper: JSON, CAS counters, digest ACLs and fenced writes."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial

import pytest
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NoAuthError

from deploy.zookeeper import ZooKeeperEnsemble
from scheduler.model.errors import Conflict, NotFound, NotLeader, RegistryError
from scheduler.model.settings import load_settings
from scheduler.storage.acl import make_client
from scheduler.storage.multi_read import MultiRead
from scheduler.storage.registry import Registry
from scheduler.storage.transactions import Fence, FencedWriter, Op, compare_and_set
from tests.support.tcpproxy import proxied_client
from tests.support.waiting import wait_for


def test_json_round_trip_and_missing_nodes(registry: Registry) -> None:
    assert registry.get_json("/config/app/a") is None
    assert registry.children("/config/app") == []
    registry.create("/config/app/a", b'{"appName": "a"}')
    assert registry.get_json("/config/app/a") == {"appName": "a"}
    assert registry.children("/config/app") == ["a"]
    with pytest.raises(Conflict):
        registry.create("/config/app/a", b"{}")
    registry.put("/config/app/a", b"[1]")
    assert registry.get_json("/config/app/a") == [1]
    registry.put("/config/app/not-json", b"\xff")
    with pytest.raises(RegistryError):
        registry.get_json("/config/app/not-json")
    assert registry.delete("/config") is True
    assert registry.delete("/config") is False


def test_paths_live_under_the_namespace(
    registry: Registry, zk_client: KazooClient, zk_namespace: str
) -> None:
    registry.put("/state/ready/j", b"1")
    assert zk_client.get(f"/{zk_namespace}/state/ready/j")[0] == b"1"


def test_concurrent_compare_and_set_loses_no_increment(registry: Registry) -> None:
    def bump(old: bytes | None) -> bytes:
        return str(int(old or b"0") + 1).encode()

    def worker() -> None:
        for _ in range(25):
            compare_and_set(registry, "/state/ready/counter", bump)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert registry.get("/state/ready/counter") == b"100"
    # Returning None deletes the node.
    compare_and_set(registry, "/state/ready/counter", lambda old: None)
    assert registry.get("/state/ready/counter") is None


def test_fenced_write_needs_the_election_node_and_an_acting_term(
    registry: Registry, zk_client: KazooClient
) -> None:
    registry.ensure("/ha/election")
    node = zk_client.create(registry.abs("/ha/election/n_"), b"me", ephemeral=True, sequence=True)
    acting = threading.Event()
    acting.set()
    fenced = FencedWriter(registry, Fence(node, acting.is_set))
    fenced.put("/ha/framework_id", b"fw-1")
    fenced.compare_and_set("/state/ready/j", lambda old: b"1")
    assert registry.get("/ha/framework_id") == b"fw-1"

    acting.clear()  # SUSPENDED: refused before anything is sent
    with pytest.raises(NotLeader):
        fenced.put("/ha/framework_id", b"fw-2")
    acting.set()
    zk_client.delete(node)  # the term is over (session gone or node removed)
    for write in (
        lambda: fenced.put("/ha/framework_id", b"fw-3"),
        lambda: fenced.set("/ha/framework_id", b"fw-3"),
        lambda: fenced.create("/state/new", b"x"),
        lambda: fenced.delete("/ha/framework_id"),
        lambda: fenced.compare_and_set("/state/ready/j", lambda old: b"2"),
    ):
        with pytest.raises(NotLeader):
            write()
    assert registry.get("/ha/framework_id") == b"fw-1"
    assert registry.get("/state/ready/j") == b"1"
    assert registry.get("/state/new") is None


def test_fenced_errors_name_the_problem(registry: Registry, zk_client: KazooClient) -> None:
    registry.ensure("/ha/election")
    node = zk_client.create(registry.abs("/ha/election/n_"), b"me", ephemeral=True, sequence=True)
    fenced = FencedWriter(registry, Fence(node, lambda: True))
    with pytest.raises(NotFound):
        fenced.set("/missing", b"x")
    fenced.create("/here", b"x")
    with pytest.raises(Conflict):
        fenced.create("/here", b"y")
    fenced.create("/tree/a/b", b"1")
    assert fenced.delete("/tree") is True
    assert registry.exists("/tree") is False


def _change_after_listing(
    registry: Registry,
    monkeypatch: pytest.MonkeyPatch,
    top: str,
    change: Callable[[], object],
    every: bool = False,
) -> list[list[str]]:
    """Make `change` happen between a recursive delete's listing of `top` and its deletes, as
    a concurrent writer's would (once, or after `every` listing); returns each listing made."""
    listings: list[list[str]] = []
    real = registry.subtree

    def listing(path: str) -> Iterator[str]:
        if path != top:
            return real(path)  # the listing's own recursion
        paths = list(real(path))
        if every or not listings:
            change()
        listings.append(paths)
        return iter(paths)

    monkeypatch.setattr(registry, "subtree", listing)
    return listings


@pytest.mark.parametrize("fenced", [True, False], ids=["fenced", "unfenced"])
@pytest.mark.parametrize("change", ["child added", "child deleted"])
def test_a_recursive_delete_survives_its_subtree_changing_under_it(
    registry: Registry, fence: Fence, monkeypatch: pytest.MonkeyPatch, fenced: bool, change: str
) -> None:
    # A user disables a job while the status handler queues one of its shards for failover.
    registry.put("/state/failover/job/job@-@0", b"t0")
    registry.put("/state/failover/job/job@-@1", b"t1")
    job = "/state/failover/job"
    if change == "child added":
        listings = _change_after_listing(
            registry, monkeypatch, job, partial(registry.put, f"{job}/job@-@2", b"t2")
        )
    else:
        listings = _change_after_listing(
            registry, monkeypatch, job, partial(registry.delete, f"{job}/job@-@0")
        )
    writer = FencedWriter(registry, fence) if fenced else registry
    assert writer.delete("/state/failover/job") is True
    assert registry.exists("/state/failover/job") is False
    assert len(listings) == (2 if fenced or change == "child added" else 1)
    assert registry.exists("/state/failover") is True


def test_a_recursive_delete_of_a_subtree_that_never_settles_gives_up_naming_it(
    registry: Registry, fence: Fence, monkeypatch: pytest.MonkeyPatch
) -> None:
    busy = "/state/ready/busy"
    registry.put(f"{busy}/a", b"1")
    names = itertools.count()
    listings = _change_after_listing(
        registry, monkeypatch, busy, lambda: registry.put(f"{busy}/n{next(names)}", b"1"), True
    )
    with pytest.raises(Conflict, match="/state/ready/busy: its subtree kept changing"):
        FencedWriter(registry, fence).delete(busy)
    assert len(listings) == 20
    assert registry.exists(f"{busy}/a") is True  # all or nothing


def test_deposed_leader_cannot_write_after_its_session_expired(
    zk: ZooKeeperEnsemble, zk_namespace: str
) -> None:
    settings = load_settings(
        {},
        {},
        {"zk_servers": zk.hosts, "zk_namespace": zk_namespace, "zk_session_timeout_seconds": "4"},
    )
    client = make_client(settings)
    client.start(timeout=15)
    try:
        registry = Registry(client, zk_namespace)
        registry.ensure("/ha/election")
        node = client.create(registry.abs("/ha/election/n_"), b"a", ephemeral=True, sequence=True)
        fenced = FencedWriter(registry, Fence(node, lambda: True))
        fenced.put("/owner", b"a")
        session_id, password = client.client_id
        lost = threading.Event()
        client.add_listener(lambda state: lost.set() if state == "LOST" else None)
        # Really expire the session on the server: a second connection with the same session
        # credentials closes it.
        twin = KazooClient(hosts=zk.hosts, client_id=(session_id, password))
        twin.start(timeout=15)
        twin.stop()
        twin.close()
        assert lost.wait(20), "client never saw LOST"
        wait_for(
            lambda: client.connected and client.client_id[0] != session_id,
            20,
            message="new session",
        )
        # A plain write on the new session goes through...
        registry.put("/plain", b"new session")
        # ...but the old term's fence holds: its node died with the old session.
        with pytest.raises(NotLeader):
            fenced.put("/owner", b"stale")
        assert registry.get("/owner") == b"a"
    finally:
        client.stop()
        client.close()


def test_digest_acl_keeps_other_clients_out(zk: ZooKeeperEnsemble, zk_namespace: str) -> None:
    settings = load_settings({}, {}, {"zk_servers": zk.hosts, "zk_digest": "ejc:secret"})
    owner = make_client(settings)
    owner.start(timeout=15)
    stranger = KazooClient(hosts=zk.hosts)
    stranger.start(timeout=15)
    try:
        Registry(owner, zk_namespace).put("/config/app/a", b"{}")
        assert Registry(owner, zk_namespace).get("/config/app/a") == b"{}"
        with pytest.raises(RegistryError):
            Registry(stranger, zk_namespace).get("/config/app/a")
    finally:
        for c in (owner, stranger):
            c.stop()
            c.close()


def test_a_fenced_transaction_lands_under_the_chroot_with_the_clients_acl(
    zk: ZooKeeperEnsemble, zk_namespace: str
) -> None:
    """Transactions build kazoo's requests themselves (issue 29): the client's chroot goes in
    front of every path, the fence's included, and created nodes get its default ACL."""
    chroot = f"/chroot-{zk_namespace}"
    settings = load_settings({}, {}, {"zk_servers": zk.hosts + chroot, "zk_digest": "ejc:secret"})
    stranger = KazooClient(hosts=zk.hosts)
    stranger.start(timeout=15)
    stranger.ensure_path(chroot)  # kazoo wants the chroot made first
    owner = make_client(settings)
    owner.start(timeout=15)
    try:
        registry = Registry(owner, zk_namespace)
        registry.ensure("/ha")
        node = owner.create(registry.abs("/ha/n_"), b"me", ephemeral=True, sequence=True)
        FencedWriter(registry, Fence(node, lambda: True)).commit(
            "two nodes", [Op.create("/state"), Op.create("/state/a", b"x")]
        )
        assert registry.get("/state/a") == b"x"
        path = f"{chroot}/{zk_namespace}/state/a"
        assert stranger.exists(path) is not None  # under the chroot, not at the root
        assert stranger.exists(f"/{zk_namespace}/state/a") is None
        with pytest.raises(NoAuthError):
            stranger.get(path)  # the owner's digest ACL
    finally:
        for c in (owner, stranger):
            c.stop()
            c.close()


def test_every_call_gives_up_at_its_deadline_while_zookeeper_does_not_answer(
    zk: ZooKeeperEnsemble, zk_namespace: str
) -> None:
    # Before writes had a deadline, each of these blocked for as long as the partition lasted.
    with proxied_client(zk, 10) as (proxy, client):
        registry = Registry(client, zk_namespace, timeout_s=1.0)
        registry.create("/w/a", b"1")
        assert registry.get_many(["/w/a", "/w/missing"]) == {"/w/a": (b"1", 0), "/w/missing": None}
        proxy.cut()
        wait_for(lambda: client.state != KazooState.CONNECTED, 10, message="connection lost")
        calls: dict[str, Callable[[], object]] = {
            "create": lambda: registry.create("/w/b", b"1"),
            "put": lambda: registry.put("/w/a", b"2"),
            "delete": lambda: registry.delete("/w/a", recursive=False),
            "ensure": lambda: registry.ensure("/w/c"),
            "get": lambda: registry.get("/w/a"),
            "get_many": lambda: registry.get_many(["/w/a"], timeout_s=1.0),
            "watch_children": lambda: registry.watch_children("/w", lambda _e: None),
        }
        for name, call in calls.items():
            began = time.monotonic()
            with pytest.raises(RegistryError, match=r"did not answer|ConnectionLoss"):
                call()
            assert time.monotonic() - began < 5, name


# -- multiRead: many reads in one request (ZooKeeper 3.6+) ----------------------------------


def _nodes_of_every_shape(registry: Registry) -> list[str]:
    """250 paths (three multiRead batches): data, empty data, non-ASCII names, missing nodes."""
    paths = []
    for i in range(250):
        path = f"/many/n{i:03d}" + ("é€" if i % 7 == 0 else "")
        paths.append(path)
        if i % 5 == 4:
            continue  # missing
        registry.put(path, b"" if i % 11 == 0 else f"data of {i}".encode())
        if i % 3 == 0:
            registry.put(path, f"data of {i}, version 1".encode())
    return paths


def test_multi_read_answers_what_pipelined_reads_answer(
    registry: Registry, zk_client: KazooClient, zk_namespace: str
) -> None:
    paths = _nodes_of_every_shape(registry)
    pipelined = registry.get_many(paths)
    assert registry.multi_read is None  # never asked: pipelined
    fast = Registry(zk_client, zk_namespace)
    assert fast.probe_multi_read() is True  # the tests' ZooKeeper is 3.8
    requests = []
    real_call = zk_client._call

    def counting(request: object, answer: object) -> object:
        requests.append(type(request).__name__)
        return real_call(request, answer)

    zk_client._call = counting  # counts what is sent, sends it
    try:
        got = fast.get_many(paths)
    finally:
        del zk_client._call
    assert requests == ["MultiRead"] * 3
    assert got == pipelined
    assert list(got) == paths
    assert got["/many/n004"] is None
    assert got["/many/n077é€"] == (b"", 0)
    assert got["/many/n001"] == (b"data of 1", 0)
    assert got["/many/n003"] == (b"data of 3, version 1", 1)
    assert fast.get_many([]) == {}


def test_multi_read_of_a_node_it_may_not_read_fails_naming_it(
    zk: ZooKeeperEnsemble, zk_namespace: str
) -> None:
    owner = make_client(load_settings({}, {}, {"zk_servers": zk.hosts, "zk_digest": "o:pw"}))
    owner.start(timeout=15)
    stranger = KazooClient(hosts=zk.hosts)
    stranger.start(timeout=15)
    try:
        Registry(owner, zk_namespace).put("/config/app/a", b"{}")
        Registry(owner, zk_namespace).put("/config/app/b", b"{}")
        registry = Registry(stranger, zk_namespace)
        assert registry.probe_multi_read() is True
        with pytest.raises(RegistryError, match="get /config/app/a: NoAuthError"):
            registry.get_many(["/config/app/missing", "/config/app/a", "/config/app/b"])
    finally:
        for client in (owner, stranger):
            client.stop()
            client.close()


def test_a_malformed_multi_read_answer_is_a_registry_error_and_the_session_goes_on(
    registry: Registry,
    zk_client: KazooClient,
    zk_namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ZooKeeper's real answer, cut short before kazoo's thread decodes it (issue 23)."""
    registry.put("/cut/a", b"some data")
    fast = Registry(zk_client, zk_namespace)
    assert fast.probe_multi_read() is True
    real = MultiRead.deserialize

    def cut_short(self: MultiRead, buffer: bytes, offset: int) -> object:
        return real(self, buffer[: len(buffer) - 20], offset)

    monkeypatch.setattr(MultiRead, "deserialize", cut_short)
    with pytest.raises(RegistryError, match="multiRead of 2 paths: malformed answer"):
        fast.get_many(["/cut/a", "/cut/b"])
    monkeypatch.undo()
    assert fast.get_many(["/cut/a", "/cut/b"]) == {"/cut/a": (b"some data", 0), "/cut/b": None}


def test_a_server_without_multi_read_costs_one_reconnect_in_the_same_session(
    zk_client: KazooClient,
    zk_namespace: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A server before 3.6 answers an opcode it does not know as unimplemented and drops the
    connection; this server does the same for an opcode no version has, so the probe is sent
    with one."""
    registry = Registry(zk_client, zk_namespace)
    registry.put("/old/a", b"x")
    session = zk_client.client_id
    monkeypatch.setattr(MultiRead, "type", 999)
    assert registry.probe_multi_read() is False
    assert "does not answer multiRead" in caplog.text
    assert zk_client.client_id == session  # the same session after the reconnect
    assert zk_client.state == KazooState.CONNECTED
    assert registry.get_many(["/old/a", "/old/b"]) == {"/old/a": (b"x", 0), "/old/b": None}

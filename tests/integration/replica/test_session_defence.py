"""In-process replicas on a real ZooKeeper: a dead kazoo client, /health reasons, digest ACLs."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import make_digest_acl

from deploy.zookeeper import ZooKeeperEnsemble, free_port
from scheduler.leader.lifecycle import LeaderComponent
from scheduler.model.errors import InvalidRequest
from scheduler.model.settings import load_settings
from scheduler.replica.replica import Replica
from scheduler.replica.term import BuiltTerm, LeaderContext
from scheduler.storage.acl import digest_acl
from scheduler.storage.registry import Registry
from scheduler.wiring.replica import build_replica
from tests.support.replicas import http_get
from tests.support.tcpproxy import TcpProxy
from tests.support.waiting import wait_for

SESSION_TIMEOUT_S = 3.0
DIGEST = "ejc:s3cret"
# The kazoo thread these tests kill dies with an exception on purpose.
kills_kazoo_thread = pytest.mark.filterwarnings(
    "ignore::pytest.PytestUnhandledThreadExceptionWarning"
)


class Journal(LeaderComponent):
    """Records (monotonic time, replica, event) for every start and stop.

    `stop` sets `stopping`, then waits for `release` (set unless a test clears it).
    """

    name = "journal"

    def __init__(self, who: str, events: list[tuple[float, str, str]]) -> None:
        self._who = who
        self._events = events
        self.stopping = threading.Event()
        self.release = threading.Event()
        self.release.set()

    def start(self) -> None:
        self._events.append((time.monotonic(), self._who, "start"))

    def stop(self) -> None:
        self.stopping.set()
        self.release.wait(30)
        self._events.append((time.monotonic(), self._who, "stop"))


@pytest.fixture
def make_replica(zk: ZooKeeperEnsemble, zk_namespace: str) -> Iterator[Any]:
    replicas: list[Replica] = []

    def make(component: LeaderComponent, zk_servers: str | None = None, **extra: str) -> Replica:
        settings = load_settings(
            {},
            {},
            {
                "zk_servers": zk_servers or zk.hosts,
                "zk_namespace": zk_namespace,
                "hostname": "127.0.0.1",
                "http_bind_address": "127.0.0.1",
                "http_port": str(free_port()),
                "zk_session_timeout_seconds": str(SESSION_TIMEOUT_S),
                "leader_retry_backoff_seconds": "0.2",
                **extra,
            },
        )

        def factory(_ctx: LeaderContext) -> BuiltTerm:
            return BuiltTerm([component])

        replica = build_replica(settings, factory)
        replicas.append(replica)
        replica.start()
        return replica

    yield make
    for r in replicas:
        r.stop(timeout_s=10)


def kill_connection_thread(replica: Replica) -> None:
    """Make kazoo's connection thread die as a lone surrogate in a path once made it die.

    The request goes to kazoo directly (the registry refuses such paths now): kazoo serialises it
    in its connection thread, whose UnicodeEncodeError ends that thread and closes the client.
    """
    client = replica.registry.client
    client.get_async("/\ud800")
    wait_for(lambda: client.client_state == "CLOSED", 5, message="kazoo's thread to die")


def health_http(replica: Replica) -> tuple[int, dict[str, Any]]:
    status, _headers, body = http_get(f"http://{replica.settings.identity}/health")
    return status, json.loads(body)


def wait_http_health(replica: Replica, status: int, timeout_s: float) -> dict[str, Any]:
    """The /health body once it answers `status`."""

    def answered() -> dict[str, Any] | None:
        got, body = health_http(replica)
        return body if got == status else None

    return wait_for(answered, timeout_s, message=f"/health {status}")


@kills_kazoo_thread
def test_dead_connection_thread_ends_the_term_and_a_new_client_leads_again(
    make_replica: Any,
) -> None:
    events: list[tuple[float, str, str]] = []
    journal = Journal("a", events)
    replica = make_replica(journal)
    wait_for(replica.is_acting_leader, 10, message="leadership")
    assert wait_http_health(replica, 200, 1)["reason"] is None
    term_before = replica.health()["term"]["number"]

    journal.release.clear()  # hold the term's end while /health is looked at
    killed_at = time.monotonic()
    kill_connection_thread(replica)
    # The term ends at once: its components stop; /health says why it cannot act.
    assert journal.stopping.wait(2), "the term ends"
    assert not replica.is_acting_leader()
    status, body = health_http(replica)
    journal.release.set()
    assert status == 503
    assert "ZooKeeper" in body["reason"]
    # A new client within the watchdog's bound; a new term once the old session expired.
    wait_for(lambda: replica.counters["zk_clients"] == 2, 2, message="a new client")
    wait_for(replica.is_acting_leader, SESSION_TIMEOUT_S + 5, message="leads again")
    recovered_s = time.monotonic() - killed_at
    assert replica.health()["term"]["number"] > term_before
    assert [e[2] for e in events] == ["start", "stop", "start"]
    assert replica.health()["reason"] is None
    assert health_http(replica)[0] == 200
    assert not replica.failed.is_set()
    print(f"dead client to new term: {recovered_s:.2f}s")


@kills_kazoo_thread
def test_the_standby_leads_only_after_the_dead_clients_term_has_ended(
    make_replica: Any,
) -> None:
    events: list[tuple[float, str, str]] = []
    a = make_replica(Journal("a", events))
    wait_for(a.is_acting_leader, 10, message="a leads")
    b = make_replica(Journal("b", events))
    wait_for(lambda: b.health()["leader"] == a.settings.identity, 10, message="b sees a")

    kill_connection_thread(a)
    wait_for(b.is_acting_leader, SESSION_TIMEOUT_S + 5, message="b takes over")
    a_stopped = next(t for t, who, what in events if (who, what) == ("a", "stop"))
    b_started = next(t for t, who, what in events if (who, what) == ("b", "start"))
    assert a_stopped < b_started, events
    # a has a new client and follows b as a standby; one leader.
    wait_for(lambda: a.health()["leader"] == b.settings.identity, 10, message="a follows b")
    assert a.health()["reason"] is None
    assert not a.is_acting_leader()
    assert a.counters["zk_clients"] == 2


@kills_kazoo_thread
def test_replica_fails_when_its_term_cannot_end_within_a_session_timeout(
    make_replica: Any,
) -> None:
    events: list[tuple[float, str, str]] = []
    stuck = Journal("a", events)
    replica = make_replica(stuck)
    wait_for(replica.is_acting_leader, 10, message="leadership")
    stuck.release.clear()  # its stop() now blocks: no new client can be built meanwhile

    kill_connection_thread(replica)
    wait_for(replica.failed.is_set, SESSION_TIMEOUT_S + 2, message="the replica fails")
    assert "within" in (replica.failure or "")
    status, body = health_http(replica)
    assert status == 503
    assert "failed" in body["reason"]
    stuck.release.set()
    wait_for(lambda: [e for e in events if e[2] == "stop"], 5, message="the term ends")
    # A failed replica does not contend again: its process exits for the supervisor.
    time_limit = time.monotonic() + 1.0
    while time.monotonic() < time_limit:
        assert not replica.is_acting_leader()
        replica.failed.wait(0.1)
    assert replica.counters["zk_clients"] == 1


def test_health_is_503_with_a_reason_while_zookeeper_is_unreachable_and_200_after(
    zk_proxy: TcpProxy, make_replica: Any
) -> None:
    replica = make_replica(
        Journal("a", []), zk_servers=zk_proxy.address, zk_session_timeout_seconds="8"
    )
    wait_for(replica.is_acting_leader, 10, message="leadership")
    assert health_http(replica)[0] == 200
    zk_proxy.cut()
    body = wait_http_health(replica, 503, 6)
    assert "unreachable" in body["reason"]
    assert body["zookeeper"] == "SUSPENDED"
    zk_proxy.restore()
    wait_http_health(replica, 200, 10)
    assert replica.health()["reason"] is None


def test_registry_refuses_an_unencodable_path_and_the_session_lives_on(
    zk_client: KazooClient, zk_namespace: str
) -> None:
    registry = Registry(zk_client, zk_namespace)
    with pytest.raises(InvalidRequest) as caught:
        registry.get("/config/app/\ud800")
    assert "path" in caught.value.fields
    with pytest.raises(InvalidRequest):
        registry.put("/config/job/x\udfff", b"{}")
    assert zk_client.connected
    registry.put("/config/job/ok", b"{}")
    assert registry.get("/config/job/ok") == b"{}"


@pytest.fixture
def digest_client(zk: ZooKeeperEnsemble) -> Iterator[KazooClient]:
    """A client authenticated with DIGEST (as the replicas are)."""
    client = KazooClient(hosts=zk.hosts, timeout=4, auth_data=[("digest", DIGEST)])
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


def test_leader_puts_creator_all_acl_on_nodes_created_before_digest_auth(
    make_replica: Any,
    digest_client: KazooClient,
    zk_client: KazooClient,
    zk_namespace: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    root = f"/{zk_namespace}"
    world = [f"{root}/config/job/job{i}" for i in range(40)] + [f"{root}/state/ready/job0"]
    for path in world:
        zk_client.create(path, b"{}", makepath=True)
    foreign_acl = [make_digest_acl("someone", "else", all=True)]
    zk_client.create(f"{root}/foreign", b"x", acl=foreign_acl)

    caplog.set_level(logging.INFO, logger="scheduler.replica.replica")
    caplog.set_level(logging.INFO, logger="scheduler.storage.acl")
    replica = make_replica(Journal("a", []), zk_digest=DIGEST)
    wait_for(replica.is_acting_leader, 10, message="leadership")

    wanted = digest_acl(DIGEST)
    for path in [root, f"{root}/config", f"{root}/config/job", *world]:
        acls, _ = digest_client.get_acls(path)
        assert list(acls) == wanted, path
    # Without the digest nobody can read the ACLs, nor the data,
    with pytest.raises(NoAuthError):
        zk_client.get_acls(world[0])
    with pytest.raises(NoAuthError):
        zk_client.get(world[0])
    # nor rewrite a job, nor add one.
    with pytest.raises(NoAuthError):
        zk_client.set(world[0], b'{"jobName": "evil"}')
    with pytest.raises(NoAuthError):
        zk_client.create(f"{root}/config/job/new", b"{}")
    changed = acl_messages(caplog)
    assert changed, "the ACL change is logged"
    # root, config, config/job, state, state/ready and the 41 nodes; foreign is not ours to fix.
    assert changed[0].split("set on ")[1].startswith(f"{len(world) + 5} of ")
    refused = [r.getMessage() for r in caplog.records if "keep their ACL" in r.getMessage()]
    assert refused and f"{root}/foreign" in refused[0]

    # The foreign node kept the namespace from counting as secured: the next term walks again.
    assert not digest_client.exists(f"{root}/ha/acl_secured")
    digest_client.delete(f"{root}/foreign")
    replica.stop(timeout_s=10)
    caplog.clear()
    second = make_replica(Journal("b", []), zk_digest=DIGEST)
    wait_for(second.is_acting_leader, 10, message="second leader")
    assert acl_messages(caplog)[0].split("set on ")[1].startswith("0 of ")
    assert not [r for r in caplog.records if "keep their ACL" in r.getMessage()]
    # That walk secured every node and left a marker: later terms skip the walk.
    assert list(digest_client.get_acls(f"{root}/ha/acl_secured")[0]) == wanted
    second.stop(timeout_s=10)
    caplog.clear()
    third = make_replica(Journal("c", []), zk_digest=DIGEST)
    wait_for(third.is_acting_leader, 10, message="third leader")
    assert "already on every node" in acl_messages(caplog)[0]


def acl_messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "CREATOR_ALL ACL" in r.getMessage()]


def test_replica_without_zk_digest_warns_that_zookeeper_is_open(
    make_replica: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="scheduler.replica.replica")
    make_replica(Journal("a", []))
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "zk_digest is not set" in r.getMessage()
    ]
    assert len(warnings) == 1
    assert "run code on the agents" in warnings[0]


def test_replica_with_zk_digest_does_not_warn(
    make_replica: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="scheduler.replica.replica")
    make_replica(Journal("a", []), zk_digest=DIGEST)
    assert not [r for r in caplog.records if "zk_digest is not set" in r.getMessage()]

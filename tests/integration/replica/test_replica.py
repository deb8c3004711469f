"""In-process replicas on a real ZooKeeper: term lifecycle, component order and failures."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient

from deploy.zookeeper import ZooKeeperEnsemble, free_port
from scheduler.leader.lifecycle import LeaderComponent
from scheduler.model.errors import NotLeader
from scheduler.model.settings import load_settings
from scheduler.replica.replica import Replica
from scheduler.replica.term import BuiltTerm, LeaderContext
from scheduler.storage.transactions import FencedWriter
from scheduler.wiring.replica import build_replica
from tests.support.bodies import job_body
from tests.support.tcpproxy import TcpProxy
from tests.support.waiting import wait_for


class Recorder(LeaderComponent):
    """Records lifecycle calls in a shared journal; can be told to fail its start."""

    def __init__(self, name: str, journal: list[str], fail: threading.Event | None = None) -> None:
        self.name = name
        self._journal = journal
        self._fail = fail

    def start(self) -> None:
        if self._fail is not None and self._fail.is_set():
            self._journal.append(f"fail {self.name}")
            raise RuntimeError(f"{self.name} cannot start")
        self._journal.append(f"start {self.name}")

    def stop(self) -> None:
        self._journal.append(f"stop {self.name}")

    def pause(self) -> None:
        self._journal.append(f"pause {self.name}")

    def resume(self) -> None:
        self._journal.append(f"resume {self.name}")


@pytest.fixture
def make_replica(zk: ZooKeeperEnsemble, zk_namespace: str) -> Iterator[Any]:
    replicas: list[Replica] = []

    def make(factory: Any, zk_servers: str | None = None, **extra: str) -> Replica:
        port = free_port()
        settings = load_settings(
            {},
            {},
            {
                "zk_servers": zk_servers or zk.hosts,
                "zk_namespace": zk_namespace,
                "hostname": "127.0.0.1",
                "http_bind_address": "127.0.0.1",
                "http_port": str(port),
                "zk_session_timeout_seconds": "3",
                "leader_retry_backoff_seconds": "0.2",
                **extra,
            },
        )
        replica = build_replica(settings, lambda ctx: BuiltTerm(factory(ctx)))
        replica.start()
        replicas.append(replica)
        return replica

    yield make
    for r in replicas:
        r.stop(timeout_s=10)


def test_components_start_in_order_and_stop_in_reverse(make_replica: Any) -> None:
    journal: list[str] = []
    names = ["state", "producer", "launcher", "api"]
    replica = make_replica(lambda ctx: [Recorder(n, journal) for n in names])
    wait_for(replica.is_acting_leader, 10, message="leadership")
    assert journal == [f"start {n}" for n in names]
    replica.stop(timeout_s=10)
    assert journal[4:] == [f"stop {n}" for n in reversed(names)]


def test_failed_component_stops_the_started_ones_and_the_term_is_given_up(
    make_replica: Any,
) -> None:
    journal: list[str] = []
    fail = threading.Event()
    fail.set()

    def factory(ctx: LeaderContext) -> list[LeaderComponent]:
        return [Recorder("a", journal), Recorder("b", journal), Recorder("c", journal, fail)]

    replica = make_replica(factory)
    wait_for(lambda: replica.counters["term_failures"] >= 2, 10, message="two failed terms")
    assert not replica.is_acting_leader()
    # Each failed term: a, b started; c failed (and is stopped too); then b, a stopped.
    first = journal[:6]
    assert first == ["start a", "start b", "fail c", "stop c", "stop b", "stop a"]
    fail.clear()  # the fault is repaired: the next term (after the back-off) succeeds
    wait_for(replica.is_acting_leader, 10, message="leadership after repair")
    assert replica.health()["role"] == "leader"


def test_standby_takes_over_when_leader_stops(make_replica: Any) -> None:
    journal_a: list[str] = []
    journal_b: list[str] = []
    a = make_replica(lambda ctx: [Recorder("x", journal_a)])
    wait_for(a.is_acting_leader, 10, message="a leads")
    b = make_replica(lambda ctx: [Recorder("x", journal_b)])
    wait_for(lambda: b.health()["leader"] == a.settings.identity, 10, message="b sees a")
    assert not b.is_acting_leader()
    a.stop(timeout_s=10)
    wait_for(b.is_acting_leader, 5, message="b leads")
    assert journal_a == ["start x", "stop x"]
    assert journal_b == ["start x"]


def test_a_standby_parses_the_jobs_ahead_and_its_term_is_given_them(
    make_replica: Any, zk_namespace: str, zk_client: KazooClient
) -> None:
    for i in range(30):
        body = json.dumps(job_body(f"j{i:02d}")).encode()
        zk_client.create(f"/{zk_namespace}/config/job/j{i:02d}", body, makepath=True)
    given: list[Any] = []

    def factory(ctx: LeaderContext) -> list[LeaderComponent]:
        given.append(ctx.parsed_ahead)
        return [Recorder("x", [])]

    a = make_replica(factory)
    wait_for(a.is_acting_leader, 10, message="a leads")
    b = make_replica(factory)
    off = make_replica(factory, standby_parse_ahead_minutes="0")
    # The first pass comes once b has been a standby for a few seconds.
    wait_for(lambda: len(b.parsed_ahead) == 30, 30, message="b's jobs parsed ahead")
    assert len(a.parsed_ahead) == 0  # it won at its start: never a standby
    assert len(off.parsed_ahead) == 0
    off.stop(timeout_s=10)
    a.stop(timeout_s=10)
    wait_for(b.is_acting_leader, 10, message="b leads")
    assert given == [a.parsed_ahead, b.parsed_ahead]


def test_suspended_leader_stops_acting_at_once_and_steps_down_after_session_timeout(
    zk_proxy: TcpProxy, make_replica: Any
) -> None:
    journal: list[str] = []
    replica = make_replica(lambda ctx: [Recorder("launcher", journal)], zk_servers=zk_proxy.address)
    wait_for(replica.is_acting_leader, 10, message="leadership")
    term = replica._term
    assert term is not None
    fenced = FencedWriter(replica.registry, term.fence)
    fenced.put("/probe", b"1")
    zk_proxy.cut()
    wait_for(lambda: "pause launcher" in journal, 5, message="pause on SUSPENDED")
    assert not replica.is_acting_leader()
    with pytest.raises(NotLeader):
        fenced.put("/probe", b"2")
    # SUSPENDED longer than the session timeout: the term ends, components stop.
    wait_for(lambda: "stop launcher" in journal, 10, message="step down after timeout")
    assert replica.last_term is not None
    assert "suspended" in replica.last_term["endReason"]
    zk_proxy.restore()
    # Back in the election with a new session; being the only replica it leads again.
    wait_for(replica.is_acting_leader, 20, message="leads again after reconnect")
    assert journal.count("start launcher") == 2


def test_short_blip_pauses_and_resumes_the_same_term(zk_proxy: TcpProxy, make_replica: Any) -> None:
    journal: list[str] = []
    replica = make_replica(
        lambda ctx: [Recorder("launcher", journal)],
        zk_servers=zk_proxy.address,
        zk_session_timeout_seconds="8",
    )
    wait_for(replica.is_acting_leader, 10, message="leadership")
    term_before = replica._term
    zk_proxy.cut()
    wait_for(lambda: "pause launcher" in journal, 5, message="pause")
    zk_proxy.restore()
    wait_for(lambda: "resume launcher" in journal, 10, message="resume")
    assert replica._term is term_before
    assert replica.is_acting_leader()
    assert "stop launcher" not in journal

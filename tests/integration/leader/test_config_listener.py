"""The config listener's term start against a real ZooKeeper: every job read without watches and
scheduled, then the watches placed by the listener's thread; a job changed or deleted between
the two reads is acted on, and every job's watch is in place afterwards."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from deploy.zookeeper import ZooKeeperEnsemble
from scheduler.leader.config_listener import ConfigListener
from scheduler.model.config.job import JobConfig
from scheduler.storage.parsed_jobs import ParsedJobs
from scheduler.storage.registry import Registry
from scheduler.storage.term_stores import TermStores
from scheduler.storage.transactions import Fence
from tests.support.bodies import job_body
from tests.support.tcpproxy import TcpProxy
from tests.support.waiting import wait_for

JOBS = 150


def _job(name: str, cron: str = "0 0 3 * * ?") -> bytes:
    return json.dumps(job_body(name, cron=cron)).encode()


def _registry_with_jobs(client: KazooClient, namespace: str, multi_read: bool) -> Registry:
    """A registry (answering multiRead, or not asked) over JOBS daily jobs j000, j001, ..."""
    registry = Registry(client, namespace)
    if multi_read:
        assert registry.probe_multi_read() is True
    for i in range(JOBS):
        registry.put(f"/config/job/j{i:03d}", _job(f"j{i:03d}"))
    return registry


class _Producer:
    """The listener's run producer, recording what it is asked (the `RunProducer` protocol)."""

    def __init__(self) -> None:
        self.scheduled: set[str] = set()
        self.calls: list[tuple[str, str, str, bool]] = []
        self.prefetched: list[str] = []
        self.jobs: dict[str, JobConfig] = {}  # the last scheduled of each name
        self.on_schedule: Callable[[JobConfig], None] | None = None
        self._lock = threading.Lock()

    def prefetch_last_fires(self, names: list[str]) -> None:
        self.prefetched = list(names)

    def schedule(self, job: JobConfig, *, catch_up: bool = False) -> None:
        with self._lock:
            self.calls.append(("schedule", job.job_name, job.cron, catch_up))
            self.scheduled.add(job.job_name)
            self.jobs[job.job_name] = job
        if self.on_schedule is not None:
            self.on_schedule(job)

    def unschedule(self, job_name: str) -> bool:
        with self._lock:
            self.calls.append(("unschedule", job_name, "", False))
            was = job_name in self.scheduled
            self.scheduled.discard(job_name)
        return was

    def seen(self, call: tuple[str, str, str, bool]) -> bool:
        with self._lock:
            return call in self.calls

    def count(self, name: str) -> int:
        with self._lock:
            return sum(1 for c in self.calls if c[1] == name)


@pytest.mark.parametrize("multi_read", [True, False], ids=["multiRead", "pipelined"])
def test_a_term_start_loads_every_job_then_watches_each_and_misses_no_change_between(
    zk_client: KazooClient, zk_namespace: str, fence: Fence, multi_read: bool
) -> None:
    registry = _registry_with_jobs(zk_client, zk_namespace, multi_read)
    stores = TermStores.build(registry, fence, "UTC", 10_000)
    producer = _Producer()
    killed: list[str] = []

    def between_the_reads(job: JobConfig) -> None:
        # Called while the jobs read at start are applied, before any watch is placed.
        if job.job_name == "j000":
            producer.on_schedule = None
            registry.put("/config/job/j001", _job("j001", "0 0 4 * * ?"))
            registry.delete("/config/job/j002")

    producer.on_schedule = between_the_reads
    listener = ConfigListener(stores, producer, killed.append)
    listener.start()
    try:
        names = [f"j{i:03d}" for i in range(JOBS)]
        assert producer.prefetched == names
        loaded = producer.calls[:JOBS]
        assert loaded == [("schedule", n, "0 0 3 * * ?", True) for n in names]
        # The watch pass: the change and the deletion made between the two reads are acted on.
        wait_for(
            lambda: (
                producer.seen(("schedule", "j001", "0 0 4 * * ?", False))
                and producer.seen(("unschedule", "j002", "", False))
            ),
            30,
            message="the change and the deletion between the reads",
        )
        assert killed == ["j002"]
        # Through the watch the pass left on j001: handled after the pass has ended.
        registry.put("/config/job/j001", _job("j001", "0 0 5 * * ?"))
        wait_for(
            lambda: producer.seen(("schedule", "j001", "0 0 5 * * ?", False)),
            30,
            message="j001's change through its watch",
        )
        # Every other job has its watch too (the last one read, for one).
        registry.put(f"/config/job/j{JOBS - 1:03d}", _job(f"j{JOBS - 1:03d}", "0 0 6 * * ?"))
        wait_for(
            lambda: producer.seen(("schedule", f"j{JOBS - 1:03d}", "0 0 6 * * ?", False)),
            30,
            message="the last job's change through its watch",
        )
        # The pass re-read the unchanged jobs without scheduling them again.
        assert [n for n in names[3:-1] if producer.count(n) != 1] == []
    finally:
        listener.stop()


@pytest.mark.parametrize("multi_read", [True, False], ids=["recursive-watch", "exists-watches"])
def test_a_dropped_connection_costs_one_resync_after_the_session_is_back_and_no_read_before(
    zk: ZooKeeperEnsemble,
    zk_namespace: str,
    zk_client: KazooClient,
    caplog: pytest.LogCaptureFixture,
    multi_read: bool,
) -> None:
    # kazoo calls every watch with a NONE event when its connection drops (watches cleared).
    # Read one by one while the connection is dead, each waited out its deadline: the term's
    # stop waited on the listener's thread past its join timeout (a CI failure), and 100,000
    # jobs would have been 100,000 such reads.
    host, port = zk.servers[0].address.split(":")
    proxy = TcpProxy(host, int(port))
    client = KazooClient(hosts=proxy.address, timeout=20)
    client.start(timeout=15)
    listener: ConfigListener | None = None
    try:
        registry = Registry(client, zk_namespace, timeout_s=2.0)
        if multi_read:
            assert registry.probe_multi_read() is True
        writer = Registry(zk_client, zk_namespace)
        for i in range(40):
            writer.put(f"/config/job/d{i:02d}", _job(f"d{i:02d}"))
        writer.ensure("/ha/election")
        node = client.create(registry.abs("/ha/election/n_"), b"me", ephemeral=True, sequence=True)
        stores = TermStores.build(registry, Fence(node, lambda: True), "UTC", 10_000)
        producer = _Producer()
        listener = ConfigListener(stores, producer, lambda _name: None)
        caplog.set_level(logging.INFO, logger="scheduler")
        listener.start()
        if multi_read:
            assert len(client._data_watchers) == 0  # one watch on the folder, none per job
        else:
            wait_for(  # the start's watch pass has placed each job's watch
                lambda: len(client._data_watchers) >= 40,  # kazoo's own watch table
                20,
                message="job watches placed",
            )
        proxy.cut()
        wait_for(lambda: client.state == KazooState.SUSPENDED, 20, message="suspended")
        listener.pause()  # as the replica does on SUSPENDED
        # Changed while this client cannot hear of it (its watches are gone).
        writer.put("/config/job/d07", _job("d07", "0 0 4 * * ?"))
        writer.delete("/config/job/d08")
        proxy.restore()
        wait_for(lambda: client.state == KazooState.CONNECTED, 20, message="same session back")
        assert not producer.seen(("schedule", "d07", "0 0 4 * * ?", False))
        listener.resume()
        wait_for(
            lambda: (
                producer.seen(("schedule", "d07", "0 0 4 * * ?", False))
                and producer.seen(("unschedule", "d08", "", False))
            ),
            20,
            message="the changes made while disconnected",
        )
        # One resync for the 40 job watches and three list watches dropped together.
        resyncs = [r for r in caplog.records if "reading every job again" in r.getMessage()]
        assert len(resyncs) == 1
        # Every job's watch is back: a change after the resync arrives through it.
        writer.put("/config/job/d39", _job("d39", "0 0 6 * * ?"))
        wait_for(
            lambda: producer.seen(("schedule", "d39", "0 0 6 * * ?", False)),
            20,
            message="a change through a watch placed again",
        )
        # Paused again with a resync queued: the stop ends the thread (it never blocked on a read).
        proxy.cut()
        wait_for(lambda: client.state == KazooState.SUSPENDED, 20, message="suspended again")
        listener.pause()
        listener.stop()
        listener = None
        assert not [r for r in caplog.records if "did not stop within" in r.getMessage()]
    finally:
        if listener is not None:
            listener.stop()
        proxy.close()
        client.stop()
        client.close()


@pytest.mark.parametrize("multi_read", [True, False], ids=["multiRead", "pipelined"])
def test_a_term_takes_the_jobs_a_standby_parsed_only_where_the_stored_job_is_the_same(
    zk_client: KazooClient,
    zk_namespace: str,
    fence: Fence,
    caplog: pytest.LogCaptureFixture,
    multi_read: bool,
) -> None:
    registry = _registry_with_jobs(zk_client, zk_namespace, multi_read)
    registry.put("/config/job/broken", b'{"jobName": "broken"}')
    ahead = ParsedJobs()
    assert ahead.warm(registry, "UTC", lambda: False) == (JOBS, JOBS)  # the broken one left out
    before = ahead.parsed("j000", _job("j000"), "UTC")
    assert before is not None and before.cron == "0 0 3 * * ?"
    assert ahead.parsed("j000", _job("j000"), "Asia/Shanghai") is None  # another zone default
    # A second pass parses only what changed since; one stopped midway keeps nothing of its own.
    registry.put("/config/job/j005", _job("j005", "0 0 5 * * ?"))
    assert ahead.warm(registry, "UTC", lambda: False) == (JOBS, 1)
    assert ahead.parsed("j000", _job("j000"), "UTC") is before
    assert ahead.warm(registry, "UTC", lambda: True) is None
    assert len(ahead) == JOBS
    # Changed, deleted and added after the standby's last pass.
    registry.put("/config/job/j001", _job("j001", "0 0 4 * * ?"))
    registry.delete("/config/job/j002")
    registry.put("/config/job/new", _job("new", "0 0 6 * * ?"))

    stores = TermStores.build(registry, fence, "UTC", 10_000)
    producer = _Producer()
    listener = ConfigListener(stores, producer, lambda name: None, ahead)
    with caplog.at_level(logging.INFO, logger="scheduler.leader.config_listener"):
        listener.start()
    try:
        crons = {name: cron for _kind, name, cron, _ in producer.calls}
        assert crons["j001"] == "0 0 4 * * ?" and crons["j005"] == "0 0 5 * * ?"
        assert crons["new"] == "0 0 6 * * ?" and "j002" not in crons and "broken" not in crons
        assert len(crons) == JOBS  # 150 - j002 + new
        assert producer.jobs["j000"] is before  # taken, not parsed again
        (line,) = [r.getMessage() for r in caplog.records if "jobs loaded" in r.getMessage()]
        # Every job but the one changed and the one added (the broken one is read, not kept).
        assert f"({JOBS - 2} parsed ahead by the standby)" in line, line
        assert len(ahead) == 0  # emptied once the term had started
    finally:
        listener.stop()

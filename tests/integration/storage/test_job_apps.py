"""`JobApps`, each job's app kept by data watches, on a real ZooKeeper: read once, read again
after any change (this process's writes at once, another client's once its watch fires), and
never kept from a read that a change overtook."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from kazoo.client import KazooClient

from deploy.zookeeper import ZooKeeperEnsemble
from scheduler.model.config.job import JobConfig
from scheduler.storage.config_store import ConfigStore
from scheduler.storage.job_apps import JobApps
from scheduler.storage.layout import job_path
from scheduler.storage.registry import PendingReads, Registry
from scheduler.storage.term_stores import TermStores
from scheduler.storage.transactions import Fence
from tests.support.bodies import job_body
from tests.support.held_watches import watches_held
from tests.support.waiting import wait_for


def _job(name: str, app: str) -> JobConfig:
    return JobConfig.from_json(job_body(name, appName=app), default_time_zone="UTC")


@pytest.fixture
def other(zk: ZooKeeperEnsemble) -> Iterator[KazooClient]:
    """Another client, another session: its writes reach the index through watches alone."""
    client = KazooClient(hosts=zk.hosts, timeout=4)
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


def _write_as_other(other: KazooClient, registry: Registry, job: JobConfig) -> None:
    path = registry.abs(job_path(job.job_name))
    data = json.dumps(job.to_json()).encode()
    if other.exists(path):
        other.set(path, data)
    else:
        other.create(path, data, makepath=True)


@pytest.fixture
def seeded(stores: TermStores) -> TermStores:
    """Three jobs: two of `a_app`, one of `b_app`, written through the term's config store."""
    for name, app in (("a_one", "a_app"), ("a_two", "a_app"), ("b_one", "b_app")):
        stores.config.add_job(_job(name, app))
    return stores


def test_each_job_is_read_once_then_answered_from_the_index(seeded: TermStores) -> None:
    index = seeded.job_apps
    expected = {"a_one": "a_app", "a_two": "a_app", "b_one": "b_app"}
    assert index.apps_of(["a_one", "a_two", "b_one", "missing"]) == expected
    first = index.reads
    assert first == 4  # the missing job too: there is nothing to keep of it
    for _ in range(3):
        assert index.apps_of(["a_one", "a_two", "b_one"]) == expected
    assert index.reads == first


def test_this_process_writes_are_answered_at_once(
    seeded: TermStores, zk_client: KazooClient
) -> None:
    index, config = seeded.job_apps, seeded.config
    assert index.apps_of(["a_one", "b_one"]) == {"a_one": "a_app", "b_one": "b_app"}
    with watches_held(zk_client, seeded.registry):  # no watch helps: the writes alone tell
        config.update_job(_job("b_one", "a_app"))  # moved
        assert index.apps_of(["b_one"]) == {"b_one": "a_app"}
        config.delete_job("a_one")
        assert index.apps_of(["a_one", "b_one"]) == {"b_one": "a_app"}
        config.add_job(_job("a_one", "b_app"))  # the same name again, in another app
        assert index.apps_of(["a_one"]) == {"a_one": "b_app"}


def test_another_clients_move_delete_and_registration_are_followed(
    seeded: TermStores, other: KazooClient
) -> None:
    index, registry = seeded.job_apps, seeded.registry
    assert index.apps_of(["a_one", "a_two"]) == {"a_one": "a_app", "a_two": "a_app"}

    _write_as_other(other, registry, _job("a_one", "b_app"))
    wait_for(lambda: index.apps_of(["a_one"]) == {"a_one": "b_app"}, 10, message="the move")

    other.delete(registry.abs(job_path("a_two")))
    wait_for(lambda: index.apps_of(["a_two"]) == {}, 10, message="the deletion")

    # A job never asked about is read at its first look-up: found at once.
    _write_as_other(other, registry, _job("c_one", "c_app"))
    assert index.apps_of(["c_one"]) == {"c_one": "c_app"}
    reads = index.reads
    assert index.apps_of(["a_one", "c_one"]) == {"a_one": "b_app", "c_one": "c_app"}
    assert index.reads == reads  # each read again once, then kept


def test_a_change_a_read_would_see_is_never_answered_stale(
    seeded: TermStores, other: KazooClient, zk_client: KazooClient
) -> None:
    """kazoo's watch thread held: the callback cannot drop the entry, yet once this session
    has read the new config (ZooKeeper sends the change's event before that answer), the index
    answers the new app too."""
    index, registry = seeded.job_apps, seeded.registry
    assert index.apps_of(["a_one"]) == {"a_one": "a_app"}
    with watches_held(zk_client, registry):
        _write_as_other(other, registry, _job("a_one", "b_app"))
        wait_for(
            lambda: b'"b_app"' in (registry.get(job_path("a_one")) or b""),
            10,
            message="this session reading the other's write",
        )
        assert index.apps_of(["a_one"]) == {"a_one": "b_app"}


def test_a_config_that_cannot_be_read_belongs_to_no_app_until_it_changes(
    seeded: TermStores, other: KazooClient
) -> None:
    index, registry = seeded.job_apps, seeded.registry
    other.set(registry.abs(job_path("b_one")), b"{not json")
    wait_for(lambda: "b_one" not in index.apps_of(["b_one"]), 10, message="the broken config")
    reads = index.reads
    assert index.apps_of(["b_one"]) == {}
    assert index.reads == reads  # kept as belonging to no app, not read per look-up
    _write_as_other(other, registry, _job("b_one", "b_app"))
    wait_for(lambda: index.apps_of(["b_one"]) == {"b_one": "b_app"}, 10, message="the repair")


class _AnswersLate(PendingReads):
    """Reads already sent, whose answers are handed over only after `before()` has run: what
    a reader's thread that is slow to collect them looks like."""

    def __init__(self, inner: PendingReads, before: Callable[[], None]) -> None:
        self._inner, self._before = inner, before

    def wait(self) -> dict[str, tuple[bytes, int] | None]:
        self._before()
        return self._inner.wait()


class _RegistrySlowOnce(Registry):
    """A registry whose next bulk read (sent at once) hands its answers over only after
    `meanwhile` has run."""

    meanwhile: Callable[[], None] | None = None

    def send_reads(
        self,
        paths: Sequence[str],
        watch: Callable[[str], Callable[[Any], None]] | None = None,
        timeout_s: float = 30.0,
    ) -> PendingReads:
        sent = super().send_reads(paths, watch, timeout_s)
        hook, self.meanwhile = self.meanwhile, None
        return sent if hook is None else _AnswersLate(sent, hook)


@pytest.fixture
def slow(zk_client: KazooClient, zk_namespace: str) -> tuple[_RegistrySlowOnce, TermStores]:
    """The term's stores over a `_RegistrySlowOnce`, with job `job` of `a_app`."""
    registry = _RegistrySlowOnce(zk_client, zk_namespace)
    registry.ensure("/ha/election")
    node = zk_client.create(registry.abs("/ha/election/n_"), b"me", ephemeral=True, sequence=True)
    stores = TermStores.build(registry, Fence(node, lambda: True), "UTC", 100)
    stores.config.add_job(_job("job", "a_app"))
    return registry, stores


def test_a_read_overtaken_by_a_write_is_not_answered_after_it(
    slow: tuple[_RegistrySlowOnce, TermStores], zk_client: KazooClient
) -> None:
    registry, stores = slow
    # The read is answered (a_app) before the write; the index keeps it after the write, and
    # the write's watch callback is held back: only the watch check can tell.
    registry.meanwhile = lambda: stores.config.update_job(_job("job", "b_app"))
    with watches_held(zk_client, registry):
        assert stores.job_apps.apps_of(["job"]) == {"job": "a_app"}  # the read's own answer
        assert stores.job_apps.apps_of(["job"]) == {"job": "b_app"}


def test_a_slow_readers_answer_never_replaces_a_later_one(
    slow: tuple[_RegistrySlowOnce, TermStores], zk_client: KazooClient
) -> None:
    registry, stores = slow
    index = stores.job_apps

    def move_and_read_again() -> None:
        stores.config.update_job(_job("job", "b_app"))
        assert index.apps_of(["job"]) == {"job": "b_app"}  # a later read, its watch set

    # The first read is answered a_app, but handed over only after a later read has kept
    # b_app (whose watch is set): the slow answer must not replace it.
    registry.meanwhile = move_and_read_again
    with watches_held(zk_client, registry):
        assert index.apps_of(["job"]) == {"job": "a_app"}
        reads = index.reads
        assert index.apps_of(["job"]) == {"job": "b_app"}
        assert index.reads == reads  # the later read's entry, answered without a read


def test_a_stopped_index_keeps_nothing(registry: Registry, seeded: TermStores) -> None:
    index = JobApps(registry, ConfigStore(registry, None, "UTC"))
    assert index.apps_of(["a_one"]) == {"a_one": "a_app"}
    index.stop()
    assert index.apps_of(["a_one"]) == {"a_one": "a_app"}  # still answered, read each time
    reads = index.reads
    index.apps_of(["a_one"])
    assert index.reads == reads + 1

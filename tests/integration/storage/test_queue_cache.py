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
from tests.support.held_watches import watches_held
from tests.support.tcpproxy import proxied_client
from tests.support.waiting import wait_for


def _job(name: str, app: str = "app", cron: str = "0 0 3 * * ?") -> dict[str, object]:
    return job_body(name, appName=app, cron=cron, shardingTotalCount=2)


class _Changes:
    """Counts the cache's change notifications (called on kazoo's thread)."""

    def __init__(self) -> None:
        self.seen = threading.Event()
        self.count = 0

    def __call__(self) -> None:
        self.count += 1
        self.seen.set()


@pytest.fixture(params=["recursive", "one-shot"])
def watched(
    registry: Registry, request: pytest.FixtureRequest
) -> Iterator[tuple[QueueCache, _Changes]]:
    """The view, following running tasks by the persistent recursive watch (a server that
    answers multiRead, ZooKeeper 3.6+) or by one-shot child watches (an older server)."""
    registry.multi_read = request.param == "recursive"
    changes = _Changes()
    queues = QueueCache(registry, ConfigStore(registry, None, "UTC"), changes)
    yield queues, changes
    queues.stop()


def _synced(queues: QueueCache, check: Callable[[], bool], what: str) -> None:
    """Sync until `check()` holds: the change is seen within a watch's latency."""

    def done() -> bool:
        queues.sync()
        return check()

    wait_for(done, 10, message=what)


def test_the_view_follows_every_queue_written_by_another_writer(
    stores: TermStores, watched: tuple[QueueCache, _Changes]
) -> None:
    queues, changes = watched
    stores.ready.add_transient("a", misfire=True)
    stores.ready.add_transient("a", misfire=True)
    running = TaskId.new("r", 0, TaskType.READY, "agent-1")
    stores.running.add(RunningTask(str(running), "agent-1"))
    failed = TaskId.new("f", 1, TaskType.READY, "agent-1")
    stores.failover.add(str(failed))
    stores.disabled.disable_job("off")
    queues.sync()
    assert {job: count for job, (count, _v) in queues.ready().items()} == {"a": 2}
    assert queues.running() == {"r": [str(running)]}
    [entry] = queues.failover()
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
        queues,
        lambda: (
            {j: c for j, (c, _v) in queues.ready().items()} == {"a": 1, "b": 1}
            and queues.running() == {}
            and queues.failover() == []
            and queues.is_disabled(JobConfig.from_json(_job("x"), default_time_zone="UTC"))
        ),
        "the second round of changes",
    )
    stores.ready.take("a")
    _synced(queues, lambda: "a" not in queues.ready(), "the take of a's last run")


def test_a_round_reads_what_changed_not_what_is_stored(
    stores: TermStores, watched: tuple[QueueCache, _Changes]
) -> None:
    queues, changes = watched
    for i in range(200):
        stores.ready.add_transient(f"job{i:03d}", misfire=True)
    queues.sync()
    assert len(queues.ready()) == 200
    before = queues.reads
    queues.sync()
    assert queues.reads == before  # nothing changed: nothing read
    changes.seen.clear()
    stores.ready.add_transient("job007", misfire=True)
    assert changes.seen.wait(10)
    _synced(queues, lambda: queues.ready()["job007"][0] == 2, "job007's second run")
    assert queues.reads - before <= 2  # that node (and the list, were a job added), not 200


def test_configuration_is_read_once_and_again_after_it_changes(
    registry: Registry, stores: TermStores, watched: tuple[QueueCache, _Changes]
) -> None:
    queues, _changes = watched
    registry.create("/config/job/j", json.dumps(_job("j")).encode())
    queues.sync()
    first = queues.jobs(["j", "missing"])
    assert first["missing"] is None
    job = first["j"]
    assert job is not None and job.cron == "0 0 3 * * ?"
    reads = queues.reads
    assert queues.jobs(["j"])["j"] == job
    assert queues.reads == reads  # from the view
    registry.put("/config/job/j", json.dumps(_job("j", cron="0 0 4 * * ?")).encode())

    def updated() -> bool:
        queues.sync()
        got = queues.jobs(["j"])["j"]
        return got is not None and got.cron == "0 0 4 * * ?"

    wait_for(updated, 10, message="the changed cron")
    registry.put("/config/job/j", b"{not json")

    def unreadable() -> bool:
        queues.sync()
        return queues.jobs(["j"])["j"] is None

    wait_for(unreadable, 10, message="the unreadable job")


def test_the_originals_daemon_nodes_are_read_for_their_task_id(
    registry: Registry, watched: tuple[QueueCache, _Changes]
) -> None:
    queues, _changes = watched
    task = TaskId.new("d", 0, TaskType.READY, "agent-1")
    registry.create("/state/running/d/d@-@0", str(task).encode())
    registry.create("/state/running/d/junk", b"not a task id")
    queues.sync()
    assert queues.running() == {"d": [str(task)]}


def test_the_view_is_read_again_after_the_connection_was_lost(
    zk: ZooKeeperEnsemble, zk_namespace: str, stores: TermStores
) -> None:
    # kazoo drops every watch when its connection drops: changes made meanwhile by another
    # client would never be seen if the view only waited for watches.
    with proxied_client(zk, 10) as (proxy, client):
        registry = Registry(client, zk_namespace, timeout_s=2.0)
        queues = QueueCache(registry, ConfigStore(registry, None, "UTC"))
        stores.ready.add_transient("before", misfire=True)
        queues.sync()
        assert set(queues.ready()) == {"before"}
        proxy.cut()
        wait_for(lambda: client.state == "SUSPENDED", 10, message="the cut")
        stores.ready.add_transient("during", misfire=True)
        stores.ready.take("before")
        proxy.restore()
        wait_for(lambda: client.state == "CONNECTED", 20, message="the reconnection")
        _synced(queues, lambda: set(queues.ready()) == {"during"}, "the changes made while cut off")
        queues.stop()


def test_a_new_session_reads_everything_again(
    zk: ZooKeeperEnsemble, zk_namespace: str, stores: TermStores
) -> None:
    client = KazooClient(hosts=zk.hosts, timeout=4)
    client.start(timeout=15)
    try:
        registry = Registry(client, zk_namespace)
        queues = QueueCache(registry, ConfigStore(registry, None, "UTC"))
        stores.ready.add_transient("one", misfire=True)
        queues.sync()
        client.stop()  # the session ends; the same client starts a new one
        stores.ready.add_transient("two", misfire=True)
        client.start(timeout=15)
        queues.sync()
        assert set(queues.ready()) == {"one", "two"}
        queues.stop()
    finally:
        client.stop()
        client.close()


@pytest.fixture
def recursive(registry: Registry) -> Iterator[tuple[QueueCache, _Changes]]:
    """The view as a leader on ZooKeeper 3.6+ keeps it: running tasks by the recursive watch."""
    registry.multi_read = True
    changes = _Changes()
    queues = QueueCache(registry, ConfigStore(registry, None, "UTC"), changes)
    yield queues, changes
    queues.stop()


def _task(job: str, item: int = 0) -> str:
    return str(TaskId.new(job, item, TaskType.READY, "agent-1"))


def test_running_tasks_are_followed_without_a_listing(
    stores: TermStores, recursive: tuple[QueueCache, _Changes]
) -> None:
    queues, _changes = recursive
    first = _task("a")
    stores.running.add(RunningTask(first, "agent-1"))
    queues.sync()
    assert queues.running() == {"a": [first]}
    reads = queues.reads
    tasks = {f"j{i:02d}": _task(f"j{i:02d}") for i in range(30)}
    for task_id in tasks.values():
        stores.running.add(RunningTask(task_id, "agent-1"))
    stores.running.remove(first)  # its folder goes with it
    expected = {job: [task_id] for job, task_id in tasks.items()}
    _synced(queues, lambda: queues.running() == expected, "30 tasks added, one removed")
    for job in ("j00", "j01"):
        stores.running.remove(tasks.pop(job))
    _synced(queues, lambda: set(queues.running()) == set(tasks), "two more removed")
    assert not queues.has_running_folder("a") and not queues.has_running_folder("j00")
    assert queues.running_tasks("j02") == [tasks["j02"]]
    assert queues.reads == reads  # every change came as the watch's event: nothing listed


def test_an_older_folder_deletion_applied_after_a_launch_keeps_the_launched_task(
    zk_client: KazooClient,
    registry: Registry,
    stores: TermStores,
    recursive: tuple[QueueCache, _Changes],
) -> None:
    queues, changes = recursive
    old = _task("job")
    stores.running.add(RunningTask(old, "agent-1"))
    queues.sync()
    assert queues.running_tasks("job") == [old]
    before = changes.count
    stores.running.remove(old)  # the task and the job's folder: two events, not applied yet
    wait_for(lambda: changes.count >= before + 2, 10, message="both deletions' events")
    new = _task("job")
    with watches_held(zk_client, registry):
        # The launch creates the folder again and notes its task; the creation's events wait
        # behind the held thread, so the sync below applies only the older deletions.
        stores.running.add(RunningTask(new, "agent-1"))
        queues.launched("job", [new], None, [])
        queues.sync()
        assert queues.running_tasks("job") == [new]
    _synced(queues, lambda: queues.running_tasks("job") == [new], "the creation's events")
    stores.running.remove(new)
    _synced(queues, lambda: not queues.has_running_folder("job"), "the new task's end")


def test_the_recursive_watch_is_placed_again_after_the_connection_was_lost(
    zk: ZooKeeperEnsemble, zk_namespace: str, stores: TermStores
) -> None:
    with proxied_client(zk, 10) as (proxy, client):
        registry = Registry(client, zk_namespace, timeout_s=2.0, multi_read=True)
        queues = QueueCache(registry, ConfigStore(registry, None, "UTC"))
        gone, during, after = _task("gone"), _task("during"), _task("after")
        stores.running.add(RunningTask(gone, "agent-1"))
        queues.sync()
        assert queues.running() == {"gone": [gone]}
        proxy.cut()
        wait_for(lambda: client.state == "SUSPENDED", 10, message="the cut")
        stores.running.remove(gone)
        stores.running.add(RunningTask(during, "agent-1"))
        proxy.restore()
        wait_for(lambda: client.state == "CONNECTED", 20, message="the reconnection")
        _synced(queues, lambda: queues.running() == {"during": [during]}, "the changes cut off")
        reads = queues.reads
        stores.running.add(RunningTask(after, "agent-1"))
        expected = {"during": [during], "after": [after]}
        _synced(queues, lambda: queues.running() == expected, "a task added after")
        assert queues.reads == reads  # the watch's event: it was placed again
        queues.stop()


def test_running_tasks_coming_and_going_call_on_running_change_and_only_pending_work_counts(
    stores: TermStores, recursive: tuple[QueueCache, _Changes]
) -> None:
    # Issue 29: a task's end wakes the launcher only when work is pending, so the view tells
    # the running tasks' comings and goings apart from the queues' changes.
    queues, changes = recursive
    running_changes = _Changes()
    queues.on_running_change = running_changes
    queues.sync()
    assert not queues.has_pending()
    before = changes.count
    task_id = _task("a")
    stores.running.add(RunningTask(task_id, "agent-1"))
    stores.running.remove(task_id)
    _synced(queues, lambda: running_changes.count >= 4, "folder and task created and deleted")
    assert changes.count == before  # none of them woke the launcher as a queue change does
    assert not queues.has_pending()
    stores.ready.add_transient("a", misfire=True)
    _synced(queues, lambda: queues.has_pending(), "a pending run")
    assert changes.count > before  # a queue change still calls on_change
    stores.ready.take("a")
    _synced(queues, lambda: not queues.has_pending(), "the run taken")
    failed = TaskId.new("f", 1, TaskType.READY, "agent-1")
    stores.failover.add(str(failed))
    _synced(queues, lambda: queues.has_pending(), "a failover shard")

"""The launcher's concurrency-pool admission (issue 28) against a real ZooKeeper and the Mesos
stand-in: a pool's tasks never take more than its size, the waiting runs launch as slots free
up, and a new launcher (a new leader) counts the tasks running before it launches."""

from __future__ import annotations

import json
from pathlib import Path

from scheduler.leader.lifecycle import WakeSignal
from scheduler.leader.mesos.driver import MesosDriver
from scheduler.leader.mesos.launcher import Launcher
from scheduler.model.pools import PoolConfig
from scheduler.model.task_id import TaskId
from scheduler.storage.queue_cache import QueueCache
from scheduler.storage.term_stores import TermStores
from tests.integration.leader.mesos.helpers import (
    Acting,
    FrameworkIds,
    settings_for,
    store_script_job,
    wire_launcher,
)
from tests.support.mesosfw import StandIn
from tests.support.waiting import wait_for


def _add_job(stores: TermStores, name: str, **extra: object) -> None:
    job = {
        "jobName": name,
        "appName": "app",
        "jobType": "SCRIPT",
        "jobExecutionType": "TRANSIENT",
        "scriptCommandLine": "sh run.sh",
        "cron": "0 0 3 * * ?",
        "shardingTotalCount": 1,
        "cpuCount": 0.1,
        "memoryMB": 16,
        **extra,
    }
    stores.registry.create(f"/config/job/{name}", json.dumps(job).encode())


def _live(standin: StandIn) -> list[TaskId]:
    tasks = [t for f in standin.state()["frameworks"] for t in f["tasks"]]
    return [
        TaskId.parse(t["id"])
        for t in tasks
        if t["state"] in ("TASK_STAGING", "TASK_STARTING", "TASK_RUNNING")
    ]


def test_a_pool_never_runs_more_than_its_size_and_a_new_launcher_counts_what_runs(
    standin: StandIn,
    stores: TermStores,
    queues: QueueCache,
    wake: WakeSignal,
    zk_namespace: str,
    tmp_path: Path,
) -> None:
    # "a" takes 2 slots of 1 shard; "b" and "c" 1 slot of 2 shards; the pool holds 2.
    store_script_job(stores, tmp_path, "a", "sleep 1", pool="db", poolSlots=2, cpuCount=0.1)
    _add_job(stores, "b", pool="db", shardingTotalCount=2)
    _add_job(stores, "c", pool="db", shardingTotalCount=2)
    _add_job(stores, "free", shardingTotalCount=2)
    _add_job(stores, "lost", pool="nowhere")
    stores.pools.save(PoolConfig("db", 2), create=True)
    driver = MesosDriver(settings_for(standin, zk_namespace), FrameworkIds())
    launcher = Launcher(stores, Acting(), driver, queues, wake=wake)
    wire_launcher(launcher, driver, stores)
    launcher.start()
    driver.start()
    seen: list[int] = []
    ran: set[str] = set()
    try:
        for name in ("a", "b", "c", "free", "lost"):
            stores.ready.add_transient(name, misfire=True)
            stores.ready.add_transient(name, misfire=True)
        wake.wake()

        def all_ran() -> bool:
            live = _live(standin)
            pooled = [t for t in live if t.job_name != "free"]
            slots = sum(2 if t.job_name == "a" else 1 for t in pooled)
            seen.append(slots)
            assert slots <= 2, f"pool over its size: {pooled}"
            ran.update(t.job_name for t in live)
            return {"a", "b", "c", "free"} <= ran and not stores.ready.counts().keys() - {"lost"}

        wait_for(all_ran, 90, interval_s=0.1, message="every pooled run launched in turn")
        # The free job (no pool) ran at once; the job of a missing pool never launched and
        # its runs stay queued, counted as waiting in no pool.
        assert stores.ready.counts() == {"lost": 2}
        assert max(seen) == 2
        counts = stores.pools.counts("db")
        assert counts.size == 2
    finally:
        launcher.stop()
        driver.stop()


def test_a_new_launcher_counts_the_tasks_running_before_it_launches(
    standin: StandIn,
    stores: TermStores,
    queues: QueueCache,
    wake: WakeSignal,
    zk_namespace: str,
    tmp_path: Path,
) -> None:
    store_script_job(stores, tmp_path, "long", "sleep 30", pool="db")
    _add_job(stores, "next", pool="db")
    stores.pools.save(PoolConfig("db", 1), create=True)
    settings = settings_for(standin, zk_namespace)
    ids = FrameworkIds()
    driver = MesosDriver(settings, ids)
    launcher = Launcher(stores, Acting(), driver, queues, wake=wake)
    wire_launcher(launcher, driver, stores)
    launcher.start()
    driver.start()
    try:
        stores.ready.add_transient("long", misfire=True)
        wake.wake()
        wait_for(lambda: [t for t in _live(standin) if t.job_name == "long"], 60, message="long")
        [record] = stores.running.tasks("long")
        assert (record.pool, record.pool_slots) == ("db", 1)
    finally:
        launcher.stop()
        driver.stop()
    # A new term: new stores, view and launcher; the task still runs in Mesos.
    fresh = TermStores.build(stores.registry, stores.fence, "UTC", 10_000)
    wake2 = WakeSignal()
    view = QueueCache(fresh.registry, fresh.config, on_change=wake2.wake)
    driver2 = MesosDriver(settings, ids)
    launcher2 = Launcher(fresh, Acting(), driver2, view, wake=wake2)
    wire_launcher(launcher2, driver2, fresh)
    launcher2.start()
    driver2.start()
    try:
        fresh.ready.add_transient("next", misfire=True)
        wake2.wake()
        wait_for(lambda: fresh.pools.counts("db").waiting == 1, 30, message="next held by the pool")
        assert fresh.pools.counts("db").in_use == 1
        assert not [t for t in _live(standin) if t.job_name == "next"]
        assert fresh.ready.counts() == {"next": 1}
    finally:
        launcher2.stop()
        driver2.stop()
        view.stop()


def test_a_chatty_job_does_not_starve_the_other_job_of_its_pool(
    standin: StandIn,
    stores: TermStores,
    queues: QueueCache,
    wake: WakeSignal,
    zk_namespace: str,
    tmp_path: Path,
) -> None:
    store_script_job(stores, tmp_path, "chatty", "sleep 0.5", pool="one", cpuCount=0.1)
    _add_job(stores, "quiet", pool="one", overlapPolicy="ALLOW")
    stores.pools.save(PoolConfig("one", 1), create=True)
    for _ in range(5):
        stores.ready.add_transient("chatty", misfire=True)
    driver = MesosDriver(settings_for(standin, zk_namespace), FrameworkIds())
    launcher = Launcher(stores, Acting(), driver, queues, wake=wake)
    wire_launcher(launcher, driver, stores)
    launched: list[str] = []
    launcher.launch_listeners.append(
        lambda round_: launched.extend(task.job_name for task, _agent, _original in round_)
    )
    launcher.start()
    driver.start()
    try:
        wait_for(lambda: launched, 30, message="chatty's first run")
        stores.ready.add_transient("quiet", misfire=True)
        most = 0

        def quiet_launched() -> bool:
            nonlocal most
            most = max(most, len(_live(standin)))
            return "quiet" in launched

        wait_for(quiet_launched, 30, interval_s=0.05, message="quiet launched")
        # One at a time (a pool of 1): quiet's run waited for the run it found running, then
        # went before chatty's other pending runs.
        assert most <= 1
        assert 1 <= launched.index("quiet") <= 2, launched
        assert stores.ready.counts().get("chatty", 0) >= 2
    finally:
        launcher.stop()
        driver.stop()

"""The backfill engine and store over a real ZooKeeper (issue 28), with the launcher's and the
status handler's writes made as they make them (`launch_ops`, `shard_ended_ops`): each fire is
queued exactly once when two terms' engines race (and none by the older once it is fenced
out); FORBID waits for the previous fire's end, ALLOW does not; pacing by `firesPerMinute` on a
stepped clock; pause, resume and cancel (a queued fire withdrawn); a new leader resumes from the
stored state and counts a shard whose end was lost as failed; a deleted job cancels, a disabled
one waits."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime

import pytest
from kazoo.client import KazooClient

from scheduler.leader.backfill import BackfillEngine
from scheduler.leader.workflows import WorkflowEngine
from scheduler.model.backfill import BackfillRequest, backfill_fires
from scheduler.model.config.job import JobConfig
from scheduler.model.errors import NotLeader, QuotaExceeded
from scheduler.model.task_id import TaskId, TaskType
from scheduler.storage import backfill_store, layout
from scheduler.storage.backfill_store import BackfillStore, backfill_of_key, key_of
from scheduler.storage.registry import Registry
from scheduler.storage.state import RunningTask
from scheduler.storage.term_stores import TermStores
from scheduler.storage.transactions import Fence, FencedWriter
from scheduler.storage.workflow_store import NodeFire, WorkflowQueue, WorkflowStore, launch_ops
from tests.support.waiting import wait_for

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
HOURLY = "0 0 * * * ?"


class Acting:
    acting = True


class Clock:
    """Epoch seconds a test steps."""

    def __init__(self) -> None:
        self.now = NOW.timestamp()

    def __call__(self) -> float:
        return self.now


def _job(stores: TermStores, name: str = "hourly", shards: int = 2, **extra: object) -> JobConfig:
    if not stores.registry.exists("/config/app/app"):
        app = {"appName": "app", "appURL": "http://example.invalid/a.tgz", "bootstrapScript": "x"}
        stores.registry.create("/config/app/app", json.dumps(app).encode())
    body = {
        "jobName": name,
        "appName": "app",
        "jobType": "SCRIPT",
        "jobExecutionType": "TRANSIENT",
        "scriptCommandLine": "true",
        "cron": HOURLY,
        "shardingTotalCount": shards,
        "cpuCount": 0.1,
        "memoryMB": 16,
        **extra,
    }
    stores.registry.create(f"/config/job/{name}", json.dumps(body).encode())
    job = stores.config.job(name)
    assert job is not None
    return job


def _engine(
    stores: TermStores, clock: Clock, fence: Fence | None = None, max_active: int = 100
) -> tuple[BackfillEngine, WorkflowQueue]:
    queue = WorkflowQueue()
    chosen = fence or stores.fence
    terms = TermStores.build(stores.registry, chosen, "UTC", 10_000)
    store = BackfillStore(stores.registry, chosen, max_active)
    engine = BackfillEngine(store, terms, Acting(), queue, lambda _t: True, clock=clock)
    return engine, queue


def _create(engine: BackfillEngine, job: JobConfig, hours: int = 6, **body: object) -> str:
    request = BackfillRequest.from_json(
        {"from": "2026-01-01T00:00:00Z", "to": f"2026-01-01T{hours - 1:02d}:00:00Z", **body},
        now=NOW,
    )
    fires = backfill_fires(job.cron_spec, request.start, request.end)
    return engine.create(job, request, fires).backfill_id


def _queued(stores: TermStores, job: str = "hourly") -> list[str]:
    return sorted(stores.registry.children(layout.workflow_queue_folder(job)))


def _launch(stores: TermStores, fire: NodeFire, shards: int) -> list[str]:
    """What the launcher writes for a queued fire: the entry taken, the record, the index, and
    the tasks' running nodes."""
    tasks = [str(TaskId.new(fire.job, i, TaskType.READY, "S0")) for i in range(shards)]
    writer = FencedWriter(stores.registry, stores.fence)  # type: ignore[arg-type]
    writer.commit("launch", list(launch_ops(fire, 0, tasks, shards)))
    for task in tasks:
        stores.running.add(RunningTask(task, "S0", workflow_fire=fire.key))
    return tasks


def _end(stores: TermStores, fire: NodeFire, task: str, ok: bool) -> None:
    """What the status handler writes when a shard of the fire ends for good."""
    workflows = WorkflowStore(stores.registry, stores.fence, "UTC", 200)
    item = TaskId.parse(task).item
    stores.running.remove(
        task, workflows.shard_ended_ops(fire.key, item, ok, "" if ok else "exit 3", task)
    )


def _run_fire(stores: TermStores, queue: WorkflowQueue, ok: bool = True) -> NodeFire:
    """Launch the oldest queued fire and end each of its shards."""
    fire, _version = queue.pending()[0]
    queue.drop([fire.key])
    for task in _launch(stores, fire, 2):
        _end(stores, fire, task, ok)
    return fire


def _state(engine: BackfillEngine, backfill_id: str, job: str = "hourly") -> dict[str, object]:
    got = engine.store.get(job, backfill_id)
    assert got is not None
    return got[0].to_json()


def test_two_terms_racing_queue_each_fire_once_and_the_older_fenced_out_writes_nothing(
    stores: TermStores, registry: Registry, zk_client: KazooClient
) -> None:
    job = _job(stores)
    clock = Clock()
    # The old leader's fence: an election node of its own, deleted when it is deposed.
    old_node = zk_client.create(
        registry.abs("/ha/election/n_"), b"old", ephemeral=True, sequence=True
    )
    old, old_queue = _engine(stores, clock, Fence(old_node, lambda: True))
    new, new_queue = _engine(stores, clock)
    backfill_id = _create(new, job, overlapPolicy="ALLOW")
    old.start()  # each term lists the active backfills at its start; both threads pass
    new.start()
    try:
        for _ in range(3):  # and both pass at the same moment, again and again
            racers = [threading.Thread(target=e.run_pass) for e in (old, new)]
            for racer in racers:
                racer.start()
            for racer in racers:
                racer.join(10)
        wait_for(
            lambda: _state(new, backfill_id)["status"] == "DONE", 10, message="all fires written"
        )
        keys = _queued(stores)
        assert keys == sorted(key_of(backfill_id, i) for i in range(6))
        # Each fire handed to one term's launcher queue, once.
        assert old.fires_written + new.fires_written == 6
        handed = [f.key for f, _v in old_queue.pending()] + [f.key for f, _v in new_queue.pending()]
        assert sorted(handed) == keys
        # The old term is deposed: its election node is gone. Restarted (as if it had not
        # noticed), it lists the new backfill but every write it tries is refused.
        old.stop()
        new.stop()
        zk_client.delete(old_node)
        later = _create(new, job, overlapPolicy="ALLOW")
        old.start()
        with pytest.raises(NotLeader):
            old.run_pass()
        with pytest.raises(NotLeader):
            old.pause_backfill("hourly", later)
        assert _state(new, later)["nextIndex"] == 0 and _state(new, later)["status"] == "RUNNING"
        new.run_pass()
        assert _state(new, later)["nextIndex"] == 6
    finally:
        old.stop()
        new.stop()


def test_forbid_waits_for_each_fire_to_end_and_counts_the_outcomes(stores: TermStores) -> None:
    job = _job(stores)
    clock = Clock()
    engine, queue = _engine(stores, clock)
    backfill_id = _create(engine, job, hours=3)
    engine.run_pass()
    assert [f.node for f, _v in queue.pending()] == ["0"]
    engine.run_pass()
    assert len(queue) == 1  # fire 1 waits for fire 0 (FORBID, the job's default)
    first = _run_fire(stores, queue, ok=True)
    assert first.fire_time == datetime(2026, 1, 1, 0, tzinfo=UTC).timestamp()
    assert first.backfill_id == backfill_id
    engine.run_pass()
    assert [f.node for f, _v in queue.pending()] == ["1"]
    assert not stores.registry.exists(layout.workflow_fire_path(first.key))  # counted, gone
    assert stores.registry.children(layout.WORKFLOW_TASKS) == []
    _run_fire(stores, queue, ok=False)
    engine.run_pass()
    _run_fire(stores, queue, ok=True)
    engine.run_pass()
    assert engine.store.outcome("hourly", backfill_id).succeeded == 2
    assert engine.store.outcome("hourly", backfill_id).failed == 1
    assert _state(engine, backfill_id)["status"] == "DONE"
    assert engine.store.active() == []
    assert stores.registry.children(layout.WORKFLOW_FIRES) == []


def test_allow_queues_every_due_fire_without_waiting(stores: TermStores) -> None:
    job = _job(stores, overlapPolicy="ALLOW")
    engine, queue = _engine(stores, Clock())
    backfill_id = _create(engine, job, hours=4)
    engine.run_pass()
    assert [f.node for f, _v in queue.pending()] == ["0", "1", "2", "3"]  # oldest fire first
    assert _state(engine, backfill_id)["status"] == "DONE"


def test_fires_per_minute_paces_the_launches_on_the_clock(stores: TermStores) -> None:
    job = _job(stores)
    clock = Clock()
    engine, queue = _engine(stores, clock)
    backfill_id = _create(engine, job, hours=3, firesPerMinute=2, overlapPolicy="ALLOW")
    assert engine.run_pass() <= 1.0  # the tick at most
    assert len(queue) == 1
    clock.now += 29.9
    engine.run_pass()
    assert len(queue) == 1  # one every 30 s
    clock.now += 0.1
    engine.run_pass()
    assert len(queue) == 2
    assert _state(engine, backfill_id)["nextIndex"] == 2


def test_pause_holds_resume_continues_and_cancel_withdraws_the_queued_fire(
    stores: TermStores,
) -> None:
    job = _job(stores)
    engine, queue = _engine(stores, Clock())
    backfill_id = _create(engine, job, hours=4)
    engine.pause_backfill("hourly", backfill_id)
    engine.run_pass()
    assert len(queue) == 0 and _queued(stores) == []
    engine.resume_backfill("hourly", backfill_id)
    engine.run_pass()
    assert len(queue) == 1
    queued = queue.pending()[0][0]
    cancelled = engine.cancel_backfill("hourly", backfill_id)
    assert cancelled.status.value == "CANCELLED"
    assert len(queue) == 0 and _queued(stores) == []  # withdrawn in the cancel's write
    assert not stores.registry.exists(layout.workflow_fire_path(queued.key))
    assert engine.store.active() == []
    engine.run_pass()
    assert _queued(stores) == []


def test_cancel_with_kill_running_kills_the_fires_tasks(stores: TermStores) -> None:
    job = _job(stores)
    killed: list[str] = []

    def kill(task_id: str) -> bool:
        killed.append(task_id)
        return True

    queue = WorkflowQueue()
    engine = BackfillEngine(
        BackfillStore(stores.registry, stores.fence, 10),
        stores,
        Acting(),
        queue,
        kill,
        clock=Clock(),
    )
    backfill_id = _create(engine, job, hours=2)
    engine.run_pass()
    fire, _v = queue.pending()[0]
    tasks = _launch(stores, fire, 2)
    engine.cancel_backfill("hourly", backfill_id, kill_running=True)
    assert sorted(killed) == sorted(tasks)
    assert all(t.kill_reason for t in stores.running.tasks("hourly"))


def test_a_new_leader_resumes_from_the_stored_state_and_settles_a_lost_shard(
    stores: TermStores,
) -> None:
    job = _job(stores)
    clock = Clock()
    old, old_queue = _engine(stores, clock)
    backfill_id = _create(old, job, hours=3)
    old.run_pass()
    fire = old_queue.pending()[0][0]
    tasks = _launch(stores, fire, 2)
    _end(stores, fire, tasks[0], True)
    stores.running.remove(tasks[1])  # its failure removed it; the leader died before the record
    new, new_queue = _engine(stores, clock)
    new.start()
    try:
        record = new.store.fire_record(fire.key)
        assert record is not None and record[0].complete and not record[0].succeeded
        assert "lost in a leader change" in record[0].done[1][1]
        new.run_pass()
        assert new.store.outcome("hourly", backfill_id).failed == 1
        assert [f.node for f, _v in new_queue.pending()] == ["1"]  # from the stored nextIndex
        assert _queued(stores) == [key_of(backfill_id, 1)]
    finally:
        new.stop()


def test_a_deleted_job_cancels_its_backfill_and_a_disabled_one_waits(stores: TermStores) -> None:
    job = _job(stores)
    other = _job(stores, "daily")
    engine, queue = _engine(stores, Clock())
    waits = _create(engine, job, hours=2)
    goes = _create(engine, other, hours=2)
    paused = _create(engine, other, hours=2)
    engine.pause_backfill("daily", paused)
    stores.disabled.disable_job("hourly")
    stores.registry.delete("/config/job/daily")
    engine.run_pass()
    assert _state(engine, goes, "daily")["status"] == "CANCELLED"
    assert _state(engine, paused, "daily")["status"] == "CANCELLED"  # no quota held for ever
    assert _state(engine, waits)["nextIndex"] == 0 and len(queue) == 0
    stores.disabled.enable_job("hourly")
    engine.run_pass()
    assert _state(engine, waits)["nextIndex"] == 1


def test_the_store_bounds_active_backfills_and_a_new_term_lists_them(stores: TermStores) -> None:
    job = _job(stores)
    engine, _queue = _engine(stores, Clock(), max_active=2)
    first = _create(engine, job)
    _create(engine, job)
    with pytest.raises(QuotaExceeded, match="max_active_backfills"):
        _create(engine, job)
    engine.cancel_backfill("hourly", first)
    _create(engine, job)
    assert len(engine.store.active()) == 2
    assert len(engine.store.ids("hourly")) == 3


def test_only_a_backfill_fire_key_reads_as_a_backfills() -> None:
    assert backfill_of_key("20260101T000000Z-0a0b0c0d~3~0") == ("20260101T000000Z-0a0b0c0d", 3)
    assert backfill_of_key("nightly@1790000000000~a~1") is None
    assert backfill_of_key("20260101T000000Z-0a0b0c0d~x~0") is None


def test_ended_backfills_beyond_the_kept_number_are_pruned_oldest_first(
    stores: TermStores, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backfill_store, "ENDED_KEPT", 2)
    job = _job(stores)
    engine, _queue = _engine(stores, Clock())
    made = []
    for _ in range(4):
        made.append(_create(engine, job))
        engine.cancel_backfill("hourly", made[-1])
    running = _create(engine, job)
    kept = engine.store.ids("hourly")
    assert running in kept and len(kept) == 3
    assert set(kept) - {running} == set(sorted(made)[-2:])  # the newest ended ones
    assert not stores.registry.exists(layout.backfill_outcome_path("hourly", sorted(made)[0]))


def test_the_workflow_engine_leaves_a_backfills_fires_alone(stores: TermStores) -> None:
    """A new term's workflow engine loads a backfill's queued fire for the launcher and neither
    settles, steps nor forgets its launched fire's record."""
    job = _job(stores)
    engine, queue = _engine(stores, Clock())
    _create(engine, job, overlapPolicy="ALLOW", hours=2)
    engine.run_pass()
    launched = _run_fire(stores, queue, ok=True)  # fire 0 ended, not counted yet
    queued = queue.pending()[0][0]  # fire 1 waits for its launch
    before = stores.registry.get(layout.workflow_fire_path(launched.key))
    loaded = WorkflowQueue()
    workflows = WorkflowEngine(
        WorkflowStore(stores.registry, stores.fence, "UTC", 200), stores, Acting(), loaded, bool
    )
    workflows.start()
    try:
        workflows._advance_all()
        assert [f.key for f, _v in loaded.pending()] == [queued.key]
        assert loaded.pending()[0][0].backfill_id == queued.backfill_id
        assert stores.registry.get(layout.workflow_fire_path(launched.key)) == before
        assert stores.registry.exists(layout.workflow_fire_path(queued.key))
    finally:
        workflows.stop()

"""Workflow backfills over a real ZooKeeper (issue 28), stepped by the workflow engine with the
launcher's and the status handler's writes made as they make them: each fire makes exactly one
run, in order, when two terms race (none by the older once fenced out); FORBID waits for the
previous run's end, each end counted once; a fire that already has a run is not run again;
pause, resume, cancel (its runs cancelled with killRunning); pacing on a stepped clock; a
deleted workflow cancels its backfill."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime

import pytest
from kazoo.client import KazooClient

from scheduler.leader.workflows import WorkflowEngine
from scheduler.model.backfill import BackfillRequest, backfill_fires
from scheduler.model.config.policies import OverlapPolicy
from scheduler.model.errors import Conflict, NotLeader, QuotaExceeded
from scheduler.model.task_id import TaskId, TaskType
from scheduler.model.workflow import WorkflowConfig, WorkflowNode, run_id_of
from scheduler.storage.backfill_store import BackfillStore
from scheduler.storage.registry import Registry
from scheduler.storage.state import RunningTask
from scheduler.storage.term_stores import TermStores
from scheduler.storage.transactions import Fence, FencedWriter
from scheduler.storage.workflow_store import NodeFire, WorkflowQueue, WorkflowStore, launch_ops

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


class Acting:
    acting = True


class Clock:
    def __init__(self) -> None:
        self.now = NOW.timestamp()

    def __call__(self) -> float:
        return self.now


def _setup(stores: TermStores, policy: OverlapPolicy = OverlapPolicy.FORBID) -> WorkflowConfig:
    """App `app`, job `step` (2 shards), workflow `nightly` (hourly, one node) registered."""
    app = {"appName": "app", "appURL": "http://example.invalid/a.tgz", "bootstrapScript": "x"}
    stores.registry.create("/config/app/app", json.dumps(app).encode())
    job = {
        "jobName": "step",
        "appName": "app",
        "jobType": "SCRIPT",
        "jobExecutionType": "TRANSIENT",
        "scriptCommandLine": "true",
        "cron": "",
        "shardingTotalCount": 2,
        "cpuCount": 0.1,
        "memoryMB": 16,
    }
    stores.registry.create("/config/job/step", json.dumps(job).encode())
    config = WorkflowConfig(
        "nightly", "app", (WorkflowNode("a", "step"),), cron="0 0 * * * ?", overlap_policy=policy
    )
    WorkflowStore(stores.registry, stores.fence, "UTC", 200).save(config, create=True)
    return config


def _engine(
    stores: TermStores, clock: Clock, fence: Fence | None = None, max_active: int = 100
) -> tuple[WorkflowEngine, WorkflowQueue]:
    chosen = fence or stores.fence
    terms = TermStores.build(stores.registry, chosen, "UTC", 10_000)
    store = WorkflowStore(stores.registry, chosen, "UTC", 200)
    queue = WorkflowQueue()
    engine = WorkflowEngine(
        store,
        terms,
        Acting(),
        queue,
        lambda _t: True,
        max_active_backfills=max_active,
        clock=clock,
    )
    return engine, queue


def _create(
    engine: WorkflowEngine, config: WorkflowConfig, hours: int = 5, first: int = 0, **body: object
) -> str:
    """A backfill of the hourly fires `first` to `hours - 1` of 2026-01-01."""
    request = BackfillRequest.from_json(
        {
            "from": f"2026-01-01T{first:02d}:00:00Z",
            "to": f"2026-01-01T{hours - 1:02d}:00:00Z",
            **body,
        },
        now=NOW,
    )
    spec = config.cron_spec("UTC")
    assert spec is not None
    fires = backfill_fires(spec, request.start, request.end)
    return engine.backfills.create(config, request, fires).backfill_id


def _fire_time(hour: int) -> float:
    return datetime(2026, 1, 1, hour, tzinfo=UTC).timestamp()


def _runs(engine: WorkflowEngine) -> dict[str, str]:
    """run id -> backfill id of every run of `nightly`."""
    store = engine.store
    return {r.run_id: r.backfill_id for r in store.runs("nightly", store.run_ids("nightly"))}


def _state(engine: WorkflowEngine, backfill_id: str) -> dict[str, object]:
    got = engine.backfills.store.get("nightly", backfill_id)
    assert got is not None
    return got[0].to_json()


def _finish(stores: TermStores, engine: WorkflowEngine, queue: WorkflowQueue, ok: bool) -> str:
    """Launch the oldest queued node fire, end both shards (`ok` or not), step the run; its
    run id."""
    fire: NodeFire = queue.pending()[0][0]
    queue.drop([fire.key])
    tasks = [str(TaskId.new(fire.job, i, TaskType.READY, "S0")) for i in range(2)]
    writer = FencedWriter(stores.registry, stores.fence)  # type: ignore[arg-type]
    writer.commit("launch", list(launch_ops(fire, 0, tasks, 2)))
    for task in tasks:
        stores.running.add(RunningTask(task, "S0", workflow_fire=fire.key))
        item = TaskId.parse(task).item
        stores.running.remove(
            task, engine.store.shard_ended_ops(fire.key, item, ok, "" if ok else "exit 3", task)
        )
    engine._advance_all()
    return fire.run_id


def test_two_terms_racing_make_each_run_once_in_order_and_the_older_fenced_out_writes_nothing(
    stores: TermStores, registry: Registry, zk_client: KazooClient
) -> None:
    config = _setup(stores)
    clock = Clock()
    old_node = zk_client.create(
        registry.abs("/ha/election/n_"), b"old", ephemeral=True, sequence=True
    )
    old, old_queue = _engine(stores, clock, Fence(old_node, lambda: True))
    new, new_queue = _engine(stores, clock)
    backfill_id = _create(new, config, overlapPolicy="ALLOW")
    old.backfills.load()
    new.backfills.load()
    for _ in range(3):
        racers = [threading.Thread(target=e.backfills.run_pass) for e in (old, new)]
        for racer in racers:
            racer.start()
        for racer in racers:
            racer.join(10)
    state = _state(new, backfill_id)
    assert state["status"] == "DONE" and state["nextIndex"] == 5
    wanted = {run_id_of("nightly", _fire_time(h)): backfill_id for h in range(5)}
    assert _runs(new) == wanted
    assert old.backfills.runs_made + new.backfills.runs_made == 5
    # Each run's first node queued once, in one term's queue, with the run's fire time.
    handed = old_queue.pending() + new_queue.pending()
    assert sorted(f.fire_time for f, _v in handed) == [_fire_time(h) for h in range(5)]
    # Deposed: its election node gone, the old term's engine writes nothing.
    zk_client.delete(old_node)
    later = _create(new, config, overlapPolicy="ALLOW", hours=7)
    old.backfills.load()
    with pytest.raises(NotLeader):
        old.backfills.run_pass()
    with pytest.raises(NotLeader):
        old.backfills.pause("nightly", later)
    assert _state(new, later)["nextIndex"] == 0
    new.backfills.run_pass()
    # Its first five fires had runs (the earlier backfill's): recorded, not run again.
    assert _state(new, later)["status"] == "DONE"
    assert new.backfills.store.outcome("nightly", later).had_run == 5
    runs = _runs(new)
    assert len(runs) == 7 and runs[run_id_of("nightly", _fire_time(0))] == backfill_id
    assert runs[run_id_of("nightly", _fire_time(6))] == later


def test_forbid_waits_for_each_run_and_counts_each_end_once(stores: TermStores) -> None:
    config = _setup(stores)  # overlapPolicy FORBID, the default
    engine, queue = _engine(stores, Clock())
    backfill_id = _create(engine, config, hours=3)
    engine.backfills.run_pass()
    engine.backfills.run_pass()
    assert list(_runs(engine)) == [run_id_of("nightly", _fire_time(0))]
    ended = _finish(stores, engine, queue, ok=True)
    assert ended == run_id_of("nightly", _fire_time(0))
    engine.backfills.run_pass()
    assert len(_runs(engine)) == 2
    _finish(stores, engine, queue, ok=False)
    engine._advance_all()  # stepping again counts nothing twice
    engine.backfills.run_pass()
    _finish(stores, engine, queue, ok=True)
    outcome = engine.backfills.store.outcome("nightly", backfill_id)
    assert (outcome.succeeded, outcome.failed, outcome.had_run) == (2, 1, 0)
    assert _state(engine, backfill_id)["status"] == "DONE"
    store = engine.store
    runs = store.runs("nightly", store.run_ids("nightly"))
    assert [r.state.value for r in sorted(runs, key=lambda r: r.fire_time)] == [
        "succeeded",
        "failed",
        "succeeded",
    ]
    assert all(r.summary_json()["backfillId"] == backfill_id for r in runs)


def test_a_fire_that_has_a_run_already_is_recorded_and_not_run_twice(stores: TermStores) -> None:
    config = _setup(stores, OverlapPolicy.ALLOW)
    engine, _queue = _engine(stores, Clock())
    # The cron (or a trigger) made the run of 02:00 earlier.
    cron_run = engine._make_run(config, _fire_time(2), None, [])
    backfill_id = _create(engine, config, overlapPolicy="ALLOW")
    engine.backfills.run_pass()
    runs = _runs(engine)
    assert len(runs) == 5 and runs[cron_run.run_id] == ""  # the cron's run untouched
    assert engine.backfills.runs_made == 4
    assert engine.backfills.store.outcome("nightly", backfill_id).had_run == 1
    assert _state(engine, backfill_id)["status"] == "DONE"


def test_pause_resume_cancel_and_kill_running(stores: TermStores) -> None:
    config = _setup(stores)
    engine, _queue = _engine(stores, Clock())
    backfill_id = _create(engine, config, overlapPolicy="ALLOW")
    paused = engine.backfills.pause("nightly", backfill_id)
    assert paused.status.value == "PAUSED"
    engine.backfills.run_pass()
    assert _runs(engine) == {}
    engine.backfills.resume("nightly", backfill_id)
    engine.backfills.run_pass()
    assert len(_runs(engine)) == 5
    # A second one, FORBID, of 05:00 and 06:00: cancelled with killRunning, its one running
    # run is cancelled and the other never made.
    second = _create(engine, config, hours=7, first=5)
    engine.backfills.run_pass()
    engine.backfills.run_pass()
    running = run_id_of("nightly", _fire_time(5))
    assert _state(engine, second)["nextIndex"] == 1
    after = engine.backfills.cancel("nightly", second, kill_running=True)
    assert after.status.value == "CANCELLED"
    got = engine.store.run("nightly", running)
    assert got is not None and got[0].state.value == "cancelled"
    engine.backfills.run_pass()
    assert run_id_of("nightly", _fire_time(6)) not in _runs(engine)
    outcome = engine.backfills.store.outcome("nightly", second)
    assert (outcome.succeeded, outcome.failed) == (0, 1)  # the cancelled run counted once
    with pytest.raises(Conflict, match="of workflow nightly is CANCELLED"):
        engine.backfills.resume("nightly", second)


def test_fires_per_minute_paces_the_runs_and_a_deleted_workflow_cancels(
    stores: TermStores,
) -> None:
    config = _setup(stores, OverlapPolicy.ALLOW)
    clock = Clock()
    engine, _queue = _engine(stores, clock, max_active=1)
    backfill_id = _create(engine, config, firesPerMinute=2)
    with pytest.raises(QuotaExceeded):
        _create(engine, config)
    engine.backfills.run_pass()
    engine.backfills.run_pass()
    assert len(_runs(engine)) == 1
    clock.now += 29
    engine.backfills.run_pass()
    assert len(_runs(engine)) == 1
    clock.now += 1
    engine.backfills.run_pass()
    assert len(_runs(engine)) == 2
    engine.store.delete("nightly")
    engine.backfills.run_pass()
    assert _state(engine, backfill_id)["status"] == "CANCELLED"
    assert BackfillStore(stores.registry, stores.fence, 1).active_count() == 0

"""The workflow engine over a real ZooKeeper (issue 27), with the launcher's and the status
handler's writes made as they make them (`launch_ops`, `shard_ended_ops`): a node whose
parents just ended is queued exactly once even when two leaders' engines step the run at the
same moment; a new leader resumes a run where it stood and counts a shard whose end was lost as
failed; cron fires are caught up under `misfire` and overlapPolicy."""

from __future__ import annotations

import json
import threading
import time

from scheduler.leader.workflows import WorkflowEngine
from scheduler.model.config.policies import OverlapPolicy
from scheduler.model.task_id import TaskId, TaskType
from scheduler.model.workflow import Condition, WorkflowConfig, WorkflowNode
from scheduler.storage import layout
from scheduler.storage.state import RunningTask
from scheduler.storage.term_stores import TermStores
from scheduler.storage.transactions import FencedWriter
from scheduler.storage.workflow_store import (
    NodeFire,
    WorkflowQueue,
    WorkflowStore,
    launch_ops,
)


class Acting:
    acting = True


def _jobs(stores: TermStores, shards: dict[str, int]) -> None:
    app = {"appName": "app", "appURL": "http://example.invalid/a.tgz", "bootstrapScript": "true"}
    stores.registry.create("/config/app/app", json.dumps(app).encode())
    for name, count in shards.items():
        job = {
            "jobName": name,
            "appName": "app",
            "jobType": "SCRIPT",
            "jobExecutionType": "TRANSIENT",
            "scriptCommandLine": "true",
            "cron": "",
            "shardingTotalCount": count,
            "cpuCount": 0.1,
            "memoryMB": 16,
        }
        stores.registry.create(f"/config/job/{name}", json.dumps(job).encode())


def _engine(stores: TermStores) -> tuple[WorkflowEngine, WorkflowQueue]:
    store = WorkflowStore(stores.registry, stores.fence, "UTC", 200)
    queue = WorkflowQueue()
    return WorkflowEngine(store, stores, Acting(), queue, lambda _task_id: True), queue


DIAMOND = WorkflowConfig(
    "diamond",
    "app",
    (
        WorkflowNode("a", "ja"),
        WorkflowNode("b", "jb", ("a",)),
        WorkflowNode("c", "jc", ("a",)),
        WorkflowNode("d", "jd", ("b", "c")),
        WorkflowNode("f", "jf", ("b",), Condition.ON_FAILURE),
    ),
)


def _queued(stores: TermStores, job: str) -> list[str]:
    return stores.registry.children(layout.workflow_queue_folder(job))


def _launch(stores: TermStores, fire: NodeFire, shards: int) -> list[str]:
    """What the launcher writes: the entry taken, the fire record, the index; and the tasks'
    running nodes."""
    tasks = [str(TaskId.new(fire.job, i, TaskType.READY, "S0")) for i in range(shards)]
    writer = FencedWriter(stores.registry, stores.fence)  # type: ignore[arg-type]
    writer.commit("launch", list(launch_ops(fire, 0, tasks, shards)))
    for task in tasks:
        stores.running.add(RunningTask(task, "S0", workflow_fire=fire.key))
    return tasks


def _end(stores: TermStores, store: WorkflowStore, fire: NodeFire, task: str, ok: bool) -> None:
    """What the status handler writes when a shard of the fire ends for good."""
    item = TaskId.parse(task).item
    stores.running.remove(
        task, store.shard_ended_ops(fire.key, item, ok, "" if ok else "exit 3", task)
    )


def _fire(queue: WorkflowQueue, node: str) -> NodeFire:
    found = [f for f, _v in queue.pending() if f.node == node]
    assert len(found) == 1, (node, queue.pending())
    return found[0]


def test_two_leaders_stepping_together_queue_each_node_exactly_once(stores: TermStores) -> None:
    _jobs(stores, {"ja": 2, "jb": 1, "jc": 1, "jd": 1, "jf": 1})
    first, queue = _engine(stores)
    second, _other = _engine(stores)
    first.store.save(DIAMOND, create=True)
    run = first.trigger("diamond")
    fire_a = _fire(queue, "a")
    for task in _launch(stores, fire_a, 2):
        _end(stores, first.store, fire_a, task, True)
    # Both engines see a's end at once: b and c are queued once between them.
    racers = [threading.Thread(target=e._advance_all) for e in (first, second)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(10)
    assert len(_queued(stores, "jb")) == 1 and len(_queued(stores, "jc")) == 1
    assert _queued(stores, "jd") == []
    loaded = WorkflowQueue()
    loaded.load(first.store.queued())  # what a new term's launcher gets
    fire_b, fire_c = _fire(loaded, "b"), _fire(loaded, "c")
    (task_b,) = _launch(stores, fire_b, 1)
    _end(stores, first.store, fire_b, task_b, True)
    first._advance_all()
    second._advance_all()
    assert _queued(stores, "jd") == []  # d waits for c too (fan-in)
    (task_c,) = _launch(stores, fire_c, 1)
    _end(stores, first.store, fire_c, task_c, True)
    second._advance_all()
    first._advance_all()
    assert len(_queued(stores, "jd")) == 1 and _queued(stores, "jf") == []
    loaded.load(first.store.queued())
    fire_d = _fire(loaded, "d")
    (task_d,) = _launch(stores, fire_d, 1)
    _end(stores, first.store, fire_d, task_d, True)
    first._advance_all()
    got = first.store.run("diamond", run.run_id)
    assert got is not None
    done = got[0]
    assert done.state.value == "succeeded"
    assert {n: r.state.value for n, r in done.nodes.items()} == {
        "a": "succeeded", "b": "succeeded", "c": "succeeded", "d": "succeeded", "f": "skipped",
    }  # fmt: skip
    assert all(r.attempt <= 1 for r in done.nodes.values())
    assert set(done.node("a").task_ids) >= set(stores.registry.children(layout.WORKFLOW_TASKS))
    assert stores.registry.children(layout.WORKFLOW_ACTIVE) == []
    assert stores.registry.children(layout.WORKFLOW_FIRES) == []  # forgotten once ended


def test_a_new_leader_resumes_and_counts_a_shard_whose_end_was_lost_as_failed(
    stores: TermStores,
) -> None:
    _jobs(stores, {"ja": 3, "jb": 1, "jc": 1, "jd": 1, "jf": 1})
    old, queue = _engine(stores)
    old.store.save(DIAMOND, create=True)
    run = old.trigger("diamond")
    fire_a = _fire(queue, "a")
    tasks = _launch(stores, fire_a, 3)
    _end(stores, old.store, fire_a, tasks[0], True)
    # Shard 1's failure removed its task, and the leader died before recording its end; shard 2
    # still runs.
    stores.running.remove(tasks[1])
    new, new_queue = _engine(stores)
    new.start()
    try:
        record = new.store.fire_record(fire_a.key)
        assert record is not None
        assert set(record[0].done) == {0, 1} and record[0].done[1][0] is False
        assert "lost in a leader change" in record[0].done[1][1]
        new._advance_all()
        got = new.store.run("diamond", run.run_id)
        assert got is not None and got[0].node("a").state.value == "running"  # shard 2 runs
        _end(stores, new.store, fire_a, tasks[2], True)
        new._advance_all()
        got = new.store.run("diamond", run.run_id)
        assert got is not None
        assert got[0].node("a").state.value == "failed"
        assert {n: r.state.value for n, r in got[0].nodes.items()} == {
            "a": "failed", "b": "skipped", "c": "skipped", "d": "skipped", "f": "skipped",
        }  # fmt: skip
        assert got[0].state.value == "failed"
    finally:
        new.stop()
    assert len(new_queue) == 0


def test_cron_fires_missed_while_no_leader_acted_are_caught_up_under_misfire(
    stores: TermStores,
) -> None:
    _jobs(stores, {"ja": 1})
    engine, queue = _engine(stores)
    store = engine.store
    one = (WorkflowNode("a", "ja"),)
    every_second = "* * * * * ?"
    store.save(
        WorkflowConfig(
            "caught",
            "app",
            one,
            cron=every_second,
            misfire=True,
            overlap_policy=OverlapPolicy.ALLOW,
        ),
        create=True,
    )
    store.save(WorkflowConfig("dropped", "app", one, cron=every_second), create=True)
    store.save(
        WorkflowConfig("one_at_a_time", "app", one, cron=every_second, misfire=True), create=True
    )
    store.save(
        WorkflowConfig(
            "few",
            "app",
            one,
            cron=every_second,
            misfire=True,
            overlap_policy=OverlapPolicy.ALLOW,
        ),
        create=True,
    )
    now = float(int(time.time()))
    writer = FencedWriter(stores.registry, stores.fence)  # type: ignore[arg-type]
    for name in ("caught", "dropped", "one_at_a_time"):
        writer.commit("record", [store.last_fire_op(name, now - 60, -1)])
    writer.commit("record", [store.last_fire_op("few", now - 3, -1)])
    engine._fire_crons(now)
    # misfire, ALLOW, 3 fires missed: each one is a run.
    assert sorted(store.run_ids("few")) == [f"few@{int((now - k) * 1000):013d}" for k in (2, 1, 0)]
    # misfire, ALLOW: 60 fires missed, more than catch_up_cap (10): the older ones skipped, the
    # newest 10 caught up, in order.
    caught = store.run_ids("caught")
    assert len(caught) == 10
    assert sorted(caught)[0].endswith(f"{int((now - 9) * 1000):013d}")
    # no misfire: the missed fires are skipped, the one on time (now) runs.
    assert store.run_ids("dropped") == [f"dropped@{int(now * 1000):013d}"]
    # misfire, FORBID: one run at a time (the newest 10 fires wait for it).
    assert store.run_ids("one_at_a_time") == [f"one_at_a_time@{int((now - 9) * 1000):013d}"]
    engine._fire_crons(now)
    assert len(store.run_ids("one_at_a_time")) == 1
    assert len(store.run_ids("caught")) == 10
    assert len(queue) == 10 + 1 + 1 + 3


def test_deleting_a_workflow_cancels_its_run_kills_its_tasks_and_drops_the_run(
    stores: TermStores,
) -> None:
    _jobs(stores, {"ja": 2, "jb": 1, "jc": 1, "jd": 1, "jf": 1})
    killed: list[str] = []
    store = WorkflowStore(stores.registry, stores.fence, "UTC", 200)
    queue = WorkflowQueue()

    def kill(task_id: str) -> bool:
        killed.append(task_id)
        return True

    engine = WorkflowEngine(store, stores, Acting(), queue, kill)
    store.save(DIAMOND, create=True)
    run = engine.trigger("diamond")
    tasks = _launch(stores, _fire(queue, "a"), 2)
    queue.drop([_fire(queue, "a").key])  # the launcher took it
    store.delete("diamond")
    store.delete_runs("diamond")  # as the API's delete: the ended ones (none yet)
    assert store.run_ids("diamond") == [run.run_id]
    engine._advance_all()
    assert sorted(killed) == sorted(tasks)
    assert all(t.kill_reason == "user" for t in stores.running.tasks("ja"))
    assert store.run_ids("diamond") == []
    assert stores.registry.children(layout.WORKFLOW_ACTIVE) == []
    assert stores.registry.children(layout.WORKFLOW_FIRES) == []


def test_a_node_whose_job_is_disabled_before_its_launch_fails_and_its_launch_is_withdrawn(
    stores: TermStores,
) -> None:
    _jobs(stores, {"ja": 1, "jb": 1, "jc": 1, "jd": 1, "jf": 1})
    engine, queue = _engine(stores)
    engine.store.save(DIAMOND, create=True)
    run = engine.trigger("diamond")
    assert len(_queued(stores, "ja")) == 1 and len(queue) == 1
    stores.disabled.disable_job("ja")
    engine._advance_all()
    got = engine.store.run("diamond", run.run_id)
    assert got is not None
    assert got[0].node("a").state.value == "failed"
    assert "disabled" in got[0].node("a").reason
    assert _queued(stores, "ja") == [] and len(queue) == 0
    assert got[0].state.value == "failed"

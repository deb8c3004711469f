"""State stores on a real ZooKeeper: ready counts, caps, running tasks, failover, disable."""

from __future__ import annotations

import json
import time

import pytest
from kazoo.client import KazooClient

from scheduler.model.errors import NotLeader
from scheduler.model.task_id import TaskId, TaskType
from scheduler.storage.registry import Registry
from scheduler.storage.state import (
    DisableStore,
    FailoverQueue,
    ReadyQueue,
    RunningStore,
    RunningTask,
    failover_delay,
)
from scheduler.storage.transactions import Fence


def test_ready_queue_misfire_counts_and_caps(registry: Registry, fence: Fence) -> None:
    ready = ReadyQueue(registry, fence, cap=2)
    assert ready.add_transient("a", misfire=True)
    assert ready.add_transient("a", misfire=True)
    assert ready.add_transient("b", misfire=False)
    assert ready.add_transient("b", misfire=False)
    assert ready.counts() == {"a": 2, "b": 1}
    assert registry.get("/state/ready/a") == b"2"  # the original's decimal encoding
    assert ready.add_transient("c", misfire=True) is False  # cap of 2 jobs reached
    ready.take("a")
    ready.take("b")
    assert ready.counts() == {"a": 1}
    assert not registry.exists("/state/ready/b")
    ready.remove("a")
    assert ready.counts() == {}


def test_task_ids_round_trip_and_bad_ids_are_named() -> None:
    tid = TaskId.new("job", 3, TaskType.FAILOVER, "agent-S1")
    assert TaskId.parse(str(tid)) == tid
    assert tid.shard_key == "job@-@3"
    for bad in ("x", "j@-@x@-@READY@-@a@-@u", "j@-@1@-@SOMETIMES@-@a@-@u"):
        with pytest.raises(ValueError, match="task id"):
            TaskId.parse(bad)


def test_running_store_reads_ours_and_the_originals(registry: Registry, fence: Fence) -> None:
    running = RunningStore(registry, fence)
    tid = str(TaskId.new("job", 0, TaskType.READY, "S1"))
    running.add(RunningTask(tid, "S1", hostname="h1", state="TASK_RUNNING"))
    # Elastic-Job-Cloud 2.1.5 stored daemon tasks as {job}@-@{item} = task id.
    original = "old@-@1@-@READY@-@S2@-@9f0e"
    registry.put("/state/running/old/old@-@1", original.encode())
    tasks = {t.task_id: t for t in running.tasks()}
    assert tasks[tid].hostname == "h1" and tasks[tid].state == "TASK_RUNNING"
    assert tasks[original].agent_id == "S2"
    assert tasks[tid].to_json()["metaInfo"] == {"jobName": "job", "shardingItems": [0]}
    running.remove(tid)
    assert not registry.exists("/state/running/job")


def test_failover_queue_keeps_one_entry_per_shard(registry: Registry, fence: Fence) -> None:
    failover = FailoverQueue(registry, fence)
    first = str(TaskId.new("job", 2, TaskType.READY, "S1"))
    second = str(TaskId.new("job", 2, TaskType.FAILOVER, "S2"))
    assert failover.add(first) and failover.add(second)
    assert failover.entries() == [("job", 2, first)]
    failover.remove("job", 2)
    assert failover.entries() == []


def test_failover_delay_policy() -> None:
    assert [failover_delay(n) for n in range(1, 10)] == [0, 1, 2, 4, 8, 16, 32, 60, 60]
    assert failover_delay(10_000) == 60


def test_consecutive_failures_of_a_shard_back_off_until_a_success(
    registry: Registry, fence: Fence
) -> None:
    failover = FailoverQueue(registry, fence)
    started = time.time()
    for expected in range(1, 5):
        task = str(TaskId.new("job", 1, TaskType.FAILOVER, "S1"))
        assert failover.add(task)
        assert failover.add(task)  # a resent update: the same failure, not counted again
        not_before = failover.not_before("job", 1)
        assert started + failover_delay(expected) <= not_before
        assert not_before <= time.time() + failover_delay(expected)
        failover.remove("job", 1)  # relaunched
    assert json.loads(registry.get("/state/failover_backoff/job/1") or b"{}")["failures"] == 4
    assert failover.not_before("job", 0) == 0.0  # other shards are not held back
    failover.succeeded("job", 1)
    assert failover.not_before("job", 1) == 0.0
    assert failover.add(str(TaskId.new("job", 1, TaskType.FAILOVER, "S1")))
    assert failover.not_before("job", 1) <= time.time()  # counting starts over
    failover.remove_job("job")
    assert not registry.exists("/state/failover_backoff/job")
    assert failover.entries() == []


def test_disable_store_and_fence(registry: Registry, fence: Fence, zk_client: KazooClient) -> None:
    disabled = DisableStore(registry, fence)
    disabled.disable_app("app")
    disabled.disable_job("job")
    assert disabled.is_app_disabled("app") and disabled.is_job_disabled("job")
    assert registry.get("/state/disable/job/job") == b"job"
    disabled.enable_job("job")
    assert not disabled.is_job_disabled("job")
    zk_client.delete(fence.node_path)  # the term is over
    with pytest.raises(NotLeader):
        disabled.enable_app("app")
    assert disabled.is_app_disabled("app")

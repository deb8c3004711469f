"""The replica's metrics: runs counted once each from status updates, job series dropped with
their job, fire-to-launch latency, and the exposition parsed by prometheus_client's parser."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from executor.records import ExecutionRecord, encode_status_data
from scheduler.edge.metrics import (
    OTHER_JOBS,
    ReplicaCollector,
    ReplicaFigures,
    SchedulerMetrics,
    TermFigures,
    render_metrics,
)
from scheduler.leader.statistics.fire_times import FireTimes
from scheduler.model.job_events import JobEvent, JobEventKind
from scheduler.model.task_id import LaunchedTask, TaskId, TaskType


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the exposition, as Prometheus would read it."""
    text = generate_latest(registry).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def _runs(registry: CollectorRegistry, job: str, result: str) -> float:
    key = ("ejc_job_runs_total", (("job_name", job), ("result", result)))
    return _samples(registry).get(key, 0.0)


def _task(job: str, item: int = 0, kind: TaskType = TaskType.READY) -> TaskId:
    return TaskId.new(job, item, kind, "S0")


def _record(tid: TaskId, start_ms: int, end_ms: int | None, cause: str | None) -> str:
    record = ExecutionRecord.started(
        job_name=tid.job_name,
        task_id=str(tid),
        sharding_item=tid.item,
        hostname="h",
        ip="i",
        start_time_ms=start_ms,
    )
    if end_ms is not None:
        record = record.finished(end_ms, cause)
    return encode_status_data(record)


def _status(tid: TaskId, state: str, **extra: Any) -> dict[str, Any]:
    return {
        "task_id": {"value": str(tid)},
        "state": state,
        "source": "SOURCE_EXECUTOR",
        "executor_id": {"value": f"app@-@{tid.agent_id}"},
        **extra,
    }


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


def test_runs_are_counted_once_by_result_with_their_durations(
    registry: CollectorRegistry,
) -> None:
    metrics = SchedulerMetrics(registry)
    ok, bad, killed, lost, late = (_task("j", n) for n in range(5))
    for tid in (ok, bad):
        metrics.on_status(_status(tid, "TASK_RUNNING", data=_record(tid, 1000, None, None)), tid)
    metrics.on_status(_status(ok, "TASK_FINISHED", data=_record(ok, 1000, 3500, None)), ok)
    failed = _status(bad, "TASK_FAILED", data=_record(bad, 1000, 2000, "boom"))
    metrics.on_status(failed, bad)
    metrics.on_status(failed, bad)  # delivered again: counted once
    metrics.on_status(_status(killed, "TASK_KILLED", message="killed before it started"), killed)
    agent = {"source": "SOURCE_AGENT", "reason": "REASON_EXECUTOR_TERMINATED"}
    metrics.on_status({**_status(lost, "TASK_FAILED"), **agent}, lost)
    timeout = {"reason": "REASON_MAX_COMPLETION_TIME_REACHED"}
    metrics.on_status({**_status(late, "TASK_FAILED"), **timeout}, late)
    assert _runs(registry, "j", "success") == 1
    assert _runs(registry, "j", "failure") == 2
    assert _runs(registry, "j", "killed") == 1
    assert _runs(registry, "j", "timeout") == 1
    samples = _samples(registry)
    assert samples[("ejc_job_run_duration_seconds_count", (("job_name", "j"),))] == 2
    assert samples[("ejc_job_run_duration_seconds_sum", (("job_name", "j"),))] == 3.5
    bucket = ("ejc_job_run_duration_seconds_bucket", (("job_name", "j"), ("le", "2.0")))
    assert samples[bucket] == 1  # the 1 s failure; the 2.5 s success is above
    assert not any(name.endswith("_created") for name, _ in samples)


def test_daemon_runs_count_each_complete_and_an_idle_daemon_kill_counts_nothing(
    registry: CollectorRegistry,
) -> None:
    metrics = SchedulerMetrics(registry)
    busy, idle = _task("d", 0), _task("d", 1)
    for tid in (busy, idle):
        metrics.on_status(_status(tid, "TASK_RUNNING", message="output: stdout=a stderr=b"), tid)
    for n, cause in enumerate((None, "bad row", None)):
        start = 10_000 * (n + 1)
        data = _record(busy, start, None, None)
        metrics.on_status(_status(busy, "TASK_RUNNING", message="BEGIN", data=data), busy)
        data = _record(busy, start, start + 500, cause)
        metrics.on_status(_status(busy, "TASK_RUNNING", message="COMPLETE", data=data), busy)
    # A run cut short by the kill is a killed run; an idle daemon's kill ran nothing.
    cut = _record(busy, 50_000, 50_100, "killed by the scheduler")
    metrics.on_status(_status(busy, "TASK_KILLED", data=cut), busy)
    metrics.on_status(_status(idle, "TASK_KILLED"), idle)
    assert _runs(registry, "d", "success") == 2
    assert _runs(registry, "d", "failure") == 1
    assert _runs(registry, "d", "killed") == 1


def test_command_tasks_are_timed_from_the_command_executors_updates(
    registry: CollectorRegistry,
) -> None:
    metrics = SchedulerMetrics(registry)
    tid = _task("script")
    command = {"executor_id": {"value": str(tid)}}
    metrics.on_status({**_status(tid, "TASK_RUNNING", timestamp=100.0), **command}, tid)
    end = _status(tid, "TASK_FAILED", timestamp=104.0, message="Command exited with status 3")
    metrics.on_status({**end, **command}, tid)
    assert _runs(registry, "script", "failure") == 1
    count = ("ejc_job_run_duration_seconds_sum", (("job_name", "script"),))
    assert _samples(registry)[count] == 4.0


def test_a_deleted_jobs_series_go_and_job_labels_are_bounded(
    registry: CollectorRegistry,
) -> None:
    metrics = SchedulerMetrics(registry, max_jobs=2)
    for job in ("a", "b", "c"):
        tid = _task(job)
        metrics.on_status(_status(tid, "TASK_FINISHED"), tid)
    metrics.on_job_event(JobEvent(JobEventKind.FIRE_SKIPPED, "a", 1.0, "misfire off", fires=3))
    metrics.on_job_event(JobEvent(JobEventKind.FIRE_CAPPED, "b", 1.0, "queue full"))
    assert _runs(registry, "a", "success") == 1
    assert _runs(registry, OTHER_JOBS, "success") == 1  # the third job shares a label
    skipped = ("ejc_job_fires_skipped_total", (("job_name", "a"), ("outcome", "skipped")))
    assert _samples(registry)[skipped] == 3
    metrics.forget_job("a")
    samples = _samples(registry)
    assert not [key for key in samples if ("job_name", "a") in key[1]]
    assert _runs(registry, "b", "success") == 1
    metrics.retain_jobs(["c"])
    assert metrics.job_names() == set()
    assert not [key for key in _samples(registry) if ("job_name", "b") in key[1]]


def test_a_deleted_jobs_series_stay_gone_when_its_killed_tasks_end_until_it_runs_again(
    registry: CollectorRegistry,
) -> None:
    metrics = SchedulerMetrics(registry)
    done, running = _task("a", 0), _task("a", 1)
    metrics.on_launched([LaunchedTask(done, "S0", str(done))])
    metrics.on_status(_status(done, "TASK_FINISHED"), done)
    metrics.on_launched([LaunchedTask(running, "S0", str(running))])
    assert _runs(registry, "a", "success") == 1
    # Deleting the job drops its series and kills its running task, whose end comes later.
    metrics.forget_job("a")
    metrics.on_status(_status(running, "TASK_KILLED"), running)
    assert not [key for key in _samples(registry) if ("job_name", "a") in key[1]]
    assert "a" not in metrics.job_names()
    # Registered again under the same name: its new runs count.
    again = _task("a", 0)
    metrics.on_launched([LaunchedTask(again, "S0", str(again))])
    metrics.on_status(_status(again, "TASK_FAILED"), again)
    assert _runs(registry, "a", "failure") == 1 and _runs(registry, "a", "success") == 0


def test_fire_times_go_to_the_runs_that_run_them_and_time_the_launch(
    registry: CollectorRegistry,
) -> None:
    fires = FireTimes()
    fires.fired("j", 100.0)
    fires.fired("j", 110.0)
    first = [_task("j", item) for item in range(3)]
    # One round launches the run's three shards, in any order.
    seen = fires.launched([first[1], first[0], first[2]])
    assert seen == [(100.0, True), (100.0, False), (100.0, False)]
    second = _task("j", 1)
    assert fires.launched([second]) == [(110.0, True)]  # the item again: the next run
    # In one round: the run's other shard, then the item again (a run no fire of ours
    # queued), then a relaunch, which has no fire.
    assert fires.launched([_task("j", 0), _task("j", 1), _task("j", 0, TaskType.FAILOVER)]) == [
        (110.0, False),
        (None, True),
        (None, False),
    ]
    assert fires.fire_of(str(first[2])) == 100.0 and fires.fire_of("nosuch") is None
    metrics = SchedulerMetrics(registry)
    metrics.on_fire_launched(2.5)
    metrics.on_launched([LaunchedTask(second, "S0", str(second))])
    samples = _samples(registry)
    assert samples[("ejc_fire_to_launch_seconds_count", ())] == 1
    assert samples[("ejc_task_launches_total", (("type", "READY"),))] == 1
    assert samples[("ejc_task_launches_total", (("type", "FAILOVER"),))] == 0
    # A round's launches are counted by type.
    round_ = [_task("k", 0), _task("k", 1), _task("k", 0, TaskType.FAILOVER)]
    metrics.on_launched([LaunchedTask(task, "S0", str(task)) for task in round_])
    samples = _samples(registry)
    assert samples[("ejc_task_launches_total", (("type", "READY"),))] == 3
    assert samples[("ejc_task_launches_total", (("type", "FAILOVER"),))] == 1


def test_the_replica_collector_exports_role_connections_and_the_terms_figures(
    registry: CollectorRegistry,
) -> None:
    figures = ReplicaFigures(
        acting=True,
        terms=2,
        term_failures=1,
        leader_changes=3,
        zk_clients=1,
        zk_state="CONNECTED",
        started_at=1.7e9,
        term_started_at=1.7e9 + 5,
        mesos="connected",
        term=TermFigures(
            ready_runs=4,
            offers_held=2,
            offers_declined=7,
            launch_rounds=9,
            launches_unconfirmed=3,
            status_batches=5,
            status_batched=21,
            status_batch_fallbacks=1,
            trace_dropped=1,
            job_events={JobEventKind.FIRE_SKIPPED: 2},
            webhook_deliveries={"dropped": 1},
            webhook_queue=3,
        ),
    )
    registry.register(ReplicaCollector(lambda: figures))
    samples = _samples(registry)
    assert samples[("ejc_leader", ())] == 1
    assert samples[("ejc_replica_role", (("role", "leader"),))] == 1
    assert samples[("ejc_replica_role", (("role", "standby"),))] == 0
    assert samples[("ejc_leader_terms_total", ())] == 2
    assert samples[("ejc_zookeeper_state", (("state", "CONNECTED"),))] == 1
    assert samples[("ejc_mesos_connected", ())] == 1
    assert samples[("ejc_mesos_state", (("state", "connected"),))] == 1
    assert samples[("ejc_ready_runs", ())] == 4
    assert samples[("ejc_offers_declined_total", ())] == 7
    assert samples[("ejc_launch_rounds_total", ())] == 9
    assert samples[("ejc_launches_unconfirmed_total", ())] == 3
    assert samples[("ejc_status_batches_total", ())] == 5
    assert samples[("ejc_status_updates_batched_total", ())] == 21
    assert samples[("ejc_status_batch_fallbacks_total", ())] == 1
    assert samples[("ejc_trace_writer_dropped_total", ())] == 1
    assert samples[("ejc_webhook_queue_length", ())] == 3
    assert samples[("ejc_fires_skipped_total", ())] == 2
    assert samples[("ejc_fires_capped_total", ())] == 0
    assert samples[("ejc_webhook_deliveries_total", (("outcome", "dropped"),))] == 1

    standby = CollectorRegistry()
    idle = ReplicaFigures(False, 0, 0, 1, 1, "CONNECTED", 1.7e9)
    standby.register(ReplicaCollector(lambda: idle))
    samples = _samples(standby)
    assert samples[("ejc_replica_role", (("role", "standby"),))] == 1
    assert samples[("ejc_mesos_connected", ())] == 0
    assert not [key for key in samples if key[0] == "ejc_mesos_state"]


def test_workflow_runs_are_counted_by_result_with_their_duration_and_hidden_when_filtered() -> None:
    """Issue 27: per-workflow series; with metrics_require_auth filtering (a caller who does
    not see every app) none of them is shown, as workflow names belong to apps."""
    registry = CollectorRegistry()
    metrics = SchedulerMetrics(registry, max_jobs=1)
    metrics.on_workflow_run("nightly", "succeeded", 12.5)
    metrics.on_workflow_run("nightly", "failed", 3.0)
    metrics.on_workflow_run("hourly", "failed", 1.0)  # over the bound: counted as _other
    text = generate_latest(registry).decode()
    assert 'ejc_workflow_runs_total{result="succeeded",workflow_name="nightly"} 1.0' in text
    assert 'ejc_workflow_runs_total{result="failed",workflow_name="_other"} 1.0' in text
    assert 'ejc_workflow_run_duration_seconds_sum{workflow_name="nightly"} 15.5' in text
    shown = render_metrics(registry, lambda names: names).decode()
    assert "workflow_name=" not in shown and "# TYPE ejc_workflow_runs_total counter" in shown

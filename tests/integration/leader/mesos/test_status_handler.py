"""The status handler's state table, branch by branch, on a real ZooKeeper: what each Mesos task
state does to the running tasks, the ready and failover queues, the job events and the ack."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from executor.records import ExecutionRecord, encode_status_data
from scheduler.leader.mesos import status as status_module
from scheduler.leader.mesos.status import KIND_OF_STATE, StatusHandler, UpdateKind
from scheduler.model.job_events import JobEvent, JobEventCounts, JobEventKind
from scheduler.model.runs import NO_RUN_KEY
from scheduler.model.task_id import TaskId, TaskType
from scheduler.storage.layout import running_folder
from scheduler.storage.registry import Registry
from scheduler.storage.state import KILLED_BY_REPLACE, KILLED_BY_USER, RunningTask
from scheduler.storage.term_stores import TermStores
from scheduler.storage.transactions import Fence
from tests.integration.leader.mesos.helpers import status_update as _update
from tests.support.bodies import job_config

# Every TaskState of the Mesos v1 protocol (mesos.proto, Mesos 1.x).
MESOS_TASK_STATES = frozenset(
    {
        "TASK_STAGING",
        "TASK_STARTING",
        "TASK_RUNNING",
        "TASK_KILLING",
        "TASK_FINISHED",
        "TASK_FAILED",
        "TASK_KILLED",
        "TASK_ERROR",
        "TASK_LOST",
        "TASK_DROPPED",
        "TASK_UNREACHABLE",
        "TASK_GONE",
        "TASK_GONE_BY_OPERATOR",
        "TASK_UNKNOWN",
    }
)


class _Recorder:
    """What the handler did beyond ZooKeeper: kills sent, launcher wakes, job events."""

    def __init__(self) -> None:
        self.kills: list[str] = []
        self.wakes = 0
        self.events: list[JobEvent] = []
        self.seen: list[str] = []

    def kill(self, task_id: str) -> bool:
        self.kills.append(task_id)
        return True

    def wake(self) -> None:
        self.wakes += 1

    def kinds(self) -> list[JobEventKind]:
        return [event.kind for event in self.events]


@pytest.fixture
def seen() -> _Recorder:
    return _Recorder()


@pytest.fixture
def handler(stores: TermStores, seen: _Recorder) -> StatusHandler:
    handler = StatusHandler(stores, seen.kill, seen.wake)
    handler.event_listeners.append(seen.events.append)
    handler.listeners.append(lambda status, _tid: seen.seen.append(str(status["state"])))
    return handler


def _job(stores: TermStores, name: str, daemon: bool = False, **extra: Any) -> None:
    job = job_config(
        name,
        strict=False,
        **{
            "jobExecutionType": "DAEMON" if daemon else "TRANSIENT",
            "cron": "0/5 * * * * ?",
            "shardingTotalCount": 2,
            **extra,
        },
    )
    stores.registry.create(f"/config/job/{name}", job.to_bytes())


def _task(
    stores: TermStores,
    job: str,
    item: int = 0,
    kind: TaskType = TaskType.READY,
    kill_reason: str = "",
) -> str:
    task_id = str(TaskId.new(job, item, kind, "agent-1"))
    stores.running.add(RunningTask(task_id, "agent-1", kill_reason=kill_reason))
    return task_id


def _running(stores: TermStores, job: str) -> dict[str, RunningTask]:
    return {task.task_id: task for task in stores.running.tasks(job)}


def _daemon_record(task_id: str, cause: str | None) -> str:
    record = ExecutionRecord.started(
        job_name="d",
        task_id=task_id,
        sharding_item=0,
        hostname="h",
        ip="127.0.0.1",
        start_time_ms=1,
    ).finished(2, cause)
    return encode_status_data(record)


# -- the table -----------------------------------------------------------------------------


def test_every_mesos_task_state_has_one_kind_and_every_kind_a_handler(
    handler: StatusHandler,
) -> None:
    assert set(KIND_OF_STATE) == MESOS_TASK_STATES
    assert {KIND_OF_STATE[s] for s in ("TASK_FINISHED", "TASK_KILLED")} == {
        UpdateKind.FINISHED,
        UpdateKind.KILLED,
    }
    assert set(handler.handlers) == set(UpdateKind)


def test_a_state_from_a_newer_mesos_is_logged_as_an_error_acked_and_writes_nothing(
    handler: StatusHandler,
    stores: TermStores,
    registry: Registry,
    seen: _Recorder,
    caplog: pytest.LogCaptureFixture,
) -> None:
    _job(stores, "job", failover=True)
    task_id = _task(stores, "job")
    before = registry.get(f"/state/running/job/{task_id}")
    with caplog.at_level(logging.ERROR, logger=status_module.__name__):
        # Not acking would hold every later update of the task at the agent, its end included.
        assert handler.handle(_update(task_id, "TASK_FROM_A_NEWER_MESOS"))
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any("TASK_FROM_A_NEWER_MESOS" in e and task_id in e for e in errors), errors
    assert registry.get(f"/state/running/job/{task_id}") == before
    assert stores.failover.entries() == [] and stores.ready.counts() == {}
    assert seen.events == [] and seen.wakes == 0 and seen.kills == []


# -- active ---------------------------------------------------------------------------------


def test_an_active_update_records_the_state_and_adopts_a_task_it_did_not_know(
    handler: StatusHandler, stores: TermStores
) -> None:
    _job(stores, "job")
    known = _task(stores, "job", 0)
    assert handler.handle(_update(known, "TASK_RUNNING"))
    adopted = str(TaskId.new("job", 1, TaskType.READY, "agent-2"))  # launched before a crash
    assert handler.handle(_update(adopted, "TASK_STARTING"))
    tasks = _running(stores, "job")
    assert tasks[known].state == "TASK_RUNNING"
    assert tasks[adopted].state == "TASK_STARTING" and tasks[adopted].agent_id == "agent-2"


def test_an_active_update_of_a_deleted_job_kills_the_task(
    handler: StatusHandler, stores: TermStores, seen: _Recorder
) -> None:
    task_id = str(TaskId.new("gone", 0, TaskType.READY, "agent-1"))
    assert handler.handle(_update(task_id, "TASK_RUNNING"))
    assert seen.kills == [task_id]
    assert stores.running.tasks("gone") == []


def test_a_stale_active_update_after_the_end_is_ignored(
    handler: StatusHandler, stores: TermStores
) -> None:
    _job(stores, "job")
    task_id = _task(stores, "job")
    assert handler.handle(_update(task_id, "TASK_FINISHED"))
    assert handler.handle(_update(task_id, "TASK_RUNNING"))
    assert stores.running.tasks("job") == []


def test_daemon_begin_and_complete_set_the_idle_flag_and_a_failed_run_is_reported(
    handler: StatusHandler, stores: TermStores, seen: _Recorder
) -> None:
    _job(stores, "d", daemon=True)
    task_id = _task(stores, "d")
    assert handler.handle(_update(task_id, "TASK_RUNNING", "BEGIN"))
    assert _running(stores, "d")[task_id].idle is False
    ok = _daemon_record(task_id, None)
    assert handler.handle(_update(task_id, "TASK_RUNNING", "COMPLETE", data=ok))
    assert _running(stores, "d")[task_id].idle is True
    assert seen.events == []
    assert handler.handle(_update(task_id, "TASK_RUNNING", "BEGIN"))
    assert _running(stores, "d")[task_id].idle is False
    failed = _daemon_record(task_id, "Traceback\nValueError: boom")
    assert handler.handle(_update(task_id, "TASK_RUNNING", "COMPLETE", data=failed))
    assert seen.kinds() == [JobEventKind.RUN_FAILED]
    assert seen.events[0].reason == "daemon run failed: ValueError: boom"
    assert handler.handle(_update(task_id, "TASK_RUNNING", "BEGIN"))
    slow = _daemon_record(task_id, "timed out after 5 s")
    assert handler.handle(_update(task_id, "TASK_RUNNING", "COMPLETE", data=slow))
    # A timed-out run is one event, the timeout, counted as a failed run too (issue 30).
    assert seen.kinds()[1:] == [JobEventKind.RUN_TIMED_OUT]
    assert seen.events[1].reason == "daemon run timed out after 5 s"
    assert seen.events[1].given_up is True
    counts = JobEventCounts()
    for event in seen.events:
        counts.add(event)
    assert counts.get(JobEventKind.RUN_FAILED) == 2 and counts.get(JobEventKind.RUN_TIMED_OUT) == 1
    assert _running(stores, "d")[task_id].idle is True
    assert stores.failover.entries() == []  # the next run comes on the cron


@pytest.mark.parametrize("state", ["TASK_UNKNOWN", "TASK_LOST", "TASK_GONE"])
def test_an_idle_daemon_task_mesos_no_longer_knows_is_relaunched_without_a_failure(
    handler: StatusHandler, stores: TermStores, seen: _Recorder, state: str
) -> None:
    # The local cluster restarted: reconciliation finds the daemon's task unknown (issue 30).
    _job(stores, "d", daemon=True, failover=False, maxRetries=0)
    task_id = _task(stores, "d")
    assert handler.handle(_update(task_id, "TASK_RUNNING", "COMPLETE"))
    assert _running(stores, "d")[task_id].idle is True
    answer = _update(
        task_id, state, "Reconciliation: Task is unknown", reason="REASON_RECONCILIATION"
    )
    assert handler.handle(answer)
    assert seen.events == []  # no run_failed, no webhook
    assert stores.running.tasks("d") == []
    assert [(job, item) for job, item, _ in stores.failover.entries()] == [("d", 0)]
    assert stores.failover.not_before("d", 0) == 0  # no failure counted: no back-off
    assert answer[NO_RUN_KEY] is True  # the metrics count no run
    assert answer["message"].endswith("the daemon task was idle (no run going on), started again")


@pytest.mark.parametrize("state", ["TASK_UNKNOWN", "TASK_LOST", "TASK_GONE"])
def test_a_launch_that_never_reached_mesos_is_relaunched_without_a_failure(
    handler: StatusHandler, stores: TermStores, seen: _Recorder, state: str
) -> None:
    # A leader stopped between its bookkeeping and the ACCEPT: the task was never recorded
    # started (its node still TASK_STAGING) and the next leader's reconciliation finds it
    # unknown.
    _job(stores, "t", failover=False, maxRetries=0)
    task_id = _task(stores, "t")
    assert _running(stores, "t")[task_id].state == "TASK_STAGING"
    answer = _update(
        task_id, state, "Reconciliation: Task is unknown", reason="REASON_RECONCILIATION"
    )
    assert handler.handle(answer)
    assert seen.events == []  # no run_failed, no webhook: no run was going on
    assert stores.running.tasks("t") == []
    assert [(job, item) for job, item, _ in stores.failover.entries()] == [("t", 0)]
    assert stores.failover.not_before("t", 0) == 0  # no failure counted: no back-off
    assert answer[NO_RUN_KEY] is True
    assert answer["message"].endswith("its launch never reached Mesos, started again")


def test_a_started_task_mesos_no_longer_knows_or_a_staging_one_lost_otherwise_fails(
    handler: StatusHandler, stores: TermStores, seen: _Recorder
) -> None:
    _job(stores, "t", failover=False)
    started = _task(stores, "t", 0)
    assert handler.handle(_update(started, "TASK_STARTING"))
    unknown = _update(
        started, "TASK_UNKNOWN", "Reconciliation: Task is unknown", reason="REASON_RECONCILIATION"
    )
    assert handler.handle(unknown)
    staging = _task(stores, "t", 1)
    lost = _update(staging, "TASK_LOST", "agent removed", reason="REASON_AGENT_REMOVED")
    assert handler.handle(lost)
    # Both may have run: each is a failed run (failover is off), nothing relaunched.
    assert seen.kinds() == [JobEventKind.RUN_FAILED, JobEventKind.RUN_FAILED]
    assert stores.failover.entries() == [] and stores.running.tasks("t") == []
    assert NO_RUN_KEY not in unknown and NO_RUN_KEY not in lost


def test_a_daemon_task_is_idle_once_started_until_its_first_run_begins(
    handler: StatusHandler, stores: TermStores
) -> None:
    _job(stores, "d", daemon=True)
    _job(stores, "t")
    daemon, transient = _task(stores, "d"), _task(stores, "t")
    for task_id in (daemon, transient):
        started = _update(task_id, "TASK_RUNNING", "output: ...", source="SOURCE_EXECUTOR")
        assert handler.handle(started)
    assert _running(stores, "d")[daemon].idle is True
    assert _running(stores, "t")[transient].idle is False
    assert handler.handle(_update(daemon, "TASK_RUNNING", "BEGIN", source="SOURCE_EXECUTOR"))
    assert _running(stores, "d")[daemon].idle is False
    # A reconciliation answer (the master's) changes nothing.
    again = _update(daemon, "TASK_RUNNING", "Reconciliation: Latest task state")
    assert handler.handle({**again, "source": "SOURCE_MASTER"})
    assert _running(stores, "d")[daemon].idle is False


def test_a_busy_daemon_task_or_one_lost_otherwise_is_still_a_failure(
    handler: StatusHandler, stores: TermStores, seen: _Recorder
) -> None:
    _job(stores, "d", daemon=True)
    busy = _task(stores, "d", 0)
    assert handler.handle(_update(busy, "TASK_RUNNING", "BEGIN"))
    unknown = _update(
        busy, "TASK_UNKNOWN", "Reconciliation: Task is unknown", reason="REASON_RECONCILIATION"
    )
    assert handler.handle(unknown)
    idle = _task(stores, "d", 1)
    assert handler.handle(_update(idle, "TASK_RUNNING", "COMPLETE"))
    lost = _update(idle, "TASK_LOST", "agent removed", reason="REASON_AGENT_REMOVED")
    assert handler.handle(lost)
    # Both relaunched through a failover that counts a failure (a run was cut short, or the
    # agent was lost while Mesos could say so): as before.
    assert stores.failover.not_before("d", 0) > 0 and stores.failover.not_before("d", 1) > 0
    assert sorted(item for _, item, _ in stores.failover.entries()) == [0, 1]
    assert NO_RUN_KEY not in unknown and NO_RUN_KEY not in lost


# -- unreachable ----------------------------------------------------------------------------


def test_an_unreachable_task_is_kept_until_mesos_says_more(
    handler: StatusHandler, stores: TermStores, seen: _Recorder
) -> None:
    _job(stores, "job", failover=True)
    task_id = _task(stores, "job")
    assert handler.handle(_update(task_id, "TASK_UNREACHABLE", "agent partitioned"))
    assert _running(stores, "job")[task_id].state == "TASK_UNREACHABLE"
    unknown = str(TaskId.new("job", 1, TaskType.READY, "agent-1"))
    assert handler.handle(_update(unknown, "TASK_UNREACHABLE"))
    assert list(_running(stores, "job")) == [task_id]
    assert stores.failover.entries() == [] and seen.events == [] and seen.wakes == 0


# -- finished -------------------------------------------------------------------------------


def test_a_finished_failover_run_forgets_its_shards_failures(
    handler: StatusHandler, stores: TermStores, registry: Registry, seen: _Recorder
) -> None:
    _job(stores, "job", failover=True)
    failed = _task(stores, "job")
    assert handler.handle(_update(failed, "TASK_FAILED"))
    assert registry.exists("/state/failover_backoff/job/0")
    stores.failover.remove("job", 0)
    relaunch = _task(stores, "job", kind=TaskType.FAILOVER)
    assert handler.handle(_update(relaunch, "TASK_FINISHED"))
    assert stores.running.tasks("job") == []
    assert not registry.exists("/state/failover_backoff/job/0")
    assert seen.events == [] and seen.wakes == 2


# -- killed ---------------------------------------------------------------------------------


def test_a_killed_transient_task_is_no_failure(
    handler: StatusHandler, stores: TermStores, seen: _Recorder
) -> None:
    _job(stores, "job", failover=True)
    task_id = _task(stores, "job")
    assert handler.handle(_update(task_id, "TASK_KILLED"))
    assert stores.running.tasks("job") == []
    assert stores.failover.entries() == [] and seen.events == [] and seen.wakes == 1


def test_a_killed_daemon_is_queued_again_unless_disabled_or_still_running(
    handler: StatusHandler, stores: TermStores
) -> None:
    _job(stores, "d", daemon=True)
    first, second = _task(stores, "d", 0), _task(stores, "d", 1)
    assert handler.handle(_update(first, "TASK_KILLED"))
    assert stores.ready.counts() == {}  # shard 1 still runs
    assert handler.handle(_update(second, "TASK_KILLED"))
    assert stores.ready.counts() == {"d": 1}
    stores.ready.remove("d")
    stores.disabled.disable_job("d")
    assert handler.handle(_update(_task(stores, "d"), "TASK_KILLED"))
    assert stores.ready.counts() == {}


@pytest.mark.parametrize("reason", [KILLED_BY_USER, KILLED_BY_REPLACE])
def test_a_task_killed_on_purpose_is_no_failure_whatever_its_state(
    handler: StatusHandler,
    stores: TermStores,
    seen: _Recorder,
    caplog: pytest.LogCaptureFixture,
    reason: str,
) -> None:
    _job(stores, "job", failover=True)
    task_id = _task(stores, "job", kill_reason=reason)
    with caplog.at_level(logging.INFO, logger=status_module.__name__):
        assert handler.handle(_update(task_id, "TASK_LOST"))
    assert stores.running.tasks("job") == []
    assert stores.failover.entries() == [] and seen.events == []
    assert any(f"{task_id} killed by " in r.getMessage() for r in caplog.records)


# -- failed, lost, error, gone, dropped, unknown ----------------------------------------------


@pytest.mark.parametrize(
    "state",
    sorted(
        MESOS_TASK_STATES
        - {"TASK_FINISHED", "TASK_KILLED", "TASK_UNREACHABLE"}
        - {"TASK_STAGING", "TASK_STARTING", "TASK_RUNNING", "TASK_KILLING"}
    ),
)
def test_a_failed_shard_fails_over(
    handler: StatusHandler, stores: TermStores, seen: _Recorder, state: str
) -> None:
    _job(stores, "job", failover=True)
    task_id = _task(stores, "job", 1)
    assert handler.handle(_update(task_id, state, "exit 1"))
    assert stores.running.tasks("job") == []
    assert stores.failover.entries() == [("job", 1, task_id)]
    assert seen.events == [] and seen.wakes == 1 and seen.seen == [state]


def test_a_failed_shard_of_a_daemon_job_always_fails_over(
    handler: StatusHandler, stores: TermStores
) -> None:
    _job(stores, "d", daemon=True)
    task_id = _task(stores, "d")
    assert handler.handle(_update(task_id, "TASK_FAILED"))
    assert stores.failover.entries() == [("d", 0, task_id)]


def test_without_failover_a_failure_is_reported_once_even_when_resent(
    handler: StatusHandler, stores: TermStores, seen: _Recorder
) -> None:
    _job(stores, "job")
    task_id = _task(stores, "job")
    assert handler.handle(_update(task_id, "TASK_FAILED", "exit 3"))
    assert handler.handle(_update(task_id, "TASK_FAILED", "exit 3"))  # resent
    assert seen.kinds() == [JobEventKind.RUN_FAILED]
    assert seen.events[0].reason == "exit 3; failover is off"
    assert stores.failover.entries() == []


def test_a_shard_is_not_relaunched_after_max_retries(
    handler: StatusHandler, stores: TermStores, seen: _Recorder
) -> None:
    _job(stores, "job", failover=True, maxRetries=1)
    first = _task(stores, "job")
    assert handler.handle(_update(first, "TASK_FAILED", "exit 1"))
    assert stores.failover.entries() == [("job", 0, first)]
    stores.failover.remove("job", 0)
    again = _task(stores, "job", kind=TaskType.FAILOVER)
    assert handler.handle(_update(again, "TASK_FAILED", "exit 1"))
    assert stores.failover.entries() == []
    assert seen.kinds() == [JobEventKind.RUN_FAILED]
    assert seen.events[0].reason == ("exit 1; not relaunched: failed 2 times, maxRetries is 1")


def test_a_disabled_jobs_failure_is_neither_relaunched_nor_reported(
    handler: StatusHandler, stores: TermStores, seen: _Recorder
) -> None:
    _job(stores, "job", failover=True)
    stores.disabled.disable_job("job")
    assert handler.handle(_update(_task(stores, "job"), "TASK_FAILED"))
    assert stores.failover.entries() == [] and seen.events == []


# -- timeouts -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "extra", "said"),
    [
        ("TASK_KILLED", {"message": "timed out after 7 s"}, "timed out after 7 s"),
        ("TASK_FAILED", {"reason": "REASON_MAX_COMPLETION_TIME_REACHED"}, "timed out after 9 s"),
    ],
)
def test_a_run_stopped_for_its_timeout_is_a_failure_even_when_killed_on_purpose(
    handler: StatusHandler,
    stores: TermStores,
    seen: _Recorder,
    state: str,
    extra: dict[str, str],
    said: str,
) -> None:
    _job(stores, "job", timeoutSeconds=9)
    task_id = _task(stores, "job", kill_reason=KILLED_BY_USER)
    update = _update(task_id, state, **({"message": ""} | extra))
    assert handler.handle(update)
    assert update["message"] == said  # what the event trace and the runs show
    # One event for the run (one trace row, one webhook POST): the timeout, which says the
    # shard is not relaunched and counts as a failed run too (issue 30).
    assert seen.kinds() == [JobEventKind.RUN_TIMED_OUT]
    assert seen.events[0].reason == f"{said}; failover is off"
    assert seen.events[0].given_up is True
    assert stores.running.tasks("job") == []


def test_a_timed_out_run_relaunched_by_failover_is_one_timeout_event_not_given_up(
    handler: StatusHandler, stores: TermStores, seen: _Recorder
) -> None:
    _job(stores, "job", failover=True, maxRetries=1, timeoutSeconds=3)
    first = _task(stores, "job")
    assert handler.handle(_update(first, "TASK_FAILED", "timed out after 3 s"))
    assert seen.kinds() == [JobEventKind.RUN_TIMED_OUT]
    assert seen.events[0].reason == "timed out after 3 s; relaunched (failover)"
    assert seen.events[0].given_up is False
    assert len(stores.failover.entries()) == 1


# -- not the leader -------------------------------------------------------------------------


def test_an_update_a_deposed_leader_cannot_record_is_not_acked(
    stores: TermStores, registry: Registry, seen: _Recorder
) -> None:
    _job(stores, "job", failover=True)
    task_id = _task(stores, "job")
    assert stores.fence is not None
    deposed = TermStores.build(registry, Fence(stores.fence.node_path, lambda: False), "UTC", 9)
    handler = StatusHandler(deposed, seen.kill, seen.wake)
    assert not handler.handle(_update(task_id, "TASK_FAILED"))
    assert not handler.handle(_update(task_id, "TASK_RUNNING"))
    assert list(_running(stores, "job")) == [task_id]
    assert stores.failover.entries() == [] and handler.counts == {}


def _watch_reads(
    stores: TermStores,
    monkeypatch: pytest.MonkeyPatch,
    then: Callable[[str, tuple[RunningTask, int] | None], None] = lambda _t, _g: None,
) -> list[str]:
    """The task ids the handler reads running nodes of (`RunningStore.task`), in order; `then`
    runs after each read, before the handler gets its answer (to change the node meanwhile)."""
    read = stores.running.task
    reads: list[str] = []

    def watched(job: str, tid: str) -> tuple[RunningTask, int] | None:
        got = read(job, tid)
        reads.append(tid)
        then(tid, got)
        return got

    monkeypatch.setattr(stores.running, "task", watched)
    return reads


# -- one request per update, and no lost kill reason ---------------------------------------------


def test_a_kill_reason_recorded_between_the_read_and_the_write_is_kept(
    handler: StatusHandler, stores: TermStores, seen: _Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The handler reads the task's node, then writes it over the version it read. A user's
    # kill recorded in between (an API thread) used to be written over by the state, and the
    # kill's end then counted as a failure and relaunched.
    _job(stores, "job", failover=True)
    task_id = _task(stores, "job")
    raced: list[str] = []

    def kill_once(tid: str, _got: object) -> None:
        if not raced:
            raced.append(tid)
            assert stores.running.mark_killed(tid, KILLED_BY_USER)

    _watch_reads(stores, monkeypatch, kill_once)
    assert handler.handle(_update(task_id, "TASK_RUNNING"))
    (task,) = stores.running.tasks("job")
    assert (task.state, task.kill_reason) == ("TASK_RUNNING", KILLED_BY_USER)
    assert handler.handle(_update(task_id, "TASK_FAILED"))
    assert stores.running.tasks("job") == []
    assert stores.failover.entries() == [] and seen.events == []


def test_an_update_of_a_task_whose_node_went_meanwhile_does_not_bring_it_back(
    handler: StatusHandler, stores: TermStores, monkeypatch: pytest.MonkeyPatch
) -> None:
    _job(stores, "job")
    task_id = _task(stores, "job")

    def remove(tid: str, got: tuple[RunningTask, int] | None) -> None:
        if got is not None and got[0].state != "TASK_RUNNING":
            stores.running.remove(tid)  # ended on another path meanwhile

    _watch_reads(stores, monkeypatch, remove)
    assert handler.handle(_update(task_id, "TASK_STARTING"))
    assert stores.running.tasks("job") == []


def test_a_task_s_next_live_update_needs_no_read_and_a_change_meanwhile_is_not_lost(
    handler: StatusHandler, stores: TermStores, seen: _Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    _job(stores, "job", failover=True)
    task_id = _task(stores, "job")
    reads = _watch_reads(stores, monkeypatch)
    assert handler.handle(_update(task_id, "TASK_STARTING"))
    assert handler.handle(_update(task_id, "TASK_RUNNING"))
    assert reads == [task_id]  # RUNNING wrote over the version STARTING's write left
    (task,) = stores.running.tasks("job")
    assert task.state == "TASK_RUNNING"
    # A kill reason recorded by another thread: the remembered version is stale, so the next
    # live write is refused, the node read again and both kept.
    assert stores.running.mark_killed(task_id, KILLED_BY_USER)
    assert handler.handle(_update(task_id, "TASK_KILLING"))
    (task,) = stores.running.tasks("job")
    assert (task.state, task.kill_reason) == ("TASK_KILLING", KILLED_BY_USER)
    # The end is decided on the node as it is (its kill reason): killed, not failed.
    assert handler.handle(_update(task_id, "TASK_FAILED"))
    assert stores.running.tasks("job") == []
    assert stores.failover.entries() == [] and seen.events == []


def test_a_launched_task_s_first_live_update_needs_no_read(
    handler: StatusHandler, stores: TermStores, monkeypatch: pytest.MonkeyPatch
) -> None:
    _job(stores, "job")
    first = str(TaskId.new("job", 0, TaskType.READY, "agent-1"))
    second = str(TaskId.new("job", 1, TaskType.READY, "agent-1"))
    launched = [RunningTask(first, "agent-1"), RunningTask(second, "agent-1")]
    for task in launched:
        stores.running.add(task)  # as the launch book creates it: version 0
        handler.note_launched([task])
    reads = _watch_reads(stores, monkeypatch)
    assert handler.handle(_update(first, "TASK_RUNNING"))
    assert reads == []
    assert _running(stores, "job")[first].state == "TASK_RUNNING"
    # Changed after the launch (a kill reason): the note is stale, the write refused and the
    # node read again; both are kept.
    assert stores.running.mark_killed(second, KILLED_BY_USER)
    assert handler.handle(_update(second, "TASK_RUNNING"))
    assert reads == [second]
    task = _running(stores, "job")[second]
    assert (task.state, task.kill_reason) == ("TASK_RUNNING", KILLED_BY_USER)


def test_a_task_s_end_needs_no_read_and_a_kill_reason_recorded_meanwhile_still_decides(
    handler: StatusHandler, stores: TermStores, seen: _Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    _job(stores, "job", failover=True)
    done = str(TaskId.new("job", 0, TaskType.READY, "agent-1"))
    killed = str(TaskId.new("job", 1, TaskType.READY, "agent-1"))
    for task in (RunningTask(done, "agent-1"), RunningTask(killed, "agent-1")):
        stores.running.add(task)
        handler.note_launched([task])
    reads = _watch_reads(stores, monkeypatch)
    assert handler.handle(_update(done, "TASK_RUNNING"))
    assert handler.handle(_update(killed, "TASK_RUNNING"))
    assert handler.handle(_update(done, "TASK_FINISHED"))
    assert reads == []  # the end deleted the node over the version the RUNNING write left
    assert list(_running(stores, "job")) == [killed]
    # A user's kill recorded after the handler's last write: the delete over the remembered
    # version is refused, the node read again, and the end counts as the kill it is.
    assert stores.running.mark_killed(killed, KILLED_BY_USER)
    assert handler.handle(_update(killed, "TASK_FAILED", "killed"))
    assert reads == [killed]
    assert stores.failover.entries() == [] and seen.events == []
    # The last task's delete took its job's folder with it.
    assert not stores.registry.exists(running_folder("job"))


def test_starting_is_kept_in_memory_and_running_is_written(
    handler: StatusHandler, stores: TermStores, monkeypatch: pytest.MonkeyPatch
) -> None:
    _job(stores, "job")
    task_id = str(TaskId.new("job", 0, TaskType.READY, "agent-1"))
    task = RunningTask(task_id, "agent-1")
    stores.running.add(task)
    handler.note_launched([task])
    reads = _watch_reads(stores, monkeypatch)
    assert handler.handle(_update(task_id, "TASK_STARTING"))
    found = stores.running.task("job", task_id)
    assert found is not None and (found[0].state, found[1]) == ("TASK_STAGING", 0)  # no write
    assert handler.handle(_update(task_id, "TASK_RUNNING"))
    found = stores.running.task("job", task_id)
    assert found is not None and (found[0].state, found[1]) == ("TASK_RUNNING", 1)
    # A failure after STARTING alone is a failed run (its process may have been starting).
    other = str(TaskId.new("job", 1, TaskType.READY, "agent-1"))
    stores.running.add(RunningTask(other, "agent-1"))
    assert handler.handle(_update(other, "TASK_STARTING"))
    assert handler.handle(_update(other, "TASK_FAILED", "cannot start the job's worker process"))
    assert list(_running(stores, "job")) == [task_id]
    assert reads.count(other) == 1  # read at STARTING; its end used what that read gave


def test_a_task_whose_accept_is_on_its_way_is_not_relaunched_when_mesos_does_not_know_it_yet(
    handler: StatusHandler, stores: TermStores, seen: _Recorder
) -> None:
    # A periodic reconciliation read the node the launch round just wrote and asked before the
    # round's ACCEPT reached the master: "unknown" then says nothing; the task must not be
    # relaunched beside the one the ACCEPT starts.
    _job(stores, "t", failover=True)
    task_id = str(TaskId.new("t", 0, TaskType.READY, "agent-1"))
    handler.note_launching([task_id])
    task = RunningTask(task_id, "agent-1")
    stores.running.add(task)
    answer = _update(
        task_id, "TASK_UNKNOWN", "Reconciliation: Task is unknown", reason="REASON_RECONCILIATION"
    )
    assert handler.handle(answer)
    assert list(_running(stores, "t")) == [task_id] and stores.failover.entries() == []
    assert seen.events == [] and answer[NO_RUN_KEY] is True
    # The ACCEPT answered: its updates are handled as any task's.
    handler.note_launched([task])
    assert handler.handle(_update(task_id, "TASK_RUNNING"))
    assert handler.handle(_update(task_id, "TASK_FINISHED"))
    assert stores.running.tasks("t") == []
    # Once launched, Mesos not knowing a task never recorded started is the lost launch again.
    other = str(TaskId.new("t", 1, TaskType.READY, "agent-1"))
    stores.running.add(RunningTask(other, "agent-1"))
    lost = _update(
        other, "TASK_UNKNOWN", "Reconciliation: Task is unknown", reason="REASON_RECONCILIATION"
    )
    assert handler.handle(lost)
    assert [(job, item) for job, item, _ in stores.failover.entries()] == [("t", 1)]

"""Status updates: what Elastic-Job-Cloud 2.1.5's SchedulerEngine.statusUpdate does per state,
done right.

Every task's running state lives in ZooKeeper (transient ones too), so a new leader knows what
runs. Terminal failures go to the failover queue when the job has `failover` (daemon jobs
always), at most `maxRetries` times in a row per shard; a shard not relaunched is reported as a
`run_failed` event. A run stopped for the job's `timeoutSeconds` (our executor reports TASK_FAILED
"timed out after N s"; Mesos ends a command task with REASON_MAX_COMPLETION_TIME_REACHED) is a
failure with that reason, reported as `run_timed_out`, whatever its state. A task the scheduler
killed on purpose (`killReason` on its running node: a user, or overlapPolicy REPLACE) is no
failure, whatever its state: it is not relaunched. TASK_UNKNOWN (Mesos does not know the task:
with PARTITION_AWARE that is what reconciliation answers for a task that is gone) counts as lost;
TASK_UNREACHABLE keeps the task until Mesos says more. Updates for tasks the leader does not know
are logged and acknowledged.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from executor.records import RecordError, decode_status_data
from scheduler.model.config.job import JobConfig, JobExecutionType
from scheduler.model.errors import NotLeader, SchedulerError
from scheduler.model.job_events import JobEvent, JobEventKind
from scheduler.model.task_id import InvalidTaskId, TaskId, TaskType
from scheduler.model.task_states import ACTIVE_STATES, COUNTED_FAILED_STATES, TERMINAL_STATES
from scheduler.storage.facade import StateFacade
from scheduler.storage.registry import Op
from scheduler.storage.result_journal import ResultJournal
from scheduler.storage.state import KILLED_BY_REPLACE, KILLED_BY_USER, Retry, RunningTask

log = logging.getLogger(__name__)

StatusListener = Callable[[dict[str, Any], TaskId], None]
_ENDED_KEPT = 100_000
MAX_COMPLETION_REASON = "REASON_MAX_COMPLETION_TIME_REACHED"
TIMED_OUT_PREFIX = "timed out after "
_KILLED_BY = {KILLED_BY_USER: "by a user", KILLED_BY_REPLACE: "by overlapPolicy REPLACE"}
_REASON_MAX_CHARS = 1000


class StatusHandler:
    """Called from `sched-mesos-events` for each update; returns True when it may be acked."""

    def __init__(
        self,
        facade: StateFacade,
        kill: Callable[[str], bool],
        wake_launcher: Callable[[], None],
        journal: ResultJournal | None = None,
    ) -> None:
        self._facade = facade
        self._journal = journal
        self._kill = kill
        self._wake = wake_launcher
        self.listeners: list[StatusListener] = []
        # Called with each run_failed / run_timed_out event (sched-mesos-events); must not block.
        self.event_listeners: list[Callable[[JobEvent], None]] = []
        self.counts: dict[str, int] = {}
        # Tasks this term saw end. Updates arrive at least once: a retried or reconciled
        # non-terminal update can come after the terminal one, and must not bring the task back
        # (that would block its shard and count its result a second time).
        self._ended: OrderedDict[str, None] = OrderedDict()

    def handle(self, status: dict[str, Any]) -> bool:
        task_id = str(status.get("task_id", {}).get("value", ""))
        state = str(status.get("state", ""))
        message = str(status.get("message", ""))
        try:
            tid = TaskId.parse(task_id)
        except InvalidTaskId:
            log.warning(
                "status: %s for a task this scheduler did not launch (%s); ignored", state, task_id
            )
            return True
        try:
            self._apply(tid, task_id, state, message, status)
        except NotLeader:
            return False  # not acked: Mesos resends it to the next (or resumed) leader
        except SchedulerError as exc:
            log.error("status: %s of %s not recorded: %s", state, task_id, exc.message)
            return False
        self.counts[state] = self.counts.get(state, 0) + 1
        for listener in self.listeners:
            try:
                listener(status, tid)
            except Exception:
                log.exception("status: listener failed on %s", task_id)
        return True

    def _apply(
        self, tid: TaskId, task_id: str, state: str, message: str, status: dict[str, Any]
    ) -> None:
        facade = self._facade
        known = {t.task_id: t for t in facade.running.tasks(tid.job_name)}
        task = known.get(task_id)
        job = facade.config.job(tid.job_name)
        if state in ACTIVE_STATES:
            if job is None:
                log.info("status: job %s is gone; killing %s", tid.job_name, task_id)
                self._kill(task_id)
                return
            if task is None:
                if task_id in self._ended:
                    log.info("status: stale %s of ended task %s; ignored", state, task_id)
                    return
                # Running but unknown here (e.g. launched just before a crash): adopt it.
                task = RunningTask(task_id, tid.agent_id)
            changed = task.state != state
            was_busy = not task.idle
            if message == "COMPLETE":
                cause = _failed_daemon_run(tid, status)
                if cause is not None:
                    self._daemon_run_failed(tid, task_id, job, cause)
            if message in ("BEGIN", "COMPLETE"):
                idle = message == "COMPLETE"
                changed = changed or task.idle != idle
                task.idle = idle
            if changed:
                task.state = state
                # A daemon run completed: counted as a success with the idle flag it sets.
                completed = message == "COMPLETE" and was_busy
                self._with_result(
                    True if completed else None, lambda ops: facade.running.update(task, ops)
                )
                if completed:
                    self._reset_backoff(tid)
            return
        if state == "TASK_UNREACHABLE":
            log.warning(
                "status: %s unreachable (%s); waiting for Mesos to decide", task_id, message
            )
            if task is not None and task.state != state:
                task.state = state
                facade.running.update(task)
            return
        if state not in TERMINAL_STATES:
            log.warning("status: %s in unexpected state %s", task_id, state)
            return
        self._ended[task_id] = None
        self._ended.move_to_end(task_id)
        while len(self._ended) > _ENDED_KEPT:
            self._ended.popitem(last=False)
        timed_out = "" if state == "TASK_FINISHED" else _timed_out(status, job)
        kill_reason = task.kill_reason if task is not None else ""
        on_purpose = kill_reason in _KILLED_BY and not timed_out
        if timed_out:
            # The run's outcome as the event trace and the runs show it.
            log.warning("status: %s %s (%s)", task_id, timed_out, message or state)
            status["message"] = timed_out
        if task is not None:
            success: bool | None = None  # a kill is neither
            if state == "TASK_FINISHED":
                success = True
            elif timed_out or (state in COUNTED_FAILED_STATES and not on_purpose):
                success = False
            self._with_result(success, lambda ops: facade.running.remove(task_id, ops))
        if state == "TASK_FINISHED":
            log.info("status: %s finished", task_id)
            self._reset_backoff(tid)
        elif on_purpose or (state == "TASK_KILLED" and not timed_out):
            killed_by = f" {_KILLED_BY[kill_reason]}" if kill_reason in _KILLED_BY else ""
            log.info("status: %s killed%s (%s)", task_id, killed_by, state)
            if (
                job is not None
                and job.execution_type is JobExecutionType.DAEMON
                and not facade.is_disabled(job)
                and not facade.running.tasks(job.job_name)
            ):
                facade.ready.add_daemon(job.job_name)
        else:
            reason = status.get("reason", "")
            if not timed_out:
                log.warning("status: %s %s (%s) %s", task_id, state, reason, message)
            if task is not None:  # else already handled (a resent update) or never ours
                if timed_out:
                    self._emit(JobEventKind.RUN_TIMED_OUT, tid, task_id, job, timed_out)
                self._failed(tid, task_id, job, timed_out or message or state)
        self._wake()

    def _failed(self, tid: TaskId, task_id: str, job: JobConfig | None, why: str) -> None:
        """A run of shard `tid.item` failed: relaunch it (failover) or report it failed."""
        facade = self._facade
        if job is None or facade.is_disabled(job):
            return  # deleted or disabled: nothing is relaunched, nothing more is expected
        if not (job.failover or job.execution_type is JobExecutionType.DAEMON):
            self._emit(JobEventKind.RUN_FAILED, tid, task_id, job, f"{why}; failover is off")
            return
        outcome, failures = facade.failover.retry(task_id, job.max_retries)
        if outcome is Retry.QUEUED:
            log.info("status: shard %s of %s queued for failover", tid.item, tid.job_name)
        elif outcome is Retry.EXHAUSTED:
            log.warning(
                "status: shard %s of %s failed %s times in a row; not relaunched (maxRetries %s)",
                tid.item,
                tid.job_name,
                failures,
                job.max_retries,
            )
            self._emit(
                JobEventKind.RUN_FAILED,
                tid,
                task_id,
                job,
                f"{why}; not relaunched: failed {failures} times, maxRetries is {job.max_retries}",
            )
        else:
            self._emit(
                JobEventKind.RUN_FAILED,
                tid,
                task_id,
                job,
                f"{why}; not relaunched: the failover queue is full (job_state_queue_size)",
            )

    def _daemon_run_failed(
        self, tid: TaskId, task_id: str, job: JobConfig | None, cause: str
    ) -> None:
        """A daemon run failed (it is not run again: the next comes on the cron)."""
        if cause.startswith(TIMED_OUT_PREFIX):
            self._emit(JobEventKind.RUN_TIMED_OUT, tid, task_id, job, cause)
        self._emit(JobEventKind.RUN_FAILED, tid, task_id, job, f"daemon run failed: {cause}")

    def _emit(
        self, kind: JobEventKind, tid: TaskId, task_id: str, job: JobConfig | None, reason: str
    ) -> None:
        event = JobEvent(
            kind,
            tid.job_name,
            time.time(),
            reason[:_REASON_MAX_CHARS],
            sharding_item=tid.item,
            task_id=task_id,
            execution_type=tid.type.value,
            webhook_url=None if job is None else job.notify_webhook_url,
        )
        for listener in self.event_listeners:
            try:
                listener(event)
            except Exception:
                log.exception("status: event listener failed on %s", task_id)

    def _reset_backoff(self, tid: TaskId) -> None:
        """A run succeeded: forget its shard's failures. Only a FAILOVER task can follow
        failures (the job's other runs wait while its shard is queued), so READY successes,
        the common case, cost no ZooKeeper read here."""
        if tid.type is TaskType.FAILOVER:
            self._facade.failover.succeeded(tid.job_name, tid.item)

    def _with_result(self, success: bool | None, write: Callable[[list[Op]], None]) -> None:
        """Run `write` with the journal op of a result (success True/False; None: no result),
        so the result is journaled in the same transaction as the state change, or not at all.
        """
        journal = self._journal
        if success is None or journal is None:
            write([])
            return
        ops = journal.ops(success)
        try:
            write(ops)
        except BaseException:
            if ops:
                journal.not_committed()
            raise


def _timed_out(status: dict[str, Any], job: JobConfig | None) -> str:
    """`timed out after N s` when a terminal update says the run was stopped for its timeout,
    else ""."""
    message = str(status.get("message", ""))
    if message.startswith(TIMED_OUT_PREFIX):
        return message  # our executor's own words
    if status.get("reason") == MAX_COMPLETION_REASON:
        timeout_s = None if job is None else job.timeout_seconds
        return f"{TIMED_OUT_PREFIX}{timeout_s} s" if timeout_s else "timed out"
    return ""


def _failed_daemon_run(tid: TaskId, status: dict[str, Any]) -> str | None:
    """A daemon task reports each run's end as TASK_RUNNING "COMPLETE", a failure only in the
    execution record it carries: log that failure, as a failed transient task is logged, and
    return its cause (None when the run succeeded or the record is unreadable)."""
    try:
        record = decode_status_data(status.get("data"))
    except RecordError:
        return None  # the statistics component reports unreadable records
    if record is not None and record.is_success is False:
        lines = record.failure_cause.strip().splitlines() or ["no cause given"]
        log.warning(
            "status: daemon run of %s shard %s failed: %s", tid.job_name, tid.item, lines[-1]
        )
        return lines[-1]
    return None

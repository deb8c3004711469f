"""Status updates: what Elastic-Job-Cloud 2.1.5's SchedulerEngine.statusUpdate does per state,
done right.

Every task's running state lives in ZooKeeper (transient ones too), so a new leader knows what
runs. Terminal failures go to the failover queue when the job has `failover` (daemon jobs
always). TASK_UNKNOWN (Mesos does not know the task: with PARTITION_AWARE that is what
reconciliation answers for a task that is gone) counts as lost; TASK_UNREACHABLE keeps the task
until Mesos says more. Updates for tasks the leader does not know are logged and acknowledged.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from executor.records import RecordError, decode_status_data
from scheduler.model.config.job import JobExecutionType
from scheduler.model.errors import NotLeader, SchedulerError
from scheduler.model.task_id import InvalidTaskId, TaskId, TaskType
from scheduler.model.task_states import ACTIVE_STATES, COUNTED_FAILED_STATES, TERMINAL_STATES
from scheduler.storage.facade import StateFacade
from scheduler.storage.registry import Op
from scheduler.storage.result_journal import ResultJournal
from scheduler.storage.state import RunningTask

log = logging.getLogger(__name__)

StatusListener = Callable[[dict[str, Any], TaskId], None]
_ENDED_KEPT = 100_000


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
                _log_failed_run(tid, status)
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
        if task is not None:
            success: bool | None = None  # a kill is neither
            if state == "TASK_FINISHED":
                success = True
            elif state in COUNTED_FAILED_STATES:
                success = False
            self._with_result(success, lambda ops: facade.running.remove(task_id, ops))
        if state == "TASK_FINISHED":
            log.info("status: %s finished", task_id)
            self._reset_backoff(tid)
        elif state == "TASK_KILLED":
            log.info("status: %s killed", task_id)
            if (
                job is not None
                and job.execution_type is JobExecutionType.DAEMON
                and not facade.is_disabled(job)
                and not facade.running.tasks(job.job_name)
            ):
                facade.ready.add_daemon(job.job_name)
        else:
            reason = status.get("reason", "")
            log.warning("status: %s %s (%s) %s", task_id, state, reason, message)
            if task is None:
                pass  # already handled (a resent update) or never ours
            elif (
                job is not None
                and not facade.is_disabled(job)
                and (job.failover or job.execution_type is JobExecutionType.DAEMON)
            ):
                if facade.failover.add(task_id):
                    log.info("status: shard %s of %s queued for failover", tid.item, tid.job_name)
        self._wake()

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


def _log_failed_run(tid: TaskId, status: dict[str, Any]) -> None:
    """A daemon task reports each run's end as TASK_RUNNING "COMPLETE", a failure only in the
    execution record it carries: log that failure, as a failed transient task is logged."""
    try:
        record = decode_status_data(status.get("data"))
    except RecordError:
        return  # the statistics component reports unreadable records
    if record is not None and record.is_success is False:
        lines = record.failure_cause.strip().splitlines() or ["no cause given"]
        log.warning(
            "status: daemon run of %s shard %s failed: %s", tid.job_name, tid.item, lines[-1]
        )

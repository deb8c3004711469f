"""Status updates: what Elastic-Job-Cloud 2.1.5's SchedulerEngine.statusUpdate does per state,
done right.

Every task's running state lives in ZooKeeper (transient ones too), so a new leader knows what
runs. Terminal failures go to the failover queue when the job has `failover` (daemon jobs
always), at most `maxRetries` times in a row per shard; a shard not relaunched is reported as a
`run_failed` event. A run stopped for the job's `timeoutSeconds` (our executor reports TASK_FAILED
"timed out after N s"; Mesos ends a command task with REASON_MAX_COMPLETION_TIME_REACHED) is a
failure with that reason, reported as `run_timed_out`, whatever its state: its one event (one
trace row, one webhook POST), which says when the shard is not relaunched (`given_up`, counted
in `ejc_runs_failed` too), never a `run_failed` beside it (issue 30). A task the scheduler
killed on purpose (`killReason` on its running node: a user, or overlapPolicy REPLACE) is no
failure, whatever its state: it is not relaunched. TASK_UNKNOWN (Mesos does not know the task:
with PARTITION_AWARE that is what reconciliation answers for a task that is gone) counts as lost;
TASK_UNREACHABLE keeps the task until Mesos says more. Updates for tasks the leader does not know
are logged and acknowledged.

An idle daemon task (before its first run or between two runs: the executor's first
TASK_RUNNING makes it idle, BEGIN busy, COMPLETE idle) that reconciliation finds unknown to
Mesos (TASK_UNKNOWN, TASK_LOST or TASK_GONE with REASON_RECONCILIATION: the master does not know
it, as after the local cluster was stopped, which stops its agents and their executors, and
started again) is no failure: no run was going on. Its shard is relaunched without a failure
counted (no back-off, no `run_failed`, no webhook, no run in the metrics) and the update says so
(issue 30). So is a task never recorded started (its node still TASK_STAGING, as the launcher
wrote it before its ACCEPT: TASK_STARTING is kept in memory only, one write per task saved, and
our executor sends TASK_RUNNING once the job's process started) that reconciliation finds
unknown: the ACCEPT never reached the
master, as when a leader is killed between its bookkeeping and the ACCEPT; its shard is
relaunched the same way, so a workflow node's fire or a backfill's run is not failed by a leader
change. A master
that has just failed over does not answer for a task whose agent has not re-registered yet
(Mesos's reconciliation: "no reply" until the agent re-registers or its
`agent_reregister_timeout` passes), so such an answer is never a too-early one.

The dispatch is a table: each Mesos state maps to one kind of update (`KIND_OF_STATE`), each kind
to one handler. A state outside the table (one a newer Mesos added) is logged at ERROR and
acknowledged without being recorded: the agent forwards a task's updates one at a time, the next
only once the previous one was acknowledged, so holding it back would keep every later update of
the task, its end included, from ever arriving.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from enum import Enum
from functools import partial
from types import MappingProxyType
from typing import Any

from executor.records import RecordError, decode_status_data
from scheduler.leader.lifecycle import Listeners
from scheduler.model.config.job import JobConfig, JobExecutionType
from scheduler.model.errors import Conflict, NotFound, NotLeader, SchedulerError
from scheduler.model.job_events import JobEvent, JobEventKind
from scheduler.model.runs import FIRE_TASK_KEY, NO_RUN_KEY
from scheduler.model.task_id import InvalidTaskId, TaskId, TaskType
from scheduler.model.task_states import ACTIVE_STATES, FAILED_STATES
from scheduler.storage.result_journal import ResultJournal
from scheduler.storage.state import KILLED_BY_REPLACE, KILLED_BY_USER, Retry, RunningTask
from scheduler.storage.term_stores import TermStores
from scheduler.storage.transactions import FencedWriter, Op
from scheduler.storage.workflow_store import WorkflowStore

log = logging.getLogger(__name__)

_ENDED_KEPT = 100_000
# Writes of a task's running node over a version another thread keeps changing.
_WRITE_TRIES = 5
# How long a task of this term's launch round counts as on its way to Mesos: far longer than
# an ACCEPT takes (its answer, or the driver's timeout).
_LAUNCHING_S = 60.0
# Running nodes remembered after this handler's writes (a task's live updates come close
# together).
_WRITTEN_KEPT = 20_000
MAX_COMPLETION_REASON = "REASON_MAX_COMPLETION_TIME_REACHED"
TIMED_OUT_PREFIX = "timed out after "
_KILLED_BY = {KILLED_BY_USER: "by a user", KILLED_BY_REPLACE: "by overlapPolicy REPLACE"}
_REASON_MAX_CHARS = 1000


class UpdateKind(Enum):
    """What a Mesos task state means to the scheduler; each kind has one handler."""

    ACTIVE = "active"
    """Staging, starting, running, killing: the task lives (a daemon's BEGIN and COMPLETE too)."""
    UNREACHABLE = "unreachable"
    """Its agent is cut off: the task is kept until Mesos says more."""
    FINISHED = "finished"
    KILLED = "killed"
    FAILED = "failed"
    """Failed, lost, error, dropped, gone, gone by operator, unknown."""


# The state table: every Mesos task state the scheduler knows, by kind.
KIND_OF_STATE: Mapping[str, UpdateKind] = MappingProxyType(
    {
        **dict.fromkeys(ACTIVE_STATES, UpdateKind.ACTIVE),
        "TASK_UNREACHABLE": UpdateKind.UNREACHABLE,
        "TASK_FINISHED": UpdateKind.FINISHED,
        "TASK_KILLED": UpdateKind.KILLED,
        **dict.fromkeys(FAILED_STATES, UpdateKind.FAILED),
    }
)


class _StaleNode(Exception):
    """A task's running node changed since the handler read it: nothing was written; the
    update is decided again from the node as it is now."""


@dataclass(frozen=True)
class TaskUpdate:
    """One status update as a handler reads it."""

    parsed: TaskId
    task_id: str
    state: str
    message: str
    """The message as Mesos sent it (a timeout rewrites `status["message"]`, not this)."""
    status: dict[str, Any]
    task: RunningTask | None
    """Its running node; None when this leader does not follow the task."""
    job: JobConfig | None
    """None when the job was deleted."""
    version: int | None = None
    """The version of the running node `task` was read from (None: read from a listing)."""


@dataclass
class _Planned:
    """An update of a batch decided before anything is written (`StatusHandler._plan`): its
    ops go into the batch's one transaction, and `done` runs once that committed."""

    status: dict[str, Any]
    parsed: TaskId
    task_id: str
    ops: list[Op]
    done: Callable[[], None]
    finished: bool
    """A TASK_FINISHED: the node is deleted, a success journaled with it."""
    journaled: bool = False
    """`ops` hold a result journal op (uncounted again when the transaction fails)."""


class StatusHandler:
    """Called from `sched-mesos-events` for each update (`handle`), or for the updates that
    came together (`handle_many`); says which may be acked."""

    def __init__(
        self,
        stores: TermStores,
        kill: Callable[[str], bool],
        wake_launcher: Callable[[], None],
        journal: ResultJournal | None = None,
        workflows: WorkflowStore | None = None,
        job_of: Callable[[str], JobConfig | None] | None = None,
        running_of: Callable[[str], list[str]] | None = None,
    ) -> None:
        """`workflows`: where a workflow node's task records its shard's end (issue 27).
        `job_of`: a job's configuration as the term keeps it (the queue view's, kept by
        watches; None: deleted); without it each update reads the job's node.
        `running_of`: a job's running task ids as the term's queue view knows them; without it
        `handle_many` writes no TASK_FINISHED in its batch (it could not tell when the job's
        folder empties)."""
        self._stores = stores
        self._job_of = job_of or stores.config.job
        self._running_of = running_of
        self._journal = journal
        self._workflows = workflows
        self._kill = kill
        self._wake = wake_launcher
        self.listeners: Listeners[[dict[str, Any], TaskId]] = Listeners(log, "status: listener")
        # Called with each run_failed / run_timed_out event (sched-mesos-events); must not block.
        self.event_listeners: Listeners[[JobEvent]] = Listeners(log, "status: event listener")
        self.counts: dict[str, int] = {}
        # handle_many: transactions committed, the updates they carried, and the batches whose
        # transaction failed (their updates then handled one by one).
        self.batches = self.batched = self.batch_fallbacks = 0
        # Tasks this term saw end. Updates arrive at least once: a retried or reconciled
        # non-terminal update can come after the terminal one, and must not bring the task back
        # (that would block its shard and count its result a second time).
        self._ended: OrderedDict[str, None] = OrderedDict()
        # The running nodes this handler wrote last, at the version its write left: the next
        # update of the task (RUNNING after STARTING, its end) needs no read. Only a hint: the
        # write or delete is made over that version, so a node changed by anyone else meanwhile
        # (a kill reason recorded) is refused and read again before anything is decided.
        self._written: OrderedDict[str, tuple[RunningTask, int]] = OrderedDict()
        self._written_lock = threading.Lock()  # the launcher's thread notes launches too
        # Tasks of this term's launch rounds whose ACCEPT has not answered yet (task id ->
        # monotonic time noted; under `_written_lock`): Mesos may not know them yet.
        self._launching: OrderedDict[str, float] = OrderedDict()
        self.handlers: Mapping[UpdateKind, Callable[[TaskUpdate], None]] = {
            UpdateKind.ACTIVE: self._on_active,
            UpdateKind.UNREACHABLE: self._on_unreachable,
            UpdateKind.FINISHED: self._on_finished,
            UpdateKind.KILLED: self._on_killed,
            UpdateKind.FAILED: self._on_failed,
        }

    def handle(self, status: dict[str, Any]) -> bool:
        task_id = str(status.get("task_id", {}).get("value", ""))
        state = str(status.get("state", ""))
        try:
            parsed = TaskId.parse(task_id)
        except InvalidTaskId:
            log.warning(
                "status: %s for a task this scheduler did not launch (%s); ignored", state, task_id
            )
            return True
        try:
            self._apply(parsed, task_id, state, status)
        except NotLeader:
            return False  # not acked: Mesos resends it to the next (or resumed) leader
        except SchedulerError as exc:
            log.error("status: %s of %s not recorded: %s", state, task_id, exc.message)
            return False
        self.counts[state] = self.counts.get(state, 0) + 1
        self.listeners.emit(status, parsed)
        return True

    def handle_many(self, statuses: list[dict[str, Any]]) -> list[bool]:
        """`handle` for updates that came together (the event thread found them queued), in
        order; the answer for each. The common ones, a transient task's TASK_STARTING (kept in
        memory), TASK_RUNNING or TASK_FINISHED when this handler wrote its node last and knows
        its version, are decided first and written in one fenced transaction (issue 29: one
        request for the batch, not one per update), the others handled one by one after it, as
        `handle` does (a task's second update in the batch among them, so its updates keep
        their order).

        ZooKeeper applies a transaction whole or not at all: when it fails (a node changed
        meanwhile, say a kill reason recorded; a job folder not empty after all; ZooKeeper
        failing) nothing of it was written, and every update of the batch is handled on its
        own as `handle` would, from what is stored. A fence that fails (leadership lost) leaves
        them unacknowledged, for the next leader."""
        planned: dict[int, _Planned] = {}
        seen: set[str] = set()
        for i, status in enumerate(statuses):
            task_id = str(status.get("task_id", {}).get("value", ""))
            if task_id not in seen:
                try:
                    plan = self._plan(task_id, status)
                except SchedulerError:
                    plan = None  # (a job read failing) `handle` meets it and says what it is
                if plan is not None:
                    planned[i] = plan
            seen.add(task_id)
        answers = self._commit_planned(list(planned.items())) if planned else {}
        return [
            answers[i] if i in answers else self.handle(status) for i, status in enumerate(statuses)
        ]

    def _plan(self, task_id: str, status: dict[str, Any]) -> _Planned | None:
        """The update's ops and what follows their commit, when it is one `handle_many`
        batches; None otherwise (nothing changed: `handle` takes it)."""
        state = str(status.get("state", ""))
        kind = KIND_OF_STATE.get(state)
        if kind is not UpdateKind.ACTIVE and kind is not UpdateKind.FINISHED:
            return None
        found = self._remembered(task_id)
        if found is None:
            return None
        task, version = found
        parsed = task.parsed
        job = self._job_of(parsed.job_name)
        if job is None or job.execution_type is not JobExecutionType.TRANSIENT:
            return None
        if task.workflow_fire or task.task_id in self._ended:
            return None
        running = self._stores.running
        if kind is UpdateKind.ACTIVE:
            # What `_record_active` writes for it: the state, nothing journaled (a transient
            # task sends no BEGIN or COMPLETE); TASK_STARTING is kept in memory only.
            if state == task.state or status.get("message") in ("BEGIN", "COMPLETE"):
                return None
            task.state = state
            if state == "TASK_STARTING":
                done = partial(self._remember, task, version)
                return _Planned(status, parsed, task_id, [], done, False)
            done = partial(self._remember, task, version + 1)
            return _Planned(
                status, parsed, task_id, [running.update_op(task, version)], done, False
            )
        # What `_on_finished` writes: the node deleted with a success journaled. A FAILOVER
        # task's success also clears its shard's failures (a write of its own): `handle` then.
        if parsed.type is TaskType.FAILOVER or self._running_of is None:
            return None
        ops = [running.remove_op(parsed.job_name, task_id, version)]
        journaled = False
        if self._journal is not None:
            try:
                journal_ops = self._journal.ops(True)
            except SchedulerError:
                return None  # `handle` meets it again and leaves the update unacknowledged
            ops += journal_ops
            journaled = bool(journal_ops)
        return _Planned(
            status, parsed, task_id, ops, partial(self._finished, task_id), True, journaled
        )

    def _finished(self, task_id: str) -> None:
        """What follows a TASK_FINISHED written in a batch (`_on_finished`'s rest, but its log
        line: the batch logs one for all, `_log_finished`)."""
        self._note_ended(task_id)

    def _commit_planned(self, planned: list[tuple[int, _Planned]]) -> dict[int, bool]:
        """Write the planned updates in one fenced transaction, with the folder of each job
        that has no other task left; the answers of those committed (none when it failed:
        `handle` takes them)."""
        ops = [op for _, plan in planned for op in plan.ops]
        if ops:  # else only TASK_STARTINGs, kept in memory
            assert self._stores.fence is not None
            written = sum(1 for _, plan in planned if plan.ops)
            try:
                ops += self._emptied_folders([plan for _, plan in planned if plan.finished])
                FencedWriter(self._stores.registry, self._stores.fence).commit(
                    f"record {written} status updates", ops
                )
            except NotLeader:
                self._unplan(plan for _, plan in planned)
                return {i: False for i, _ in planned}  # not acked: resent to the next leader
            except SchedulerError as exc:
                self._unplan(plan for _, plan in planned)
                self.batch_fallbacks += 1
                log.debug("status: %d updates not written together (%s); one by one", written, exc)
                return {}
            self.batches += 1
            self.batched += written
        ended: list[str] = []
        for _, plan in planned:
            plan.done()
            if plan.finished:
                ended.append(plan.task_id)
            state = str(plan.status.get("state", ""))
            self.counts[state] = self.counts.get(state, 0) + 1
            self.listeners.emit(plan.status, plan.parsed)
        if ended:
            _log_finished(ended)
            self._wake()
        return {i: True for i, _ in planned}

    def _emptied_folders(self, finished: list[_Planned]) -> list[Op]:
        """The deletes of the job folders these removals leave empty, as the queue view knows
        the jobs' tasks (less those this term saw end): a folder that holds another task after
        all makes ZooKeeper refuse the transaction, and the updates are handled one by one."""
        assert self._running_of is not None
        removed: dict[str, set[str]] = {}
        for plan in finished:
            removed.setdefault(plan.parsed.job_name, set()).add(plan.task_id)
        ops = []
        for job, tasks in removed.items():
            others = [t for t in self._running_of(job) if t not in tasks and t not in self._ended]
            if not others:
                ops.append(self._stores.running.folder_remove_op(job))
        return ops

    def _unplan(self, planned: Iterable[_Planned]) -> None:
        """Planned updates not written: their journal ops are uncounted."""
        journal = self._journal
        for plan in planned:
            if plan.journaled and journal is not None:
                journal.not_committed()

    def _apply(self, parsed: TaskId, task_id: str, state: str, status: dict[str, Any]) -> None:
        """Look the state up in the table and hand the update to its kind's handler."""
        kind = KIND_OF_STATE.get(state)
        if kind is None:
            log.error(
                "status: %s of %s is no task state this scheduler knows (a newer Mesos?); "
                "acknowledged unrecorded, so that the task's next update reaches it",
                state or "an update without a state",
                task_id,
            )
            return
        original = dict(status)  # a handler's changes to it are undone before a retry
        found = self._remembered(task_id)
        for _attempt in range(_WRITE_TRIES):
            update = self._update_of(parsed, task_id, state, status, found)
            try:
                self.handlers[kind](update)
                return
            except _StaleNode:
                # The node changed since it was read (a kill reason recorded meanwhile): read
                # it again and decide anew; nothing was written.
                status.clear()
                status.update(original)
                found = None
        raise Conflict(f"running node of {task_id}: too many concurrent changes")

    def _update_of(
        self,
        parsed: TaskId,
        task_id: str,
        state: str,
        status: dict[str, Any],
        found: tuple[RunningTask, int] | None,
    ) -> TaskUpdate:
        """The update with the task's running node: `found` (what this handler knows of it),
        else its own node (one request), else a listing when there is none of that name (ended
        already, or a daemon node of the original's naming)."""
        stores = self._stores
        task: RunningTask | None
        version: int | None
        if found is None:
            found = stores.running.task(parsed.job_name, task_id)
        if found is not None:
            task, version = found
        else:
            known = {t.task_id: t for t in stores.running.tasks(parsed.job_name)}
            task, version = known.get(task_id), None
        job = self._job_of(parsed.job_name)
        message = str(status.get("message", ""))
        if task is not None and task.workflow_fire:
            status[FIRE_TASK_KEY] = task.workflow_fire
        return TaskUpdate(parsed, task_id, state, message, status, task, job, version)

    # -- the task lives ---------------------------------------------------------------------

    def _on_active(self, update: TaskUpdate) -> None:
        """Record the state (and a daemon's idle flag), adopting a running task this leader
        does not follow; kill the task when its job is gone."""
        if update.job is None:
            log.info("status: job %s is gone; killing %s", update.parsed.job_name, update.task_id)
            self._kill(update.task_id)
            return
        task = update.task
        if task is None:
            if update.task_id in self._ended:
                log.info("status: stale %s of ended task %s; ignored", update.state, update.task_id)
                return
            # Running but unknown here (e.g. launched just before a crash): adopt it.
            task = RunningTask(update.task_id, update.parsed.agent_id)
        if update.message == "COMPLETE":
            cause = _failed_daemon_run(update.parsed, update.status)
            if cause is not None:
                self._daemon_run_failed(update, cause)
        self._record_active(task, update)

    def _record_active(self, task: RunningTask, update: TaskUpdate) -> None:
        """Write the task's node when its state or idle flag changed. A daemon reports each
        run's start and end as BEGIN and COMPLETE; a COMPLETE after a BEGIN counts as a
        success, journaled with the idle flag it sets."""
        changed = task.state != update.state
        was_busy = not task.idle
        if update.message in ("BEGIN", "COMPLETE"):
            idle = update.message == "COMPLETE"
            changed = changed or task.idle != idle
            task.idle = idle
        elif _daemon_started(task, update):
            task.idle = True  # waiting for its first run (issue 30: no run is going on)
        if not changed:
            return
        task.state = update.state
        if update.state == "TASK_STARTING" and update.version is not None:
            # Kept in memory only (a write per task saved, issue 29): our executor sends it
            # just before it starts the job's process, and its TASK_RUNNING follows. A leader
            # taking over meanwhile finds the node TASK_STAGING, and reconciliation tells it the
            # task's latest state.
            self._remember(task, update.version)
            return
        completed = update.message == "COMPLETE" and was_busy
        self._with_result(True if completed else None, partial(self._write_active, task, update))
        if completed:
            self._reset_backoff(update.parsed)

    def _write_active(self, task: RunningTask, update: TaskUpdate, ops: list[Op]) -> None:
        """Write the task's node over the version it was read at; when it changed meanwhile
        (a kill reason recorded by another thread), read it again and apply the update's
        state and idle flag to what is there now, so neither is lost."""
        running = self._stores.running
        version = update.version
        for _attempt in range(_WRITE_TRIES):
            try:
                running.update(task, ops, version)
            except (Conflict, NotFound):
                self._remember(task, None)
                if version is None:
                    raise
            else:
                self._remember(task, None if version is None else version + 1)
                return
            found = running.task(update.parsed.job_name, update.task_id)
            if found is None:
                if ops:  # a result to journal: not written, so not acknowledged either
                    raise NotFound(f"running node of {update.task_id} is gone")
                log.info("status: %s ended while its %s was written", update.task_id, update.state)
                return
            fresh, version = found
            fresh.state, fresh.idle = task.state, task.idle
            task = fresh
        raise Conflict(f"running node of {update.task_id}: too many concurrent changes")

    def _on_unreachable(self, update: TaskUpdate) -> None:
        """Keep the task, marked unreachable, until Mesos says more."""
        log.warning(
            "status: %s unreachable (%s); waiting for Mesos to decide",
            update.task_id,
            update.message,
        )
        task = update.task
        if task is not None and task.state != update.state:
            task.state = update.state
            self._write_active(task, update, [])

    # -- the task ended ---------------------------------------------------------------------

    def _on_finished(self, update: TaskUpdate) -> None:
        self._note_ended(update.task_id)
        self._remove(update, True)
        log.info("status: %s finished", update.task_id)
        self._reset_backoff(update.parsed)
        self._wake()

    def _on_killed(self, update: TaskUpdate) -> None:
        """A kill (ours or an operator's) is no failure, unless it stopped a run that timed out."""
        timed_out, killed_by = self._ending(update)
        if timed_out:
            self._run_failed(update, timed_out)
        else:
            self._run_killed(update, killed_by)

    def _on_failed(self, update: TaskUpdate) -> None:
        """A failure, unless the scheduler had killed the task on purpose (the agent may then
        report it lost or gone, say), or it was an idle daemon task Mesos no longer knows."""
        timed_out, killed_by = self._ending(update)
        if killed_by:
            self._run_killed(update, killed_by)
        elif not timed_out and _idle_daemon_unknown(update):
            self._no_run_gone(update, "the daemon task was idle (no run going on)")
        elif not timed_out and _launch_never_reached_mesos(update):
            if self._in_flight(update.task_id):
                self._launch_on_its_way(update)
            else:
                self._no_run_gone(
                    update, "the task was never recorded started: its launch never reached Mesos"
                )
        else:
            self._run_failed(update, timed_out)

    def _launch_on_its_way(self, update: TaskUpdate) -> None:
        """Asked about while this term's ACCEPT of it is on its way: its updates follow, or,
        should the ACCEPT fail, the launcher takes its node back. Nothing is changed."""
        log.info(
            "status: %s %s while its launch is on its way; ignored", update.task_id, update.state
        )
        update.status["message"] = f"{update.message or update.state}; its launch was on its way"
        update.status[NO_RUN_KEY] = True  # no run ended: the metrics count none
        self._ended.pop(update.task_id, None)  # it has not ended: its updates are awaited

    def _no_run_gone(self, update: TaskUpdate, why: str) -> None:
        """No run was going on (an idle daemon task, or a launch Mesos never got): relaunch
        the shard, counting no failure."""
        reason = f"{update.message or update.state}; {why}"
        update.status["message"] = f"{reason}, started again"
        update.status[NO_RUN_KEY] = True
        self._remove(update, None)
        job = update.job
        relaunched = (
            job is not None
            and not self._stores.is_disabled(job)
            and self._stores.failover.relaunch(update.task_id)
        )
        log.info(
            "status: %s %s (%s)%s",
            update.task_id,
            update.state,
            reason,
            "; started again" if relaunched else "",
        )
        self._wake()

    def _ending(self, update: TaskUpdate) -> tuple[str, str]:
        """A task ended other than finished: note it, and return (`timed out after N s` when
        it was stopped for its timeout, else ""; whom it was killed by on purpose, else "").
        A timeout wins over a kill on purpose."""
        self._note_ended(update.task_id)
        timed_out = _timed_out(update.status, update.job)
        if timed_out:
            log.warning(
                "status: %s %s (%s)", update.task_id, timed_out, update.message or update.state
            )
            update.status["message"] = timed_out  # the run's outcome as the trace and runs show it
            return timed_out, ""
        kill_reason = update.task.kill_reason if update.task is not None else ""
        return "", _KILLED_BY.get(kill_reason, "")

    def _run_killed(self, update: TaskUpdate, killed_by: str) -> None:
        """Not relaunched; a daemon job's last task killed puts the job back in the ready
        queue, unless the job is disabled."""
        self._remove(update, None)  # a kill is neither a success nor a failure
        self._shard_failed(update, f"killed{' ' + killed_by if killed_by else ''}")
        by = f" {killed_by}" if killed_by else ""
        log.info("status: %s killed%s (%s)", update.task_id, by, update.state)
        stores, job = self._stores, update.job
        if (
            job is not None
            and job.execution_type is JobExecutionType.DAEMON
            and not stores.is_disabled(job)
            and not stores.running.tasks(job.job_name)
        ):
            stores.ready.add_daemon(job.job_name)
        self._wake()

    def _run_failed(self, update: TaskUpdate, timed_out: str) -> None:
        """Count a failure and relaunch the shard or report it (once: a resent update finds
        the task gone)."""
        self._remove(update, False)
        if not timed_out:
            reason = update.status.get("reason", "")
            log.warning(
                "status: %s %s (%s) %s", update.task_id, update.state, reason, update.message
            )
        if update.task is not None:  # else already handled (a resent update) or never ours
            why = timed_out or update.message or update.state
            kind = JobEventKind.RUN_TIMED_OUT if timed_out else JobEventKind.RUN_FAILED
            if not self._failed(update.parsed, update.task_id, update.job, why, kind):
                self._shard_failed(update, why)
        self._wake()

    def note_launching(self, task_ids: list[str]) -> None:
        """A launch round is about to write these tasks' nodes and send their ACCEPT
        (launcher's thread; never blocks). Until `note_launched` (or `_LAUNCHING_S`), a
        reconciliation answer that Mesos does not know one of them is no news."""
        now = time.monotonic()
        with self._written_lock:
            for task_id in task_ids:
                self._launching[task_id] = now + _LAUNCHING_S
            while self._launching:
                oldest, until = next(iter(self._launching.items()))
                if now < until:
                    break
                del self._launching[oldest]  # its ACCEPT failed: the node was taken back

    def note_unconfirmed(self, tasks: list[RunningTask], grace_s: float) -> None:
        """The ACCEPT of `tasks` went unanswered (launcher's thread; never blocks): they are
        on their way for `grace_s` more (a slow master may still take them); after that, an
        answer that Mesos does not know one is news: its launch never reached Mesos."""
        until = time.monotonic() + grace_s
        with self._written_lock:
            for task in tasks:
                if task.task_id in self._launching:
                    self._launching[task.task_id] = until

    def _in_flight(self, task_id: str) -> bool:
        with self._written_lock:
            until = self._launching.get(task_id)
        return until is not None and time.monotonic() < until

    def note_launched(self, tasks: list[RunningTask]) -> None:
        """The launcher created the running nodes of `tasks` (version 0) and Mesos accepted
        them: their first live updates need no read (launcher's thread, once a round; never
        blocks). A task is kept only when this handler has not written its node yet (an
        update may come before this note)."""
        with self._written_lock:
            written = self._written
            for task in tasks:
                task_id = task.task_id
                self._launching.pop(task_id, None)
                if task_id in written or task_id in self._ended:
                    continue
                written[task_id] = (replace(task), 0)
            while len(written) > _WRITTEN_KEPT:
                written.popitem(last=False)

    def _remembered(self, task_id: str) -> tuple[RunningTask, int] | None:
        """A copy (the handlers change the task they get) of what `_remember` kept."""
        with self._written_lock:
            found = self._written.get(task_id)
        return None if found is None else (replace(found[0]), found[1])

    def _remember(self, task: RunningTask, version: int | None) -> None:
        """`task` as its node now is, at `version` (None: unknown, forgotten)."""
        with self._written_lock:
            if version is None:
                self._written.pop(task.task_id, None)
                return
            self._written[task.task_id] = (replace(task), version)
            self._written.move_to_end(task.task_id)
            while len(self._written) > _WRITTEN_KEPT:
                self._written.popitem(last=False)

    def _note_ended(self, task_id: str) -> None:
        with self._written_lock:
            self._written.pop(task_id, None)
        self._ended[task_id] = None
        self._ended.move_to_end(task_id)
        while len(self._ended) > _ENDED_KEPT:
            self._ended.popitem(last=False)

    def _remove(self, update: TaskUpdate, success: bool | None) -> None:
        """Delete the task's node with its result (None: no result); nothing when this leader
        does not follow the task (a resent update, or never ours). A workflow node's shard
        that succeeded records its end in its fire record in the same transaction."""
        if update.task is not None:
            task_id = update.task_id
            also: list[Op] = []
            if success and update.task.workflow_fire and self._workflows is not None:
                also = self._workflows.shard_ended_ops(
                    update.task.workflow_fire, update.parsed.item, True, "", task_id
                )
            version = update.version
            try:
                self._with_result(
                    success,
                    lambda ops: self._stores.running.remove(task_id, [*ops, *also], version),
                )
            except Conflict as exc:
                self._remember(update.task, None)
                if version is None:
                    raise
                raise _StaleNode(task_id) from exc

    def _shard_failed(self, update: TaskUpdate, why: str) -> None:
        """A workflow node's shard ended for good without success (not relaunched): record it
        in its fire record, after the failover decision (a leader that dies in between leaves
        the shard without an end; the next leader's engine finds it gone and counts it
        failed)."""
        task, workflows = update.task, self._workflows
        if task is None or not task.workflow_fire or workflows is None:
            return
        ops = workflows.shard_ended_ops(
            task.workflow_fire, update.parsed.item, False, why, update.task_id
        )
        if not ops:
            return
        assert self._stores.fence is not None
        try:
            FencedWriter(self._stores.registry, self._stores.fence).commit(
                f"record the end of workflow task {update.task_id}", ops
            )
        except (Conflict, NotFound):
            log.info("status: fire %s changed meanwhile; end not recorded", task.workflow_fire)

    def _failed(
        self,
        parsed: TaskId,
        task_id: str,
        job: JobConfig | None,
        why: str,
        kind: JobEventKind = JobEventKind.RUN_FAILED,
    ) -> bool:
        """A run of shard `parsed.item` failed: relaunch it (failover) or report it failed.
        True when it is relaunched. `kind` RUN_TIMED_OUT: the run timed out, reported as that
        whether relaunched or not (a RUN_FAILED is reported only when it is not)."""
        stores = self._stores
        timed_out = kind is JobEventKind.RUN_TIMED_OUT
        if job is None or stores.is_disabled(job):
            if timed_out:
                self._emit(kind, parsed, task_id, job, why)
            return False  # deleted or disabled: nothing is relaunched, nothing more expected
        if not (job.failover or job.execution_type is JobExecutionType.DAEMON):
            self._emit(kind, parsed, task_id, job, f"{why}; failover is off", given_up=True)
            return False
        outcome, failures = stores.failover.retry(task_id, job.max_retries)
        if outcome is Retry.QUEUED:
            log.info("status: shard %s of %s queued for failover", parsed.item, parsed.job_name)
            if timed_out:
                self._emit(kind, parsed, task_id, job, f"{why}; relaunched (failover)")
            return True
        if outcome is Retry.EXHAUSTED:
            log.warning(
                "status: shard %s of %s failed %s times in a row; not relaunched (maxRetries %s)",
                parsed.item,
                parsed.job_name,
                failures,
                job.max_retries,
            )
            why += f"; not relaunched: failed {failures} times, maxRetries is {job.max_retries}"
        else:
            why += "; not relaunched: the failover queue is full (job_state_queue_size)"
        self._emit(kind, parsed, task_id, job, why, given_up=True)
        return False

    def _daemon_run_failed(self, update: TaskUpdate, cause: str) -> None:
        """A daemon run failed (it is not run again: the next comes on the cron); one event,
        `run_timed_out` when it was stopped for its timeout."""
        parsed, task_id, job = update.parsed, update.task_id, update.job
        if cause.startswith(TIMED_OUT_PREFIX):
            reason = f"daemon run {cause}"
            self._emit(JobEventKind.RUN_TIMED_OUT, parsed, task_id, job, reason, given_up=True)
            return
        self._emit(JobEventKind.RUN_FAILED, parsed, task_id, job, f"daemon run failed: {cause}")

    def _emit(
        self,
        kind: JobEventKind,
        parsed: TaskId,
        task_id: str,
        job: JobConfig | None,
        reason: str,
        *,
        given_up: bool = False,
    ) -> None:
        event = JobEvent(
            kind,
            parsed.job_name,
            time.time(),
            reason[:_REASON_MAX_CHARS],
            sharding_item=parsed.item,
            task_id=task_id,
            execution_type=parsed.type.value,
            webhook_url=None if job is None else job.notify_webhook_url,
            given_up=given_up,
        )
        self.event_listeners.emit(event)

    def _reset_backoff(self, parsed: TaskId) -> None:
        """A run succeeded: forget its shard's failures. Only a FAILOVER task can follow
        failures (the job's other runs wait while its shard is queued), so READY successes,
        the common case, cost no ZooKeeper read here."""
        if parsed.type is TaskType.FAILOVER:
            self._stores.failover.succeeded(parsed.job_name, parsed.item)

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


def _daemon_started(task: RunningTask, update: TaskUpdate) -> bool:
    """The executor's first TASK_RUNNING of a daemon job's task (not BEGIN or COMPLETE): the
    task waits for its cron's first fire."""
    job = update.job
    return (
        job is not None
        and job.execution_type is JobExecutionType.DAEMON
        and update.state == "TASK_RUNNING"
        and task.state != "TASK_RUNNING"
        and update.status.get("source") == "SOURCE_EXECUTOR"
    )


_UNKNOWN_TO_MESOS = frozenset({"TASK_UNKNOWN", "TASK_LOST", "TASK_GONE"})
_RECONCILIATION = "REASON_RECONCILIATION"


def _idle_daemon_unknown(update: TaskUpdate) -> bool:
    """A daemon job's task, idle when last heard of, that reconciliation says Mesos does not
    know (Mesos's answer for an unknown task: TASK_LOST, TASK_UNKNOWN when partition-aware,
    TASK_GONE for an agent that does not know it; REASON_RECONCILIATION)."""
    task, job = update.task, update.job
    return (
        task is not None
        and task.idle
        and job is not None
        and job.execution_type is JobExecutionType.DAEMON
        and update.state in _UNKNOWN_TO_MESOS
        and update.status.get("reason") == _RECONCILIATION
    )


def _launch_never_reached_mesos(update: TaskUpdate) -> bool:
    """A task never recorded started (its node still TASK_STAGING, as the launcher wrote it
    before its ACCEPT; a TASK_STARTING is not written, and our executor sends TASK_RUNNING once
    the job's process started) that reconciliation says Mesos does not know: the ACCEPT never
    reached the master (a leader stopped between its bookkeeping and the ACCEPT), or the task
    went with its agent before its job's process started. A master knows a task from the ACCEPT
    on, and one that has just failed over answers nothing for a task whose agent has not
    re-registered yet, so no run of it can be going on."""
    task = update.task
    return (
        task is not None
        and task.state == "TASK_STAGING"
        and update.state in _UNKNOWN_TO_MESOS
        and update.status.get("reason") == _RECONCILIATION
    )


def _failed_daemon_run(parsed: TaskId, status: dict[str, Any]) -> str | None:
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
            "status: daemon run of %s shard %s failed: %s", parsed.job_name, parsed.item, lines[-1]
        )
        return lines[-1]
    return None


def _log_finished(task_ids: list[str]) -> None:
    """One line for the tasks a batch ended well, `status: <task> finished, <task> finished`
    (what `./dev.sh run`'s live view reads): a line per task took about 14% of the event
    thread's time at 100 tasks a second (issue 29)."""
    log.info("status: %s", ", ".join(f"{task_id} finished" for task_id in task_ids))

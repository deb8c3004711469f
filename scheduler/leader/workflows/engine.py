"""The workflow engine (issue 27): a leader room that fires workflows and moves their runs.

On its thread (`sched-workflows`), woken by a task's end, by the API and once a second:
- **cron fires**: each enabled workflow with a cron is accounted from its last recorded fire
  (`WORKFLOW_LAST_FIRE`), as the producer accounts a job's: with `misfire` every fire since the
  record makes a run, in order (at most `catch_up_cap` at a time; the rest are logged), without
  it a fire missed by more than the grace is skipped and logged. overlapPolicy FORBID makes one
  run at a time (with `misfire` the fires wait, else they are skipped while a run is active);
  ALLOW makes each. A run and the record that accounts its fire are written in one fenced
  transaction; the run's id comes from the fire, so a fire makes one run however many leaders
  race for it. A fire in a period one of the workflow's `excludeCalendars` excludes (issue 28)
  makes no run, on time or missed, misfire on or off: it is recorded as accounted (exactly once
  across leader changes), logged (INFO, at most every 10 s a workflow) and reported to
  `event_listeners` as a `fire_excluded` event (the trace row and metric of the workflow's
  name). The calendars are asked of `calendars` at each accounting, so an edit applies at once.
- **runs**: for each active run, the fire records of its running nodes say when every shard
  ended (the status handler writes them); the run is stepped (`model/workflow/run.step`) and
  written with what the step launches in one fenced, versioned transaction
  (`WorkflowStore.apply`); the launcher then launches each node fire as one run of its job.
  A node whose job is gone or disabled fails; a run past its `timeoutSeconds` times out; a
  run whose workflow was deleted is cancelled. Nodes stopped while running have their tasks
  killed and their failover shards dropped.
- **resume**: at the term's start the queued node fires are loaded for the launcher and every
  running node's shards are checked: a shard with no task running, none queued for failover and
  no end recorded ended while no leader could record it (between the status handler's two
  writes of a failure) and counts as failed, so that no run waits for ever.

The API's operations (trigger, cancel, retry, mark-success) are methods called on API threads;
every write is a fenced compare-and-set, so they and the engine's thread never overwrite each
other.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from scheduler.leader.lifecycle import Listeners, TermView, ThreadedComponent
from scheduler.leader.workflows.backfills import WorkflowBackfills
from scheduler.model.calendar import Calendar, excluded_by
from scheduler.model.config.job import JobConfig
from scheduler.model.config.policies import OverlapPolicy
from scheduler.model.errors import (
    Conflict,
    InvalidRequest,
    NotFound,
    NotLeader,
    SchedulerError,
)
from scheduler.model.fires import (
    MAX_FIRES_COUNTED,
    FireDecision,
    FireOutcome,
    FirePlan,
    due_fires,
    fire_events,
)
from scheduler.model.job_events import JobEvent
from scheduler.model.runs import FIRE_TASK_KEY
from scheduler.model.task_id import TaskId
from scheduler.model.task_states import ACTIVE_STATES
from scheduler.model.workflow import (
    Cancel,
    Event,
    MarkSuccess,
    NodeEnded,
    NodeState,
    Retry,
    RunState,
    Start,
    Step,
    Timeout,
    WorkflowConfig,
    WorkflowRun,
    new_run,
    parse_run_id,
    run_id_of,
    step,
)
from scheduler.storage.backfill_store import WORKFLOW_PATHS, BackfillStore
from scheduler.storage.layout import workflow_active_path
from scheduler.storage.state import KILLED_BY_USER
from scheduler.storage.term_stores import TermStores
from scheduler.storage.transactions import FencedWriter
from scheduler.storage.workflow_store import (
    FireRecord,
    NodeFire,
    WorkflowQueue,
    WorkflowStore,
    fire_key,
)

log = logging.getLogger(__name__)

TICK_S = 1.0
_MISFIRE_GRACE_S = 30.0
_DEFINITIONS_EVERY_S = 30.0
# A workflow firing every second in an excluded day: its skips are logged at most this often.
_EXCLUDED_LOG_EVERY_S = 10.0


class CalendarSource(Protocol):
    """The calendars a workflow's `excludeCalendars` name (the term's calendar store)."""

    def calendars(self, names: Iterable[str]) -> list[Calendar]:
        """Those of `names` that exist, in the order given; no I/O once loaded."""
        ...


_TRIGGER_TRIES = 50


@dataclass
class _Schedule:
    """A cron workflow as the engine fires it."""

    config: WorkflowConfig
    trigger: Any
    next_fire: float | None = None
    """Epoch seconds of its next fire not yet accounted (None: work it out from the record)."""


class WorkflowEngine(ThreadedComponent):
    name = "workflows"
    thread_name = "sched-workflows"

    def __init__(
        self,
        store: WorkflowStore,
        stores: TermStores,
        term: TermView,
        queue: WorkflowQueue,
        kill: Callable[[str], bool],
        *,
        catch_up_cap: int = 10,
        tick_s: float = TICK_S,
        calendars: CalendarSource | None = None,
        max_active_backfills: int = 100,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`queue`: the node fires for the launcher (shared with it). `kill`: the driver's
        kill of a task. `catch_up_cap`: runs made at most per workflow and accounting.
        `calendars`: asked for a workflow's `excludeCalendars` at each accounting (None: no
        calendars in this term). `max_active_backfills`: the settings' quota of backfills
        (issue 28: the workflows' backfills are stepped here, `backfills.py`). `clock`: the
        backfills' epoch seconds (tests step it)."""
        super().__init__()
        self._store = store
        self._stores = stores
        self._term = term
        self._queue = queue
        self._kill = kill
        self._cap = max(1, catch_up_cap)
        self._tick_s = tick_s
        self._wake = threading.Event()
        self._paused = False
        self._lock = threading.RLock()
        self._schedules: dict[str, _Schedule] = {}
        self._definitions_read_at = float("-inf")
        # Called with each run that ended (the engine's thread or an API thread); must not
        # block.
        self.run_listeners: Listeners[[WorkflowRun]] = Listeners(log, "workflows: run listener")
        # Called with each fire_excluded event (the engine's thread); must not block.
        self.event_listeners: Listeners[[JobEvent]] = Listeners(log, "workflows: event listener")
        self._calendars = calendars
        # (workflow, calendar) named but missing, warned about once (bounded).
        self._missing_warned: set[tuple[str, str]] = set()
        # workflow -> (when its excluded fires were last logged, how many since).
        self._excluded_log: dict[str, tuple[float, int]] = {}
        self.runs_made = 0
        self.backfills = WorkflowBackfills(
            BackfillStore(stores.registry, stores.fence, max_active_backfills, WORKFLOW_PATHS),
            store,
            lambda config, fire, extra, backfill_id: self._make_run(
                config, fire, None, extra, backfill_id
            ),
            self.cancel,
            self.wake,
            clock,
        )

    @property
    def store(self) -> WorkflowStore:
        return self._store

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Load the queued node fires for the launcher and settle the shards whose end was
        lost, then start the thread. Raises (refusing the term) when ZooKeeper cannot be read."""
        self._queue.load(self._store.queued())
        self._settle_lost_shards()
        self.backfills.load()
        self._start_thread()

    def stop(self) -> None:
        self._stop_thread()

    def pause(self) -> None:
        self._paused = True

    def resume(self) -> None:
        self._paused = False
        self._wake.set()

    def _interrupt(self) -> None:
        self._wake.set()

    def wake(self) -> None:
        """Look at the runs now (any thread; never blocks)."""
        self._wake.set()

    def definitions_changed(self) -> None:
        """A workflow was registered, updated, deleted, enabled or disabled (any thread)."""
        self._definitions_read_at = float("-inf")
        self._wake.set()

    def on_status(self, status: dict[str, Any], parsed: TaskId) -> None:
        """Status listener: the end of a task that runs a fire may end a node
        (sched-mesos-events; never blocks). Other tasks' ends do not wake the thread (issue 29:
        a pass per ended task cost 4% of a core at 100 tasks a second); the tick would find
        any end all the same."""
        if status.get(FIRE_TASK_KEY) and str(status.get("state", "")) not in ACTIVE_STATES:
            self._wake.set()

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(self._tick_s)
            self._wake.clear()
            if self._stopping.is_set():
                return
            if self._paused or not self._term.acting:
                continue
            try:
                self._fire_crons(time.time())
                self._advance_all()
                self.backfills.run_pass()
            except NotLeader:
                log.info("workflows: not acting; round abandoned")
            except Exception:
                log.exception("workflows: round failed")

    # -- the API's operations (API threads) ----------------------------------------------------

    def trigger(self, name: str, parameter: str | None = None) -> WorkflowRun:
        """A run of `name` now. NotFound for an unknown workflow, Conflict when it is disabled
        or (overlapPolicy FORBID) a run of it is still running."""
        config = self._store.require(name)
        if self._store.is_disabled(name):
            raise Conflict(f"workflow '{name}' is disabled; enable it first")
        if config.overlap_policy is OverlapPolicy.FORBID and self._active_of(name):
            raise Conflict(
                f"workflow '{name}' has a run in progress; with overlapPolicy FORBID a trigger "
                "does not start another (cancel it, or use ALLOW)"
            )
        fire = time.time()
        for _ in range(_TRIGGER_TRIES):
            try:
                run = self._make_run(config, fire, parameter, extra=[])
            except Conflict:
                fire += 0.001  # a run of that millisecond exists: the next one is free
                continue
            log.info("workflows: %s triggered (run %s)", name, run.run_id)
            return run
        raise Conflict(f"workflow '{name}': could not find a free run id")

    def cancel(self, workflow: str, run_id: str) -> WorkflowRun:
        return self._operate(workflow, run_id, lambda now: Cancel(now, "cancelled by a user"))

    def retry(self, workflow: str, run_id: str) -> WorkflowRun:
        return self._operate(workflow, run_id, lambda now: Retry(now))

    def mark_success(self, workflow: str, run_id: str, node: str) -> WorkflowRun:
        return self._operate(workflow, run_id, lambda now: MarkSuccess(node, now))

    def _operate(
        self, workflow: str, run_id: str, event_at: Callable[[float], Event]
    ) -> WorkflowRun:
        parsed, _fire = parse_run_id(run_id)
        if parsed != workflow:
            raise NotFound(f"workflow '{workflow}' has no run '{run_id}'")
        written = self._store.apply(
            workflow,
            run_id,
            lambda run: step(run, event_at(time.time())),
            on_end=self.backfills.end_ops,
        )
        if written is None:
            got = self._store.run(workflow, run_id)
            if got is None:
                raise NotFound(f"workflow '{workflow}' has no run '{run_id}'")
            return got[0]
        return self._after(written)

    # -- making runs ----------------------------------------------------------------------------

    def _make_run(
        self,
        config: WorkflowConfig,
        fire: float,
        parameter: str | None,
        extra: list[Any],
        backfill_id: str = "",
    ) -> WorkflowRun:
        """Create the run of `config`'s fire at `fire` with its first nodes queued, `extra`
        ops (the cron record, a backfill's state) in the same transaction. Conflict when it
        exists already (or an extra op's version moved)."""
        now = time.time()
        first = step(new_run(config, fire, parameter, backfill_id), Start(now))
        first = self._fail_unlaunchable(first, now)
        if first.run.ended:
            extra = [*extra, *self.backfills.end_ops(first.run)]
        fires = self._store.create_run(first, extra)
        self.runs_made += 1
        self._queue.add(fires)
        if first.run.ended:
            self._ended(first.run)
        return first.run

    def _fail_unlaunchable(self, current: Step, now: float) -> Step:
        """Nodes just launched whose job is gone or disabled fail at once (a launch would wait
        for ever); their failure may launch or skip others, folded into the same step."""
        run = current.run
        launch = list(current.launch)
        kill = list(current.kill)
        todo = list(launch)
        while todo:
            name = todo.pop(0)
            why = self._unlaunchable(run.definition.node(name).job)
            if why is None:
                continue
            ended = step(run, NodeEnded(name, run.node(name).attempt, False, now, why))
            run = ended.run
            launch.extend(ended.launch)
            todo.extend(ended.launch)
            kill.extend(ended.kill)
        kept = [n for n in dict.fromkeys(launch) if run.node(n).state is NodeState.RUNNING]
        return Step(run, tuple(kept), tuple(dict.fromkeys(kill)))

    def _unlaunchable(self, job_name: str) -> str | None:
        job: JobConfig | None
        try:
            job = self._stores.config.job(job_name)
        except SchedulerError as exc:
            return f"job {job_name} cannot be read: {exc.message}"
        if job is None:
            return f"job {job_name} does not exist"
        if self._stores.is_disabled(job):
            return f"job {job_name} (or its app) is disabled"
        if job.execution_type.value != "TRANSIENT":
            return f"job {job_name} is a DAEMON job; a workflow node runs TRANSIENT jobs"
        return None

    def _active_of(self, workflow: str) -> list[str]:
        prefix = run_id_of(workflow, 0).rsplit("@", 1)[0] + "@"
        return [r for r in self._store.active() if r.startswith(prefix)]

    # -- cron fires -----------------------------------------------------------------------------

    def _fire_crons(self, now: float) -> None:
        self._refresh_schedules(now)
        with self._lock:
            due = [s for s in self._schedules.values() if s.next_fire is None or s.next_fire <= now]
        for schedule in due:
            try:
                self._account(schedule, now)
            except NotLeader:
                raise
            except SchedulerError as exc:
                log.error(
                    "workflows: fires of %s not accounted: %s",
                    schedule.config.workflow_name,
                    exc.message,
                )

    def _refresh_schedules(self, now: float) -> None:
        """Re-read the definitions when told they changed, and every 30 s regardless."""
        if now - self._definitions_read_at < _DEFINITIONS_EVERY_S:
            return
        self._definitions_read_at = now
        disabled = self._store.disabled_names()
        fresh: dict[str, _Schedule] = {}
        for config in self._store.all():
            if not config.cron or config.workflow_name in disabled:
                continue
            try:
                spec = config.cron_spec(self._store.default_time_zone)
            except InvalidRequest as exc:
                log.error("workflows: %s not scheduled: %s", config.workflow_name, exc.message)
                continue
            if spec is None:
                continue
            with self._lock:
                known = self._schedules.get(config.workflow_name)
            if known is not None and known.config == config:
                fresh[config.workflow_name] = known
            else:
                fresh[config.workflow_name] = _Schedule(config, spec.trigger())
        with self._lock:
            self._schedules = fresh

    def _account(self, schedule: _Schedule, now: float) -> None:
        """Make the runs of `schedule`'s fires due by `now` (see the module's docstring)."""
        config = schedule.config
        name = config.workflow_name
        made = 0
        for _ in range(self._cap + 1):
            last, version = self._store.last_fire(name)
            if last is None:
                # Counting starts now: a new (or re-enabled) workflow does not catch up.
                writer = self._writer()
                writer.commit(
                    f"start counting fires of {name}",
                    [self._store.last_fire_op(name, now, version)],
                )
                schedule.next_fire = self._next_after(schedule, now)
                return
            due = due_fires(schedule.trigger, last, now, self._cap + 1)
            if due.last is None:
                schedule.next_fire = self._next_after(schedule, last)
                return
            why = self._exclusion_of(config)
            if why is not None and why(due.times[0]) is not None:
                # The excluded fires first in line are accounted without a run, in one write
                # (looked for among many: a day of a fire a second missed in an excluded day).
                wide = due_fires(schedule.trigger, last, now, MAX_FIRES_COUNTED).times
                excluded = []
                for fire in wide:
                    reason = why(fire)
                    if reason is None:
                        break
                    excluded.append(FireDecision(fire, FireOutcome.EXCLUDED, reason))
                self._writer().commit(
                    f"exclude fires of {name}",
                    [self._store.last_fire_op(name, excluded[-1].time, version)],
                )
                self._report_excluded(name, excluded)
                continue
            forbid = config.overlap_policy is OverlapPolicy.FORBID
            active = forbid and bool(self._active_of(name))
            if not config.misfire:
                # Only the newest fire may run, and only when it is on time.
                newest = due.last
                on_time = now - newest <= _MISFIRE_GRACE_S
                missed = len(due.times) + (1 if due.more else 0) - (1 if on_time else 0)
                if missed > 0:
                    log.warning(
                        "workflows: %s missed %s fire(s) while no leader acted; skipped "
                        "(misfire off)",
                        name,
                        missed,
                    )
                record = self._store.last_fire_op(name, newest, version)
                reason = None if why is None else why(newest)
                if reason is not None:
                    self._writer().commit(f"exclude a fire of {name}", [record])
                    self._report_excluded(
                        name, [FireDecision(newest, FireOutcome.EXCLUDED, reason)]
                    )
                    continue
                if active or not on_time:
                    if active and on_time:
                        log.warning(
                            "workflows: %s fire at %s skipped: a run is in progress "
                            "(overlapPolicy FORBID, misfire off)",
                            name,
                            time.strftime("%H:%M:%S", time.gmtime(newest)),
                        )
                    self._writer().commit(f"skip fires of {name}", [record])
                    continue
                self._create(config, newest, record)
                continue
            if active:
                schedule.next_fire = None  # the fires wait for the run to end (misfire on)
                return
            if len(due.times) > self._cap or due.more:
                # More missed fires than catch_up_cap wait: the older ones are skipped (as a
                # job's beyond job_state_queue_size are), the newest cap are caught up.
                waiting = due_fires(schedule.trigger, last, now, MAX_FIRES_COUNTED)
                keep = list(waiting.times[-self._cap :])
                if waiting.more and waiting.last is not None:
                    keep = [waiting.last]
                # Recorded a millisecond before the first fire kept (fires are seconds apart).
                skipped_to = max(last, keep[0] - 0.001)
                log.warning(
                    "workflows: %s: more than catch_up_cap=%s fires missed; the older ones "
                    "skipped, the newest %s caught up (misfire on)",
                    name,
                    self._cap,
                    len(keep),
                )
                self._writer().commit(
                    f"skip fires of {name}",
                    [self._store.last_fire_op(name, skipped_to, version)],
                )
                continue
            fire = due.times[0]
            record = self._store.last_fire_op(name, fire, version)
            if len(due.times) > 1 or due.more:
                log.warning(
                    "workflows: %s catching up on a fire missed at %s (misfire on)",
                    name,
                    time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(fire)),
                )
            self._create(config, fire, record)
            made += 1
            if forbid or made >= self._cap:
                schedule.next_fire = None  # the rest wait for the run, or the next tick
                return
        schedule.next_fire = None  # more to catch up: on the next tick

    def _exclusion_of(self, config: WorkflowConfig) -> Callable[[float], str | None] | None:
        """Why a fire of the workflow at an epoch time is excluded (None: it is not), over its
        calendars as the store holds them now; None when it has none that exists (a missing
        one is ignored: deleting a calendar in use is refused)."""
        if self._calendars is None or not config.exclude_calendars:
            return None
        found = self._calendars.calendars(config.exclude_calendars)
        self._warn_missing(config, {c.calendar_name for c in found})
        if not found:
            return None

        def why(fire: float) -> str | None:
            exclusion = excluded_by(found, datetime.fromtimestamp(fire, UTC))
            return None if exclusion is None else str(exclusion)

        return why

    def _warn_missing(self, config: WorkflowConfig, found: set[str]) -> None:
        """One WARNING per workflow and calendar it names that does not exist (ignored: its
        fires are not excluded by it), as the producer warns of a job's."""
        name = config.workflow_name
        new = [
            c
            for c in config.exclude_calendars
            if c not in found and (name, c) not in self._missing_warned
        ]
        if not new:
            return
        if len(self._missing_warned) >= 4096:
            self._missing_warned.clear()  # bounded: warned again, never unbounded
        self._missing_warned.update((name, c) for c in new)
        log.warning(
            "workflows: %s lists calendar(s) %s in excludeCalendars, which do not exist; "
            "its fires are not excluded by them",
            name,
            ", ".join(repr(c) for c in new),
        )

    def _report_excluded(self, name: str, excluded: list[FireDecision]) -> None:
        """Tell the event listeners of excluded fires of workflow `name` (one event per run of
        the same calendar part); log them at INFO, at most every 10 s a workflow."""
        plan = FirePlan(tuple(excluded), pending=0)
        now = time.monotonic()
        for event in fire_events(name, plan, None):
            with self._lock:
                logged_at, unlogged = self._excluded_log.get(name, (float("-inf"), 0))
                unlogged += event.fires
                log_now = now - logged_at >= _EXCLUDED_LOG_EVERY_S
                self._excluded_log[name] = (now, 0) if log_now else (logged_at, unlogged)
                if len(self._excluded_log) > 4096:
                    self._excluded_log.clear()  # bounded: workflows come and go
            if log_now:
                earlier = unlogged - event.fires
                more = f" (and {earlier} excluded fires since the last line)" if earlier else ""
                log.info("workflows: %s: %s%s", name, event.reason, more)
            self.event_listeners.emit(event)

    def _create(self, config: WorkflowConfig, fire: float, record: Any) -> None:
        try:
            self._make_run(config, fire, None, [record])
            log.info(
                "workflows: %s fired (run %s)",
                config.workflow_name,
                run_id_of(config.workflow_name, fire),
            )
        except Conflict:
            # The record moved (another write accounted this fire) or the run exists: read
            # again.
            return

    def _next_after(self, schedule: _Schedule, after: float) -> float | None:
        fire = schedule.trigger.get_next_fire_time(None, datetime.fromtimestamp(after + 1e-3, UTC))
        return None if fire is None else float(fire.timestamp())

    def _writer(self) -> FencedWriter:
        assert self._stores.fence is not None
        return FencedWriter(self._stores.registry, self._stores.fence)

    # -- moving runs ----------------------------------------------------------------------------

    def _advance_all(self) -> None:
        for run_id in self._store.active():
            try:
                workflow, _fire = parse_run_id(run_id)
            except InvalidRequest:
                log.warning("workflows: active marker %s names no run; ignored", run_id)
                continue
            try:
                written = self._store.apply(
                    workflow,
                    run_id,
                    lambda run: self._decide(run, time.time()),
                    on_end=self.backfills.end_ops,
                )
            except NotFound:
                self._drop_marker(run_id)
                continue
            except NotLeader:
                raise
            except SchedulerError as exc:
                log.error("workflows: run %s not advanced: %s", run_id, exc.message)
                continue
            if written is not None:
                self._after(written)

    def _drop_marker(self, run_id: str) -> None:
        self._writer().delete(workflow_active_path(run_id), recursive=False)

    def _decide(self, run: WorkflowRun, now: float) -> Step | None:
        """The events the run's state in ZooKeeper implies now, folded into one step."""
        if run.ended:
            return None
        events: list[Event] = []
        if self._store.get(run.workflow_name) is None:
            events.append(Cancel(now, "the workflow was deleted"))
        timeout_s = run.definition.timeout_seconds
        if timeout_s and run.started_at is not None and now - run.started_at >= timeout_s:
            events.append(Timeout(now))
        running = [n for n, r in run.nodes.items() if r.state is NodeState.RUNNING]
        keys = {n: fire_key(run.run_id, n, run.node(n).attempt) for n in running}
        records = self._store.fire_records(list(keys.values())) if keys else {}
        # Nodes failed before their launch (their job gone or disabled): their queued launch
        # is withdrawn in the same write, as a stopped node's is.
        withdrawn: list[str] = []
        for name in running:
            record = records.get(keys[name])
            ended = self._node_end(run, name, record, now)
            if ended is not None:
                events.append(ended)
                if record is not None and record.shards is None:
                    withdrawn.append(name)
        if not events:
            return None
        current = Step(run)
        launch: list[str] = []
        kill: list[str] = list(withdrawn)
        for event in events:
            current = step(current.run, event)
            launch.extend(current.launch)
            kill.extend(current.kill)
        launch = [n for n in launch if current.run.node(n).state is NodeState.RUNNING]
        return self._fail_unlaunchable(Step(current.run, tuple(launch), tuple(kill)), now)

    def _node_end(
        self, run: WorkflowRun, name: str, record: FireRecord | None, now: float
    ) -> NodeEnded | None:
        attempt = run.node(name).attempt
        if record is None:
            return NodeEnded(name, attempt, False, now, "its fire record is gone")
        if record.complete:
            tasks = tuple(record.task_ids) + tuple(t for _ok, _w, t in record.done.values())
            return NodeEnded(name, attempt, record.succeeded, now, record.reason(), tasks)
        if record.shards is None:
            why = self._unlaunchable(run.definition.node(name).job)
            if why is not None:
                return NodeEnded(name, attempt, False, now, why)
        return None

    def _after(self, written: tuple[Step, list[NodeFire], list[NodeFire]]) -> WorkflowRun:
        """What follows a step written: its launches to the launcher, its stopped nodes'
        tasks killed, an ended run's fire records dropped and its listeners told."""
        done, fires, stopped = written
        self._queue.drop([f.key for f in stopped])
        self._queue.add(fires)
        for fire in stopped:
            self._stop_tasks(fire)
        if done.run.ended:
            self._ended(done.run)
        return done.run

    def _stop_tasks(self, fire: NodeFire) -> None:
        """Kill the running tasks of a stopped node fire and drop its failover shards."""
        stores = self._stores
        try:
            for task in stores.running.tasks(fire.job):
                if task.workflow_fire == fire.key and stores.running.mark_killed(
                    task.task_id, KILLED_BY_USER
                ):
                    self._kill(task.task_id)
                    log.info(
                        "workflows: run %s node %s: %s killed", fire.run_id, fire.node, task.task_id
                    )
            for job, item, original in stores.failover.entries():
                if job == fire.job:
                    owner = self._store.fire_of_task(original)
                    if owner is not None and owner.key == fire.key:
                        stores.failover.remove(job, item)
        except (NotLeader, Conflict):
            raise
        except SchedulerError as exc:
            log.error("workflows: tasks of %s not all stopped: %s", fire.key, exc.message)

    def _ended(self, run: WorkflowRun) -> None:
        log.log(
            logging.INFO if run.state.value == "succeeded" else logging.WARNING,
            "workflows: run %s %s%s",
            run.run_id,
            run.state.value,
            f" ({run.reason})" if run.reason else "",
        )
        for name, record in run.nodes.items():
            for attempt in range(1, record.attempt + 1):
                try:
                    self._store.forget_fire(fire_key(run.run_id, name, attempt))
                except SchedulerError as exc:
                    log.warning("workflows: fire record of %s kept: %s", name, exc.message)
        self.run_listeners.emit(run)
        if run.state is RunState.CANCELLED and self._store.get(run.workflow_name) is None:
            # The run of a deleted workflow, cancelled by the delete: it goes as its ended runs
            # went with the definition.
            try:
                self._store.delete_runs(run.workflow_name)
            except SchedulerError as exc:
                log.warning(
                    "workflows: runs of deleted %s kept: %s", run.workflow_name, exc.message
                )

    # -- resume -----------------------------------------------------------------------------------

    def _settle_lost_shards(self) -> None:
        """Term start: a launched shard of a running node with no task running, none queued for
        failover and no end recorded counts as failed (see the module's docstring)."""
        for run_id in self._store.active():
            try:
                workflow, _fire = parse_run_id(run_id)
                got = self._store.run(workflow, run_id)
            except SchedulerError as exc:
                log.warning("workflows: active run %s unreadable at start: %s", run_id, exc.message)
                continue
            if got is None:
                continue
            run = got[0]
            for name, node in run.nodes.items():
                if node.state is NodeState.RUNNING:
                    self._settle_node(run, name, node.attempt)

    def _settle_node(self, run: WorkflowRun, name: str, attempt: int) -> None:
        key = fire_key(run.run_id, name, attempt)
        got = self._store.fire_record(key)
        if got is None or got[0].shards is None or got[0].complete:
            return
        record = got[0]
        job = run.definition.node(name).job
        alive: set[int] = set()
        for task in self._stores.running.tasks(job):
            if task.workflow_fire == key:
                alive.add(task.parsed.item)
        for entry_job, item, original in self._stores.failover.entries():
            if entry_job == job:
                owner = self._store.fire_of_task(original)
                if owner is not None and owner.key == key:
                    alive.add(item)
        assert record.shards is not None
        for item in range(record.shards):
            if item in record.done or item in alive:
                continue
            why = "its end was lost in a leader change (no task running, none relaunched)"
            log.warning("workflows: run %s node %s shard %s: %s", run.run_id, name, item, why)
            ops = self._store.shard_ended_ops(key, item, False, why, "")
            if ops:
                self._writer().commit(f"settle shard {item} of {key}", ops)

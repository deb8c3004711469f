"""The cron producer: turns cron fires into pending runs, on the leader only.

A fresh APScheduler `BackgroundScheduler` (memory job store) per term, one trigger per distinct
cron and zone (`CronSpec.schedule_key`), fanning out to the jobs that use it. Every fire is
accounted from the job's last recorded fire (the fire ledger: the record and the pending runs
change in one fenced transaction), so none is lost or counted twice across leader changes:
when a job is scheduled (at term start, or enabled) and at each trigger, every fire since the
record is due. With `misfire` each adds a pending run, in order, up to `job_state_queue_size`
pending (the rest are capped); without, a missed fire is skipped and one on time adds a run
unless one is pending or the job still runs under overlapPolicy FORBID. Every skipped or capped
fire is logged here and reported to `event_listeners` (event trace, metrics, webhooks).

`max_fires_per_second` (0: none) budgets the cron fires of the whole cluster (only the leader
produces): a job's fire takes one token of a bucket that holds a second's worth. The fires over
it are delayed, never dropped: the job waits in a queue (in the order its fires came) that the
producer's pool drains as the budget allows, and is then accounted as any fire, from its record
and with its fire counted on time, so its run still comes. A fire of a job that already waits is
accounted with the waiting one. Each delayed fire is reported to `event_listeners` as a
`fire_delayed` event (event trace and metrics; the log says so at most every 10 s). Catch-up
fires at term start and on a schedule change are not budgeted.

Calendars (issue 28): a fire in a period excluded by one of the job's `excludeCalendars` adds no
run, on time or missed, misfire on or off; it is accounted as any fire (the record moves past
it, so exactly once across leader changes) and reported to `event_listeners` as a
`fire_excluded` event naming the calendar and its part (event trace and metrics; no webhook),
and logged at INFO (at most every 10 s a job, with the count since). The calendars are asked
of `calendars` at each accounting, none kept here, so an edited calendar applies from the next
fire on; a listed calendar that does not exist is ignored, with one WARNING per job and name.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Protocol

from apscheduler.executors.pool import ThreadPoolExecutor  # type: ignore[import-untyped]
from apscheduler.jobstores.base import JobLookupError  # type: ignore[import-untyped]
from apscheduler.schedulers.background import BackgroundScheduler  # type: ignore[import-untyped]
from apscheduler.schedulers.base import STATE_STOPPED  # type: ignore[import-untyped]
from apscheduler.triggers.base import BaseTrigger  # type: ignore[import-untyped]

from scheduler.leader.lifecycle import LeaderComponent, Listeners, TermView, collector_paused_for
from scheduler.model.calendar import Calendar, excluded_by
from scheduler.model.config.job import JobConfig, JobExecutionType
from scheduler.model.errors import InvalidRequest, NotLeader, SchedulerError
from scheduler.model.fire_turns import FireTurns
from scheduler.model.fires import (
    MAX_FIRES_COUNTED,
    DueSince,
    FireBudget,
    FireOutcome,
    FirePlan,
    Trigger,
    fire_events,
    plan_fires,
)
from scheduler.model.job_events import JobEvent, JobEventKind, iso_time
from scheduler.storage.fire_ledger import FireLedger, LedgerState, LedgerWrite
from scheduler.storage.queue_cache import QueueCache
from scheduler.storage.term_stores import TermStores

log = logging.getLogger(__name__)


def _at(epoch_s: float) -> datetime:
    return datetime.fromtimestamp(epoch_s, UTC)


# An enqueue-only callback: a fire up to this late still counts (APScheduler's default 1 s is
# easily missed on a loaded machine).
_MISFIRE_GRACE_S = 30

# APScheduler runs a job a millisecond or so after its time (its loop thread works out the
# job's next run, logs, and hands it to a pool thread). A cron fire is asked for this much
# earlier and waits for its exact time itself, so that the fire is recorded, and its runs
# launched, from the cron second on rather than from when APScheduler gets to it.
_FIRE_LEAD_S = 0.005

# A sustained overload delays fires every second; the log says so at most this often.
_DELAY_LOG_EVERY_S = 10.0

# A job firing every second whose fires are skipped (its last run still going, an excluded
# day, a full queue): each kind of outcome is logged at most this often per job. Every fire
# still becomes its event (metrics, webhooks, the job's events).
_FIRE_EVENT_LOG_EVERY_S = 10.0


class CalendarSource(Protocol):
    """The calendars a job's `excludeCalendars` name (the term's calendar store)."""

    def calendars(self, names: Iterable[str]) -> list[Calendar]:
        """Those of `names` that exist, in the order given; no I/O once loaded (any thread)."""
        ...


class _EarlyTrigger(BaseTrigger):  # type: ignore[misc]  # APScheduler is untyped
    """`trigger`'s fire times, `lead` earlier (the APScheduler job of a cron)."""

    def __init__(self, trigger: Trigger, lead_s: float) -> None:
        self._trigger = trigger
        self._lead = timedelta(seconds=lead_s)

    def get_next_fire_time(
        self, previous_fire_time: datetime | None, now: datetime
    ) -> datetime | None:
        previous = None if previous_fire_time is None else previous_fire_time + self._lead
        fire = self._trigger.get_next_fire_time(previous, now + self._lead)
        return None if fire is None else fire - self._lead

    def __str__(self) -> str:
        return f"{self._trigger}, asked {self._lead.total_seconds() * 1000:g} ms early"


def _fire_due(trigger: Trigger, now: float) -> float:
    """The epoch time of the cron fire a call at `now` was asked for early: the trigger's next
    fire if it is at most twice the lead ahead, else `now` (the one asked for has passed, and
    it is due now)."""
    fire = trigger.get_next_fire_time(None, _at(now))
    if fire is None:
        return now
    due: float = fire.timestamp()
    return now if due - now > 2 * _FIRE_LEAD_S else due


def _wait_for_fire(
    due: float,
    now: float,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """Sleep until `due`, the cron fire this call was asked for early (`_fire_due`), if it is
    still ahead; returns the time then."""
    if due <= now:
        return now
    deadline = now + 2 * _FIRE_LEAD_S
    while now < due and now < deadline:
        sleep(due - now)
        now = clock()
    return now


class _Scheduler(BackgroundScheduler):  # type: ignore[misc]
    """APScheduler's background scheduler, quiet about a one-shot job it ran as it was shut
    down: its loop removes such a job after submitting it, and once `shutdown` has set the
    state to stopped, `remove_job` looks among the jobs not yet started only and raises
    JobLookupError, which ended the loop's thread with an exception (a term's stop during a
    fire budget's drain or a catch-up accounting; seen in a test under load)."""

    def remove_job(self, job_id: str, jobstore: str | None = None) -> None:
        try:
            super().remove_job(job_id, jobstore)
        except JobLookupError:
            if self.state != STATE_STOPPED:
                raise


class Producer(LeaderComponent):
    name = "producer"

    def __init__(
        self,
        stores: TermStores,
        term: TermView,
        on_work: Callable[[], None],
        queue_size: int,
        queues: QueueCache,
        max_fires_per_second: float = 0.0,
        calendars: CalendarSource | None = None,
    ) -> None:
        self._stores = stores
        # Asked at each accounting of a job with `excludeCalendars` (None: no calendars here).
        self._calendars = calendars
        # (job, calendar) named but missing, warned about once; job -> outcome -> (when its
        # fires of that outcome were last logged, how many since).
        self._missing_warned: set[tuple[str, str]] = set()
        self._fire_log: dict[str, dict[JobEventKind, tuple[float, int]]] = {}
        self._cap = queue_size
        # The term's view of the queues (shared with the launcher): the ledger reads pending
        # and running work from it, and it learns the jobs scheduled here.
        self._queues = queues
        self._ledger = FireLedger(stores.registry, stores.fence, queue_size, queues)
        # Called with each skipped, capped or excluded fire (any producer thread); must not
        # block.
        self.event_listeners: Listeners[[JobEvent]] = Listeners(log, "producer: event listener")
        # Called with (job name, fire time) of each fire that queued a run, in order (any
        # producer thread); must not block.
        self.fire_listeners: Listeners[[str, float]] = Listeners(log, "producer: fire listener")
        self._term = term
        self._on_work = on_work
        self._lock = threading.RLock()
        # Cron fires being accounted now (their pool threads count them).
        self._accounting = 0
        self._accounting_lock = threading.Lock()
        self._jobs: dict[str, JobConfig] = {}
        self._key_of: dict[str, tuple[object, ...]] = {}
        self._by_key: dict[tuple[object, ...], set[str]] = {}
        self._ids: dict[tuple[object, ...], str] = {}
        self._triggers: dict[tuple[object, ...], Trigger] = {}
        self._sched: BackgroundScheduler | None = None
        self.fires = 0
        self._last_fires: dict[str, float] | None = None
        # (cron key, recorded last fire) -> the fire after it, for term start's due checks:
        # thousands of jobs on one cron were last fired at the same second.
        self._fire_after: dict[tuple[tuple[object, ...], float], float] = {}
        # Jobs scheduled at term start whose fires are still to account, by cron key.
        self._deferred: dict[tuple[object, ...], list[tuple[JobConfig, bool]]] = {}
        self._flushing = False
        # The fires of one second are accounted the fewest jobs first (`model.fire_turns`).
        self._turns = FireTurns(patience_s=4 * _FIRE_LEAD_S)
        # max_fires_per_second (None: no budget), and the jobs whose fire waits for it, in the
        # order they came: name -> (cron key, the first fire it waits with).
        self._budget = (
            FireBudget(max_fires_per_second, time.monotonic()) if max_fires_per_second > 0 else None
        )
        self._delayed: dict[str, tuple[tuple[object, ...], float]] = {}
        self._draining = False
        self.delayed_fires = 0
        self._delays_unlogged = 0
        self._delay_logged_at = float("-inf")

    def start(self) -> None:
        self._sched = _Scheduler(
            timezone=UTC,
            executors={"default": ThreadPoolExecutor(2)},
            job_defaults={
                "coalesce": True,
                "max_instances": 1,
                "misfire_grace_time": _MISFIRE_GRACE_S,
            },
        )
        self._sched.start()

    def stop(self) -> None:
        sched, self._sched = self._sched, None
        if sched is not None:
            # wait=False: a fire already submitted still checks the fence before writing.
            sched.shutdown(wait=False)
        with self._lock:
            self._jobs.clear()
            self._key_of.clear()
            self._by_key.clear()
            self._ids.clear()
            self._triggers.clear()
            self._fire_after.clear()
            self._deferred.clear()
            self._fire_log.clear()
            # Not accounted: the next leader accounts them from the same records.
            self._delayed.clear()
            self._draining = False

    def pause(self) -> None:
        if self._sched is not None:
            self._sched.pause()

    def resume(self) -> None:
        if self._sched is not None:
            self._sched.resume()

    def next_fire_at(self) -> float | None:
        """Epoch seconds of the next cron fire of any scheduled job (None: none); now while a
        fire is being accounted (10,000 jobs' fire takes longer than the launcher holds its
        offers after the fire second: it would suppress them, then revive); any thread."""
        if self._accounting:  # an int read: no lock (this must not block)
            return time.time()
        sched = self._sched
        if sched is None:
            return None
        times = [j.next_run_time for j in sched.get_jobs() if j.next_run_time is not None]
        return min(times).timestamp() if times else None

    @property
    def scheduled(self) -> set[str]:
        with self._lock:
            return set(self._jobs)

    def prefetch_last_fires(self, names: list[str]) -> None:
        """Read the recorded last fires of `names` in one pipelined round (term start)."""
        self._last_fires = self._ledger.prefetch(names)

    def schedule(self, job: JobConfig, *, catch_up: bool = False) -> None:
        """Start producing runs for `job` (replacing an earlier schedule of it).

        Raises NotLeader/RegistryError from state writes; a cron that cannot be honoured is
        logged and the job is not scheduled.
        """
        with self._lock:
            previous_key = self._key_of.get(job.job_name)
            scheduled = job.job_name in self._jobs
            if not scheduled:
                self._fire_log.pop(job.job_name, None)
        if scheduled:
            self.unschedule(job.job_name)
        self._queues.note_job(job)  # (replaces what the view knew of a job not scheduled here)
        if job.execution_type is JobExecutionType.DAEMON:
            if not self._stores.running.tasks(job.job_name):
                self._stores.ready.add_daemon(job.job_name)
                self._on_work()
            with self._lock:
                self._jobs[job.job_name] = job
            return
        if not job.has_cron:
            # No cron (issue 27): it fires only when triggered or in a workflow.
            with self._lock:
                self._jobs[job.job_name] = job
            log.log(
                logging.DEBUG if catch_up else logging.INFO,
                "producer: job %s has no cron; it runs when triggered or in a workflow",
                job.job_name,
            )
            return
        try:
            spec = job.cron_spec
            trigger = spec.trigger()
        except InvalidRequest as exc:
            log.error("producer: job %s not scheduled: %s", job.job_name, exc.message)
            return
        key = spec.schedule_key
        with self._lock:
            self._jobs[job.job_name] = job
            self._key_of[job.job_name] = key
            names = self._by_key.setdefault(key, set())
            names.add(job.job_name)
            self._triggers.setdefault(key, trigger)
            if key not in self._ids and self._sched is not None:
                aps_job = self._sched.add_job(
                    self._fire,
                    trigger=_EarlyTrigger(trigger, _FIRE_LEAD_S),
                    args=[key],
                    name=f"cron {spec.expression}",
                )
                self._ids[key] = aps_job.id
        # At term start the config listener logs one line for all jobs (a line per job costs
        # 10,000 writes to the log, a quarter of the term's start with 10,000 jobs).
        if not catch_up or log.isEnabledFor(logging.DEBUG):
            log.log(
                logging.DEBUG if catch_up else logging.INFO,
                "producer: job %s scheduled (%s %s)",
                job.job_name,
                spec.expression,
                spec.time_zone,
            )
        # After the trigger is in place, so that no fire falls between the two: fires since the
        # record (missed while no leader acted, or while the job was not scheduled here) are
        # due now; a job without a record, or whose cron changed, starts counting from now.
        prefetched = self._last_fires.get(job.job_name) if catch_up and self._last_fires else None
        if (
            prefetched is not None
            and self._fire_after_record(key, trigger, prefetched) > time.time()
        ):
            return  # nothing due: no ZooKeeper round trip for most jobs at term start
        restart = previous_key is not None and previous_key != key
        if catch_up and self._sched is not None:
            # Term start: accounted in batches on the producer's pool, so that thousands of
            # jobs cost a few pipelined reads and transactions, not a round trip each, and the
            # term's start does not wait for them (a fire meanwhile accounts from the same
            # records; the versioned ledger counts each fire once).
            with self._lock:
                self._deferred.setdefault(key, []).append((job, restart))
                if not self._flushing:
                    self._flushing = True
                    self._sched.add_job(self._flush_deferred, name="catch-up accounting")
            return
        now = time.time()
        # At term start every fire since the record was missed; later (the job changed), a fire
        # of the last moments is one whose trigger is just going off.
        on_time_from = None if catch_up else now - _MISFIRE_GRACE_S
        self._account(job, trigger, now, on_time_from=on_time_from, restart=restart)

    def _fire_after_record(
        self, key: tuple[object, ...], trigger: Trigger, recorded: float
    ) -> float:
        """The cron's first fire after the recorded one, in epoch seconds (infinity when it
        fires no more)."""
        with self._lock:
            known = self._fire_after.get((key, recorded))
        if known is not None:
            return known
        fire = trigger.get_next_fire_time(None, _at(recorded + 1e-6))
        at = math.inf if fire is None else fire.timestamp()
        with self._lock:
            if len(self._fire_after) >= 4096:
                self._fire_after.clear()  # bounded: jobs of many crons and many last fires
            self._fire_after[(key, recorded)] = at
        return at

    def _flush_deferred(self) -> None:
        """Producer pool: account the jobs scheduled at term start, a batch per cron, until
        none is left."""
        while True:
            with self._lock:
                deferred, self._deferred = self._deferred, {}
                if not deferred:
                    self._flushing = False
                    return
                triggers = {key: self._triggers.get(key) for key in deferred}
            if not self._term.acting:
                continue  # dropped: the next leader accounts them from the same records
            for key, jobs in deferred.items():
                trigger = triggers[key]
                if trigger is None:
                    continue  # unscheduled meanwhile
                with self._lock:
                    jobs = [(j, r) for j, r in jobs if self._key_of.get(j.job_name) == key]
                try:
                    self._account_many(jobs, trigger, time.time(), on_time_from=None)
                except NotLeader:
                    return
                except SchedulerError as exc:
                    log.error(
                        "producer: catch-up of %s job(s) (%s...) not recorded: %s",
                        len(jobs),
                        jobs[0][0].job_name if jobs else "",
                        exc.message,
                    )

    def unschedule(self, job_name: str) -> bool:
        """Stop producing runs for `job_name`; False when it was not scheduled."""
        self._queues.forget_job(job_name)
        with self._lock:
            self._fire_log.pop(job_name, None)
            if self._jobs.pop(job_name, None) is None:
                return False
            key = self._key_of.pop(job_name, None)
            if key is None:
                return True
            names = self._by_key.get(key, set())
            names.discard(job_name)
            if not names:
                self._by_key.pop(key, None)
                self._triggers.pop(key, None)
                aps_id = self._ids.pop(key, None)
                if aps_id is not None and self._sched is not None:
                    try:
                        self._sched.remove_job(aps_id)
                    except Exception:
                        log.exception("producer: could not remove trigger of %s", job_name)
        return True

    def _account(
        self,
        job: JobConfig,
        trigger: Trigger,
        now: float,
        *,
        on_time_from: float | None,
        restart: bool = False,
    ) -> None:
        """Account every fire of `job` due by `now` (any thread; the ledger serialises).

        Raises NotLeader and other SchedulerErrors from the ledger's reads and write.
        """
        self._account_many([(job, restart)], trigger, now, on_time_from=on_time_from)

    def _account_many(
        self,
        jobs: list[tuple[JobConfig, bool]],
        trigger: Trigger,
        now: float,
        *,
        on_time_from: float | None,
    ) -> None:
        """Account every fire due by `now` of `jobs` (each with its `restart` flag: counting
        starts now), all sharing `trigger`, in one batch of the ledger (any thread).

        Raises NotLeader and other SchedulerErrors from the ledger's reads and writes.
        """
        limit = max(MAX_FIRES_COUNTED, self._cap + 1)
        # The jobs of one cron share the fires due since their records (`fires.DueSince`).
        due_since = DueSince(trigger, now, limit)

        # Read before the ledger's transaction, which may run its decisions more than once.
        exclusions = {job.job_name: self._exclusion_of(job) for job, _r in jobs}

        def decider(
            job: JobConfig, restart: bool
        ) -> Callable[[LedgerState], tuple[LedgerWrite, FirePlan | None] | None]:
            def decide(state: LedgerState) -> tuple[LedgerWrite, FirePlan | None] | None:
                if state.last is None or restart:
                    return LedgerWrite(now, state.pending), None  # counting starts now
                due = due_since(state.last)
                if due.last is None:
                    return None
                plan = plan_fires(
                    due,
                    misfire=job.misfire,
                    policy=job.overlap,
                    pending=state.pending,
                    running=state.running,
                    cap=self._cap,
                    on_time_from=on_time_from,
                    queue_full=state.queue_full,
                    excluded=exclusions[job.job_name],
                )
                return LedgerWrite(due.last, plan.pending), plan

            return decide

        plans = self._ledger.account_many(
            [(job.job_name, decider(job, restart)) for job, restart in jobs]
        )
        reported = [(job, plan) for job, _r in jobs if (plan := plans.get(job.job_name))]
        for job, plan in reported:
            self._note_fires(job, plan)  # before a launch can take them
        # Then the launcher: the events below are not on the way from a fire to its launch.
        if any(plan.queued > 0 for _job, plan in reported):
            self._on_work()
        for job, plan in reported:
            self._report(job, plan, on_time_from)

    def _exclusion_of(self, job: JobConfig) -> Callable[[float], str | None] | None:
        """Why a fire of `job` at an epoch time is excluded (None: it is not), over the job's
        calendars as the store holds them now; None when no calendar of the job exists."""
        source = self._calendars
        if source is None or not job.exclude_calendars:
            return None
        found = source.calendars(job.exclude_calendars)
        if len(found) < len(job.exclude_calendars):
            self._warn_missing(job, {c.calendar_name for c in found})
        if not found:
            return None

        def why(fire: float) -> str | None:
            exclusion = excluded_by(found, _at(fire))
            return None if exclusion is None else str(exclusion)

        return why

    def _warn_missing(self, job: JobConfig, found: set[str]) -> None:
        """One WARNING per job and calendar it names that does not exist."""
        missing = [n for n in job.exclude_calendars if n not in found]
        with self._lock:
            new = [n for n in missing if (job.job_name, n) not in self._missing_warned]
            if len(self._missing_warned) >= 4096:
                self._missing_warned.clear()  # bounded: warned again, never unbounded
            self._missing_warned.update((job.job_name, n) for n in new)
        for name in new:
            log.warning(
                "producer: job %s: calendar %s in its excludeCalendars does not exist; ignored",
                job.job_name,
                name,
            )

    def _note_fires(self, job: JobConfig, plan: FirePlan) -> None:
        """Tell the fire listeners of each fire of `job` that queued a run."""
        self.fires += plan.queued
        for decision in plan.decisions:
            if decision.outcome is FireOutcome.QUEUED:
                self.fire_listeners.emit(job.job_name, decision.time)

    def _report(self, job: JobConfig, plan: FirePlan, on_time_from: float | None) -> None:
        """Log and tell the event listeners what an accounting of `job` decided."""
        missed = [
            d
            for d in plan.decisions
            if (on_time_from is None or d.time < on_time_from)
            and d.outcome is not FireOutcome.EXCLUDED
        ]
        if missed and plan.queued and job.misfire:
            log.warning(
                "producer: job %s missed %s fires while no leader acted; %s queued (misfire on)",
                job.job_name,
                len(missed),
                plan.queued,
            )
        for event in fire_events(job.job_name, plan, job.notify_webhook_url):
            self._log_fire_event(event)
            self.event_listeners.emit(event)

    def _log_fire_event(self, event: JobEvent) -> None:
        """Log a job's fires that made no run: the first of each outcome at once, then at most
        every 10 s with the count since (a job firing every second whose runs overlap, or
        through an excluded day). WARNING for skipped and capped fires, INFO for excluded."""
        now = time.monotonic()
        with self._lock:
            logged = self._fire_log.setdefault(event.job_name, {})
            logged_at, unlogged = logged.get(event.kind, (float("-inf"), 0))
            unlogged += event.fires
            log_now = now - logged_at >= _FIRE_EVENT_LOG_EVERY_S
            logged[event.kind] = (now, 0) if log_now else (logged_at, unlogged)
        if log_now:
            earlier = unlogged - event.fires
            outcome = event.kind.value.removeprefix("fire_")
            more = f" (and {earlier} {outcome} fires since the last line)" if earlier else ""
            level = logging.INFO if event.kind is JobEventKind.FIRE_EXCLUDED else logging.WARNING
            log.log(level, "producer: job %s: %s%s", event.job_name, event.reason, more)

    def _fire(self, key: tuple[object, ...]) -> None:
        """APScheduler thread: one cron fire for every job of `key`."""
        if not self._term.acting:
            return  # fenced anyway; do not even try while paused or after the term
        with self._lock:
            jobs = [self._jobs[n] for n in sorted(self._by_key.get(key, ())) if n in self._jobs]
            trigger = self._triggers.get(key)
        if trigger is None:
            return
        asked = time.time()
        due = _fire_due(trigger, asked)
        # Queued now, before the wait, so that every fire of this second is queued when it
        # comes and the smallest is accounted first.
        with self._turns.queued(due, len(jobs)) as take_turn:
            now = _wait_for_fire(due, asked)
            if self._budget is not None:
                jobs = self._within_budget(key, jobs, now)
                if not jobs:
                    return
            take_turn()
            with self._accounting_lock:
                self._accounting += 1
            try:
                self._account_fire(jobs, trigger, now)
            finally:
                with self._accounting_lock:
                    self._accounting -= 1

    def _account_fire(self, jobs: list[JobConfig], trigger: Trigger, now: float) -> None:
        """Account the cron fire at `now` of `jobs` (producer pool); errors are logged. A fire
        of many jobs is accounted with the garbage collector paused, as the launch round that
        follows it is."""
        try:
            with collector_paused_for(len(jobs)):
                self._account_many(
                    [(job, False) for job in jobs],
                    trigger,
                    now,
                    on_time_from=now - _MISFIRE_GRACE_S,
                )
        except NotLeader:
            return
        except SchedulerError as exc:
            log.error(
                "producer: fire of %s job(s) (%s...) not recorded: %s",
                len(jobs),
                jobs[0].job_name if jobs else "",
                exc.message,
            )

    # -- the fire budget (max_fires_per_second) ----------------------------------------------

    def _within_budget(
        self, key: tuple[object, ...], jobs: list[JobConfig], fire: float
    ) -> list[JobConfig]:
        """The jobs of a fire at epoch `fire` that the budget lets account now; the others
        wait in the delayed queue (behind any waiting already) and are reported delayed."""
        assert self._budget is not None
        with self._lock:
            waiting = [job for job in jobs if job.job_name in self._delayed]
            fresh = [job for job in jobs if job.job_name not in self._delayed]
            # Fires wait in the order they came: none goes ahead of a waiting one.
            granted = 0 if self._delayed else self._budget.take(len(fresh), time.monotonic())
            now_jobs, late = fresh[:granted], fresh[granted:]
            for job in late:
                self._delayed[job.job_name] = (key, fire)
            queued = len(self._delayed)
            start_drain = bool(self._delayed) and not self._draining
            self._draining = self._draining or start_drain
        if late or waiting:
            self._report_delayed([*waiting, *late], fire, queued)
        if start_drain:
            self._schedule_drain()
        return now_jobs

    def _report_delayed(self, jobs: list[JobConfig], fire: float, queued: int) -> None:
        """Tell the event listeners of each delayed fire; log it at most every 10 s."""
        assert self._budget is not None
        rate = self._budget.per_second
        reason = (
            f"fire at {iso_time(fire)} delayed: over max_fires_per_second={rate:g} for the "
            f"cluster; {queued} jobs wait for the budget"
        )
        now = time.monotonic()
        with self._lock:
            self.delayed_fires += len(jobs)
            self._delays_unlogged += len(jobs)
            log_now = now - self._delay_logged_at >= _DELAY_LOG_EVERY_S
            if log_now:
                count, self._delays_unlogged = self._delays_unlogged, 0
                self._delay_logged_at = now
        if log_now:
            log.warning(
                "producer: %s fire(s) delayed over max_fires_per_second=%g (job %s...); "
                "%s jobs wait; they still run, later",
                count,
                rate,
                jobs[0].job_name,
                queued,
            )
        for job in jobs:
            event = JobEvent(
                JobEventKind.FIRE_DELAYED, job.job_name, fire, reason, webhook_url=None
            )
            self.event_listeners.emit(event)

    def _schedule_drain(self, at_least_s: float = 0.0) -> None:
        """Have the pool drain the delayed queue once the budget has room for it."""
        sched = self._sched
        budget = self._budget
        if sched is None or budget is None:
            return
        with self._lock:
            wait_s = budget.wait_s(len(self._delayed), time.monotonic())
        sched.add_job(
            self._drain,
            trigger="date",
            # Not sooner than 5 ms: a token a rounding short of whole must not spin the pool.
            run_date=_at(time.time() + max(wait_s, at_least_s, 0.005)),
            name="fire budget",
            misfire_grace_time=None,  # however late (a pause): the queue must drain
        )

    def _drain(self) -> None:
        """Producer pool: account the delayed jobs the budget has room for, in order; then
        schedule the next drain while any waits."""
        budget = self._budget
        if budget is None:
            return
        if not self._term.acting:
            self._schedule_drain(at_least_s=1.0)  # paused: later; over: stop() clears it
            return
        try:
            self._drain_granted(budget)
        except NotLeader:
            return  # the term is over: stop() clears the queue
        except Exception:
            # Never leave the queue without a drain: every later fire would wait behind it.
            log.exception("producer: draining the delayed fires failed; trying again")
        with self._lock:
            more = bool(self._delayed)
            self._draining = more
        if more:
            self._schedule_drain()

    def _drain_granted(self, budget: FireBudget) -> None:
        """Account the delayed jobs `budget` has room for now, in order (producer pool).

        Raises NotLeader from the ledger; other SchedulerErrors are logged (the jobs' next
        fire accounts theirs too, from the same records)."""
        with self._lock:
            granted = budget.take(len(self._delayed), time.monotonic())
            names = list(self._delayed)[:granted]
            groups: dict[tuple[object, ...], tuple[list[JobConfig], float]] = {}
            for name in names:
                key, fire = self._delayed.pop(name)
                job = self._jobs.get(name)
                if job is None or self._key_of.get(name) != key:
                    continue  # unscheduled or changed meanwhile: accounted as it is now
                jobs, first = groups.get(key, ([], fire))
                jobs.append(job)
                groups[key] = (jobs, min(first, fire))
            triggers = {key: self._triggers.get(key) for key in groups}
        for key, (jobs, first) in groups.items():
            trigger = triggers[key]
            if trigger is None:
                continue
            try:
                # On time from the fire they waited with, however long the wait was.
                self._account_many(
                    [(job, False) for job in jobs],
                    trigger,
                    time.time(),
                    on_time_from=first - _MISFIRE_GRACE_S,
                )
            except NotLeader:
                raise
            except SchedulerError as exc:
                # Their next fire accounts this one too (from the same records).
                log.error(
                    "producer: delayed fire of %s job(s) (%s...) not recorded: %s",
                    len(jobs),
                    jobs[0].job_name,
                    exc.message,
                )

"""The cron producer: turns cron fires into pending runs, on the leader only.

A fresh APScheduler `BackgroundScheduler` (memory job store) per term, one trigger per distinct
cron and zone (`CronSpec.schedule_key`), fanning out to the jobs that use it. Each fire adds a
pending run (`misfire`: one more, else exactly one) and records the job's last fire with a
fenced write. At term start a job whose next fire after its recorded last fire is already past
missed a fire during the hand-over: with `misfire` it runs once now, otherwise it is skipped
(logged either way), instead of being silently lost as in the original.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from apscheduler.executors.pool import ThreadPoolExecutor  # type: ignore[import-untyped]
from apscheduler.schedulers.background import BackgroundScheduler  # type: ignore[import-untyped]

from scheduler.leader.lifecycle import LeaderComponent, TermView
from scheduler.model.config.job import JobConfig, JobExecutionType
from scheduler.model.errors import InvalidRequest, NotLeader, SchedulerError
from scheduler.storage.facade import StateFacade

log = logging.getLogger(__name__)

# An enqueue-only callback: a fire up to this late still counts (APScheduler's default 1 s is
# easily missed on a loaded machine).
_MISFIRE_GRACE_S = 30


class Producer(LeaderComponent):
    name = "producer"

    def __init__(self, facade: StateFacade, term: TermView, on_work: Callable[[], None]) -> None:
        self._facade = facade
        self._term = term
        self._on_work = on_work
        self._lock = threading.RLock()
        self._jobs: dict[str, JobConfig] = {}
        self._key_of: dict[str, tuple[object, ...]] = {}
        self._by_key: dict[tuple[object, ...], set[str]] = {}
        self._ids: dict[tuple[object, ...], str] = {}
        self._sched: BackgroundScheduler | None = None
        self.fires = 0
        self._last_fires: dict[str, float] | None = None

    def start(self) -> None:
        self._sched = BackgroundScheduler(
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

    def pause(self) -> None:
        if self._sched is not None:
            self._sched.pause()

    def resume(self) -> None:
        if self._sched is not None:
            self._sched.resume()

    @property
    def scheduled(self) -> set[str]:
        with self._lock:
            return set(self._jobs)

    def prefetch_last_fires(self, names: list[str]) -> None:
        """Read the recorded last fires of `names` in one pipelined round (term start)."""
        self._last_fires = self._facade.last_fires(names)

    def schedule(self, job: JobConfig, *, catch_up: bool = False) -> None:
        """Start producing runs for `job` (replacing an earlier schedule of it).

        Raises NotLeader/RegistryError from state writes; a cron that cannot be honoured is
        logged and the job is not scheduled.
        """
        self.unschedule(job.job_name)
        if job.execution_type is JobExecutionType.DAEMON:
            if not self._facade.running.tasks(job.job_name):
                self._facade.ready.add_daemon(job.job_name)
                self._on_work()
            with self._lock:
                self._jobs[job.job_name] = job
            return
        try:
            spec = job.cron_spec
            trigger = spec.trigger()
        except InvalidRequest as exc:
            log.error("producer: job %s not scheduled: %s", job.job_name, exc.message)
            return
        if catch_up:
            self._catch_up(job, trigger)
        key = spec.schedule_key
        with self._lock:
            self._jobs[job.job_name] = job
            self._key_of[job.job_name] = key
            names = self._by_key.setdefault(key, set())
            names.add(job.job_name)
            if key not in self._ids and self._sched is not None:
                aps_job = self._sched.add_job(
                    self._fire, trigger=trigger, args=[key], name=f"cron {spec.expression}"
                )
                self._ids[key] = aps_job.id
        log.info(
            "producer: job %s scheduled (%s %s)", job.job_name, spec.expression, spec.time_zone
        )

    def unschedule(self, job_name: str) -> bool:
        """Stop producing runs for `job_name`; False when it was not scheduled."""
        with self._lock:
            if self._jobs.pop(job_name, None) is None:
                return False
            key = self._key_of.pop(job_name, None)
            if key is None:
                return True
            names = self._by_key.get(key, set())
            names.discard(job_name)
            if not names:
                self._by_key.pop(key, None)
                aps_id = self._ids.pop(key, None)
                if aps_id is not None and self._sched is not None:
                    try:
                        self._sched.remove_job(aps_id)
                    except Exception:
                        log.exception("producer: could not remove trigger of %s", job_name)
        return True

    def _catch_up(self, job: JobConfig, trigger: object) -> None:
        prefetched = self._last_fires
        last = (
            prefetched.get(job.job_name)
            if prefetched is not None
            else self._facade.last_fire(job.job_name)
        )
        if last is None:
            return
        after = datetime.fromtimestamp(last + 0.001, UTC)
        missed = trigger.get_next_fire_time(None, after)  # type: ignore[attr-defined]
        if missed is None or missed.timestamp() > time.time():
            return
        if job.misfire:
            log.warning(
                "producer: job %s missed its fire at %s during a leader change; running it once",
                job.job_name,
                missed.isoformat(),
            )
            self._facade.ready.add_transient(job.job_name, True)
            self._facade.record_fire(job.job_name, time.time())
            self._on_work()
        else:
            log.warning(
                "producer: job %s missed its fire at %s during a leader change; skipped "
                "(misfire is off)",
                job.job_name,
                missed.isoformat(),
            )

    def _fire(self, key: tuple[object, ...]) -> None:
        """APScheduler thread: one cron fire for every job of `key`."""
        if not self._term.acting:
            return  # fenced anyway; do not even try while paused or after the term
        with self._lock:
            jobs = [self._jobs[n] for n in sorted(self._by_key.get(key, ())) if n in self._jobs]
        now = time.time()
        for job in jobs:
            try:
                if self._facade.ready.add_transient(job.job_name, job.misfire):
                    self._facade.record_fire(job.job_name, now)
                    self.fires += 1
            except NotLeader:
                return
            except SchedulerError as exc:
                log.error("producer: fire of job %s not recorded: %s", job.job_name, exc.message)
        self._on_work()

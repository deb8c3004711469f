"""The config listener: follows `/config/job` and the disable nodes in ZooKeeper and schedules,
reschedules or unschedules each job exactly once per change, whatever wrote it (this leader's
REST API, another tool, or an operator in zkCli).

kazoo watch callbacks only queue an event (`JobChanged`, `ChildrenChanged`); the
`sched-config-listener` thread reads ZooKeeper, compares znode versions with what it scheduled,
and acts.

A term starts by reading every job without watches (100 to a request where ZooKeeper answers
multiRead: thousands of jobs in a fraction of a second) and scheduling them. Where ZooKeeper
answers multiRead (3.6+) it also answers addWatch: one persistent recursive watch on the jobs'
folder, placed before that read, reports every later change of any job (issue 29: no request
per job, no watch per job in kazoo or the server). On an older server the job watches are placed
by the listener's own thread, its first event (`WatchJobs`), with an `exists` per job that
carries one: a job that changed between the two reads is acted on then, like any change.

A connection that drops takes the watches with it (kazoo calls its one-shot ones with a NONE
event; the server forgets the persistent one): one `Resync` once the session is back sets them
again and reads every job, acting on those whose version changed meanwhile.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, assert_never

from scheduler.leader.lifecycle import EventLoopComponent, Listeners, collector_paused
from scheduler.model.config.job import JobConfig, JobExecutionType
from scheduler.model.errors import NotLeader, RegistryError
from scheduler.storage.layout import DISABLE_APP, DISABLE_JOB, JOBS, job_path
from scheduler.storage.parsed_jobs import ParsedJobs
from scheduler.storage.term_stores import TermStores

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobChanged:
    """The znode of job `name` changed or was deleted."""

    name: str


@dataclass(frozen=True)
class ChildrenChanged:
    """The children of `path` (the job list or a disable list) changed."""

    path: str


@dataclass(frozen=True)
class WatchJobs:
    """Place a watch on each of the jobs `names`, loaded at term start without one."""

    names: tuple[str, ...]


@dataclass(frozen=True)
class Resync:
    """kazoo dropped this client's watches (the connection was lost): read the lists and every
    job again, each read placing its watch anew, and act on what changed meanwhile."""


ConfigEvent = JobChanged | ChildrenChanged | WatchJobs | Resync


class RunProducer(Protocol):
    """What the listener asks of the term's producer (the cron side of scheduling)."""

    @property
    def scheduled(self) -> set[str]:
        """Names of the jobs producing runs now."""
        ...

    def prefetch_last_fires(self, names: list[str]) -> None:
        """Read the recorded last fires of `names` at once (term start)."""

    def schedule(self, job: JobConfig, *, catch_up: bool = False) -> None:
        """Produce runs for `job` (replacing an earlier schedule of it)."""

    def unschedule(self, job_name: str) -> bool:
        """Stop producing runs for `job_name`; False when it was not scheduled."""
        ...


class ConfigListener(EventLoopComponent[ConfigEvent]):
    name = "config-listener"
    thread_name = "sched-config-listener"

    def __init__(
        self,
        stores: TermStores,
        producer: RunProducer,
        kill_job_tasks: Callable[[str], None],
        parsed_ahead: ParsedJobs | None = None,
    ) -> None:
        super().__init__()
        self._stores = stores
        # Jobs a standby parsed before this term (taken at the start where the document read
        # is the same; emptied after it).
        self._parsed_ahead = parsed_ahead
        self._taken_ahead = 0
        self._registry = stores.registry
        self._producer = producer
        self._kill = kill_job_tasks
        self._versions: dict[str, int] = {}
        self._configs: dict[str, JobConfig] = {}
        self._disabled_jobs: set[str] = set()
        self._disabled_apps: set[str] = set()
        self.changes = 0
        # Cleared while the term is paused (session SUSPENDED): the thread reads nothing then.
        self._acting = threading.Event()
        self._acting.set()
        self._resync_lock = threading.Lock()
        self._resync_posted = False
        self._job_watch = self._on_job  # one object: kazoo keeps a set of callbacks per path
        self._jobs_prefix = stores.registry.abs(JOBS) + "/"
        # One persistent recursive watch on the jobs' folder (ZooKeeper 3.6+: the server
        # answers multiRead) instead of a one-shot watch per job.
        self._recursive = False
        # Called with the name of each job deleted from ZooKeeper (listener thread).
        self.deleted_listeners: Listeners[[str]] = Listeners(
            log, "config-listener: deleted listener"
        )

    # -- watches: callbacks only queue ------------------------------------------------------

    def _on(self, event: ConfigEvent) -> Callable[[object], None]:
        """A kazoo watch callback that queues `event` (until the listener stops)."""

        def fire(watched: Any) -> None:
            if self._stopping.is_set():
                return
            if self._registry.watch_dropped(watched):
                # Not a change: kazoo clears every watch when its connection drops and calls
                # each with NONE. One resync re-reads them all (100,000 jobs are not 100,000
                # events, each read waiting out a dead connection).
                self._post_resync()
                return
            self.post(event)

        return fire

    def _on_job(self, watched: Any) -> None:
        """The one watch callback of every job's znode (the job is the event's path's last
        part): one callable, so a job watched twice (its re-read and the watch pass) keeps one
        watch in kazoo's table, and 100,000 jobs cost no closure each."""
        if self._stopping.is_set():
            return
        if self._registry.watch_dropped(watched):
            self._post_resync()
            return
        path = getattr(watched, "path", None)
        if isinstance(path, str) and path.startswith(self._jobs_prefix):
            name = path[len(self._jobs_prefix) :]
            if name and "/" not in name:  # a job's node (not the folder, nothing deeper)
                self.post(JobChanged(name))

    def _post_resync(self) -> None:
        with self._resync_lock:
            if self._resync_posted:
                return
            self._resync_posted = True
        self.post(Resync())

    def _watch_children(self, path: str) -> list[str]:
        return self._registry.watch_children(path, self._on(ChildrenChanged(path)))

    def _job_names(self) -> list[str]:
        """The jobs' names; with the folder's recursive watch, without a child watch: its
        creations and deletions come as the jobs' own events (a child watch would list all
        100,000 names again at each registration, and read each new job twice)."""
        if self._recursive:
            return self._registry.children(JOBS)
        return self._watch_children(JOBS)

    def _read_job(self, name: str) -> tuple[bytes, int] | None:
        if self._recursive:
            return self._registry.get_versioned(job_path(name))  # the folder's watch covers it
        return self._registry.watch_data(job_path(name), self._job_watch)

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Load every job and schedule the enabled ones (with missed-fire catch-up)."""
        self._stopping.clear()
        began = time.monotonic()
        self._disabled_jobs = set(self._watch_children(DISABLE_JOB))
        self._disabled_apps = set(self._watch_children(DISABLE_APP))
        self._recursive = self._registry.multi_read is True
        if self._recursive:
            # Before the read: a change made after it is reported, none is missed between.
            self._registry.ensure(JOBS)
            self._registry.add_recursive_watch(JOBS, self._job_watch)
        names = self._job_names()
        listed = time.monotonic()
        self._producer.prefetch_last_fires(names)
        prefetched = time.monotonic()
        # No watches yet: a read that sets one costs a request of its own.
        loaded = self._registry.get_many([job_path(name) for name in names])
        read = time.monotonic()
        # The collector paused while every job is built, and what is alive then set aside
        # from its later collections (`gc.freeze`; the term's stop gives them back with
        # `gc.unfreeze`). Each full collection walks every object alive: 100,000 new jobs set
        # off several during the start, and one after it took a third of a second. The jobs
        # hold no cycles; reference counting frees them, frozen or not.
        try:
            with collector_paused():
                for path, got in loaded.items():
                    if got is not None:
                        self._apply(path.rsplit("/", 1)[1], got, catch_up=True)
        finally:
            gc.freeze()
        applied = time.monotonic()
        if self._parsed_ahead is not None:
            self._parsed_ahead.clear()  # the term keeps its own configs from here on
        if not self._recursive:
            # The listener's first work: watches on the jobs read (a job created meanwhile
            # comes with the job list's watch, already placed).
            self.post(WatchJobs(tuple(names)))
        self._start_thread()
        log.info(
            "config-listener: %s jobs loaded (%s parsed ahead by the standby), %s scheduled in "
            "%.2f s (names %.2f s, last fires %.2f s, reading %.2f s, parsing and scheduling "
            "%.2f s)",
            len(names),
            self._taken_ahead,
            len(self._producer.scheduled),
            applied - began,
            listed - began,
            prefetched - listed,
            read - prefetched,
            applied - read,
        )

    def stop(self) -> None:
        if self._recursive:
            self._registry.remove_recursive_watch(JOBS, self._job_watch)
        super().stop()
        gc.unfreeze()  # what the start set aside is collected again (the term's cycles too)

    def pause(self) -> None:
        self._acting.clear()

    def resume(self) -> None:
        if self._recursive:
            # The session came back: the server forgot the folder's watch with the connection
            # (kazoo's NONE events usually say so too; this does not lean on them).
            self._post_resync()
        self._acting.set()

    # -- the listener thread ----------------------------------------------------------------

    def _handle(self, event: ConfigEvent) -> None:
        # While paused a read would only wait out the dead connection (seconds each) and keep
        # the thread from stopping: the event waits for the session to come back instead. A
        # resync also waits for the connection itself (it is queued the moment the connection
        # drops, before the replica has paused the term).
        while not self._ready_for(event):
            if self._stopping.wait(0.2):
                return
        if self._stopping.is_set():
            return
        try:
            self._dispatch(event)
        except NotLeader:
            log.info("config-listener: not acting; %s left to the next leader", event)

    def _ready_for(self, event: ConfigEvent) -> bool:
        if not self._acting.is_set():
            return False
        return not isinstance(event, Resync) or self._registry.connected

    def _dispatch(self, event: ConfigEvent) -> None:
        match event:
            case JobChanged(name):
                self._apply(name, self._read_job(name))
            case WatchJobs(loaded):
                self._watch_jobs(loaded)
            case Resync():
                self._resync()
            case ChildrenChanged(path) if path == JOBS:
                names = set(self._watch_children(JOBS))
                for name in sorted(names - set(self._versions)):
                    self._apply(name, self._read_job(name))
                for name in sorted(set(self._versions) - names):
                    self._apply(name, None)
            case ChildrenChanged(path) if path == DISABLE_JOB:
                self._disabled_jobs = set(self._watch_children(DISABLE_JOB))
                self._sync_all()
            case ChildrenChanged(path) if path == DISABLE_APP:
                self._disabled_apps = set(self._watch_children(DISABLE_APP))
                self._sync_all()
            case ChildrenChanged(path):
                raise ValueError(f"config-listener: no handler for the children of {path}")
            case _:
                assert_never(event)

    def _watch_jobs(self, names: tuple[str, ...]) -> None:
        """Watch each job: an `exists` per job leaves the watch and answers its version, a
        window of them in flight; only a job whose version is not the one acted on (changed or
        deleted since the term's first read, or new) is read again (100,000 jobs are not read
        twice, nor held in memory twice, for their watches)."""
        versions = self._registry.watch_versions(
            [job_path(name) for name in names], self._job_watch
        )
        for path, version in versions:
            if self._stopping.is_set():
                return
            name = path.rsplit("/", 1)[1]
            if version is None:
                self._apply(name, None)
            elif self._versions.get(name) != version:
                self._apply(name, self._read_job(name))

    def _resync(self) -> None:
        with self._resync_lock:
            self._resync_posted = False  # a drop from here on needs a resync of its own
        log.info("config-listener: watches dropped with the connection; reading every job again")
        self._disabled_jobs = set(self._watch_children(DISABLE_JOB))
        self._disabled_apps = set(self._watch_children(DISABLE_APP))
        if self._recursive:
            # The server forgot the folder's watch with the connection: set it again first.
            self._registry.add_recursive_watch(JOBS, self._job_watch)
        names = set(self._job_names())
        for name in sorted(set(self._versions) - names):
            self._apply(name, None)
        self._sync_all()
        if self._recursive:
            read = self._registry.get_many([job_path(name) for name in sorted(names)])
            for path, got in read.items():
                if self._stopping.is_set():
                    return
                self._apply(path.rsplit("/", 1)[1], got)  # an unchanged version is passed over
        else:
            self._watch_jobs(tuple(sorted(names)))

    def _sync_all(self) -> None:
        for _name, job in sorted(self._configs.items()):
            self._sync_enabled(job)

    def _enabled(self, job: JobConfig) -> bool:
        return job.job_name not in self._disabled_jobs and job.app_name not in self._disabled_apps

    def _apply(self, name: str, got: tuple[bytes, int] | None, catch_up: bool = False) -> None:
        """Act on the job's current znode (None: deleted), once per version."""
        if got is None:
            if self._versions.pop(name, None) is not None or name in self._configs:
                self._configs.pop(name, None)
                self.changes += 1
                log.info(
                    "config-listener: job %s deleted; unscheduling and killing its tasks", name
                )
                self._producer.unschedule(name)
                self._kill(name)
                self._stores.forget_fires(name)
                self.deleted_listeners.emit(name)
            return
        data, version = got
        if self._versions.get(name) == version:
            return  # already acted on this version (e.g. the watch and a re-list both fired)
        try:
            job = (self._ahead(name, data) if catch_up else None) or (
                self._stores.config.parse_stored_job(name, data)
            )
        except RegistryError as exc:
            log.error("config-listener: %s", exc.message)
            self._versions[name] = version
            return
        previous = self._configs.get(name)
        self._versions[name] = version
        self._configs[name] = job
        self.changes += 1
        if previous is None:
            if self._enabled(job):
                self._producer.schedule(job, catch_up=catch_up)
            return
        log.info("config-listener: job %s changed; rescheduling", name)
        if previous.execution_type is JobExecutionType.DAEMON:
            # Daemon tasks run the old cron and config inside the executor: restart them.
            self._producer.unschedule(name)
            self._stores.ready.remove(name)
            self._kill(name)
        if self._enabled(job):
            self._producer.schedule(job)
        else:
            self._producer.unschedule(name)

    def _ahead(self, name: str, data: bytes) -> JobConfig | None:
        if self._parsed_ahead is None:
            return None
        job = self._parsed_ahead.parsed(name, data, self._stores.config.default_time_zone)
        if job is not None:
            self._taken_ahead += 1
        return job

    def _sync_enabled(self, job: JobConfig) -> None:
        scheduled = job.job_name in self._producer.scheduled
        if self._enabled(job) and not scheduled:
            log.info("config-listener: job %s enabled; scheduling", job.job_name)
            self._producer.schedule(job)
        elif not self._enabled(job) and scheduled:
            log.info(
                "config-listener: job %s disabled; unscheduling and killing its tasks", job.job_name
            )
            self._producer.unschedule(job.job_name)
            self._stores.ready.remove(job.job_name)
            self._stores.failover.remove_job(job.job_name)  # no stale relaunch on enable
            self._stores.forget_fires(job.job_name)
            self._kill(job.job_name)

"""The config listener: follows `/config/job` and the disable nodes in ZooKeeper and schedules,
reschedules or unschedules each job exactly once per change, whatever wrote it (this leader's
REST API, another tool, or an operator in zkCli).

kazoo watch callbacks only queue an event; the `sched-config-listener` thread reads ZooKeeper,
compares znode versions with what it scheduled, and acts.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Protocol

from kazoo.exceptions import NoNodeError

from scheduler.leader.lifecycle import LeaderComponent
from scheduler.model.config.job import JobConfig, JobExecutionType
from scheduler.model.errors import NotLeader, RegistryError
from scheduler.storage.config_store import JOBS
from scheduler.storage.facade import StateFacade
from scheduler.storage.state import DISABLE_APP, DISABLE_JOB

log = logging.getLogger(__name__)

_STOP = ("stop", "")


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


class ConfigListener(LeaderComponent):
    name = "config-listener"

    def __init__(
        self,
        facade: StateFacade,
        producer: RunProducer,
        kill_job_tasks: Callable[[str], None],
    ) -> None:
        self._facade = facade
        self._registry = facade.registry
        self._producer = producer
        self._kill = kill_job_tasks
        self._events: queue.Queue[tuple[str, str]] = queue.Queue()
        self._versions: dict[str, int] = {}
        self._configs: dict[str, JobConfig] = {}
        self._disabled_jobs: set[str] = set()
        self._disabled_apps: set[str] = set()
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self.changes = 0

    # -- watches: callbacks only queue ------------------------------------------------------

    def _watch_children(self, path: str) -> list[str]:
        def fire(_event: object) -> None:
            if not self._stopped.is_set():
                self._events.put(("children", path))

        try:
            return sorted(self._registry.client.get_children(self._registry.abs(path), watch=fire))
        except NoNodeError:
            self._registry.ensure(path)
            return sorted(self._registry.client.get_children(self._registry.abs(path), watch=fire))

    def _read_job(self, name: str) -> tuple[bytes, int] | None:
        def fire(_event: object) -> None:
            if not self._stopped.is_set():
                self._events.put(("job", name))

        try:
            data, stat = self._registry.client.get(self._registry.abs(f"{JOBS}/{name}"), watch=fire)
        except NoNodeError:
            return None
        return data or b"", int(stat.version)

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Load every job and schedule the enabled ones (with missed-fire catch-up)."""
        self._stopped.clear()
        self._disabled_jobs = set(self._watch_children(DISABLE_JOB))
        self._disabled_apps = set(self._watch_children(DISABLE_APP))
        names = self._watch_children(JOBS)
        # Pipelined reads: one round trip for all jobs, so 10,000 jobs load in about a second.
        client = self._registry.client
        pending = {}
        for name in names:
            pending[name] = client.get_async(
                self._registry.abs(f"{JOBS}/{name}"), watch=self._job_watch(name)
            )
        self._producer.prefetch_last_fires(names)
        for name, result in pending.items():
            try:
                data, stat = result.get(timeout=30)
            except NoNodeError:
                continue
            self._apply(name, (data or b"", int(stat.version)), catch_up=True)
        self._thread = threading.Thread(target=self._run, name="sched-config-listener", daemon=True)
        self._thread.start()
        log.info(
            "config-listener: %s jobs loaded, %s scheduled",
            len(names),
            len(self._producer.scheduled),
        )

    def _job_watch(self, name: str) -> Callable[[object], None]:
        def fire(_event: object) -> None:
            if not self._stopped.is_set():
                self._events.put(("job", name))

        return fire

    def stop(self) -> None:
        self._stopped.set()
        self._events.put(_STOP)
        if self._thread is not None:
            self._thread.join(5.0)
            if self._thread.is_alive():
                log.error("config-listener: thread sched-config-listener did not stop")
            self._thread = None

    # -- the listener thread ----------------------------------------------------------------

    def _run(self) -> None:
        while True:
            kind, arg = self._events.get()
            if kind == "stop":
                return
            try:
                self._handle(kind, arg)
            except NotLeader:
                log.info(
                    "config-listener: not acting; change of %s %s left to the next leader",
                    kind,
                    arg,
                )
            except Exception:
                log.exception("config-listener: handling %s %s failed", kind, arg)

    def _handle(self, kind: str, arg: str) -> None:
        if kind == "job":
            self._apply(arg, self._read_job(arg))
        elif arg == JOBS:
            names = set(self._watch_children(JOBS))
            for name in sorted(names - set(self._versions)):
                self._apply(name, self._read_job(name))
            for name in sorted(set(self._versions) - names):
                self._apply(name, None)
        elif arg in (DISABLE_JOB, DISABLE_APP):
            if arg == DISABLE_JOB:
                self._disabled_jobs = set(self._watch_children(DISABLE_JOB))
            else:
                self._disabled_apps = set(self._watch_children(DISABLE_APP))
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
                self._facade.forget_fires(name)
            return
        data, version = got
        if self._versions.get(name) == version:
            return  # already acted on this version (e.g. the watch and a re-list both fired)
        try:
            job = self._facade.config.parse_stored_job(name, data)
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
            self._facade.ready.remove(name)
            self._kill(name)
        if self._enabled(job):
            self._producer.schedule(job)
        else:
            self._producer.unschedule(name)

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
            self._facade.ready.remove(job.job_name)
            self._facade.failover.remove_job(job.job_name)  # no stale relaunch on enable
            self._facade.forget_fires(job.job_name)
            self._kill(job.job_name)

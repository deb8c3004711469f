"""The configurations the view of the queues knows: jobs and apps, read once and watched.

The launcher needs the configuration of every job it could launch and of its app. The producer
notes each job it schedules as the config listener read it (`note_job`), which is used first;
any other is read from ZooKeeper on first use, with a watch, and kept until that watch fires
(`drop`: read again when next asked for). A node that cannot be read is logged once per change
of it and answered as None. Not thread-safe on its own: `QueueCache` calls it under its view's
lock, and does the reading (`read`: paths to their (data, version), watched and counted).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from scheduler.model.config.app import AppConfig
from scheduler.model.config.job import JobConfig
from scheduler.model.errors import InvalidRequest, RegistryError
from scheduler.storage.config_store import ConfigStore
from scheduler.storage.layout import APPS, JOBS, app_path, job_path

__all__ = ["ConfigMirror", "Reader"]

log = logging.getLogger(__name__)

Reader = Callable[[list[str]], dict[str, tuple[bytes, int] | None]]
"""Reads paths (watched) into their (data, version), None for a missing node."""


class ConfigMirror:
    """Jobs and apps as read (or noted), until their watches fire."""

    def __init__(self, config: ConfigStore) -> None:
        self._config = config
        self._jobs: dict[str, JobConfig | RegistryError] = {}
        self._noted_jobs: dict[str, JobConfig] = {}
        self._apps: dict[str, AppConfig | RegistryError] = {}

    def clear(self) -> None:
        """Forget what was read (the view reads everything again); noted jobs stay."""
        self._jobs.clear()
        self._apps.clear()

    def drop(self, path: str) -> bool:
        """The watch on `path` fired: if it is a job's or an app's, forget it (read again
        when next asked for) and say so; False for any other path."""
        jobs, apps = f"{JOBS}/", f"{APPS}/"
        if path.startswith(jobs):
            self._jobs.pop(path[len(jobs) :], None)
        elif path.startswith(apps):
            self._apps.pop(path[len(apps) :], None)
        else:
            return False
        return True

    def note_job(self, job: JobConfig) -> None:
        self._noted_jobs[job.job_name] = job

    def forget_job(self, job_name: str) -> None:
        self._noted_jobs.pop(job_name, None)

    def jobs(self, names: Iterable[str], read: Reader) -> dict[str, JobConfig | None]:
        """See `QueueCache.jobs`."""
        wanted = list(dict.fromkeys(names))
        unknown = [n for n in wanted if n not in self._noted_jobs and n not in self._jobs]
        self._load(JOBS, unknown, self._jobs, read)
        out: dict[str, JobConfig | None] = {}
        for name in wanted:
            got = self._noted_jobs.get(name) or self._jobs.get(name)
            out[name] = got if isinstance(got, JobConfig) else None
        return out

    def apps(self, names: Iterable[str], read: Reader) -> dict[str, AppConfig | None]:
        """See `QueueCache.apps`."""
        wanted = list(dict.fromkeys(names))
        self._load(APPS, [n for n in wanted if n not in self._apps], self._apps, read)
        out: dict[str, AppConfig | None] = {}
        for name in wanted:
            got = self._apps.get(name)
            out[name] = got if isinstance(got, AppConfig) else None
        return out

    def _load(self, base: str, names: list[str], into: dict[str, Any], read: Reader) -> None:
        plain = [n for n in names if n and "/" not in n and n not in (".", "..")]
        paths = [job_path(n) if base == JOBS else app_path(n) for n in plain]
        for path, got in read(paths).items():
            name = path[len(base) + 1 :]
            if got is None:
                continue  # missing: not kept, asked again next time
            try:
                if base == JOBS:
                    into[name] = self._config.parse_stored_job(name, got[0])
                else:
                    into[name] = AppConfig.from_bytes(got[0], strict=False)
            except RegistryError as exc:
                log.error("queue cache: %s", exc.message)
                into[name] = exc
            except InvalidRequest as exc:
                log.error("queue cache: stored app %r cannot be read: %s", name, exc.message)
                into[name] = RegistryError(exc.message)

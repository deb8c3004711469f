"""Quotas on what clients may register (issue 23), checked before anything is written.

- `max_apps`, `max_jobs`: a registration beyond them is a 409 `QuotaExceeded` naming the quota
  and its value. The count is the configuration folder's numChildren (one stat request), not a
  listing; registrations of one leader are serialised around count and create, so concurrent
  requests cannot together pass the quota.
- `max_job_bytes`: an app or job whose stored JSON is larger is a 413 `TooLarge` (registration
  and update).
- `min_fire_interval_seconds`: a transient job whose cron fires twice closer than this, over
  its next 500 fires, is a 400 naming the setting (registration and update).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from flask import current_app

from scheduler.model.config import shown
from scheduler.model.config.app import AppConfig
from scheduler.model.config.job import JobConfig, JobExecutionType
from scheduler.model.errors import InvalidRequest, QuotaExceeded, TooLarge
from scheduler.model.fires import shortest_gap
from scheduler.model.settings import Settings
from scheduler.storage.config_store import ConfigStore

_GAPS_KEPT = 4096
_FIRES_CHECKED = 500


@dataclass
class Quotas:
    """The quota settings of one term's API, and the lock that serialises registrations."""

    max_apps: int
    max_jobs: int
    max_job_bytes: int
    min_fire_interval_s: float
    max_list_items: int = 10_000
    """The most items an unpaged list answers (not a quota on writes; kept with them)."""
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # Shortest fire gap by cron (fields, zone): thousands of jobs share a few crons.
    _gaps: dict[object, float | None] = field(default_factory=dict)

    @classmethod
    def from_settings(cls, settings: Settings) -> Quotas:
        return cls(
            max_apps=settings.max_apps,
            max_jobs=settings.max_jobs,
            max_job_bytes=settings.max_job_bytes,
            min_fire_interval_s=settings.min_fire_interval_seconds,
            max_list_items=settings.max_list_items,
        )

    @contextmanager
    def registering_app(self, config: ConfigStore, app: AppConfig) -> Iterator[None]:
        """Refuse `app` if it is too large or `max_apps` are stored; the body of the `with`
        (the write) runs while no other registration of this leader is counted."""
        self.check_app_size(app)
        with self._lock:
            if config.app_count() >= self.max_apps:
                raise QuotaExceeded(
                    "max_apps",
                    f"quota max_apps={self.max_apps} reached: {self.max_apps} apps are registered "
                    "already; delete one or raise max_apps",
                )
            yield

    @contextmanager
    def registering_job(self, config: ConfigStore, job: JobConfig) -> Iterator[None]:
        """As `registering_app`, for `job` and `max_jobs`; its cron is checked too."""
        self.check_job(job)
        with self._lock:
            if config.job_count() >= self.max_jobs:
                raise QuotaExceeded(
                    "max_jobs",
                    f"quota max_jobs={self.max_jobs} reached: {self.max_jobs} jobs are registered "
                    "already; delete one or raise max_jobs",
                )
            yield

    @contextmanager
    def registering_jobs(self, config: ConfigStore, count: int) -> Iterator[None]:
        """As `registering_job` for `count` jobs at once (`POST /api/job/register-many`), their
        sizes and crons checked already by the caller (`check_job` each): QuotaExceeded unless
        all of them fit under `max_jobs`."""
        with self._lock:
            stored = config.job_count()
            if stored + count > self.max_jobs:
                raise QuotaExceeded(
                    "max_jobs",
                    f"quota max_jobs={self.max_jobs}: {stored} jobs are registered, so "
                    f"{max(0, self.max_jobs - stored)} more fit, not {count}; delete some or "
                    "raise max_jobs",
                )
            yield

    def check_app_size(self, app: AppConfig) -> None:
        """TooLarge when `app` as stored exceeds `max_job_bytes`."""
        self._check_size(len(app.to_bytes()), f"app '{app.app_name}'")

    def check_job(self, job: JobConfig, stored_bytes: int | None = None) -> None:
        """TooLarge when `job` as stored exceeds `max_job_bytes` (`stored_bytes`: its stored
        size, when the caller has it); InvalidRequest when its cron fires more often than
        `min_fire_interval_seconds` allows."""
        size = len(job.to_bytes()) if stored_bytes is None else stored_bytes
        self._check_size(size, f"job '{job.job_name}'")
        self._check_fire_interval(job)

    def _check_size(self, size: int, what: str) -> None:
        if size > self.max_job_bytes:
            raise TooLarge(
                "max_job_bytes",
                f"{what} takes {size} bytes stored, more than the quota "
                f"max_job_bytes={self.max_job_bytes}",
            )

    def _check_fire_interval(self, job: JobConfig) -> None:
        if job.execution_type is JobExecutionType.DAEMON or self.min_fire_interval_s <= 0:
            return
        if not job.has_cron:
            return  # fires only when triggered or in a workflow (issue 27)
        spec = job.cron_spec  # parsed and checked already by from_json
        key = spec.schedule_key
        if key not in self._gaps:
            gap = shortest_gap(spec.trigger(), time.time(), _FIRES_CHECKED)
            if len(self._gaps) >= _GAPS_KEPT:
                self._gaps.clear()
            self._gaps[key] = gap
        gap = self._gaps[key]
        if gap is not None and gap < self.min_fire_interval_s:
            problem = (
                f"fires {gap:g} s apart, more often than min_fire_interval_seconds="
                f"{self.min_fire_interval_s:g} allows"
            )
            raise InvalidRequest(f"cron {shown(job.cron)} {problem}", {"cron": problem})


def quotas() -> Quotas:
    """The quotas of the current request's API."""
    found: Quotas = current_app.extensions["ejc_quotas"]
    return found

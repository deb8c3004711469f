"""The stores of one leader term, built together over the same registry and fence."""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.model.config.job import JobConfig
from scheduler.model.settings import Settings
from scheduler.storage.calendar_store import CalendarStore
from scheduler.storage.config_store import ConfigStore
from scheduler.storage.job_apps import JobApps
from scheduler.storage.layout import last_fire_path
from scheduler.storage.pool_store import PoolStore
from scheduler.storage.registry import Registry
from scheduler.storage.state import DisableStore, FailoverQueue, ReadyQueue, RunningStore
from scheduler.storage.transactions import Fence, FencedWriter


@dataclass
class TermStores:
    """One term's stores: configuration, ready, running, failover and disable, writing
    under the same fence (the leader's election node, checked in each write's transaction)."""

    registry: Registry
    config: ConfigStore
    ready: ReadyQueue
    running: RunningStore
    failover: FailoverQueue
    disabled: DisableStore
    fence: Fence | None
    # Job -> app, kept by watches and told of the config store's writes: the API's lists
    # filter by it for a caller who sees some apps (issue 26).
    job_apps: JobApps
    # The concurrency pools (issue 28), read once and kept by the store's own writes.
    pools: PoolStore
    # The named calendars (issue 28), read once and kept by the store's own writes; the
    # producer asks them at every fire of a job with excludeCalendars.
    calendars: CalendarStore

    @classmethod
    def build(
        cls,
        registry: Registry,
        fence: Fence | None,
        default_time_zone: str,
        queue_size: int,
        max_pools: int = Settings.max_pools,
        max_calendars: int = Settings.max_calendars,
    ) -> TermStores:
        config = ConfigStore(registry, fence, default_time_zone)
        job_apps = JobApps(registry, config)
        config.job_write_listeners.append(job_apps.forget)
        return cls(
            registry=registry,
            config=config,
            ready=ReadyQueue(registry, fence, queue_size),
            running=RunningStore(registry, fence, queue_size),
            failover=FailoverQueue(registry, fence, queue_size),
            disabled=DisableStore(registry, fence, queue_size),
            fence=fence,
            job_apps=job_apps,
            pools=PoolStore(registry, fence, max_pools),
            calendars=CalendarStore(registry, fence, default_time_zone, max_calendars, config),
        )

    def is_disabled(self, job: JobConfig) -> bool:
        """The job or its app is disabled."""
        return self.disabled.is_job_disabled(job.job_name) or self.disabled.is_app_disabled(
            job.app_name
        )

    def forget_fires(self, job_name: str) -> None:
        """Delete the job's last accounted fire, so that a job deleted or disabled and then
        brought back starts from its next fire instead of catching up on the ones missed."""
        assert self.fence is not None
        FencedWriter(self.registry, self.fence).delete(last_fire_path(job_name))

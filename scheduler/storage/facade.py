"""One object over configuration and scheduling state for a leader term."""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.model.config.job import JobConfig
from scheduler.storage.config_store import ConfigStore
from scheduler.storage.registry import Fence, Registry
from scheduler.storage.state import DisableStore, FailoverQueue, ReadyQueue, RunningStore

LAST_FIRE = "/state/last_fire"


@dataclass
class StateFacade:
    registry: Registry
    config: ConfigStore
    ready: ReadyQueue
    running: RunningStore
    failover: FailoverQueue
    disabled: DisableStore
    fence: Fence | None

    @classmethod
    def build(
        cls, registry: Registry, fence: Fence | None, default_time_zone: str, queue_size: int
    ) -> StateFacade:
        return cls(
            registry=registry,
            config=ConfigStore(registry, fence, default_time_zone),
            ready=ReadyQueue(registry, fence, queue_size),
            running=RunningStore(registry, fence, queue_size),
            failover=FailoverQueue(registry, fence, queue_size),
            disabled=DisableStore(registry, fence, queue_size),
            fence=fence,
        )

    def is_disabled(self, job: JobConfig) -> bool:
        """The job or its app is disabled."""
        return self.disabled.is_job_disabled(job.job_name) or self.disabled.is_app_disabled(
            job.app_name
        )

    def last_fire(self, job_name: str) -> float | None:
        data = self.registry.get(f"{LAST_FIRE}/{job_name}")
        try:
            return float(data) if data else None
        except ValueError:
            return None

    def last_fires(self, names: list[str]) -> dict[str, float]:
        """Recorded last fires of `names`, read with pipelined requests."""
        recorded = set(self.registry.children(LAST_FIRE)) if names else set()
        found = self.registry.get_many([f"{LAST_FIRE}/{n}" for n in names if n in recorded])
        out: dict[str, float] = {}
        for path, got in found.items():
            try:
                if got is not None:
                    out[path.rsplit("/", 1)[1]] = float(got[0])
            except ValueError:
                continue
        return out

    def record_fire(self, job_name: str, when: float) -> None:
        assert self.fence is not None
        self.registry.fenced(self.fence).put(f"{LAST_FIRE}/{job_name}", f"{when:.3f}".encode())

    def forget_fires(self, job_name: str) -> None:
        assert self.fence is not None
        self.registry.fenced(self.fence).delete(f"{LAST_FIRE}/{job_name}")

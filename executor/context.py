"""`JobContext`: what a SIMPLE or DATAFLOW job is called with.

    def run(ctx: JobContext) -> None:
        rows = load(ctx.sharding_item, ctx.sharding_total_count)
        ...

It carries the shard's sharding context (the original's `ShardingContext` getters, in Python
names) plus the job's properties. It is immutable; `job_properties` is a read-only mapping.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .taskdata import TaskData

__all__ = ["JobContext"]


@dataclass(frozen=True)
class JobContext:
    job_name: str
    task_id: str
    sharding_total_count: int
    sharding_item: int
    sharding_parameter: str = ""
    """This item's parameter from `shardingItemParameters` (`0=a,1=b` gives item 1 "b")."""
    job_parameter: str = ""
    job_properties: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    workflow_name: str = ""
    """The workflow whose node this shard runs ("": not in a workflow)."""
    workflow_run_id: str = ""
    fire_time: str = ""
    """The logical fire time of the run, ISO 8601 in UTC ("": not known)."""
    backfill_id: str = ""
    """The backfill this run belongs to ("": not a backfill's)."""

    def __post_init__(self) -> None:
        # A frozen dataclass still holds whatever mapping it was given; keep a read-only copy
        # so job code cannot change what the next DATAFLOW call sees.
        object.__setattr__(self, "job_properties", MappingProxyType(dict(self.job_properties)))

    @property
    def item_parameter(self) -> str:
        """Same as `sharding_parameter`."""
        return self.sharding_parameter

    @classmethod
    def from_task_data(cls, data: TaskData) -> JobContext:
        ctx = data.sharding
        return cls(
            job_name=ctx.job_name,
            task_id=ctx.task_id,
            sharding_total_count=ctx.sharding_total_count,
            sharding_item=ctx.sharding_item,
            sharding_parameter=ctx.sharding_parameter,
            job_parameter=ctx.job_parameter or data.job.job_parameter,
            job_properties=data.job.job_properties,
            workflow_name=ctx.workflow_name,
            workflow_run_id=ctx.workflow_run_id,
            fire_time=ctx.fire_time,
            backfill_id=ctx.backfill_id,
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain data, e.g. for logging or JSON."""
        return {
            "job_name": self.job_name,
            "task_id": self.task_id,
            "sharding_total_count": self.sharding_total_count,
            "sharding_item": self.sharding_item,
            "sharding_parameter": self.sharding_parameter,
            "job_parameter": self.job_parameter,
            "job_properties": dict(self.job_properties),
            **({"fire_time": self.fire_time} if self.fire_time else {}),
            **(
                {"workflow_name": self.workflow_name, "workflow_run_id": self.workflow_run_id}
                if self.workflow_name
                else {}
            ),
            **({"backfill_id": self.backfill_id} if self.backfill_id else {}),
        }

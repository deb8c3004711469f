"""What the API handlers of one term work with, kept in the Flask app's extensions."""

from __future__ import annotations

from dataclasses import dataclass, field

from flask import current_app

from scheduler.config.store import ConfigStore
from scheduler.registry import Fence, Registry
from scheduler.scheduling import RecordedActions, SchedulingActions, Throttle
from scheduler.state.stores import DisableStore, FailoverQueue, ReadyQueue, RunningStore

RECONCILE_THROTTLE_S = 10.0


@dataclass
class ApiServices:
    config: ConfigStore
    ready: ReadyQueue
    running: RunningStore
    failover: FailoverQueue
    disabled: DisableStore
    actions: SchedulingActions
    reconcile_throttle: Throttle = field(default_factory=lambda: Throttle(RECONCILE_THROTTLE_S))

    @classmethod
    def build(
        cls,
        registry: Registry,
        fence: Fence | None,
        default_time_zone: str,
        queue_size: int,
        actions: SchedulingActions | None = None,
    ) -> ApiServices:
        return cls(
            config=ConfigStore(registry, fence, default_time_zone),
            ready=ReadyQueue(registry, fence, queue_size),
            running=RunningStore(registry, fence, queue_size),
            failover=FailoverQueue(registry, fence, queue_size),
            disabled=DisableStore(registry, fence, queue_size),
            actions=actions if actions is not None else RecordedActions(),
        )


def services() -> ApiServices:
    found: ApiServices = current_app.extensions["ejc_services"]
    return found

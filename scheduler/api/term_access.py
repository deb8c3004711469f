"""`TermAccess`: what the API handlers of one term work with, kept in the Flask app's extensions.

The term's stores (configuration, ready, running, failover, disable, each job's app), the
operator actions that need Mesos, the reconcile throttle, the statistics component and the
agents' capacity; a handler gets them with `term_access()`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from flask import current_app
from sqlalchemy.engine import Engine

from scheduler.leader.mesos.capacity import AgentCapacity
from scheduler.leader.mesos.operator_actions import OperatorActions, Throttle
from scheduler.storage.calendar_store import CalendarStore
from scheduler.storage.config_store import ConfigStore
from scheduler.storage.job_apps import JobApps
from scheduler.storage.state import DisableStore, FailoverQueue, ReadyQueue, RunningStore
from scheduler.storage.term_stores import TermStores

RECONCILE_THROTTLE_S = 10.0


class TraceSource(Protocol):
    """What the API reads of the term's statistics component (`Statistics` is one)."""

    @property
    def engine(self) -> Engine | None:
        """The event trace database, None while the trace is off or not migrated yet."""
        ...


@dataclass
class TermAccess:
    """One term's stores and actions, as the API handlers of that term reach them."""

    config: ConfigStore
    ready: ReadyQueue
    running: RunningStore
    failover: FailoverQueue
    disabled: DisableStore
    # Job -> app, kept by watches: lists filtered for a caller who sees some apps (issue 26).
    job_apps: JobApps
    actions: OperatorActions
    reconcile_throttle: Throttle = field(default_factory=lambda: Throttle(RECONCILE_THROTTLE_S))
    # The term's statistics component (None: no statistics in this term).
    statistics: TraceSource | None = None
    # What the term's known Mesos agents could ever offer (None: no launcher in this term).
    capacity: AgentCapacity | None = None
    # The term's calendars (issue 28): the next fire times skip what a job's exclude.
    calendars: CalendarStore | None = None

    @property
    def trace_engine(self) -> Engine | None:
        """The event trace database, None while there is none to read."""
        return None if self.statistics is None else self.statistics.engine

    @classmethod
    def build(
        cls,
        stores: TermStores,
        actions: OperatorActions,
        statistics: TraceSource | None = None,
        capacity: AgentCapacity | None = None,
    ) -> TermAccess:
        return cls(
            config=stores.config,
            ready=stores.ready,
            running=stores.running,
            failover=stores.failover,
            disabled=stores.disabled,
            job_apps=stores.job_apps,
            actions=actions,
            statistics=statistics,
            capacity=capacity,
            calendars=stores.calendars,
        )


def term_access() -> TermAccess:
    found: TermAccess = current_app.extensions["ejc_term_access"]
    return found

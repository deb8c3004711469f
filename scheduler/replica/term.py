"""One leadership term of this replica, and the fence its leader-only writes carry."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scheduler.leader.lifecycle import LeaderComponent
from scheduler.storage.transactions import Fence

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIApplication

    from scheduler.edge.metrics import SchedulerMetrics, TermFigures
    from scheduler.model.settings import Settings
    from scheduler.storage.parsed_jobs import ParsedJobs
    from scheduler.storage.registry import Registry


def term_number(node_name: str) -> int:
    """The election node's sequence number (kazoo names nodes `<uuid>__lock__0000000012`)."""
    digits = node_name.rsplit("__", 1)[-1]
    return int(digits) if digits.isdigit() else 0


@dataclass
class Term:
    """A leadership term: from winning the election to stepping down.

    `number` is the election node's sequence number, so it grows across replicas. Acting turns
    off at once when the session is SUSPENDED or LOST (the listener calls `stop_acting`, which
    only clears a flag) and on again only if the same session comes back.
    """

    number: int
    node_path: str
    session_id: int
    started_at: float = field(default_factory=time.time)
    paused_at: float | None = None
    ended_at: float | None = None
    _acting: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._acting.set()
        self.fence = Fence(self.node_path, self._acting.is_set, self.number)

    @property
    def acting(self) -> bool:
        return self._acting.is_set()

    def stop_acting(self) -> None:
        """Fence the term now (non-blocking; safe from a kazoo listener)."""
        if self._acting.is_set():
            self._acting.clear()
            self.paused_at = time.time()

    def resume_acting(self) -> None:
        self.paused_at = None
        self._acting.set()

    def end(self) -> None:
        self.stop_acting()
        self.ended_at = time.time()

    def describe(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "acting": self.acting,
            "startedAt": self.started_at,
            "pausedAt": self.paused_at,
            "endedAt": self.ended_at,
        }


@dataclass(frozen=True)
class LeaderContext:
    """What a leader component may use during its term."""

    settings: Settings
    registry: Registry
    term: Term
    # Serves /api/* from this app on the replica's HTTP port (None: takes it down).
    mount_api: Callable[[WSGIApplication | None], None]
    # The replica's scheduling metrics (they outlive the term); None where nothing counts.
    metrics: SchedulerMetrics | None = None
    # Jobs this replica parsed while it was a standby (None: none).
    parsed_ahead: ParsedJobs | None = None


@dataclass(frozen=True)
class TermReadout:
    """What the replica reads of the term it leads, for `/health` and `/metrics`.

    Built by the term's wiring; called on the HTTP server's ops threads, so none may block. A
    failing one is logged and read as absent.
    """

    # The Mesos driver's connection: connected, connecting, reconnecting, disconnected.
    mesos: Callable[[], str]
    # How many jobs no agent could ever hold.
    unplaceable: Callable[[], int]
    # The event trace and its database, for /health.
    statistics: Callable[[], dict[str, Any]]
    # The term's figures for /metrics.
    figures: Callable[[], TermFigures]


@dataclass(frozen=True)
class BuiltTerm:
    """A term as its wiring built it: its components in start order, and its read-out (None
    where nothing reports, as in the replica's own tests)."""

    components: Sequence[LeaderComponent]
    readout: TermReadout | None = None

"""The fire ledger: a job's last accounted cron fire and its pending runs, changed together.

`/state/last_fire/{job}` holds the epoch time of the newest fire the leader accounted for, and
`/state/ready/{job}` the job's pending runs (a decimal count, as the original wrote it). Each
accounting reads both with their versions and writes both in one fenced transaction that fails
if either changed meanwhile (then it is done again): a fire is accounted exactly once, by one
leader, and the runs it adds exist exactly when its record does. A leader that dies between two
fires leaves a record from which the next one carries on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from scheduler.model.errors import Conflict, NotFound
from scheduler.storage.facade import LAST_FIRE
from scheduler.storage.registry import Fence, Op, Registry
from scheduler.storage.state import READY, RUNNING

__all__ = ["FireLedger", "LedgerState", "LedgerWrite"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")
_MAX_TRIES = 50


@dataclass(frozen=True)
class LedgerState:
    """What an accounting decides on, read at one moment."""

    last: float | None
    """The newest fire accounted for (None: none recorded, a job scheduled for the first time
    or again after being disabled)."""
    pending: int
    running: bool
    """Tasks of the job are running."""
    queue_full: bool
    """The job has no pending runs and the ready queue already holds `cap` jobs."""


@dataclass(frozen=True)
class LedgerWrite:
    record: float
    """The newest fire accounted for after this accounting."""
    pending: int


def _count(data: bytes | None) -> int:
    try:
        return max(0, int((data or b"0").decode().strip() or 0))
    except (UnicodeDecodeError, ValueError):
        return 0


def _time(data: bytes | None) -> float | None:
    try:
        return float(data) if data else None
    except ValueError:
        return None


class FireLedger:
    """Accounts a job's fires with fenced, versioned writes (any thread)."""

    def __init__(self, registry: Registry, fence: Fence | None, cap: int) -> None:
        self._registry = registry
        self._fence = fence
        self._cap = cap

    def account(
        self, job_name: str, decide: Callable[[LedgerState], tuple[LedgerWrite, _T] | None]
    ) -> _T | None:
        """Read the job's ledger, let `decide` say what to write, and write it atomically.

        `decide` may be called more than once (when another writer changed the nodes between
        the read and the write: a launch taking a run, a trigger); the value of the call whose
        write succeeded is returned, None when it wrote nothing. Raises NotLeader when the term
        no longer acts, Conflict after many lost races, RegistryError from ZooKeeper.
        """
        if self._fence is None:
            raise RuntimeError("the fire ledger was built read-only (no fence)")
        registry = self._registry
        last_path, ready_path = f"{LAST_FIRE}/{job_name}", f"{READY}/{job_name}"
        for _ in range(_MAX_TRIES):
            last = registry.get_versioned(last_path)
            ready = registry.get_versioned(ready_path)
            pending = _count(None if ready is None else ready[0])
            state = LedgerState(
                last=_time(None if last is None else last[0]),
                pending=pending,
                running=bool(registry.children(f"{RUNNING}/{job_name}")),
                queue_full=pending == 0 and len(registry.children(READY)) >= self._cap,
            )
            decided = decide(state)
            if decided is None:
                return None
            write, result = decided
            ops = [self._set(last_path, last, f"{write.record:.3f}".encode(), LAST_FIRE)]
            if write.pending > 0 and write.pending != pending:
                ops.append(self._set(ready_path, ready, str(write.pending).encode(), READY))
            elif write.pending == 0 and ready is not None:
                ops.append(Op("delete", ready_path, version=ready[1]))
            try:
                registry.fenced(self._fence).commit(f"account fires of {job_name}", ops)
            except (Conflict, NotFound):
                continue  # changed meanwhile: read and decide again
            return result
        raise Conflict(f"account fires of {job_name}: too many concurrent changes")

    def _set(self, path: str, current: tuple[bytes, int] | None, data: bytes, parent: str) -> Op:
        if current is None:
            self._registry.ensure(parent)
            return Op("create", path, data)
        return Op("set", path, data, current[1])

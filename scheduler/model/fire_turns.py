"""The order in which the cron fires of one instant are accounted: the fewest jobs first.

Each distinct cron is its own APScheduler job, and the fires of one second run side by side on
the producer's pool, then account one at a time (the fire ledger serialises them). Taken in the
order the threads happened to get there, a job alone on its cron could wait behind a cron that
thousands of jobs share: behind its accounting, then behind the launch round that took those
thousands. Taken the fewest jobs first, the small fire is accounted in a few milliseconds and
its launch round starts while the large one is still being accounted; the large one waits that
much longer (the mean wait is the shortest this way).

A fire enters its place in the queue when APScheduler hands it over (a little before its
second), so that fires of the same second are all queued when their second comes; each then
takes its turn with `take`. A fire queued ahead that has not yet taken its turn (still waiting
for its second) is waited for at most `patience_s`, so a thread that never gets there cannot
hold the others back.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class FireTurns:
    """The queue of the fires waiting to account, and whose turn it is (any thread)."""

    def __init__(self, patience_s: float) -> None:
        self._patience_s = patience_s
        self._cond = threading.Condition()
        # (fire time, jobs, arrival) of every fire queued and not yet done, its turn's holder
        # included; a heap.
        self._queued: list[tuple[float, int, int]] = []
        self._held = False
        self._arrivals = itertools.count()

    @contextmanager
    def queued(self, fire: float, jobs: int) -> Iterator[Callable[[], None]]:
        """Queue a fire at epoch `fire` of `jobs` jobs; yields `take`, which blocks until it is
        this fire's turn (none held, and none queued ahead of it). The turn, taken or not, is
        given up on leaving the block."""
        entry = (fire, jobs, next(self._arrivals))
        with self._cond:
            heapq.heappush(self._queued, entry)
        holding = False

        def take() -> None:
            nonlocal holding
            deadline: float | None = None  # for the fire ahead that has not taken its turn
            with self._cond:
                while True:
                    if self._held:
                        self._cond.wait()
                        continue
                    if self._queued[0] == entry:
                        break
                    now = time.monotonic()
                    deadline = now + self._patience_s if deadline is None else deadline
                    if now >= deadline:
                        break
                    self._cond.wait(deadline - now)
                self._held = holding = True

        try:
            yield take
        finally:
            with self._cond:
                self._queued.remove(entry)
                heapq.heapify(self._queued)
                if holding:
                    self._held = False
                self._cond.notify_all()

"""One thread that runs callbacks at deadlines: allocation rounds, failover and registration
timeouts, status-update retries, kill grace periods, filter expiry.

Callbacks run on the clock thread and take the state lock themselves; they must not block.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class Timer:
    """A scheduled callback; `cancel()` makes it a no-op if it has not run yet."""

    __slots__ = ("_callback", "cancelled", "due")

    def __init__(self, due: float, callback: Callable[[], None]) -> None:
        self.due = due
        self._callback: Callable[[], None] | None = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True
        self._callback = None

    def _fire(self) -> None:
        callback = self._callback
        self._callback = None
        if callback is not None and not self.cancelled:
            callback()


class Clock:
    """Runs `Timer`s in deadline order on a thread named `name`."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Timer]] = []
        self._seq = itertools.count()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.error("thread %s did not stop within %.1fs", self._name, timeout_s)

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> Timer:
        """Run `callback` on the clock thread after `delay_s` seconds (0 = as soon as possible)."""
        timer = Timer(time.monotonic() + max(0.0, delay_s), callback)
        with self._cond:
            heapq.heappush(self._heap, (timer.due, next(self._seq), timer))
            if self._heap[0][2] is timer:
                self._cond.notify()
        return timer

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping:
                    while self._heap and self._heap[0][2].cancelled:
                        heapq.heappop(self._heap)
                    now = time.monotonic()
                    if self._heap and self._heap[0][0] <= now:
                        break
                    wait_s = self._heap[0][0] - now if self._heap else None
                    self._cond.wait(wait_s)
                if self._stopping:
                    return
                timer = heapq.heappop(self._heap)[2]
            try:
                timer._fire()
            except Exception:
                log.exception("clock %s: timer callback failed", self._name)

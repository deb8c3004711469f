"""The trace database's state as its users find it, and the records dropped while it is down.

`DatabaseState` is told by the trace writer and the statistics thread each time the database
failed them for want of reaching it (a connection refused, a server gone, SQLite's disk full: an
`OperationalError` or `InterfaceError`) and each time it took their work again. The database is
down while any of them is failing; `/health` shows since when, and once it is back, the last
outage's start and end. Each change is logged once (WARNING down, WARNING back).

A database that stops answering without refusing (a frozen server, a host gone from the network
without a reset) fails nothing: a call on an open connection waits for ever. So the users wrap
their calls in `call(source)`, and a call in flight for `STALL_S` counts as a failure of its
source from the call's start, found when the state is read (/health, /metrics), since the
users' own threads are the ones waiting.

`DropLog` counts records dropped because a bounded buffer was full and logs them at WARNING at
most once per interval, naming how many since the last line and in all (a flood of drops is one
line every ten seconds, never silence and never a flood).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

__all__ = ["DROP_LOG_INTERVAL_S", "STALL_S", "DatabaseState", "DropLog", "iso_utc"]

log = logging.getLogger(__name__)

DROP_LOG_INTERVAL_S = 10.0
STALL_S = 10.0
"""A database call in flight this long means the database does not answer."""


def iso_utc(epoch_s: float) -> str:
    """`2026-11-26T16:50:01.250Z`, as the API writes times."""
    moment = datetime.fromtimestamp(epoch_s, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class DatabaseState:
    """Whether the trace database takes the work of its users (`source`s); any thread."""

    def __init__(
        self,
        name: str,
        clock: Callable[[], float] = time.time,
        stall_s: float = STALL_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """`clock` gives the times shown (epoch seconds); `monotonic` measures stalls."""
        self._name = name
        self._clock = clock
        self._monotonic = monotonic
        self._stall_s = stall_s
        # in flight: token -> (source, start (clock), start (monotonic))
        self._calls: dict[int, tuple[str, float, float]] = {}
        self._stalled: set[int] = set()  # tokens counted as a failure of their source
        self._tokens = itertools.count()
        self._lock = threading.Lock()
        self._down: dict[str, tuple[float, str]] = {}  # source -> (since, problem)
        self._since: float | None = None
        self._problem = ""  # what started the current outage
        self._last_outage: tuple[float, float, str] | None = None
        self._outages = 0

    @property
    def down_since(self) -> float | None:
        """Epoch seconds since when the database has been down; None while it is up."""
        self._find_stalls()
        with self._lock:
            return self._since

    @property
    def outages(self) -> int:
        """Outages seen (each counted when it started)."""
        self._find_stalls()
        with self._lock:
            return self._outages

    @contextmanager
    def call(self, source: str) -> Iterator[None]:
        """Around one database call of `source` (its own thread), so that a call that does not
        return counts as a failure once it has been in flight for `stall_s`."""
        token = next(self._tokens)
        with self._lock:
            self._calls[token] = (source, self._clock(), self._monotonic())
        ok = False
        try:
            yield
            ok = True
        finally:
            with self._lock:
                self._calls.pop(token, None)
                stalled = token in self._stalled
                self._stalled.discard(token)
            if stalled and ok:
                self.succeeded(source)  # it answered in the end

    def failed(self, source: str, problem: str, since: float | None = None) -> None:
        """`source` could not reach the database (`problem`: a line safe to show), from
        `since` (epoch seconds; default now)."""
        now = self._clock() if since is None else since
        with self._lock:
            began = self._since is None
            since = self._down.get(source, (now, ""))[0]
            self._down[source] = (since, problem)
            if began:
                self._since = now
                self._problem = problem
                self._outages += 1
        if began:
            log.warning(
                "trace database %s down (%s): scheduling goes on; trace and statistics records "
                "wait in memory and in ZooKeeper until it is back",
                self._name,
                problem,
            )

    def _find_stalls(self) -> None:
        """Count each call in flight for `stall_s` as a failure of its source (once)."""
        now = self._monotonic()
        with self._lock:
            found = [
                (token, source, start, now - began)
                for token, (source, start, began) in self._calls.items()
                if token not in self._stalled and now - began >= self._stall_s
            ]
            self._stalled.update(token for token, _, _, _ in found)
        for _, source, start, waited_s in found:
            self.failed(source, f"no answer for {waited_s:.0f}s", since=start)

    def succeeded(self, source: str) -> None:
        """`source` reached the database and it did the work."""
        now = self._clock()
        with self._lock:
            if self._down.pop(source, None) is None or self._down or self._since is None:
                return
            since, self._since = self._since, None
            self._last_outage = (since, now, self._problem)
        log.warning(
            "trace database %s back after %.1fs down (since %s); writing what was held",
            self._name,
            now - since,
            iso_utc(since),
        )

    def describe(self) -> dict[str, Any]:
        """For /health: `state` ("up"/"down"); while down `downSince`, `downSeconds` and
        `problem` (each failing user's); `lastOutage` (from, to, seconds, problem) once one
        ended; `outages`, the number seen."""
        self._find_stalls()
        with self._lock:
            out: dict[str, Any] = {"state": "down" if self._since is not None else "up"}
            if self._since is not None:
                out["downSince"] = iso_utc(self._since)
                out["downSeconds"] = round(self._clock() - self._since, 1)
                out["problem"] = "; ".join(
                    f"{source}: {problem}" for source, (_, problem) in sorted(self._down.items())
                )
            if self._last_outage is not None:
                start, end, problem = self._last_outage
                out["lastOutage"] = {
                    "from": iso_utc(start),
                    "to": iso_utc(end),
                    "seconds": round(end - start, 1),
                    "problem": problem,
                }
            out["outages"] = self._outages
            return out


class DropLog:
    """Records dropped from one bounded buffer: counted, and logged at most once per
    `interval_s` at WARNING with how many; any thread."""

    def __init__(
        self,
        what: str,
        why: str,
        interval_s: float = DROP_LOG_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._what = what
        self._why = why
        self._interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._total = 0
        self._unlogged = 0
        self._logged_at: float | None = None

    @property
    def total(self) -> int:
        with self._lock:
            return self._total

    def dropped(self, count: int = 1) -> None:
        """Count `count` records dropped; log them if no line was logged for an interval."""
        with self._lock:
            self._total += count
            self._unlogged += count
        self.flush(due_only=True)

    def flush(self, due_only: bool = False) -> None:
        """Log the drops not logged yet (with `due_only`, only once an interval has passed)."""
        now = self._clock()
        with self._lock:
            if not self._unlogged:
                return
            last = self._logged_at
            if due_only and last is not None and now - last < self._interval_s:
                return
            unlogged, self._unlogged = self._unlogged, 0
            total = self._total
            self._logged_at = now
        log.warning(
            "%s: %d dropped (%s); %d dropped in all",
            self._what,
            unlogged,
            self._why,
            total,
        )

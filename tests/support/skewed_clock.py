"""`python -m tests.support.skewed_clock [flags]`: a replica whose wall clock a test moves.

The process's wall clock reads the real one plus an offset in seconds written in the file named
by `EJC_TEST_CLOCK_OFFSET_FILE` (a float; missing or unreadable = 0), read again at most every
0.1 s, so a test that writes `60` makes the replica's clock jump a minute ahead, as an NTP step or
an operator's `date -s` would. What moves: `time.time`, `time.time_ns`, and `datetime.now`,
`utcnow` and `today` where APScheduler and the scheduler ask them (APScheduler's and the
scheduler's notion of now). What does not, as on a
real machine whose wall clock is stepped: `time.monotonic` and every wait on it, and the clocks
of ZooKeeper, the Mesos stand-in and the executors.

Why not libfaketime: Debian's 0.9.10 makes Python's `time.sleep` fail with EINVAL when it leaves
the monotonic clock alone (`FAKETIME_DONT_FAKE_MONOTONIC=1`), and moves the monotonic clock too
otherwise, which a wall clock step does not.
"""

from __future__ import annotations

import datetime as _datetime
import importlib
import os
import runpy
import sys
import threading
import time as _time
from typing import Any

ENV = "EJC_TEST_CLOCK_OFFSET_FILE"
_REREAD_S = 0.1

_real_time = _time.time
_real_time_ns = _time.time_ns
_RealDateTime = _datetime.datetime


class _Offset:
    def __init__(self, path: str | None) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._value = 0.0
        self._read_at = -1e9

    def get(self) -> float:
        if self._path is None:
            return 0.0
        now = _time.monotonic()
        with self._lock:
            if now - self._read_at >= _REREAD_S:
                self._read_at = now
                try:
                    with open(self._path) as fh:
                        self._value = float(fh.read().strip() or 0)
                except (OSError, ValueError):
                    pass
            return self._value


_offset = _Offset(os.environ.get(ENV))


def _time_skewed() -> float:
    return _real_time() + _offset.get()


def _time_ns_skewed() -> int:
    return _real_time_ns() + int(_offset.get() * 1e9)


class _SkewedDateTime(_RealDateTime):
    """`datetime.datetime` whose `now`, `utcnow` and `today` read the skewed clock (and return
    plain `datetime`s)."""

    @classmethod
    def now(cls, tz: Any = None) -> Any:
        return _RealDateTime.fromtimestamp(_time_skewed(), tz)

    @classmethod
    def utcnow(cls) -> Any:
        return _RealDateTime.fromtimestamp(_time_skewed(), _datetime.UTC).replace(tzinfo=None)

    @classmethod
    def today(cls) -> Any:
        return _RealDateTime.fromtimestamp(_time_skewed())


# The modules that ask `datetime` for now (the class itself cannot be changed, and replacing it
# everywhere would break `isinstance` checks against it): their `datetime` becomes the skewed one.
_ASK_NOW = (
    "apscheduler.schedulers.base",
    "apscheduler.executors.base",
    "scheduler.model.config.cron",
    "scheduler.model.runs",
    "scheduler.leader.statistics.queries",
    "scheduler.leader.statistics.counters",
    "scheduler.leader.statistics.component",
    "scheduler.leader.statistics.sampler",
    "scheduler.leader.statistics.writer",
    "scheduler.api.fire_times",
)


def install() -> None:
    """Skew this process's wall clock: `time` at once, `datetime.now` in the modules above."""
    _time.time = _time_skewed
    _time.time_ns = _time_ns_skewed
    for name in _ASK_NOW:
        module = importlib.import_module(name)
        if getattr(module, "datetime", None) is not _RealDateTime:
            raise RuntimeError(f"{name} does not use datetime.datetime as `datetime` any more")
        module.datetime = _SkewedDateTime  # type: ignore[attr-defined]


def main() -> None:
    install()
    sys.argv[0] = "scheduler"
    runpy.run_module("scheduler", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()

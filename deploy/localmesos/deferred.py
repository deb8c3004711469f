"""Calls put off while a master's ACCEPT hands its tasks to an agent.

A Mesos master accounts every task of an ACCEPT, then sends the agent its RunTask messages; the
agent starts the executors and checkpoints the tasks as they reach it. The stand-in does both
under one lock in one call, so its agent puts off what would run beside the ACCEPT's loop
(starting executors, queuing checkpoint writes) until the loop ends: fetching, forking and
writing files meanwhile slowed a 10,000-task ACCEPT several times here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["Deferred"]


class Deferred:
    """Calls asked for while `held` are made when it ends, in order. Used under the stand-in's
    state lock, as everything that asks for them is."""

    def __init__(self) -> None:
        self._calls: list[Callable[[], object]] | None = None

    @contextmanager
    def held(self) -> Iterator[None]:
        if self._calls is not None:  # nested: the outer one makes them
            yield
            return
        self._calls = []
        try:
            yield
        finally:
            calls, self._calls = self._calls, None
            for call in calls:
                call()

    def later(self, call: Callable[[], object]) -> bool:
        """True when `call` is put off (inside `held`); otherwise the caller makes it now."""
        if self._calls is None:
            return False
        self._calls.append(call)
        return True

"""The leader's lifecycle: start the leader components in order, stop them in reverse.

A `SchedulerService` lives for one leadership term. Components are built fresh for every term
(nothing is carried over in memory from an earlier term: peers doubled runs that way).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Protocol

log = logging.getLogger(__name__)


class TermView(Protocol):
    """What a component may know of its leadership term (the replica's `Term` is one)."""

    @property
    def acting(self) -> bool:
        """True while the term acts: False at once when the session is SUSPENDED or LOST, and
        after the term; a component that sees False must not launch or write."""
        ...


class LeaderComponent:
    """A part of the leader with a start/stop lifecycle.

    `start` is called once from the leader thread and may block briefly; it raises to refuse the
    term. `stop` must be safe to call after a failed or partial start and should return within a
    few seconds. `pause`/`resume` are called when the ZooKeeper session is SUSPENDED and comes
    back: a paused component must not launch tasks or make leader writes.
    """

    name = "component"

    def start(self) -> None:
        """Start; raise to refuse the term."""

    def stop(self) -> None:
        """Stop and release everything the component holds."""

    def pause(self) -> None:
        """Stop acting (SUSPENDED session) without tearing down."""

    def resume(self) -> None:
        """Act again after `pause` (same session came back)."""


class ComponentStartError(Exception):
    """A leader component failed to start; the term is given up."""

    def __init__(self, component: str, cause: BaseException) -> None:
        super().__init__(f"component {component} failed to start: {cause}")
        self.component = component


class SchedulerService:
    """Starts components in the given order and stops the started ones in reverse.

    Called from the leader thread only.
    """

    def __init__(self, components: Sequence[LeaderComponent]) -> None:
        self._components = list(components)
        self._started: list[LeaderComponent] = []
        self._paused = False

    @property
    def component_names(self) -> list[str]:
        return [c.name for c in self._components]

    def start(self) -> None:
        """Start every component in order.

        Raises ComponentStartError after stopping the ones already started, so no half leader
        is left running.
        """
        for component in self._components:
            began = time.monotonic()
            try:
                component.start()
            except Exception as exc:
                log.error(
                    "leader: component %s failed to start (%s: %s); stopping %s",
                    component.name,
                    type(exc).__name__,
                    exc,
                    [c.name for c in reversed(self._started)] or "nothing",
                    exc_info=exc,
                )
                # A partial start may hold resources too: stop it as well.
                self._stop_one(component)
                self.stop()
                raise ComponentStartError(component.name, exc) from exc
            self._started.append(component)
            log.info(
                "leader: started %s in %.0f ms", component.name, (time.monotonic() - began) * 1000
            )

    @property
    def paused(self) -> bool:
        return self._paused

    def pause(self) -> None:
        if self._paused:
            return
        self._paused = True
        for component in reversed(self._started):
            try:
                component.pause()
            except Exception:
                log.exception("leader: component %s failed to pause", component.name)

    def resume(self) -> None:
        if not self._paused:
            return
        self._paused = False
        for component in self._started:
            try:
                component.resume()
            except Exception:
                log.exception("leader: component %s failed to resume", component.name)

    def stop(self) -> None:
        """Stop the started components in reverse order; never raises."""
        while self._started:
            self._stop_one(self._started.pop())

    @staticmethod
    def _stop_one(component: LeaderComponent) -> None:
        began = time.monotonic()
        try:
            component.stop()
        except Exception:
            log.exception("leader: component %s failed to stop cleanly", component.name)
            return
        log.info("leader: stopped %s in %.0f ms", component.name, (time.monotonic() - began) * 1000)

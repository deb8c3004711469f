"""The leader's lifecycle: the contract every leader component keeps, the base of those that own
a thread, the `WakeSignal` that wakes one from another room, `Listeners` (a component's fan-out
to the listeners the wiring appended), and `TermComponents`, which starts a term's components
in order and stops them in reverse.

A `TermComponents` lives for one leadership term. Components are built fresh for every term
(nothing is carried over in memory from an earlier term: peers doubled runs that way).
"""

from __future__ import annotations

import gc
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Generic, ParamSpec, Protocol, TypeVar

from scheduler.model.errors import SchedulerError

log = logging.getLogger(__name__)

_E = TypeVar("_E")
_P = ParamSpec("_P")


class TermView(Protocol):
    """What a component may know of its leadership term (the replica's `Term` is one)."""

    @property
    def acting(self) -> bool:
        """True while the term acts: False at once when the session is SUSPENDED or LOST, and
        after the term; a component that sees False must not launch or write."""
        ...


class WakeSignal:
    """Wakes the one thread that waits on it, from any thread.

    Built by the wiring before both sides, so that the components that wake a thread (as a
    plain `wake` callable) and the one whose thread waits need not know each other. `wake`
    never blocks; `wait` and `clear` belong to the waiting thread.
    """

    def __init__(self) -> None:
        self._event = threading.Event()

    def wake(self) -> None:
        """Wake the waiting thread, or make its next `wait` return at once (any thread)."""
        self._event.set()

    def wait(self, timeout_s: float) -> bool:
        """Block until woken or for `timeout_s`; True when woken."""
        return self._event.wait(timeout_s)

    def clear(self) -> None:
        """Forget the wakes so far (the waiting thread, before it looks for work)."""
        self._event.clear()


class Listeners(Generic[_P]):
    """The listeners of one of a component's events: the wiring appends them, the component
    `emit`s to each in turn. A listener that raises is logged (`logger.exception`, naming the
    listener and what it was given) and the others are still called: one broken listener
    (a metric, the event trace) must not cost the component its work nor the other listeners
    their event. Listeners are called on the emitting thread and must not block.

    Appended while the term is built, before the component starts; emitting reads a copy, so
    a listener appended meanwhile is only called from the next event on.
    """

    def __init__(self, logger: logging.Logger, what: str) -> None:
        """`what` starts each failure's log line, e.g. "launcher: launch listener"."""
        self._log = logger
        self._what = what
        self._listeners: list[Callable[_P, object]] = []

    def append(self, listener: Callable[_P, object]) -> None:
        """Call `listener` on each event, after those appended before."""
        self._listeners.append(listener)

    def insert(self, index: int, listener: Callable[_P, object]) -> None:
        """Call `listener` at position `index` among the listeners (0: first)."""
        self._listeners.insert(index, listener)

    def __len__(self) -> int:
        return len(self._listeners)

    def __iter__(self) -> Iterator[Callable[_P, object]]:
        return iter(list(self._listeners))

    def emit(self, *args: _P.args, **kwargs: _P.kwargs) -> None:
        """Call each listener with the event; log a failure and go on (never raises but for a
        `BaseException` that is not an `Exception`)."""
        for listener in list(self._listeners):
            try:
                listener(*args, **kwargs)
            except Exception:  # noqa: BLE001 - logged with its traceback; the others go on
                self._log.exception(
                    "%s %s failed on %.200s",
                    self._what,
                    _name_of(listener),
                    ", ".join(repr(a) for a in args),
                )


def _name_of(listener: Callable[..., object]) -> str:
    """A listener's name for a log line: `Statistics.on_status`, or its repr."""
    name = getattr(listener, "__qualname__", None)
    return name if isinstance(name, str) else repr(listener)


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


def join_thread(thread: threading.Thread | None, timeout_s: float, owner: str) -> bool:
    """Wait at most `timeout_s` for `thread` to end; False, and one ERROR naming the thread and
    its `owner`, when it is still alive then (it is a daemon: it dies with the process)."""
    if thread is None:
        return True
    thread.join(timeout_s)
    if thread.is_alive():
        log.error("%s: thread %s did not stop within %g s", owner, thread.name, timeout_s)
        return False
    return True


class ThreadedComponent(LeaderComponent):
    """A leader component that owns one thread, named `thread_name`, for its term.

    `start` runs `_run` on a new thread. `stop` sets `_stopping`, calls `_interrupt` (which wakes
    a thread that waits on something else, with a sentinel or an event) and joins the thread for
    at most `join_timeout_s`, logging one ERROR when it does not end. A subclass that does more
    at start or stop overrides them and calls `_start_thread` and `_stop_thread` itself.
    """

    thread_name = "sched-component"
    join_timeout_s = 5.0

    def __init__(self) -> None:
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._start_thread()

    def stop(self) -> None:
        self._stop_thread()

    def _start_thread(self) -> None:
        self._stopping.clear()
        thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread = thread
        thread.start()

    def _stop_thread(self) -> bool:
        """Stop the thread and join it; False when it did not end within `join_timeout_s`."""
        self._stopping.set()
        self._interrupt()
        thread, self._thread = self._thread, None
        return join_thread(thread, self.join_timeout_s, self.name)

    def _interrupt(self) -> None:
        """Wake the thread so that it sees `_stopping` (nothing to do when it waits on it)."""

    def _run(self) -> None:
        """The thread's body: return soon after `_stopping` is set."""
        raise NotImplementedError


class _Stop:
    """The sentinel that ends an event loop."""


class EventLoopComponent(ThreadedComponent, Generic[_E]):
    """A threaded component whose thread handles the events queued to it, one at a time, in the
    order they were posted. Callbacks of libraries (kazoo watches, pymesos) only `post`.

    `_handle` gets each event; an exception it raises is logged and the loop goes on. With
    `idle_s` set, `_idle` runs whenever no event came for that long. With `batch_max` above 1,
    `_handle_batch` gets the events queued by the time the loop takes one, up to that many (it
    never waits for more): a loop that can act on several at once overrides it.
    """

    idle_s: float | None = None
    batch_max = 1

    def __init__(self) -> None:
        super().__init__()
        self._events: queue.Queue[_E | _Stop] = queue.Queue()

    def post(self, event: _E) -> None:
        """Queue `event` for the loop (any thread; never blocks)."""
        self._events.put(event)

    def _interrupt(self) -> None:
        self._events.put(_Stop())

    def _run(self) -> None:
        while True:
            try:
                event = self._events.get(timeout=self.idle_s)
            except queue.Empty:
                try:
                    self._idle()
                except Exception:
                    log.exception("%s: idle check failed", self.name)
                continue
            if isinstance(event, _Stop):
                return
            events = [event]
            stop = False
            while len(events) < self.batch_max:
                try:
                    more = self._events.get_nowait()
                except queue.Empty:
                    break
                if isinstance(more, _Stop):
                    stop = True
                    break
                events.append(more)
            if len(events) == 1:
                self._handle_one(event)
            else:
                self._handle_batch(events)
            if stop:
                return

    def _handle_one(self, event: _E) -> None:
        try:
            self._handle(event)
        except Exception:
            log.exception("%s: handling %.200r failed", self.name, event)

    def _handle_batch(self, events: list[_E]) -> None:
        """Act on events that were queued together, in order (the loop's thread); by default
        each through `_handle`, an exception logged and the next one handled."""
        for event in events:
            self._handle_one(event)

    def _handle(self, event: _E) -> None:
        """Act on one event (the loop's thread)."""
        raise NotImplementedError

    def _idle(self) -> None:
        """Called after `idle_s` without an event (the loop's thread)."""


class ComponentStartError(SchedulerError):
    """A leader component failed to start; the term is given up."""

    def __init__(self, component: str, cause: BaseException) -> None:
        super().__init__(f"component {component} failed to start: {cause}")
        self.component = component


class TermComponents:
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


class _CollectorPauses:
    """The pauses of Python's cyclic garbage collector that are going on, from any thread:
    the collector runs again when the last ends (if it ran when the first began)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0
        self._was_enabled = False

    @contextmanager
    def paused(self) -> Iterator[None]:
        with self._lock:
            if self._count == 0:
                self._was_enabled = gc.isenabled()
                gc.disable()
            self._count += 1
        try:
            yield
        finally:
            with self._lock:
                self._count -= 1
                if self._count == 0 and self._was_enabled:
                    gc.enable()


_PAUSES = _CollectorPauses()


def collector_paused() -> AbstractContextManager[None]:
    """Pause Python's cyclic garbage collector for a burst of allocations whose objects live
    to its end (a term's start building every job, a launch round of thousands of tasks):
    each collection meanwhile would walk them all again, to free nothing (issue 29: the full
    collections of a 10,000-task round took 0.9 s of its 5.5 s). Reference counting frees
    everything else meanwhile; only garbage in reference cycles waits for the end. Pauses
    from several threads overlap: the collector runs again when the last one ends."""
    return _PAUSES.paused()


PAUSE_COLLECTOR_AT = 500
"""A cron fire of at least this many jobs is accounted, and a launch round of at least this many
units placed, written and launched, with the collector paused (`collector_paused_for`). Not a
smaller one: were every round to pause it, the collector would hardly run between them under
a steady load, and its collections would grow long enough to delay launches (a replica whose
young generation was 50,000 objects instead of 700 launched a 2-s job's fires at a p99 of
61-284 ms instead of 41-42 ms, while 5,000 jobs fired every minute)."""


def collector_paused_for(units: int) -> AbstractContextManager[None]:
    """`collector_paused` for a burst of `units` (jobs fired, units launched) of at least
    `PAUSE_COLLECTOR_AT`; nothing for a smaller one."""
    return collector_paused() if units >= PAUSE_COLLECTOR_AT else nullcontext()

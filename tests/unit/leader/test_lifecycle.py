"""The base of threaded leader components and of event loops: named threads, bounded joins, one
ERROR for a thread that does not stop, and typed events that fail loudly when unhandled."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from scheduler.leader.lifecycle import EventLoopComponent, ThreadedComponent, WakeSignal
from scheduler.leader.mesos.driver import DriverHandlers, DriverWiringError, MesosDriver
from scheduler.leader.mesos.driver_events import FrameworkMessage, QueueingCallbacks, Rescinded
from scheduler.model.settings import load_settings
from tests.support.waiting import wait_for


class _Ticker(ThreadedComponent):
    name = "ticker"
    thread_name = "sched-test-ticker"

    def __init__(self) -> None:
        super().__init__()
        self.seen_thread = ""

    def _run(self) -> None:
        self.seen_thread = threading.current_thread().name
        self._stopping.wait()


class _Stuck(ThreadedComponent):
    name = "stuck"
    thread_name = "sched-test-stuck"
    join_timeout_s = 0.2

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def _run(self) -> None:
        self.release.wait(10)  # ignores `_stopping`


class _Loop(EventLoopComponent[str]):
    name = "loop"
    thread_name = "sched-test-loop"

    def __init__(self) -> None:
        super().__init__()
        self.handled: list[str] = []

    def _handle(self, event: str) -> None:
        if event == "boom":
            raise RuntimeError("boom")
        self.handled.append(event)


def test_a_threaded_component_runs_on_its_named_thread_and_stops_within_the_bound() -> None:
    ticker = _Ticker()
    ticker.start()
    wait_for(lambda: ticker.seen_thread != "", 5, message="thread started")
    assert ticker.seen_thread == "sched-test-ticker"
    assert ticker._stop_thread() is True
    assert not any(t.name == "sched-test-ticker" for t in threading.enumerate())
    ticker.stop()  # a second stop is harmless


def test_a_thread_that_does_not_stop_is_named_once_in_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stuck = _Stuck()
    stuck.start()
    try:
        with caplog.at_level(logging.ERROR, logger="scheduler.leader.lifecycle"):
            assert stuck._stop_thread() is False
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert errors == ["stuck: thread sched-test-stuck did not stop within 0.2 s"]
    finally:
        stuck.release.set()


def test_an_event_loop_handles_in_order_survives_a_failing_event_and_ends_on_stop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loop = _Loop()
    loop.start()
    with caplog.at_level(logging.ERROR, logger="scheduler.leader.lifecycle"):
        for event in ("a", "boom", "b"):
            loop.post(event)
        wait_for(lambda: loop.handled == ["a", "b"], 5, message="events handled")
    assert any("loop: handling 'boom' failed" in r.getMessage() for r in caplog.records)
    assert loop._stop_thread() is True


class _BatchLoop(_Loop):
    """A loop that takes what queued up together, up to three events."""

    batch_max = 3

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[str]] = []
        self.gate = threading.Event()

    def _handle_batch(self, events: list[str]) -> None:
        self.batches.append(list(events))
        super()._handle_batch(events)

    def _handle(self, event: str) -> None:
        if event == "hold":
            self.gate.wait(5)  # the next events queue up meanwhile
        super()._handle(event)


def test_an_event_loop_takes_what_queued_up_in_batches_in_order_and_stops_after_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loop = _BatchLoop()
    loop.start()
    loop.post("hold")
    wait_for(lambda: loop._events.qsize() == 0, 5, message="the first event taken")
    for event in ("a", "boom", "b", "c", "d"):
        loop.post(event)
    with caplog.at_level(logging.ERROR, logger="scheduler.leader.lifecycle"):
        loop.gate.set()
        wait_for(lambda: loop.handled == ["hold", "a", "b", "c", "d"], 5, message="handled")
    # Never more than batch_max at once; a failing event does not stop the ones after it.
    assert loop.batches == [["a", "boom", "b"], ["c", "d"]]
    assert any("loop: handling 'boom' failed" in r.getMessage() for r in caplog.records)
    # A stop queued behind events ends the loop once they are handled.
    loop.gate.clear()
    loop.post("hold")
    wait_for(lambda: loop._events.qsize() == 0, 5, message="the hold taken")
    loop.post("e")
    loop._interrupt()
    loop.gate.set()
    wait_for(lambda: loop.handled[-1:] == ["e"], 5, message="the last event handled")
    assert loop._stop_thread() is True


def test_a_wake_signal_wakes_its_waiter_and_a_wake_is_kept_until_cleared() -> None:
    signal = WakeSignal()
    assert signal.wait(0.01) is False
    signal.wake()  # before the wait: the next wait returns at once
    assert signal.wait(5) is True
    assert signal.wait(0) is True  # kept until the waiter clears it
    signal.clear()
    assert signal.wait(0.01) is False
    woken: list[bool] = []
    waiter = threading.Thread(target=lambda: woken.append(signal.wait(5)), name="test-waiter")
    waiter.start()
    threading.Timer(0.05, signal.wake).start()
    waiter.join(5)
    assert woken == [True]


class _Ids:
    framework_id: str | None = None

    def save(self, framework_id: str) -> None:
        self.framework_id = framework_id

    def clear(self) -> None:
        self.framework_id = None


def _ignore(*_args: Any) -> None:
    return None


_HANDLERS = DriverHandlers(
    on_offers=_ignore,
    on_rescind=_ignore,
    on_status=lambda _status: True,
    on_connected=_ignore,
    on_disconnected=_ignore,
)


def _driver() -> MesosDriver:
    driver = MesosDriver(load_settings({}, {}, {}), _Ids())
    driver.bind(_HANDLERS)
    return driver


def test_a_driver_started_with_no_handlers_bound_refuses_to_start() -> None:
    driver = MesosDriver(load_settings({}, {}, {}), _Ids())
    with pytest.raises(DriverWiringError, match="no handlers bound"):
        driver.start()
    assert not [t for t in threading.enumerate() if t.name == "sched-mesos-events"]
    driver.stop()  # safe after the refused start


def test_a_driver_binds_its_handlers_once() -> None:
    driver = _driver()
    with pytest.raises(DriverWiringError, match="already bound"):
        driver.bind(_HANDLERS)


def test_the_driver_hands_its_events_to_the_bound_handlers() -> None:
    rescinded: list[str] = []
    driver = MesosDriver(load_settings({}, {}, {}), _Ids())
    driver.bind(
        DriverHandlers(
            on_offers=_ignore,
            on_rescind=rescinded.append,
            on_status=lambda _status: True,
            on_connected=_ignore,
            on_disconnected=_ignore,
        )
    )
    driver._handle(Rescinded("offer-1"))
    assert rescinded == ["offer-1"]


def test_the_driver_fails_loudly_on_an_event_kind_it_does_not_handle() -> None:
    with pytest.raises(AssertionError):
        _driver()._handle(object())  # type: ignore[arg-type]


def test_a_framework_message_is_queued_as_a_typed_event_and_logged_not_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    driver = _driver()
    posted: list[object] = []
    QueueingCallbacks(posted.append).frameworkMessage(
        None, {"value": "app@-@agent-1"}, {"value": "agent-1"}, "aGk="
    )
    assert posted == [FrameworkMessage("app@-@agent-1", "agent-1", "aGk=")]
    with caplog.at_level(logging.INFO, logger="scheduler.leader.mesos.driver"):
        driver._handle(FrameworkMessage("app@-@agent-1", "agent-1", "aGk="))
    assert any("from executor app@-@agent-1 on agent-1" in r.getMessage() for r in caplog.records)

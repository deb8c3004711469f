"""A call the Mesos master refuses (403 while it fails over) is logged as one WARNING line,
without a stack trace; any other error in a call keeps its trace (issue 24). Processed updates
are acknowledged in order by the acknowledgement thread (issue 29)."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from scheduler.leader.mesos.driver import DriverHandlers, MesosDriver
from scheduler.leader.mesos.driver_events import StatusUpdate
from scheduler.model.settings import load_settings


class _FailingOver:
    """What pymesos raises when the master answers an acknowledgement with 403 (its message)."""

    def acknowledgeStatusUpdate(self, status: dict[str, Any]) -> None:
        raise RuntimeError(
            "Failed to send request 403: b'Framework is not subscribed'\n"
            + '{"type": "ACKNOWLEDGE", "acknowledge": {"uuid": "dGhl"}}'
        )

    def killTask(self, task_id: dict[str, str]) -> None:
        raise RuntimeError("an unexpected bug")


def _driver() -> MesosDriver:
    driver = MesosDriver(
        load_settings({}, {}, {"mesos_url": "http://127.0.0.1:5050"}),
        framework_ids=None,  # type: ignore[arg-type]
    )
    driver._driver = _FailingOver()  # type: ignore[assignment]
    driver.connected.set()
    return driver


def test_a_refused_acknowledgement_is_one_warning_line(caplog: pytest.LogCaptureFixture) -> None:
    driver = _driver()
    status = {"uuid": "dGhl", "task_id": {"value": "t"}, "agent_id": {"value": "a"}}
    with caplog.at_level(logging.WARNING, logger="scheduler.leader.mesos.driver"):
        ok = driver._call("acknowledge", lambda d: d.acknowledgeStatusUpdate(status))
    assert ok is False
    [record] = caplog.records
    assert record.levelno == logging.WARNING and record.exc_info is None
    message = record.getMessage()
    assert "acknowledge" in message and "403" in message and "\n" not in message


def test_any_other_error_in_a_call_keeps_its_trace(caplog: pytest.LogCaptureFixture) -> None:
    driver = _driver()
    with caplog.at_level(logging.WARNING, logger="scheduler.leader.mesos.driver"):
        assert driver.kill("t") is False
    [record] = caplog.records
    assert record.levelno == logging.ERROR and record.exc_info is not None


class _Recording:
    """A pymesos driver that records each acknowledgement with the thread that sent it."""

    def __init__(self) -> None:
        self.acks: list[tuple[str, str]] = []
        self.sent = threading.Event()

    def acknowledgeStatusUpdate(self, status: dict[str, Any]) -> None:
        self.acks.append((status["uuid"], threading.current_thread().name))
        if len(self.acks) == 3:
            self.sent.set()


def test_updates_are_acknowledged_after_processing_in_order_off_the_event_thread() -> None:
    # Each acknowledgement is an HTTP round trip to the master: the event thread handed it on
    # and took the next update, instead of waiting for it.
    driver = MesosDriver(
        load_settings({}, {}, {"mesos_url": "http://127.0.0.1:5050"}),
        framework_ids=None,  # type: ignore[arg-type]
    )
    processed: list[str] = []

    def on_status(status: dict[str, Any]) -> bool:
        processed.append(status["uuid"])
        return bool(status["uuid"] != "not-recorded")  # False: not acknowledged (sent again)

    driver.bind(
        DriverHandlers(
            on_offers=lambda _o: None,
            on_rescind=lambda _o: None,
            on_status=on_status,
            on_connected=lambda: None,
            on_disconnected=lambda: None,
        )
    )
    recording = _Recording()
    driver._driver = recording  # type: ignore[assignment]
    driver.connected.set()
    driver._start_thread()
    driver._ack_thread = threading.Thread(target=driver._send_acks, name="sched-mesos-acks")
    driver._ack_thread.start()
    try:
        for uuid in ("u1", "not-recorded", "u2", "u3"):
            driver.post(StatusUpdate({"uuid": uuid, "task_id": {"value": "t"}}))
        assert recording.sent.wait(10)
        assert processed == ["u1", "not-recorded", "u2", "u3"]
        assert recording.acks == [(u, "sched-mesos-acks") for u in ("u1", "u2", "u3")]
    finally:
        driver._driver = None
        driver.stop()
    assert driver._ack_thread is None

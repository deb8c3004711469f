"""A call the Mesos master refuses (403 while it fails over) is logged as one WARNING line,
without a stack trace; any other error in a call keeps its trace (issue 24). The
acknowledgements' and the ACCEPT's own path is in `test_calls.py`."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from scheduler.leader.mesos.driver import MesosDriver
from scheduler.model.settings import load_settings


class _FailingOver:
    """What pymesos raises when the master answers a call with 403 (its message)."""

    def declineOffer(self, offer_ids: list[dict[str, str]], filters: dict[str, Any]) -> None:
        raise RuntimeError(
            "Failed to send request 403: b'Framework is not subscribed'\n"
            + '{"type": "DECLINE", "decline": {"offer_ids": [{"value": "o1"}]}}'
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


def test_a_refused_call_is_one_warning_line(caplog: pytest.LogCaptureFixture) -> None:
    driver = _driver()
    with caplog.at_level(logging.WARNING, logger="scheduler.leader.mesos.driver"):
        assert driver.decline(["o1"], 5.0) is False
    [record] = caplog.records
    assert record.levelno == logging.WARNING and record.exc_info is None
    message = record.getMessage()
    assert "decline" in message and "403" in message and "\n" not in message


def test_any_other_error_in_a_call_keeps_its_trace(caplog: pytest.LogCaptureFixture) -> None:
    driver = _driver()
    with caplog.at_level(logging.WARNING, logger="scheduler.leader.mesos.driver"):
        assert driver.kill("t") is False
    [record] = caplog.records
    assert record.levelno == logging.ERROR and record.exc_info is not None

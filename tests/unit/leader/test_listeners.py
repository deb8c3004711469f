"""`Listeners`, the one fan-out of a leader component's events: each listener in order, a failing
one logged by name with what it was given, the others still called."""

from __future__ import annotations

import logging

import pytest

from scheduler.leader.lifecycle import Listeners

_log = logging.getLogger("tests.listeners")


class _Broken:
    def on_event(self, job: str, at: float) -> None:
        raise RuntimeError(f"broken on {job}")


def test_each_listener_is_called_in_order_with_the_event() -> None:
    calls: list[tuple[str, str, float]] = []
    listeners: Listeners[[str, float]] = Listeners(_log, "test: listener")
    listeners.append(lambda job, at: calls.append(("second", job, at)))
    listeners.append(lambda job, at: calls.append(("third", job, at)))
    listeners.insert(0, lambda job, at: calls.append(("first", job, at)))

    listeners.emit("job-a", 1.5)

    assert calls == [("first", "job-a", 1.5), ("second", "job-a", 1.5), ("third", "job-a", 1.5)]
    assert len(listeners) == 3


def test_a_failing_listener_is_logged_by_name_and_the_others_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    after: list[str] = []
    listeners: Listeners[[str, float]] = Listeners(_log, "producer: fire listener")
    listeners.append(_Broken().on_event)
    listeners.append(lambda job, _at: after.append(job))

    with caplog.at_level(logging.ERROR, logger="tests.listeners"):
        listeners.emit("job-b", 2.0)  # does not raise

    assert after == ["job-b"]
    [record] = [r for r in caplog.records if r.name == "tests.listeners"]
    assert record.getMessage() == (
        "producer: fire listener _Broken.on_event failed on 'job-b', 2.0"
    )
    assert record.exc_info is not None
    assert str(record.exc_info[1]) == "broken on job-b"


def test_what_a_failure_log_repeats_of_the_event_is_bounded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    listeners: Listeners[[str]] = Listeners(_log, "status: listener")
    listeners.append(_fail)

    with caplog.at_level(logging.ERROR, logger="tests.listeners"):
        listeners.emit("x" * 10_000)

    [record] = [r for r in caplog.records if r.name == "tests.listeners"]
    assert record.getMessage().startswith("status: listener _fail failed on 'xxx")
    assert len(record.getMessage()) < 300


def test_a_listener_appended_during_an_emit_is_called_from_the_next_event_on() -> None:
    seen: list[str] = []
    listeners: Listeners[[str]] = Listeners(_log, "test: listener")

    def first(event: str) -> None:
        seen.append(f"first {event}")
        if event == "one":
            listeners.append(lambda e: seen.append(f"late {e}"))

    listeners.append(first)
    listeners.emit("one")
    listeners.emit("two")

    assert seen == ["first one", "first two", "late two"]


def _fail(_event: str) -> None:
    raise ValueError("no")

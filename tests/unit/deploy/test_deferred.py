"""The stand-in's `Deferred`: calls asked for while held are made when the outermost hold ends,
in the order asked; outside a hold the caller makes them itself."""

from __future__ import annotations

import pytest

from deploy.localmesos.deferred import Deferred


def test_calls_held_are_made_in_order_when_the_outermost_hold_ends() -> None:
    deferred, made = Deferred(), list[str]()
    assert deferred.later(lambda: made.append("never")) is False  # not held: the caller's
    with deferred.held():
        assert deferred.later(lambda: made.append("1")) is True
        with deferred.held():  # a nested hold makes nothing itself
            assert deferred.later(lambda: made.append("2")) is True
        assert made == []
        assert deferred.later(lambda: made.append("3")) is True
    assert made == ["1", "2", "3"]
    assert deferred.later(lambda: made.append("4")) is False


def test_a_hold_ended_by_an_error_still_makes_its_calls() -> None:
    deferred, made = Deferred(), list[str]()
    with pytest.raises(RuntimeError), deferred.held():
        deferred.later(lambda: made.append("taken"))
        raise RuntimeError("the ACCEPT failed midway")
    assert made == ["taken"]

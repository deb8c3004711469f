"""The trace database's state as its users find it, and rate-limited drop logs (outage.py)."""

from __future__ import annotations

import pytest

from scheduler.leader.statistics.outage import DatabaseState, DropLog, iso_utc


class _Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def test_the_database_is_down_while_any_user_fails_and_since_the_first_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = _Clock(T0)
    state = DatabaseState("sqlite:///x.db", clock)
    assert state.describe() == {"state": "up", "outages": 0}
    state.failed("trace writer", "OperationalError: database or disk is full")
    clock.now += 5
    state.failed("statistics", "OperationalError: database or disk is full")
    assert state.down_since == T0
    clock.now += 5
    # The statistics thread gets through (a read); the writer still cannot write.
    state.succeeded("statistics")
    described = state.describe()
    assert described["state"] == "down"
    assert described["downSince"] == iso_utc(T0) == "2027-01-15T08:00:00.000Z"
    assert described["downSeconds"] == 10.0
    assert described["problem"] == "trace writer: OperationalError: database or disk is full"
    clock.now += 20.5
    state.succeeded("trace writer")
    assert state.down_since is None
    assert state.describe() == {
        "state": "up",
        "lastOutage": {
            "from": "2027-01-15T08:00:00.000Z",
            "to": "2027-01-15T08:00:30.500Z",
            "seconds": 30.5,
            "problem": "OperationalError: database or disk is full",
        },
        "outages": 1,
    }
    # One line when it went down, one when it came back; nothing for each failure between.
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "down (OperationalError: database or disk is full)" in lines[0]
    assert "back after 30.5s down (since 2027-01-15T08:00:00.000Z)" in lines[1]


def test_a_success_of_a_user_that_never_failed_ends_no_outage() -> None:
    state = DatabaseState("db", _Clock(T0))
    state.succeeded("statistics")
    state.failed("trace writer", "down")
    state.succeeded("statistics")
    assert state.describe()["state"] == "down"
    state.failed("trace writer", "still down")
    assert state.outages == 1


def test_drops_are_logged_at_most_once_per_interval_naming_how_many(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = _Clock(100.0)
    drops = DropLog("trace writer", "buffer full", interval_s=10.0, clock=clock)
    drops.dropped()  # the first drop is logged at once
    for _ in range(999):
        drops.dropped()
        clock.now += 0.005
    clock.now = 110.0
    drops.dropped()  # an interval later: the 1,000 since
    drops.flush(due_only=True)  # nothing new: no line
    drops.dropped(5)
    drops.flush()  # e.g. at stop: whatever was not logged
    assert drops.total == 1006
    assert [r.getMessage() for r in caplog.records] == [
        "trace writer: 1 dropped (buffer full); 1 dropped in all",
        "trace writer: 1000 dropped (buffer full); 1001 dropped in all",
        "trace writer: 5 dropped (buffer full); 1006 dropped in all",
    ]


def test_a_call_that_does_not_return_counts_as_down_from_its_start(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = _Clock(T0)
    state = DatabaseState("db", clock, stall_s=10.0, monotonic=clock)
    with state.call("trace writer"):
        clock.now += 9.9
        assert state.describe()["state"] == "up"  # slow, not yet stalled
        clock.now += 0.1
        described = state.describe()
        assert described["state"] == "down"
        assert described["downSince"] == iso_utc(T0)
        assert described["problem"] == "trace writer: no answer for 10s"
        assert state.outages == 1
        clock.now += 20
    # It answered in the end.
    assert state.describe()["lastOutage"]["seconds"] == 30.0
    assert state.describe()["state"] == "up"
    assert state.outages == 1


def test_a_stalled_call_that_fails_leaves_the_database_down_until_a_success() -> None:
    clock = _Clock(T0)
    state = DatabaseState("db", clock, stall_s=10.0, monotonic=clock)
    with pytest.raises(ConnectionError), state.call("statistics"):
        clock.now += 15
        assert state.down_since == T0
        raise ConnectionError("server closed the connection")
    assert state.down_since == T0
    clock.now += 1
    with state.call("statistics"):
        pass
    assert state.down_since == T0  # a quick call is no news: its user says how it went
    state.succeeded("statistics")
    assert state.down_since is None

"""The leader-watch thread outlives a dying ZooKeeper client (a CI run lost a replica so)."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from scheduler.model.settings import Settings
from scheduler.replica.leader_watch import LeaderWatch
from scheduler.replica.vouching import Vouching
from tests.support.waiting import wait_for


class DyingClient:
    """What a kazoo client whose connection died of a stray reply does to the requests in
    flight: each fails with the connection's own error, a RuntimeError, not a KazooException."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError("xids do not match, expected 101 received 1516")


def test_a_pass_that_fails_with_any_error_is_logged_and_the_thread_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = DyingClient()
    stopping = threading.Event()
    changed = threading.Event()
    passes: list[int] = []

    def connected() -> bool:
        passes.append(1)  # asked at the start of every pass
        return True

    watch = LeaderWatch(
        "/ejc/ha/election",
        Vouching(Settings()),
        client=lambda: client,
        connected=connected,
        stopping=stopping,
        changed=changed,
        follow_sessions=lambda: None,
        counters={"leader_changes": 0},
    )
    thread = threading.Thread(target=watch.run, name="sched-leader-watch", daemon=True)
    with caplog.at_level(logging.ERROR, logger="scheduler.replica.leader_watch"):
        thread.start()
        try:
            for count in (1, 2, 3):

                def past(seen: int = count) -> bool:
                    return len(passes) > seen

                wait_for(past, 10, message=f"pass {count + 1}")
                changed.set()  # the next pass now, not after the 2 s refresh interval
            assert thread.is_alive()
            assert "leader-watch: a pass failed" in caplog.text
            assert watch.leader() is None
        finally:
            stopping.set()
            changed.set()
            thread.join(5)
    assert not thread.is_alive()

"""The garbage collector's pauses (issue 29): overlapping pauses from several threads, the
collector running again when the last ends, and a collector the process had turned off left
off."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from scheduler.leader.lifecycle import collector_paused


@pytest.fixture(autouse=True)
def _collector_restored() -> Iterator[None]:
    was = gc.isenabled()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


def test_the_collector_runs_again_when_the_last_of_overlapping_pauses_ends() -> None:
    gc.enable()
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, bool] = {}

    def second() -> None:
        first_in.wait(10)
        with collector_paused():
            second_in.set()
            first_out.wait(10)
            seen["after the first ended"] = gc.isenabled()

    thread = threading.Thread(target=second)
    thread.start()
    with collector_paused():
        seen["in the first"] = gc.isenabled()
        first_in.set()
        assert second_in.wait(10)
    first_out.set()
    thread.join(10)
    assert not thread.is_alive()
    assert seen == {"in the first": False, "after the first ended": False}
    assert gc.isenabled()


def test_a_pause_ends_on_an_exception_too() -> None:
    gc.enable()
    with pytest.raises(RuntimeError), collector_paused():
        assert not gc.isenabled()
        raise RuntimeError("the round failed")
    assert gc.isenabled()


def test_a_collector_the_process_turned_off_stays_off() -> None:
    gc.disable()
    with collector_paused(), collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()

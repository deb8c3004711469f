"""The cron fires of one instant are accounted the fewest jobs first, one at a time, and a fire
that never takes its turn holds the others back only for the patience given."""

from __future__ import annotations

import threading

from scheduler.model.fire_turns import FireTurns
from tests.support.waiting import wait_for


def _fire(
    turns: FireTurns,
    fire: float,
    jobs: int,
    order: list[str],
    name: str,
    queued: threading.Barrier,
    before_take: threading.Event | None = None,
    taking: threading.Event | None = None,
) -> threading.Thread:
    """A thread that queues a fire, waits at `queued` (and for `before_take`), sets `taking`,
    takes its turn and notes its name in `order`."""

    def run() -> None:
        with turns.queued(fire, jobs) as take:
            queued.wait(10)
            if before_take is not None:
                before_take.wait(10)
            if taking is not None:
                taking.set()
            take()
            order.append(name)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _run(*fires: tuple[float, int, str], first_to_take: str) -> list[str]:
    """Every fire queued before any takes its turn; `first_to_take` asks for its turn before
    the others do. Returns the order the turns were had in."""
    turns = FireTurns(patience_s=30)
    order: list[str] = []
    queued = threading.Barrier(len(fires) + 1)
    asked = threading.Event()
    threads = [
        _fire(
            turns,
            fire,
            jobs,
            order,
            name,
            queued,
            before_take=None if name == first_to_take else asked,
            taking=asked if name == first_to_take else None,
        )
        for fire, jobs, name in fires
    ]
    queued.wait(10)
    for thread in threads:
        thread.join(10)
    assert not any(t.is_alive() for t in threads)
    return order


def test_the_smaller_fire_of_one_instant_goes_first_though_the_larger_asked_first() -> None:
    order = _run((100.0, 83, "large"), (100.0, 1, "small"), first_to_take="large")
    assert order == ["small", "large"]


def test_an_earlier_instant_goes_before_a_smaller_fire_of_a_later_one() -> None:
    order = _run((101.0, 1, "later"), (100.0, 500, "earlier"), first_to_take="later")
    assert order == ["earlier", "later"]


def test_fires_of_one_instant_and_size_go_in_the_order_they_were_queued() -> None:
    turns = FireTurns(patience_s=30)
    order: list[str] = []
    with turns.queued(100.0, 5) as take_first:
        second = _fire(turns, 100.0, 5, order, "second", threading.Barrier(1))
        take_first()
        order.append("first")
    second.join(10)
    assert order == ["first", "second"]


def test_a_fire_that_never_takes_its_turn_holds_the_others_back_for_the_patience_only() -> None:
    turns = FireTurns(patience_s=0.05)
    order: list[str] = []
    with turns.queued(100.0, 1):  # queued ahead, never taken
        large = _fire(turns, 100.0, 83, order, "large", threading.Barrier(1))
        wait_for(lambda: order == ["large"], 10, message="the large fire had its turn")
    large.join(10)
    assert not large.is_alive()

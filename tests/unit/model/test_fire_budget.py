"""The fire budget's token bucket and the shortest gap of a cron (issue 23), without I/O."""

from __future__ import annotations

import pytest

from scheduler.model.config import parse_cron
from scheduler.model.fires import FireBudget, shortest_gap

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def test_a_budget_grants_a_seconds_worth_at_once_then_its_rate() -> None:
    budget = FireBudget(10, now=T0)
    assert budget.take(25, T0) == 10  # the burst
    assert budget.take(5, T0) == 0
    assert budget.wait_s(5, T0) == pytest.approx(0.5)
    assert budget.take(5, T0 + 0.5) == 5
    assert budget.take(100, T0 + 100) == 10  # refills no further than a burst


def test_a_budget_below_one_a_second_still_grants_one_fire() -> None:
    budget = FireBudget(0.5, now=T0)
    assert budget.take(3, T0) == 1
    assert budget.take(1, T0 + 1) == 0
    assert budget.wait_s(3, T0 + 1) == pytest.approx(1.0)  # asks for one (the burst) at most
    assert budget.take(1, T0 + 2) == 1


def test_a_budget_needs_a_positive_rate() -> None:
    with pytest.raises(ValueError):
        FireBudget(0, now=T0)


@pytest.mark.parametrize(
    ("cron", "gap_s"),
    [
        ("* * * * * ?", 1.0),
        ("0/5 * * * * ?", 5.0),
        ("0 0 12 * * ?", 86400.0),
        ("0,1 0 * * * ?", 1.0),  # 1 s apart only once an hour
        ("58,59 59 23 * * ?", 1.0),  # once a day
        ("*/10 * * * *", 600.0),  # crontab: minutes
    ],
)
def test_the_shortest_gap_is_found_among_many_consecutive_fires(cron: str, gap_s: float) -> None:
    trigger = parse_cron(cron, "UTC").trigger()
    # Started right after the short gap, so that the first gaps are all long ones.
    assert shortest_gap(trigger, T0 + 2) == gap_s


def test_a_cron_that_fires_once_has_no_gap() -> None:
    trigger = parse_cron("0 0 0 1 1 ? 2030", "UTC").trigger()
    assert shortest_gap(trigger, T0) is None

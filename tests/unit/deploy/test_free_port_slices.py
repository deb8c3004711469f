"""Parallel test workers hand out test ports from parts of the range of their own, so a port one
worker handed out (its server not bound yet) is never handed out by another."""

from __future__ import annotations

from itertools import pairwise

import pytest

from deploy.zookeeper import _worker_slice


def test_each_worker_has_its_own_part_and_the_parts_do_not_overlap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "6")
    parts = []
    for index in range(6):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{index}")
        parts.append(_worker_slice(16384, 32768))
    assert parts[0][0] == 16384 and parts[-1][1] <= 32768
    assert all(a[1] <= b[0] for a, b in pairwise(parts))
    assert all(high - low >= 2000 for low, high in parts)


@pytest.mark.parametrize(
    ("worker", "count"), [("", ""), ("gw0", "1"), ("master", "6"), ("gw9", "6"), ("gwx", "6")]
)
def test_outside_xdist_or_with_odd_values_the_whole_range(
    monkeypatch: pytest.MonkeyPatch, worker: str, count: str
) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", count)
    assert _worker_slice(16384, 32768) == (16384, 32768)

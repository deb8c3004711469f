"""Fixtures: a stand-in process per test (free port, tmp work dir) and pymesos frameworks."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.mesosfw import Framework, RecordingScheduler, StandIn

# Short intervals keep the suite fast: offers every 0.1 s, executors killed 1 s after SHUTDOWN.
FAST = ("--allocation-interval-seconds", "0.1", "--executor-shutdown-grace-period-seconds", "1")

_running: list[StandIn] = []


@pytest.fixture
def make_standin(tmp_path: Path) -> Iterator[Callable[..., StandIn]]:
    """Start a stand-in with extra CLI args; all are stopped (and must exit 0) at teardown."""
    started: list[StandIn] = []

    def make(*args: str) -> StandIn:
        standin = StandIn(tmp_path / f"standin{len(started)}", *FAST, *args).start()
        started.append(standin)
        _running.append(standin)
        return standin

    yield make
    codes = []
    for standin in started:
        codes.append(standin.stop())
        _running.remove(standin)
    assert codes == [0] * len(started), "the stand-in did not exit cleanly on SIGTERM"


@pytest.fixture
def standin(make_standin: Callable[..., StandIn]) -> StandIn:
    return make_standin()


@pytest.fixture
def make_framework(standin: StandIn) -> Iterator[Callable[..., Framework]]:
    """Start in-process pymesos frameworks against `standin`; stopped at teardown."""
    frameworks: list[Framework] = []

    def make(scheduler: RecordingScheduler | None = None, **framework_info: Any) -> Framework:
        framework = Framework(standin.address, scheduler, **framework_info)
        frameworks.append(framework)
        return framework.start()

    yield make
    for framework in frameworks:
        framework.stop()


def pytest_exception_interact(node: pytest.Item, call: Any, report: Any) -> None:
    """On a failure, show the end of each running stand-in's log."""
    for standin in _running:
        print(f"\n--- {standin.log_path} (tail) ---\n{standin.log_tail()}")

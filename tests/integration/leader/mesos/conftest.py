"""Fixtures of the launcher's tests: a stand-in of two small agents, term stores with a fence,
the launcher's wake signal and the view of the queues that wakes it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduler.leader.lifecycle import WakeSignal
from scheduler.storage.queue_cache import QueueCache
from scheduler.storage.term_stores import TermStores
from tests.support.mesosfw import StandIn


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[StandIn]:
    # Two agents of 1 cpu (a run of 4 shards of 0.5 cpu needs both).
    mesos = StandIn(
        tmp_path / "mesos",
        *("--agents", "2", "--resources", "cpus:1;mem:1024;disk:1024;ports:[31000-31100]"),
        *("--allocation-interval-seconds", "0.1"),
    ).start()
    yield mesos
    mesos.stop()


@pytest.fixture
def wake() -> WakeSignal:
    """The signal the launcher's thread waits on."""
    return WakeSignal()


@pytest.fixture
def queues(stores: TermStores, wake: WakeSignal) -> Iterator[QueueCache]:
    """The term's view of the queues, as the term builds it: its changes wake the launcher,
    and (as on the ZooKeeper 3.6+ of a deployment) running tasks come by its recursive watch."""
    stores.registry.multi_read = True
    view = QueueCache(stores.registry, stores.config, on_change=wake.wake)
    yield view
    view.stop()

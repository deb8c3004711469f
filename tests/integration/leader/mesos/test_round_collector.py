"""A launch round of many units places, writes and launches them with the garbage collector
paused (issue 29: each collection during a 10,000-task round walked the round's objects again),
a small round does not (the collector must keep running between the rounds of a steady load),
and the collector runs again after it; against a real ZooKeeper and the Mesos stand-in."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest

from scheduler.leader import lifecycle
from scheduler.leader.lifecycle import WakeSignal
from scheduler.leader.mesos.driver import MesosDriver
from scheduler.leader.mesos.launcher import Launcher
from scheduler.storage.queue_cache import QueueCache
from scheduler.storage.term_stores import TermStores
from tests.integration.leader.mesos.helpers import (
    Acting,
    FrameworkIds,
    settings_for,
    store_script_job,
    wire_launcher,
)
from tests.support.mesosfw import StandIn
from tests.support.waiting import wait_for


def _job_like(stores: TermStores, name: str) -> None:
    """Another job of `store_script_job`'s app."""
    stored = stores.registry.get("/config/job/first")
    assert stored is not None
    data = json.loads(stored)
    stores.registry.create(f"/config/job/{name}", json.dumps({**data, "jobName": name}).encode())


def test_a_large_round_pauses_the_collector_a_small_one_does_not(
    standin: StandIn,
    stores: TermStores,
    queues: QueueCache,
    wake: WakeSignal,
    zk_namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lifecycle, "PAUSE_COLLECTOR_AT", 2)
    assert gc.isenabled()
    store_script_job(stores, tmp_path, "first", "true", cpuCount=0.1)
    for name in ("second", "third"):
        _job_like(stores, name)
    # Two runs pending before the launcher starts: its first round has two units.
    stores.ready.add_transient("first", misfire=True)
    stores.ready.add_transient("second", misfire=True)
    driver = MesosDriver(settings_for(standin, zk_namespace), FrameworkIds())
    launcher = Launcher(stores, Acting(), driver, queues, wake=wake)
    wire_launcher(launcher, driver, stores)
    # Listeners run inside the round: before its bookkeeping is written, after its ACCEPT.
    rounds: list[tuple[str, int, bool]] = []
    launcher.launching_listeners.append(
        lambda ids: rounds.append(("launching", len(ids), gc.isenabled()))
    )
    launcher.launch_listeners.append(
        lambda tasks: rounds.append(("launched", len(tasks), gc.isenabled()))
    )
    launcher.start()
    driver.start()
    try:
        wait_for(lambda: len(rounds) >= 2, 30, message="the first round's launch")
        assert rounds[:2] == [("launching", 2, False), ("launched", 2, False)]
        wait_for(gc.isenabled, 10, message="the collector running again after the round")
        stores.ready.add_transient("third", misfire=True)
        wait_for(lambda: len(rounds) >= 4, 30, message="the second round's launch")
        assert rounds[2:4] == [("launching", 1, True), ("launched", 1, True)]
    finally:
        launcher.stop()
        driver.stop()
    wait_for(gc.isenabled, 10, message="the collector running after the launcher stopped")

"""A pause that comes while the connect thread has not yet started its pymesos driver (the real
driver, the Mesos stand-in): the driver must not start behind the pause's back. pymesos's
`start` undoes a `stop` that came before it; the driver then ran unseen, and with the next
resume's driver the two failed each other over without end (a frozen ZooKeeper member, twice
in a row, in CI)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from pymesos import MesosSchedulerDriver

from scheduler.leader.mesos.driver import DriverHandlers, MesosDriver
from tests.integration.leader.mesos.helpers import FrameworkIds, settings_for
from tests.support.mesosfw import StandIn
from tests.support.waiting import wait_for


def _active(standin: StandIn) -> list[str]:
    return [f["id"] for f in standin.state()["frameworks"] if f.get("active")]


def test_a_driver_paused_before_its_start_does_not_run_on(
    standin: StandIn, zk_namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = threading.Event()
    started: list[Any] = []
    real_start = MesosSchedulerDriver.start

    def held_start(self: Any) -> None:
        gate.wait(10)  # the connect thread gets here only after the pause
        real_start(self)
        started.append(self)

    monkeypatch.setattr(MesosSchedulerDriver, "start", held_start)
    driver = MesosDriver(settings_for(standin, zk_namespace), FrameworkIds())
    driver.bind(
        DriverHandlers(
            on_offers=lambda offers: None,
            on_rescind=lambda offer_id: None,
            on_status=lambda status: True,
            on_connected=lambda: None,
            on_disconnected=lambda: None,
        )
    )
    driver.start()
    try:
        wait_for(lambda: driver.status == "connecting", 10, message="the connect thread")
        driver.pause()
        gate.set()
        wait_for(lambda: started, 10, message="the held start ran")
        # Stopped once its start was done: it never stays subscribed.
        wait_for(lambda: not _active(standin), 10, message="no framework subscribed")
        assert not driver.connected.is_set()
        monkeypatch.setattr(MesosSchedulerDriver, "start", real_start)
        driver.resume()  # the next driver subscribes, alone
        wait_for(driver.connected.is_set, 20, message="connected after the resume")
        wait_for(lambda: len(_active(standin)) == 1, 10, message="one framework subscribed")
    finally:
        gate.set()
        driver.stop()

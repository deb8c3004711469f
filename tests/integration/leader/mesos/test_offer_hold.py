"""Offers held around a cron fire and declined otherwise (real driver and stand-in)."""

from __future__ import annotations

import time

from scheduler.leader.lifecycle import WakeSignal
from scheduler.leader.mesos.driver import DriverHandlers, MesosDriver
from scheduler.leader.mesos.launcher import Launcher
from scheduler.leader.mesos.offers import FIRE_AHEAD_S
from scheduler.storage.queue_cache import QueueCache
from scheduler.storage.term_stores import TermStores
from tests.integration.leader.mesos.helpers import Acting, FrameworkIds, settings_for
from tests.support.mesosfw import StandIn
from tests.support.waiting import wait_for


def test_offers_are_held_just_before_a_fire_and_let_go_after_it(
    standin: StandIn,
    stores: TermStores,
    queues: QueueCache,
    wake: WakeSignal,
    zk_namespace: str,
) -> None:
    driver = MesosDriver(settings_for(standin, zk_namespace), FrameworkIds())
    fire_at = [time.time() + 3600.0]
    launcher = Launcher(stores, Acting(), driver, queues, wake=wake, next_fire=lambda: fire_at[0])
    driver.bind(
        DriverHandlers(
            on_offers=launcher.add_offers,
            on_rescind=launcher.rescind,
            on_status=lambda _status: True,
            on_connected=launcher.on_connected,
            on_disconnected=launcher.drop_offers,
        )
    )
    launcher.start()
    driver.start()
    try:

        def outstanding() -> int:
            """Offers the master has out to the framework (held by the launcher)."""
            return sum(len(f["offers"]) for f in standin.state()["frameworks"])

        def none_held() -> bool:
            return launcher.held_offers() == 0 and outstanding() == 0

        # No work and no fire near: what is offered is declined (with a 30 s filter).
        wait_for(lambda: launcher.declined > 0 and none_held(), 20, message="offers declined")
        # A fire due within FIRE_AHEAD_S: offers are revived (the filter cleared) and held...
        fire_at[0] = time.time() + FIRE_AHEAD_S / 2
        wait_for(
            lambda: launcher.held_offers() == 2 and outstanding() == 2,
            10,
            message="both agents' offers held",
        )
        # ...and let go once it has passed without work.
        fire_at[0] = time.time() + 3600.0
        wait_for(none_held, 10, message="offers declined after the fire")
    finally:
        driver.stop()
        launcher.stop()

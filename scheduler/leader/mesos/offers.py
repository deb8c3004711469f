"""The launcher's offers: those it holds between rounds, whether Mesos should send more, and when
they are held around a cron fire.

- `HeldOffers`: the offers received and not used yet. The driver's thread adds, rescinds and
  drops them; the launcher's thread takes them all at the start of a placing round.
- `OfferFlow`: suppress, revive and decline through the `OfferDriver`. With no work the
  framework suppresses offers (the original hoarded them and starved other frameworks) and
  revives when work comes back, after a (re)connection and after an agent was lost (refuse
  filters this framework's declines installed may hide the other agents' resources).
- `FireHold`: offers are revived `FIRE_AHEAD_S` before the next cron fire and held until
  `FIRE_GRACE_S` after it (its runs are queued by then), so that they launch at once instead of
  waiting for a revive and an offer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from enum import Enum
from typing import Any, Protocol

from scheduler.leader.mesos.launch_round import scalar

log = logging.getLogger(__name__)

IDLE_REFUSE_S = 30.0
BUSY_REFUSE_S = 1.0
FIRE_AHEAD_S = 1.0
FIRE_GRACE_S = 1.0
_QUIET_LOG_S = 60.0
_FIRE_READ_EVERY_S = 0.25


class AcceptOutcome(Enum):
    """What came of an ACCEPT."""

    LAUNCHED = "launched"
    """The master took it (202): its tasks are Mesos's now (an invalid one comes back as a
    status update)."""
    REFUSED = "refused"
    """Not taken: the master refused the call, or it was never sent."""
    UNCONFIRMED = "unconfirmed"
    """Sent, and no answer came (a timeout, a connection broken after the write): the master
    may have taken it or not, and only reconciliation can tell."""


class OfferDriver(Protocol):
    """What the launcher asks of the term's Mesos driver (`MesosDriver` is one). Each call
    but `accept` returns False, having logged why, when it did not reach the master."""

    @property
    def connected(self) -> threading.Event:
        """Set while subscribed to a master."""
        ...

    def accept(
        self, offer_ids: list[str], tasks: list[dict[str, Any]], refuse_s: float
    ) -> AcceptOutcome:
        """Launch `tasks` on the offers of one agent, declining what they leave (logged
        unless LAUNCHED)."""
        ...

    def decline(self, offer_ids: list[str], refuse_s: float) -> bool:
        """Decline offers, not offered again for `refuse_s`."""
        ...

    def revive(self) -> bool:
        """Ask for offers again after `suppress`."""
        ...

    def suppress(self) -> bool:
        """Ask for no more offers until `revive`."""
        ...

    def kill(self, task_id: str) -> bool:
        """Ask Mesos to kill a task."""
        ...

    def framework_info(self) -> dict[str, Any]:
        """The `FrameworkInfo` the driver subscribes with (its `id` once Mesos assigned one)."""
        ...

    def agent_totals(self, timeout_s: float = 5.0) -> dict[str, tuple[float, float]]:
        """Each agent's total (cpus, mem MB) from the master; raises OSError or ValueError."""
        ...


class HeldOffers:
    """The offers held until a round takes them (any thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offers: dict[str, dict[str, Any]] = {}

    def __len__(self) -> int:
        with self._lock:
            return len(self._offers)

    def add(self, offers: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
        """Hold `offers`; returns what each agent offered in them together (cpus, mem MB)."""
        offered: dict[str, tuple[float, float]] = {}
        with self._lock:
            for offer in offers:
                self._offers[offer["id"]["value"]] = offer
                cpus, mem = offered.get(offer["agent_id"]["value"], (0.0, 0.0))
                offered[offer["agent_id"]["value"]] = (
                    cpus + scalar(offer, "cpus"),
                    mem + scalar(offer, "mem"),
                )
        return offered

    def rescind(self, offer_id: str) -> None:
        with self._lock:
            self._offers.pop(offer_id, None)

    def drop_agent(self, agent_id: str) -> None:
        """Forget the offers of an agent that is gone."""
        with self._lock:
            for offer_id in [
                o for o, offer in self._offers.items() if offer["agent_id"]["value"] == agent_id
            ]:
                del self._offers[offer_id]

    def clear(self) -> None:
        with self._lock:
            self._offers.clear()

    def agents(self) -> list[str]:
        """The agents with an offer held."""
        with self._lock:
            return list({o["agent_id"]["value"] for o in self._offers.values()})

    def take(self) -> list[dict[str, Any]]:
        """Every offer held, no longer held (the launcher's thread)."""
        with self._lock:
            offers = list(self._offers.values())
            self._offers.clear()
        return offers


class OfferFlow:
    """Whether Mesos sends this framework offers, and the offers it gives back.

    The flags are the launcher thread's, but for `reset` and `revive_later`, which the driver's
    thread calls (a plain bool written whole: the next round sees it).
    """

    def __init__(self, driver: OfferDriver) -> None:
        self._driver = driver
        self._suppressed = False
        self._revive_needed = False
        self._quiet_until = -1e18
        # Offers declined this term, for /metrics.
        self.declined = 0

    def reset(self) -> None:
        """The connection to the master is new or gone: nothing is suppressed there."""
        self._suppressed = False

    def revive_later(self) -> None:
        """Revive once at the next round with work: refuse filters may hide resources."""
        self._revive_needed = True

    def decline(self, offer_ids: list[str], refuse_s: float) -> None:
        """Give `offer_ids` back, not offered again for `refuse_s`."""
        if offer_ids and self._driver.decline(offer_ids, refuse_s):
            self.declined += len(offer_ids)

    def revive_for_fire(self) -> None:
        """A cron fire is near: have offers come (if suppressed, or filtered)."""
        if (self._suppressed or self._revive_needed) and self._driver.revive():
            self._suppressed = self._revive_needed = False
            log.debug("launcher: offers revived for the next fire")

    def revive_for_work(self) -> None:
        """Work is pending: have offers come (if suppressed, or filtered)."""
        if (self._suppressed or self._revive_needed) and self._driver.revive():
            self._suppressed = self._revive_needed = False
            log.info("launcher: work pending; offers revived")

    def idle(self, held: list[dict[str, Any]]) -> None:
        """No work that can be placed: decline what is held for a long while and suppress."""
        self.decline([o["id"]["value"] for o in held], IDLE_REFUSE_S)
        if not self._suppressed and self._driver.suppress():
            self._suppressed = True
            # At INFO once a minute at most: with frequent fires this follows each one.
            now = time.monotonic()
            loud = now >= self._quiet_until
            if loud:
                self._quiet_until = now + _QUIET_LOG_S
            log.log(
                logging.INFO if loud else logging.DEBUG,
                "launcher: no pending work that can be placed; offers suppressed",
            )


class FireHold:
    """When offers are held for a cron fire, and how long the launcher's thread may sleep.

    `next_fire` (from the producer; any thread may call it, it must not block) says when the
    next fire is due (epoch seconds; None: none). It is asked at most 4 times a second.
    """

    def __init__(self, next_fire: Callable[[], float | None] | None) -> None:
        self._source = next_fire
        self._next_at: float | None = None
        self._read_at = -1e18
        self._hold_until = 0.0

    def _next_fire(self) -> float | None:
        source = self._source
        if source is None:
            return None
        now = time.monotonic()
        due = self._next_at is not None and self._next_at <= time.time()
        if due or now - self._read_at >= _FIRE_READ_EVERY_S:
            try:
                self._next_at = source()
            except Exception:
                log.exception("launcher: cannot tell when the next fire is")
                self._next_at = None
            self._read_at = now
        return self._next_at

    def holding(self) -> bool:
        """Whether offers are held now: a cron fire is due within `FIRE_AHEAD_S`, or was due
        less than `FIRE_GRACE_S` ago."""
        now = time.time()
        when = self._next_fire()
        if when is not None and when - now <= FIRE_AHEAD_S:
            self._hold_until = max(self._hold_until, when + FIRE_GRACE_S)
        return now < self._hold_until

    def idle_wait_s(self) -> float:
        """How long the thread sleeps without a wake: a second, or less to revive in time
        for the next fire or to decline what it held once the fire has passed."""
        now = time.time()
        if now < self._hold_until:
            return min(1.0, max(0.01, self._hold_until - now))
        when = self._next_fire()
        if when is None:
            return 1.0
        return min(1.0, max(0.01, when - FIRE_AHEAD_S - now))

"""Outstanding offers and per-framework offer filters (the allocator's memory).

A filter installed by DECLINE or by an ACCEPT that left resources unused refuses, for
`refuse_seconds`, any offer on that agent whose resources are a subset of the filtered ones, as
Mesos's hierarchical allocator does: once more resources are free there, the framework is
offered them again.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable
from dataclasses import dataclass

from .resources import Resources

DEFAULT_REFUSE_S = 5.0
MAX_REFUSE_S = 365 * 24 * 3600.0


@dataclass(frozen=True)
class Offer:
    id: str
    framework_id: str
    agent_id: str
    resources: Resources
    role: str


@dataclass(frozen=True)
class OfferFilter:
    agent_id: str
    resources: Resources
    expires_at: float  # time.monotonic()


class OfferBook:
    """Offers out to frameworks and the filters frameworks installed."""

    def __init__(self, master_id: str) -> None:
        self._master_id = master_id
        self._seq = itertools.count(1)
        self.offers: dict[str, Offer] = {}
        self._filters: dict[str, list[OfferFilter]] = {}

    def create(self, framework_id: str, agent_id: str, resources: Resources, role: str) -> Offer:
        offer = Offer(
            f"{self._master_id}-O{next(self._seq)}", framework_id, agent_id, resources, role
        )
        self.offers[offer.id] = offer
        return offer

    def take(self, offer_id: str) -> Offer | None:
        return self.offers.pop(offer_id, None)

    def offered_on(self, agent_id: str) -> Resources:
        total = Resources()
        for offer in self.offers.values():
            if offer.agent_id == agent_id:
                total = total + offer.resources
        return total

    def of_framework(self, framework_id: str) -> list[Offer]:
        return [o for o in self.offers.values() if o.framework_id == framework_id]

    def remove_where(
        self, *, framework_id: str | None = None, agent_id: str | None = None
    ) -> list[Offer]:
        gone = [
            o
            for o in self.offers.values()
            if (framework_id is None or o.framework_id == framework_id)
            and (agent_id is None or o.agent_id == agent_id)
        ]
        for offer in gone:
            del self.offers[offer.id]
        return gone

    def add_filter(
        self, framework_id: str, agent_id: str, resources: Resources, refuse_s: float | None
    ) -> None:
        """Refuse these resources on this agent for `refuse_s` (default 5 s, capped at a year)."""
        seconds = DEFAULT_REFUSE_S if refuse_s is None else min(refuse_s, MAX_REFUSE_S)
        if seconds <= 0 or resources.is_empty():
            return
        self._filters.setdefault(framework_id, []).append(
            OfferFilter(agent_id, resources, time.monotonic() + seconds)
        )

    def clear_filters(self, framework_id: str) -> None:
        self._filters.pop(framework_id, None)

    def filtered(self, framework_id: str, agent_id: str, resources: Resources) -> bool:
        now = time.monotonic()
        live = [f for f in self._filters.get(framework_id, []) if f.expires_at > now]
        self._filters[framework_id] = live
        return any(f.agent_id == agent_id and f.resources.contains(resources) for f in live)

    def forget(self, framework_ids: Iterable[str]) -> None:
        for framework_id in framework_ids:
            self._filters.pop(framework_id, None)

"""The term's concurrency pools (issue 28) at `layout.POOLS/{name}` (`PoolConfig.to_json`): a
`NamedRecords` store (read once per term, kept by its own fenced writes; `max_pools`). The
launcher asks `sizes()` every round, so that answer costs no ZooKeeper request.

The store also holds the launcher's last counts of each pool (`note_counts`, `counts`): what
`GET /api/pool/{name}` and `/metrics` show of its use and its waiting units.

Thread-safe: the API's threads and the launcher's share one store.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from scheduler.model.pools import PoolConfig, PoolCounts
from scheduler.storage.layout import POOLS
from scheduler.storage.named_records import NamedRecords
from scheduler.storage.registry import Registry
from scheduler.storage.transactions import Fence

__all__ = ["PoolStore"]


class PoolStore(NamedRecords[PoolConfig]):
    """The pools of one term: read once, kept by this store's own (fenced) writes."""

    def __init__(self, registry: Registry, fence: Fence | None, max_pools: int) -> None:
        super().__init__(
            registry,
            fence,
            kind="pool",
            folder=POOLS,
            quota=("max_pools", max_pools),
            name_of=lambda pool: pool.pool_name,
            to_json=lambda pool: pool.to_json(),
            from_json=lambda data: PoolConfig.from_json(data, strict=False),
        )
        self._counts: Mapping[str, PoolCounts] = MappingProxyType({})

    def sizes(self) -> dict[str, int]:
        """Pool -> size (slots), every pool."""
        with self._lock:
            return {name: pool.size for name, pool in self._loaded().items()}

    # -- the launcher's counts ---------------------------------------------------------------

    def note_counts(self, counts: Mapping[str, PoolCounts]) -> None:
        """The launcher's counts of its last round (any thread)."""
        self._counts = MappingProxyType(dict(counts))

    def counts(self, name: str) -> PoolCounts:
        """The pool's counts as the launcher's last round found them; zeros (with the stored
        size, 0 when there is no such pool) when none were noted."""
        found = self._counts.get(name)
        if found is not None:
            return found
        pool = self.get(name)
        return PoolCounts(name, pool.size if pool is not None else 0, 0, 0)

    def all_counts(self) -> dict[str, PoolCounts]:
        """Every pool's counts (zeros for a pool the launcher has not counted yet). Never reads
        ZooKeeper (a scrape calls it): before the pools are read, only the noted counts."""
        noted = self._counts
        with self._lock:
            if self._records is None:
                return dict(noted)
        return {
            pool.pool_name: noted.get(pool.pool_name) or PoolCounts(pool.pool_name, pool.size, 0, 0)
            for pool in self.all()
        }

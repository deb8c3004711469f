"""The term's concurrency pools (issue 28) at `layout.POOLS/{name}` (`PoolConfig.to_json`).

Only the leader writes pools and a store belongs to one term, so it reads every pool once on
first use (one pipelined read of the folder's nodes) and then keeps its copy by its own writes:
no watch, no re-read. The launcher asks `sizes()` every round, so that answer costs no
ZooKeeper request. Writes are fenced (a deposed leader cannot write).

The store also holds the launcher's last counts of each pool (`note_counts`, `counts`): what
`GET /api/pool/{name}` and `/metrics` show of its use and its waiting units.

Thread-safe: the API's threads and the launcher's share one store.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from types import MappingProxyType

from scheduler.model.errors import Conflict, InvalidRequest, NotFound, QuotaExceeded
from scheduler.model.pools import PoolConfig, PoolCounts
from scheduler.storage.layout import POOLS, pool_path
from scheduler.storage.registry import Registry
from scheduler.storage.transactions import Fence, FencedWriter

__all__ = ["PoolStore"]

log = logging.getLogger(__name__)


class PoolStore:
    """The pools of one term: read once, kept by this store's own (fenced) writes."""

    def __init__(self, registry: Registry, fence: Fence | None, max_pools: int) -> None:
        self._registry = registry
        self._fence = fence
        self.max_pools = max_pools
        self._lock = threading.RLock()
        self._pools: dict[str, PoolConfig] | None = None  # None: not read yet
        self._counts: Mapping[str, PoolCounts] = MappingProxyType({})
        self.listeners: list[Callable[[], None]] = []
        """Called after each change of a pool here (save, delete), on the writer's thread,
        outside the store's lock; must not block."""

    # -- reads -------------------------------------------------------------------------------

    def _loaded(self) -> dict[str, PoolConfig]:
        """The pools, read on first use (under the lock). RegistryError when ZooKeeper fails
        (the next call reads again)."""
        with self._lock:
            if self._pools is None:
                names = self._registry.children(POOLS)
                got = self._registry.get_many([pool_path(name) for name in names])
                pools: dict[str, PoolConfig] = {}
                for name in names:
                    found = got.get(pool_path(name))
                    if found is None:
                        continue  # deleted between the list and the read
                    pool = _decode(name, found[0])
                    if pool is not None:
                        pools[name] = pool
                self._pools = pools
            return self._pools

    def get(self, name: str) -> PoolConfig | None:
        """The pool `name`, or None when there is none."""
        with self._lock:
            return self._loaded().get(name)

    def sizes(self) -> dict[str, int]:
        """Pool -> size (slots), every pool."""
        with self._lock:
            return {name: pool.size for name, pool in self._loaded().items()}

    def names(self) -> list[str]:
        """The pools' names, sorted."""
        with self._lock:
            return sorted(self._loaded())

    def all(self) -> list[PoolConfig]:
        """Every pool, by name."""
        with self._lock:
            pools = self._loaded()
            return [pools[name] for name in sorted(pools)]

    # -- writes (fenced) ---------------------------------------------------------------------

    def _writer(self) -> FencedWriter:
        if self._fence is None:
            raise RuntimeError("read-only pool store")
        return FencedWriter(self._registry, self._fence)

    def save(self, pool: PoolConfig, *, create: bool) -> None:
        """Create (`create`) or update the pool. Raises Conflict (it exists, on a create),
        NotFound (it does not, on an update), QuotaExceeded (`max_pools` pools exist already),
        NotLeader / RegistryError from the write."""
        with self._lock:
            pools = self._loaded()
            data = json.dumps(pool.to_json()).encode()
            path = pool_path(pool.pool_name)
            if create:
                if pool.pool_name in pools:
                    raise Conflict(f"pool '{pool.pool_name}' already exists")
                if len(pools) >= self.max_pools:
                    raise QuotaExceeded(
                        "max_pools", f"at most {self.max_pools} pools may exist (max_pools)"
                    )
                try:
                    self._writer().create(path, data)
                except Conflict as exc:
                    raise Conflict(f"pool '{pool.pool_name}' already exists") from exc
            else:
                if pool.pool_name not in pools:
                    raise NotFound(f"pool '{pool.pool_name}' does not exist")
                try:
                    self._writer().set(path, data)
                except NotFound as exc:
                    pools.pop(pool.pool_name, None)
                    raise NotFound(f"pool '{pool.pool_name}' does not exist") from exc
            pools[pool.pool_name] = pool
        self._changed()

    def delete(self, name: str) -> bool:
        """Delete the pool; False when there was none. NotLeader / RegistryError from the
        write."""
        with self._lock:
            pools = self._loaded()
            if name not in pools:
                return False
            self._writer().delete(pool_path(name), recursive=False)
            del pools[name]
        self._changed()
        return True

    def _changed(self) -> None:
        for listener in list(self.listeners):
            try:
                listener()
            except Exception:
                log.exception("pools: a change listener failed")

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
            if self._pools is None:
                return dict(noted)
        return {
            pool.pool_name: noted.get(pool.pool_name) or PoolCounts(pool.pool_name, pool.size, 0, 0)
            for pool in self.all()
        }


def _decode(name: str, data: bytes) -> PoolConfig | None:
    """A stored pool; None (logged) when it cannot be read, so that one bad node does not
    hide the others."""
    try:
        pool = PoolConfig.from_json(json.loads(data.decode("utf-8")), strict=False)
    except (UnicodeDecodeError, ValueError, InvalidRequest) as exc:
        log.warning("pools: skipping stored pool %s: cannot be read (%s)", name, exc)
        return None
    if pool.pool_name != name:
        log.warning("pools: skipping stored pool %s: it names %s", name, pool.pool_name)
        return None
    return pool

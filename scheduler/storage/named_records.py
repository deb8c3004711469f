"""One term's records of one kind, each at `{folder}/{name}` as JSON: read once, kept by the
store's own fenced writes (issue 28's calendars and pools).

Only the leader writes such records and a store belongs to one term, so it reads every record
once on first use (one pipelined read of the folder's nodes) and then keeps its copy by its own
writes: no watch, no re-read, and the hot paths (the producer's calendars at each fire, the
launcher's pool sizes each round) cost no ZooKeeper request. A stored record that cannot be
read, or that names another record, is logged and left out, so that one bad node does not hide
the others. Writes are fenced (a deposed leader cannot write), bounded by a quota and by the
stored size, and tell the store's `listeners` after each change.

Thread-safe: the API's threads and the leader's components share one store.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from scheduler.model.config._wire import STORED_MAX_BYTES
from scheduler.model.errors import Conflict, InvalidRequest, NotFound, QuotaExceeded, TooLarge
from scheduler.storage.registry import Registry
from scheduler.storage.transactions import Fence, FencedWriter

__all__ = ["NamedRecords"]

log = logging.getLogger(__name__)

_R = TypeVar("_R")


class NamedRecords(Generic[_R]):
    """The records of one kind (`kind`: "calendar", "pool") of one term."""

    def __init__(
        self,
        registry: Registry,
        fence: Fence | None,
        *,
        kind: str,
        folder: str,
        quota: tuple[str, int],
        name_of: Callable[[_R], str],
        to_json: Callable[[_R], object],
        from_json: Callable[[object], _R],
    ) -> None:
        """`quota`: (the setting's name, how many records may exist). `from_json` reads a
        stored record's decoded JSON (raising ValueError, TypeError, AttributeError or
        InvalidRequest for one it cannot read)."""
        self._registry = registry
        self._fence = fence
        self._kind = kind
        self._folder = folder
        self.quota_setting, self.most = quota
        """The setting that bounds how many records may exist, and its value."""
        self._name_of = name_of
        self._to_json = to_json
        self._from_json = from_json
        self._lock = threading.RLock()
        self._records: dict[str, _R] | None = None  # None: not read yet
        self.listeners: list[Callable[[], None]] = []
        """Called after each change of a record here (save, delete), on the writer's thread,
        outside the store's lock; must not block."""

    def _path(self, name: str) -> str:
        return f"{self._folder}/{name}"

    # -- reads -------------------------------------------------------------------------------

    def _loaded(self) -> dict[str, _R]:
        """The records, read on first use (under the lock). RegistryError when ZooKeeper
        fails (the next call reads again)."""
        with self._lock:
            if self._records is None:
                names = self._registry.children(self._folder)
                got = self._registry.get_many([self._path(name) for name in names])
                records: dict[str, _R] = {}
                for name in names:
                    found = got.get(self._path(name))
                    if found is None:
                        continue  # deleted between the list and the read
                    record = self._decode(name, found[0])
                    if record is not None:
                        records[name] = record
                self._records = records
                log.info("%ss: %d read", self._kind, len(records))
            return self._records

    def _decode(self, name: str, data: bytes) -> _R | None:
        """A stored record; None (logged) when it cannot be read or names another."""
        try:
            record = self._from_json(json.loads(data.decode("utf-8")))
        except (UnicodeDecodeError, ValueError, AttributeError, TypeError, InvalidRequest) as exc:
            log.warning("%ss: skipping stored %s %s: cannot be read (%s)", *self._kinds(name), exc)
            return None
        if self._name_of(record) != name:
            log.warning(
                "%ss: skipping stored %s %s: it names %s",
                *self._kinds(name),
                self._name_of(record),
            )
            return None
        return record

    def _kinds(self, name: str) -> tuple[str, str, str]:
        return self._kind, self._kind, name

    def get(self, name: str) -> _R | None:
        """The record `name`, or None when there is none."""
        with self._lock:
            return self._loaded().get(name)

    def names(self) -> list[str]:
        """The records' names, sorted."""
        with self._lock:
            return sorted(self._loaded())

    def all(self) -> list[_R]:
        """Every record, by name."""
        with self._lock:
            records = self._loaded()
            return [records[name] for name in sorted(records)]

    # -- writes (fenced) ---------------------------------------------------------------------

    def _writer(self) -> FencedWriter:
        if self._fence is None:
            raise RuntimeError(f"read-only {self._kind} store")
        return FencedWriter(self._registry, self._fence)

    def save(self, record: _R, *, create: bool) -> None:
        """Create (`create`) or update the record. Raises Conflict (it exists, on a create),
        NotFound (it does not, on an update), QuotaExceeded (the quota's count exists already,
        on a create), TooLarge (its JSON over the stored size), NotLeader / RegistryError from
        the write."""
        name, kind = self._name_of(record), self._kind
        data = json.dumps(self._to_json(record), separators=(",", ":")).encode()
        if len(data) > STORED_MAX_BYTES:
            raise TooLarge(
                "max_job_bytes",
                f"{kind} '{name}' is {len(data)} bytes as JSON; at most {STORED_MAX_BYTES}",
            )
        with self._lock:
            records = self._loaded()
            path = self._path(name)
            if create:
                if name in records:
                    raise Conflict(f"{kind} '{name}' already exists")
                setting, most = self.quota_setting, self.most
                if len(records) >= most:
                    raise QuotaExceeded(setting, f"at most {most} {kind}s may exist ({setting})")
                try:
                    self._writer().create(path, data)
                except Conflict as exc:
                    raise Conflict(f"{kind} '{name}' already exists") from exc
            else:
                if name not in records:
                    raise NotFound(f"{kind} '{name}' does not exist")
                try:
                    self._writer().set(path, data)
                except NotFound as exc:
                    records.pop(name, None)
                    raise NotFound(f"{kind} '{name}' does not exist") from exc
            records[name] = record
        log.info("%ss: %s %s", kind, name, "created" if create else "updated")
        self._changed()

    def delete(self, name: str) -> bool:
        """Delete the record (whoever refers to it: the API asks first); False when there was
        none. NotLeader / RegistryError from the write."""
        with self._lock:
            records = self._loaded()
            if name not in records:
                return False
            self._writer().delete(self._path(name), recursive=False)
            del records[name]
        log.info("%ss: %s deleted", self._kind, name)
        self._changed()
        return True

    def _changed(self) -> None:
        for listener in list(self.listeners):
            try:
                listener()
            except Exception:
                log.exception("%ss: a change listener failed", self._kind)

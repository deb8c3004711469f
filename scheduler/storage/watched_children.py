"""`WatchedChildren`: one folder's child names, read with a child watch and answered from memory
while that watch is set (issue 29: listing 100,000 jobs read all their names, 65 ms a page).

kazoo takes a watch off on the thread that reads the connection as soon as its event arrives,
before it reads any later answer (`Registry.child_watch_set`), and ZooKeeper sends a change's
event before any later answer on the session; so while the watch of the read that gave the
names is set, a read now would answer the same names. One read at a time, under a lock, so an
older read's answer never lands on a newer one's. Writers in this process (`ConfigStore`) also
`forget` after each write, not leaning on how kazoo orders the events of the writer's own
session. Any thread.
"""

from __future__ import annotations

import threading
from typing import Any

from scheduler.storage.registry import Registry

__all__ = ["WatchedChildren"]


class WatchedChildren:
    """The sorted child names of `path`, kept while their read's child watch is set."""

    def __init__(self, registry: Registry, path: str) -> None:
        self._registry = registry
        self._path = path
        self._lock = threading.Lock()  # guards _names
        self._read_lock = threading.Lock()  # one read at a time, stored before the next
        self._names: tuple[str, ...] | None = None
        self.reads = 0
        """Reads of the names so far: what keeping them costs (tests and benchmarks)."""

    def names(self) -> tuple[str, ...]:
        """The child names, sorted (the folder is created when missing). RegistryError when
        ZooKeeper fails or does not answer."""
        known = self._known()
        if known is not None:
            return known
        with self._read_lock:
            known = self._known()  # a read that ended while this one waited may serve
            if known is not None:
                return known
            names = tuple(self._registry.watch_children(self._path, self._on_event))
            with self._lock:
                self.reads += 1
                self._names = names
            return names

    def forget(self) -> None:
        """This process changed the children (or tried to): read them again when next asked."""
        with self._lock:
            self._names = None

    def _known(self) -> tuple[str, ...] | None:
        with self._lock:
            names = self._names
        if names is not None and self._registry.child_watch_set(self._path, self._on_event):
            return names
        return None

    def _on_event(self, _event: Any) -> None:
        # kazoo's thread: only drop the copy (the watch being gone already makes it unused).
        self.forget()

"""What the view of the queues learns between two syncs: watches fired, and writers' notes.

Two kinds of news reach a `QueueCache` from other threads, and both wait here until its next
`sync()` takes them (`take`) and applies them under the view's own lock:
- kazoo's watches (on kazoo's thread): the path whose children or data changed, or, for an
  event of type NONE (connection lost, new session: kazoo dropped every watch), that
  everything must be read again (`stale`); and a persistent recursive watch's nodes created
  and deleted, in order (`on_node`);
- the writers' notes protocol (the fire ledger's and the launcher's threads): a writer here
  says which ready nodes it is writing (`expect_ready`: not to be read back when their watches
  fire), what it wrote (`note_ready`: count and version, known without a read), what it sent
  and has no answer for yet (`note_pending`: the count with what a take of it requires), that
  such a write was applied (`drop_requires`), or that an outcome is unknown (`invalidate`:
  read it again).

Thread-safe: one lock, held briefly and never across a ZooKeeper request. `on_change` is
called after each watch and each pending note, outside the lock (`on_node_change`, when given,
instead of it after a recursive watch's event); neither may block.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from scheduler.storage.layout import READY

__all__ = ["QueueInbox", "QueueNews"]


@dataclass
class QueueNews:
    """What `QueueInbox.take` hands the view: everything since the previous take."""

    stale: bool
    """Read everything again (a new view, a dropped watch, a failed sync, `invalidate()`)."""
    children: set[str] = field(default_factory=set)
    """Paths whose children changed (namespace-relative)."""
    data: set[str] = field(default_factory=set)
    """Paths whose data changed (namespace-relative)."""
    notes: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Job -> (pending runs, version) of its ready node as written here (count 0: deleted)."""
    requires: dict[str, tuple[str, int]] = field(default_factory=dict)
    """Job -> (path, version) a noted count requires (`note_pending`)."""
    expected: set[str] = field(default_factory=set)
    """Jobs whose ready nodes a writer here is writing now (not to be read; still expected
    after the take, until noted or invalidated)."""
    nodes: list[tuple[bool, str]] = field(default_factory=list)
    """Nodes created (True) or deleted (False) below a persistently watched path, in the order
    ZooKeeper made the changes (namespace-relative)."""


class QueueInbox:
    """Watch events and writers' notes, collected (any thread) until the view takes them."""

    def __init__(
        self,
        root: str,
        on_change: Callable[[], None],
        on_node_change: Callable[[], None] | None = None,
    ) -> None:
        self._root = root
        """The namespace's absolute path, cut from the paths of watch events."""
        self._on_change = on_change
        self._on_node_change = on_node_change or on_change
        self._lock = threading.Lock()
        self._stale = True
        self._children: set[str] = set()
        self._data: set[str] = set()
        self._notes: dict[str, tuple[int, int]] = {}
        self._requires: dict[str, tuple[str, int]] = {}
        self._expected: set[str] = set()
        self._nodes: list[tuple[bool, str]] = []
        self._stopped = False

    # -- watches (kazoo's thread): record and return -------------------------------------------

    def on_children(self, event: Any) -> None:
        """A child watch fired."""
        self._mark(event, self._children)

    def on_data(self, event: Any) -> None:
        """A data watch fired."""
        self._mark(event, self._data)

    def on_node(self, event: Any) -> None:
        """A persistent recursive watch's event: a node created or deleted below its path is
        kept, in order (a change of a node's data is of no interest here)."""
        kind, path = getattr(event, "type", None), getattr(event, "path", None)
        if kind not in ("CREATED", "DELETED") or not path:
            return
        with self._lock:
            if self._stopped:
                return
            self._nodes.append((kind == "CREATED", self._relative(path)))
        self._on_node_change()

    def _mark(self, event: Any, target: set[str]) -> None:
        path = getattr(event, "path", None)
        with self._lock:
            if self._stopped:
                return
            if getattr(event, "type", None) == "NONE" or not path:
                self._stale = True  # kazoo dropped every watch: connection lost or new session
            else:
                target.add(self._relative(path))
        self._on_change()

    def _relative(self, path: str) -> str:
        if path == self._root:
            return "/"
        return path[len(self._root) :] if path.startswith(self._root + "/") else path

    def stop(self) -> None:
        """Ignore every watch from now on (kazoo keeps the callbacks until each fires once)."""
        with self._lock:
            self._stopped = True

    # -- the view's side --------------------------------------------------------------------------

    def take(self) -> QueueNews:
        """Everything since the previous take (the jobs expected stay expected)."""
        with self._lock:
            news = QueueNews(
                self._stale,
                self._children,
                self._data,
                self._notes,
                self._requires,
                set(self._expected),
                self._nodes,
            )
            self._stale = False
            self._children, self._data, self._notes, self._requires = set(), set(), {}, {}
            self._nodes = []
        return news

    def make_stale(self) -> None:
        """Read everything at the next sync (this one failed)."""
        with self._lock:
            self._stale = True

    # -- the writers' notes protocol ----------------------------------------------------------

    def invalidate(self, paths: Iterable[str] = ()) -> None:
        """Read `paths` (none given: everything) again at the next sync; a ready node's note
        and expectation are dropped."""
        wanted = list(paths)
        with self._lock:
            if not wanted:
                self._stale = True
            for path in wanted:
                self._data.add(path)
                self._children.add(path.rsplit("/", 1)[0])
                if path.startswith(READY + "/"):
                    job = path.rsplit("/", 1)[1]
                    self._notes.pop(job, None)
                    self._requires.pop(job, None)
                    self._expected.discard(job)

    def expect_ready(self, jobs: Iterable[str]) -> None:
        with self._lock:
            self._expected.update(jobs)

    def note_ready(self, job: str, count: int, version: int) -> None:
        with self._lock:
            self._notes[job] = (count, version)
            self._requires.pop(job, None)
            self._expected.discard(job)

    def note_pending(self, job: str, count: int, version: int, requires: tuple[str, int]) -> None:
        with self._lock:
            self._notes[job] = (count, version)
            self._requires[job] = requires
            self._expected.discard(job)
        self._on_change()

    def drop_requires(self, job: str, requires: tuple[str, int]) -> None:
        """A noted count no longer requires `requires` (its write was applied)."""
        with self._lock:
            if self._requires.get(job) == requires:
                del self._requires[job]  # not in the view yet: a plain note now

"""ZooKeeper access for the whole scheduler: reads, writes and watches, each with a deadline.

Every path given to `Registry` is relative to the namespace (`/config/job/x` is stored at
`/{zk_namespace}/config/job/x`; `layout` spells them all). Every call, writes included, has a
deadline (kazoo's own synchronous calls wait forever while disconnected). Errors are never
swallowed: reads of a missing node return None, everything else that fails raises a
`SchedulerError` (`NotFound`, `Conflict`, `RegistryError`) translated from kazoo's exception
(`zk_error`), and callers decide.

Beside it: `transactions` (the one transaction step, `Op`, and the leader's fenced writes) and
`acl` (digest ACLs and the walk that puts them on the namespace).

A path that does not encode to UTF-8 (a lone surrogate from a JSON string) is refused with
`InvalidRequest` before kazoo sees it: kazoo serialises requests in its connection thread, and an
encoding error there kills that thread and with it the session.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    EXCEPTIONS,
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionExpiredError,
    UnimplementedError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.paths import _prefix_root
from kazoo.protocol.serialization import Watch
from kazoo.protocol.states import EVENT_TYPE_MAP, Callback, EventType, KazooState, WatchedEvent
from kazoo.retry import KazooRetry
from kazoo.security import ACL

from scheduler.model.errors import Conflict, InvalidRequest, NotFound, RegistryError
from scheduler.storage.add_watch import AddWatch, RemoveRecursiveWatch
from scheduler.storage.multi_read import MultiRead

log = logging.getLogger(__name__)

# How many times a read or an idempotent write is retried on connection loss.
_READ_RETRY = KazooRetry(max_tries=3, delay=0.1, backoff=2, max_delay=1.0, ignore_expire=False)
# Paths per multiRead. The server builds each answer whole in memory; pipelined reads of the
# same nodes keep as many answers in flight, so 100 bounds nothing less but keeps one answer
# modest (100 job configs of a few kB) while saving 99 of every 100 requests.
_MULTI_READ_BATCH = 100


def zk_error(exc: Exception, what: str) -> Exception:
    """kazoo's `exc` as the scheduler's error, its message led by `what`."""
    if isinstance(exc, NoNodeError):
        return NotFound(f"{what}: node does not exist")
    if isinstance(exc, NodeExistsError):
        return Conflict(f"{what}: node already exists")
    if isinstance(exc, BadVersionError):
        return Conflict(f"{what}: node was changed concurrently")
    if isinstance(exc, NotEmptyError):
        return Conflict(f"{what}: node has children")
    if isinstance(exc, ConnectionClosedError):
        return RegistryError(f"{what}: ZooKeeper client is closed")
    return RegistryError(f"{what}: {type(exc).__name__}")


_DELETE_TRIES = 20
"""How often a recursive delete lists its subtree again after a concurrent change."""


class Registry:
    """Namespace-relative ZooKeeper operations. Thread-safe (kazoo clients are)."""

    def __init__(
        self,
        client: KazooClient,
        namespace: str,
        timeout_s: float = 10.0,
        multi_read: bool | None = None,
    ) -> None:
        self._client = client
        self._root = "/" + namespace.strip("/")
        # kazoo's synchronous calls wait forever while disconnected; ours give up after this.
        self._timeout_s = timeout_s
        self.multi_read = multi_read
        """Whether the server answers multiRead (ZooKeeper 3.6+): True / False once
        `probe_multi_read` asked, None before (bulk reads are then pipelined)."""

    @property
    def client(self) -> KazooClient:
        return self._client

    @property
    def connected(self) -> bool:
        """Whether the client is connected now (not SUSPENDED, not LOST)."""
        return bool(self._client.state == KazooState.CONNECTED)

    @staticmethod
    def watch_dropped(event: Any) -> bool:
        """Whether a watch callback's `event` is no change but kazoo dropping the watch: it
        clears every watch when its connection drops and calls each with a NONE event."""
        return bool(getattr(event, "type", None) == EventType.NONE)

    def abs(self, path: str) -> str:
        """The absolute ZooKeeper path of namespace-relative `path`."""
        if not path.startswith("/"):
            raise ValueError(f"registry paths start with '/': {path!r}")
        try:
            path.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidRequest(
                f"ZooKeeper path {path!r} is not valid Unicode text",
                {"path": "contains characters that do not encode to UTF-8"},
            ) from exc
        return self._root if path == "/" else self._root + path

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run kazoo's `fn_async` variant of `fn` with a deadline, retried on connection loss
        (for reads and writes that may be repeated)."""
        async_fn = getattr(self._client, fn.__name__ + "_async")

        def attempt() -> Any:
            return async_fn(*args, **kwargs).get(timeout=self._timeout_s)

        return self._answer(what, lambda: _READ_RETRY.copy()(attempt))

    def _call_once(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run kazoo's `fn_async` variant of `fn` with a deadline, once: a write that fails on
        a lost connection may still have been applied, so it is not repeated blindly."""
        async_fn = getattr(self._client, fn.__name__ + "_async")
        return self._answer(what, lambda: async_fn(*args, **kwargs).get(timeout=self._timeout_s))

    def _answer(self, what: str, ask: Callable[[], Any]) -> Any:
        """`ask()`, with kazoo's errors translated and a deadline passed named."""
        try:
            return ask()
        except (KazooException, KazooTimeoutError) as exc:
            raise self.failed(what, exc) from exc

    def wait(self, what: str, result: Any, timeout_s: float | None = None) -> Any:
        """The value of kazoo's async `result`, waited for at most `timeout_s` (the registry's
        deadline when None); kazoo's errors translated as every call's are."""
        deadline = self._timeout_s if timeout_s is None else timeout_s
        return self._answer(what, partial(result.get, timeout=deadline))

    def wait_raw(self, result: Any) -> Any:
        """The value of kazoo's async `result`, waited for within the registry's deadline;
        kazoo's own exceptions are raised (for a caller that tells them apart)."""
        return result.get(timeout=self._timeout_s)

    def failed(self, what: str, exc: Exception) -> Exception:
        """kazoo's `exc` as the scheduler's error; a deadline that passed is named."""
        if isinstance(exc, KazooTimeoutError):
            return RegistryError(f"{what}: ZooKeeper did not answer in {self._timeout_s:g}s")
        return zk_error(exc, what)

    # -- reads ------------------------------------------------------------------------------

    def get(self, path: str) -> bytes | None:
        got = self.get_versioned(path)
        return None if got is None else got[0]

    def get_versioned(self, path: str) -> tuple[bytes, int] | None:
        """(data, version) of `path`, or None when it does not exist."""
        try:
            data, stat = self._call(f"get {path}", self._client.get, self.abs(path))
        except NotFound:
            return None
        return (data or b""), int(stat.version)

    def get_json(self, path: str) -> Any:
        """The decoded JSON at `path`, or None when the node is missing.

        Raises RegistryError when the node holds something that is not UTF-8 JSON.
        """
        data = self.get(path)
        if data is None:
            return None
        try:
            return json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise RegistryError(f"{path} does not hold JSON") from exc

    def exists(self, path: str) -> bool:
        return self._call(f"exists {path}", self._client.exists, self.abs(path)) is not None

    def child_count(self, path: str) -> int:
        """How many children `path` has (its stat's numChildren: one request, no names read);
        0 when it does not exist."""
        stat = self._call(f"exists {path}", self._client.exists, self.abs(path))
        return 0 if stat is None else int(stat.numChildren)

    def children(self, path: str) -> list[str]:
        """Child names of `path` (sorted); [] when it does not exist."""
        try:
            names = self._call(f"children {path}", self._client.get_children, self.abs(path))
        except NotFound:
            return []
        return sorted(names)

    def get_many(
        self,
        paths: Sequence[str],
        watch: Callable[[str], Callable[[Any], None]] | None = None,
        timeout_s: float = 30.0,
    ) -> dict[str, tuple[bytes, int] | None]:
        """(data, version) of each path (None: missing), read with pipelined requests: one
        round trip for all, so thousands of nodes read in about a second. With `watch`, each
        existing node gets the one-shot watch `watch(path)`. Waits at most `timeout_s` for each
        answer; RegistryError when one does not come or ZooKeeper fails.

        Without a watch, on a server that answers multiRead (`multi_read`), the nodes are read
        100 to a request instead: one request per 100 nodes rather than one each."""
        if watch is None and self.multi_read:
            return self._multi_read(paths, timeout_s)
        return self.send_reads(paths, watch, timeout_s).wait()

    def _multi_read(
        self, paths: Sequence[str], timeout_s: float
    ) -> dict[str, tuple[bytes, int] | None]:
        sent = [
            (batch, self._send_multi_read(batch))
            for batch in (
                paths[start : start + _MULTI_READ_BATCH]
                for start in range(0, len(paths), _MULTI_READ_BATCH)
            )
        ]
        out: dict[str, tuple[bytes, int] | None] = {}
        for batch, answer in sent:
            what = f"get {batch[0]}" + (f" and {len(batch) - 1} more" if len(batch) > 1 else "")
            answers = self._answer(what, partial(answer.get, timeout=timeout_s))
            # MultiRead.deserialize checked that there is one answer per path.
            for path, got in zip(batch, answers, strict=True):
                if isinstance(got, tuple):
                    out[path] = got
                    continue
                # kazoo's table raises RuntimeError for a code it does not know; .get does not.
                error = EXCEPTIONS.get(got)
                if error is NoNodeError:
                    out[path] = None
                elif error is None:
                    raise RegistryError(f"get {path}: unknown ZooKeeper error code {got}")
                else:
                    raise self.failed(f"get {path}", error())
        return out

    def _send_multi_read(self, paths: Sequence[str]) -> Any:
        """Send one multiRead of `paths`; kazoo's async result of its answers."""
        return self.send(MultiRead([self.wire(self.abs(p)) for p in paths]))

    def wire(self, absolute: str) -> str:
        """The server's path of `absolute` (this client's chroot in front). Without a chroot it
        is `absolute` itself: our paths are built normalized, and kazoo's normalizing cost
        1 µs a path."""
        chroot = self._client.chroot
        return str(_prefix_root(chroot, absolute)) if chroot else absolute

    def send(self, request: Any) -> Any:
        """Send a request of kazoo's shape (its own, or this package's) without waiting;
        kazoo's async result of its answer."""
        answer = self._client.handler.async_result()
        # kazoo's request queue, as its own calls use it: it sends any request of its shape.
        self._client._call(request, answer)
        return answer

    def add_recursive_watch(
        self,
        path: str,
        callback: Callable[[Any], None],
        *,
        changes: bool = True,
        inline: bool = False,
    ) -> None:
        """Place a persistent recursive watch on `path` (ZooKeeper 3.6+ addWatch): kazoo's
        callback thread calls `callback(event)` for every node created, changed or deleted
        below it (and for `path` itself), until `remove_recursive_watch` or until the
        connection drops (the server then forgets it; kazoo does not set it again: call this
        again once connected). Without `changes`, a node's data changed is not handed over
        (the server sends it all the same; the queue view follows only nodes created and
        deleted, and running nodes change with each task's state). `inline`: kazoo's
        connection thread calls `callback` itself as it reads the notification, instead of
        handing it to the callback thread (a queue and a thread switch, about half of what a
        notification costs; a launch's come in the thousands, read before the answer to its
        write): such a callback must only record and return, never block nor make a ZooKeeper
        request (its answer would wait for the thread waiting on it). RegistryError when
        ZooKeeper refuses it (older than 3.6: its cause is UnimplementedError) or does not
        answer."""
        hub = _recursive_watches(self._client)
        # First: no event between the answer and this.
        hub.add(self.abs(path), callback, _Delivery(changes, inline))
        try:
            self._send_own(f"addWatch {path}", AddWatch(self._wire_path(path)))
        except BaseException:
            hub.discard(self.abs(path), callback)
            raise

    def remove_recursive_watch(self, path: str, callback: Callable[[Any], None]) -> None:
        """Stop calling `callback` for `path`; the server's watch is removed with the last
        callback (asked, not waited for: a watch already gone with its connection is no
        error; a refusal is logged). The request removes every watch of the session on that
        exact path (`add_watch.RemoveRecursiveWatch`), so it is not sent while kazoo holds a
        one-shot watch there: the server's notifications then go on, unused (kazoo's reader
        drops them), until the connection ends."""
        if not _recursive_watches(self._client).discard(self.abs(path), callback):
            return
        wire = self._wire_path(path)
        client = self._client
        if _kazoo_watches(client, wire):
            log.info("registry: persistent watch on %s kept (a one-shot watch shares it)", path)
            return
        # Not waited for: a term that ends without ZooKeeper must not wait on it here (the
        # notifications that still come find no callback).
        answer = client.handler.async_result()

        def refused(result: Any) -> None:
            exception = result.exception
            gone = (ConnectionClosedError, ConnectionLoss, SessionExpiredError)
            if exception is not None and not isinstance(exception, gone):  # else gone with it
                log.warning("registry: persistent watch on %s not removed: %r", path, exception)

        answer.rawlink(refused)
        try:
            client._call(RemoveRecursiveWatch(wire), answer)
        except Exception as exc:  # noqa: BLE001 - best effort, as the docstring says
            log.info("registry: persistent watch on %s not removed: %s", path, exc)

    def _wire_path(self, path: str) -> str:
        return self.wire(self.abs(path))

    def _send_own(self, what: str, request: Any) -> Any:
        """Send one request of this module's own shape through kazoo's queue and wait for it."""
        answer = self.send(request)
        return self._answer(what, partial(answer.get, timeout=self._timeout_s))

    def probe_multi_read(self) -> bool:
        """Ask the server once whether it answers multiRead, and remember it in `multi_read`.

        The replica asks before it enters the election: a server older than 3.6 refuses the
        request as unimplemented and drops that connection, which kazoo re-opens within the
        same session; this waits for that (a read retried on connection loss) so that the
        drop never meets a term. RegistryError when ZooKeeper does not answer at all."""
        try:
            # Any answer will do (a node this client may not read fails its entry alone).
            answer = self._send_multi_read(["/"])
            self._answer("multiRead /", partial(answer.get, timeout=self._timeout_s))
        except RegistryError as exc:
            if not isinstance(exc.__cause__, UnimplementedError):
                raise
            self.multi_read = False
            self._call("exists /", self._client.exists, self.abs("/"))
            log.warning(
                "registry: ZooKeeper does not answer multiRead (a server before 3.6): a leader "
                "reads its jobs one request each, which takes seconds with thousands of jobs"
            )
        else:
            self.multi_read = True
        return self.multi_read

    def send_reads(
        self,
        paths: Sequence[str],
        watch: Callable[[str], Callable[[Any], None]] | None = None,
        timeout_s: float = 30.0,
    ) -> PendingReads:
        """`get_many` in two halves: the requests go now, `wait()` on the answer collects them
        (so the caller can do something else meanwhile)."""
        pending = [
            (
                path,
                self._client.get_async(self.abs(path), watch=watch(path) if watch else None),
            )
            for path in paths
        ]
        return PendingReads(self, pending, timeout_s)

    def watch_versions(
        self,
        paths: Sequence[str],
        watch: Callable[[Any], None],
        window: int = 1000,
        timeout_s: float = 30.0,
    ) -> Iterator[tuple[str, int | None]]:
        """Each path's data version (None: missing), in the order of `paths`, each `exists`
        request leaving the one-shot watch `watch` (on a missing node, a watch for its
        creation). At most `window` requests are in flight, and an answer is a stat, not the
        data: watching 100,000 nodes holds neither 100,000 answers nor their bytes at once.
        RegistryError as `get_many`."""
        in_flight: deque[tuple[str, Any]] = deque()
        todo = iter(paths)
        while True:
            for path in todo:
                in_flight.append((path, self._client.exists_async(self.abs(path), watch=watch)))
                if len(in_flight) >= window:
                    break
            if not in_flight:
                return
            path, result = in_flight.popleft()
            stat = self.wait(f"exists {path}", result, timeout_s)
            yield path, (None if stat is None else int(stat.version))

    def children_many(
        self,
        paths: Sequence[str],
        watch: Callable[[str], Callable[[Any], None]] | None = None,
        timeout_s: float = 30.0,
    ) -> dict[str, list[str] | None]:
        """Child names (sorted) of each path (None: missing), read with pipelined requests as
        `get_many` does; with `watch`, each existing path gets the one-shot child watch
        `watch(path)`. RegistryError as `get_many`."""
        pending = [
            (
                path,
                self._client.get_children_async(
                    self.abs(path), watch=watch(path) if watch else None
                ),
            )
            for path in paths
        ]
        out: dict[str, list[str] | None] = {}
        for path, result in pending:
            try:
                names = self._answer(f"children {path}", partial(result.get, timeout=timeout_s))
            except NotFound:
                out[path] = None
                continue
            out[path] = sorted(names)
        return out

    # -- watches: kazoo calls `watch(event)` once, on its own thread; it must only queue -------

    def watch_children(self, path: str, watch: Callable[[Any], None]) -> list[str]:
        """Child names of `path` (sorted), with a one-shot watch on them; `path` is created
        when missing (a watch needs a node)."""
        full = self.abs(path)
        try:
            names = self._call(f"children {path}", self._client.get_children, full, watch=watch)
        except NotFound:
            self.ensure(path)
            names = self._call(f"children {path}", self._client.get_children, full, watch=watch)
        return sorted(names)

    def watch_data(self, path: str, watch: Callable[[Any], None]) -> tuple[bytes, int] | None:
        """(data, version) of `path` with a one-shot watch on it; None (and no watch) when it
        does not exist."""
        try:
            data, stat = self._call(f"get {path}", self._client.get, self.abs(path), watch=watch)
        except NotFound:
            return None
        return (data or b""), int(stat.version)

    def data_watch_set(self, path: str, watch: Callable[[Any], None]) -> bool:
        """Whether the one-shot data watch `watch` is still set on `path` (no event for it has
        arrived). kazoo takes a watch off on the thread that reads the connection as soon as
        its event arrives, before it reads any later answer and before the callback runs (on
        another thread, maybe much later), and ZooKeeper sends a change's event before any
        later answer on the session: while this is True, a read of `path` now would answer
        what the watch was set on. False where kazoo keeps its watches elsewhere (a version
        without `_data_watchers`): the caller then reads."""
        watchers = getattr(self._client, "_data_watchers", None)
        if not isinstance(watchers, dict):
            return False
        found = watchers.get(_prefix_root(self._client.chroot, self.abs(path)))
        return found is not None and watch in found

    def child_watch_set(self, path: str, watch: Callable[[Any], None]) -> bool:
        """`data_watch_set` for the one-shot child watch `watch` on `path`."""
        watchers = getattr(self._client, "_child_watchers", None)
        if not isinstance(watchers, dict):
            return False
        found = watchers.get(_prefix_root(self._client.chroot, self.abs(path)))
        return found is not None and watch in found

    # -- ACLs -------------------------------------------------------------------------------

    def acl(self, path: str) -> list[ACL] | None:
        """The ACL of `path`, or None when it does not exist."""
        try:
            found, _stat = self._call(f"get ACL of {path}", self._client.get_acls, self.abs(path))
        except NotFound:
            return None
        return list(found)

    # -- unfenced writes --------------------------------------------------------------------

    def ensure(self, path: str) -> None:
        """Create `path` and its parents (empty) if missing."""
        self._call(f"ensure {path}", self._client.ensure_path, self.abs(path))

    def create(self, path: str, data: bytes, *, ephemeral: bool = False) -> None:
        """Create `path` (parents too). Raises Conflict when it exists."""
        self._call_once(
            f"create {path}",
            self._client.create,
            self.abs(path),
            data,
            ephemeral=ephemeral,
            makepath=True,
        )

    def put(self, path: str, data: bytes) -> None:
        """Create `path` or overwrite its data."""
        try:
            self._call_once(f"put {path}", self._client.create, self.abs(path), data, makepath=True)
        except Conflict:  # it exists
            self._call(f"set {path}", self._client.set, self.abs(path), data)

    def delete(self, path: str, *, recursive: bool = True) -> bool:
        """Delete `path` (and its subtree, deepest first); False when it did not exist."""
        if recursive:
            return self.delete_tree(path, partial(self._delete_each, path))
        try:
            self._call_once(f"delete {path}", self._client.delete, self.abs(path))
        except NotFound:
            return False
        return True

    def _delete_each(self, path: str, targets: list[str]) -> None:
        for target in targets[:-1]:
            try:
                self._call_once(f"delete {path}", self._client.delete, self.abs(target))
            except NotFound:
                pass  # deleted meanwhile
        self._call_once(f"delete {path}", self._client.delete, self.abs(targets[-1]))

    def delete_tree(self, path: str, delete_listed: Callable[[list[str]], None]) -> bool:
        """Delete `path`'s subtree with `delete_listed`, given its paths (namespace-relative)
        deepest first, `path` last.

        Another writer may add or remove a node under `path` between the listing and the
        deletes (the status handler queues a failover entry while a user disables the job):
        ZooKeeper then refuses a delete (NotEmpty or NoNode), and the subtree is listed again
        and deleted anew. False when `path` does not exist (any more).
        """
        for _ in range(_DELETE_TRIES):
            if not self.exists(path):
                return False
            try:
                delete_listed(list(self.subtree(path)))
            except (NotFound, Conflict):
                continue  # the subtree changed since it was listed
            return True
        raise Conflict(f"delete {path}: its subtree kept changing ({_DELETE_TRIES} tries)")

    def subtree(self, path: str) -> Iterator[str]:
        """Paths of `path`'s descendants, deepest first, then `path` itself."""
        for child in self.children(path):
            yield from self.subtree(f"{path.rstrip('/')}/{child}")
        yield path


class PendingReads:
    """Reads sent by `Registry.send_reads`, not yet collected."""

    def __init__(self, registry: Registry, pending: list[tuple[str, Any]], timeout_s: float):
        self._registry = registry
        self._pending = pending
        self._timeout_s = timeout_s

    def wait(self) -> dict[str, tuple[bytes, int] | None]:
        """(data, version) of each path, None for a missing one; RegistryError as `get_many`."""
        return dict(self.each())

    def each(self) -> Iterator[tuple[str, tuple[bytes, int] | None]]:
        """`wait`'s pairs in the order sent, each as soon as its answer is in (so the caller
        works on the first answers while the last ones are still on their way)."""
        for path, result in self._pending:
            try:
                data, stat = self._registry.wait(f"get {path}", result, self._timeout_s)
            except NotFound:
                yield path, None
                continue
            yield path, ((data or b""), int(stat.version))


@dataclass(frozen=True)
class _Delivery:
    """How a persistent watch's callback is called: with nodes' data changes too or not; on
    kazoo's callback thread, or inline on its connection thread."""

    changes: bool
    inline: bool


class _RecursiveWatches:
    """The persistent recursive watches of one kazoo client and their callbacks.

    kazoo hands a watch notification only to its own one-shot watchers, popped by path; the
    notifications of a persistent watch, one per node changed below its path, would be
    dropped. This wraps the client's connection's reader of notifications (once per client)
    to hand each to the callbacks of the watches whose path covers it, then to kazoo's own.
    """

    def __init__(self, client: KazooClient) -> None:
        self._client = client
        self._lock = threading.Lock()
        # Path -> callback -> how it is called.
        self._callbacks: dict[str, dict[Callable[[Any], None], _Delivery]] = {}
        connection = client._connection
        kazoos = connection._read_watch_event

        def read_watch_event(buffer: bytes, offset: int) -> Any:
            try:
                if self._deliver(buffer, offset):
                    return None
            except Exception:
                log.exception("registry: a persistent watch's notification was not delivered")
            return kazoos(buffer, offset)

        connection._read_watch_event = read_watch_event

    def add(self, path: str, callback: Callable[[Any], None], delivery: _Delivery) -> None:
        with self._lock:
            self._callbacks.setdefault(path, {})[callback] = delivery

    def discard(self, path: str, callback: Callable[[Any], None]) -> bool:
        """Drop `callback`; True when it was the path's last one."""
        with self._lock:
            callbacks = self._callbacks.get(path)
            if callbacks is None or callback not in callbacks:
                return False
            del callbacks[callback]
            if callbacks:
                return False
            del self._callbacks[path]
            return True

    def _deliver(self, buffer: bytes, offset: int) -> bool:
        """Hand the notification to the persistent watches covering its node; True when
        kazoo's own reader has nothing to do with it (no one-shot watch of kazoo's on the
        node: most of a leader's notifications, its own task nodes' comings and goings, each
        read twice before)."""
        with self._lock:
            if not self._callbacks:
                return False
            watched = [(root, list(each.items())) for root, each in self._callbacks.items()]
        watch, _ = Watch.deserialize(buffer, offset)
        kind = EVENT_TYPE_MAP.get(watch.type)
        if kind not in (EventType.CREATED, EventType.CHANGED, EventType.DELETED):
            return False
        client = self._client
        path = client.unchroot(watch.path)
        event = WatchedEvent(kind, client._state, path)
        covered = False
        for root, callbacks in watched:
            if path == root or path.startswith(root + "/"):
                covered = True
                for callback, delivery in callbacks:
                    if not delivery.changes and kind == EventType.CHANGED:
                        continue
                    if not delivery.inline:
                        client.handler.dispatch_callback(Callback("watch", callback, (event,)))
                        continue
                    try:
                        callback(event)
                    except Exception:
                        log.exception("registry: a persistent watch's callback failed")
        return covered and not _kazoo_watches(client, watch.path)


def _kazoo_watches(client: KazooClient, wire_path: str) -> bool:
    """Whether kazoo holds a one-shot watch (data or children) on the server's path."""
    return bool(client._data_watchers.get(wire_path) or client._child_watchers.get(wire_path))


_HUBS_LOCK = threading.Lock()


def _recursive_watches(client: KazooClient) -> _RecursiveWatches:
    """The client's `_RecursiveWatches`, made (and its reader wrapped) the first time."""
    with _HUBS_LOCK:
        hub = getattr(client, "_ejc_recursive_watches", None)
        if not isinstance(hub, _RecursiveWatches):
            hub = _RecursiveWatches(client)
            client._ejc_recursive_watches = hub
        return hub

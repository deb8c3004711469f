"""ZooKeeper access for the whole scheduler: namespace, digest ACLs, JSON, CAS and fenced writes.

Every path given to `Registry` is relative to the namespace (`/config/job/x` is stored at
`/{zk_namespace}/config/job/x`). Every call, writes included, has a deadline (kazoo's own
synchronous calls wait forever while disconnected). Errors are never swallowed: reads of a
missing node return None, everything else that fails raises a `SchedulerError` (`NotFound`,
`Conflict`, `NotLeader`, `RegistryError`) translated from kazoo's exception, and callers decide.

Leader-only writes go through `registry.fenced(fence)`: each is one ZooKeeper transaction that
also checks the leader's own election node, so a leader whose session has expired (its node is
gone) cannot write even after kazoo has quietly opened a new session.

A path that does not encode to UTF-8 (a lone surrogate from a JSON string) is refused with
`InvalidRequest` before kazoo sees it: kazoo serialises requests in its connection thread, and an
encoding error there kills that thread and with it the session.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    EXCEPTIONS,
    BadVersionError,
    ConnectionClosedError,
    KazooException,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    UnimplementedError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.paths import _prefix_root
from kazoo.retry import KazooRetry
from kazoo.security import ACL, make_digest_acl

from scheduler.model.errors import Conflict, InvalidRequest, NotFound, NotLeader, RegistryError
from scheduler.model.settings import Settings
from scheduler.storage.multi_read import MultiRead

log = logging.getLogger(__name__)

# How many times a read or an idempotent write is retried on connection loss.
_READ_RETRY = KazooRetry(max_tries=3, delay=0.1, backoff=2, max_delay=1.0, ignore_expire=False)
# Paths per multiRead. The server builds each answer whole in memory; pipelined reads of the
# same nodes keep as many answers in flight, so 100 bounds nothing less but keeps one answer
# modest (100 job configs of a few kB) while saving 99 of every 100 requests.
_MULTI_READ_BATCH = 100


@dataclass(frozen=True)
class Fence:
    """What a leader-only write must prove: the term is acting and its election node exists.

    `node_path` is absolute (not namespace-relative); `is_acting` is checked before the write is
    sent (it turns False at once when the session is SUSPENDED).
    """

    node_path: str
    is_acting: Callable[[], bool]
    term: int = 0


@dataclass(frozen=True)
class Op:
    """One write of a multi-write transaction (`FencedWriter.commit`).

    kind "create" (the parent must exist), "set" (at `version`, -1 = any), "delete" (at
    `version`) or "check" (writes nothing: the transaction fails unless the node is at
    `version`); `path` is namespace-relative.
    """

    kind: str
    path: str
    data: bytes = b""
    version: int = -1

    def apply(self, registry: Registry, txn: Any) -> None:
        full = registry.abs(self.path)
        if self.kind == "create":
            txn.create(full, self.data)
        elif self.kind == "set":
            txn.set_data(full, self.data, self.version)
        elif self.kind == "delete":
            txn.delete(full, self.version)
        elif self.kind == "check":
            txn.check(full, self.version)
        else:
            raise ValueError(f"unknown transaction op {self.kind!r}")


@dataclass(frozen=True)
class AclReport:
    """What `Registry.secure_tree` did: nodes seen, ACLs changed, nodes that refused the change."""

    checked: int = 0
    changed: int = 0
    refused: list[str] = field(default_factory=list)


def digest_acl(zk_digest: str) -> list[ACL]:
    """The CREATOR_ALL ACL of digest credentials `user:password`: only they may touch a node."""
    user, _, password = zk_digest.partition(":")
    return [make_digest_acl(user, password, all=True)]


def make_client(settings: Settings) -> KazooClient:
    """A KazooClient for `settings` (not started), with digest auth and ACLs when configured."""
    kwargs: dict[str, Any] = {}
    if settings.zk_digest:
        kwargs["auth_data"] = [("digest", settings.zk_digest)]
        # Only the credentials that created a node may touch it (Curator's CREATOR_ALL).
        kwargs["default_acl"] = digest_acl(settings.zk_digest)
    return KazooClient(
        hosts=settings.zk_servers,
        timeout=settings.zk_session_timeout_seconds,
        # Reconnect promptly and forever; the replica decides what a long outage means.
        connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0),
        **kwargs,
    )


def _translate(exc: Exception, what: str) -> Exception:
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


def _acl_key(acl: ACL) -> tuple[int, str, str]:
    return int(acl.perms), str(acl.id.scheme), str(acl.id.id)


def _children_paths(parent: str, names: list[str]) -> list[str]:
    prefix = "" if parent == "/" else parent
    return [f"{prefix}/{name}" for name in names]


def _cas_op(full: str, new: bytes | None, version: int, create: bool) -> Callable[[Any], None]:
    def op(txn: Any) -> None:
        if create:
            txn.create(full, new)
        elif new is None:
            txn.delete(full, version)
        else:
            txn.set_data(full, new, version)

    return op


def _check_acting(fence: Fence | None, what: str) -> None:
    if fence is not None and not fence.is_acting():
        raise NotLeader(f"{what}: this replica is not acting as leader")


def _apply_op(registry: Registry, op: Op, txn: Any) -> None:
    op.apply(registry, txn)


_DELETE_TRIES = 20
"""How often a recursive delete lists its subtree again after a concurrent change."""


def _delete_op(full: str) -> Callable[[Any], None]:
    return lambda txn: txn.delete(full)


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
            raise self._failed(what, exc) from exc

    def _failed(self, what: str, exc: Exception) -> Exception:
        """kazoo's `exc` as the scheduler's error; a deadline that passed is named."""
        if isinstance(exc, KazooTimeoutError):
            return RegistryError(f"{what}: ZooKeeper did not answer in {self._timeout_s:g}s")
        return _translate(exc, what)

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
                    raise self._failed(f"get {path}", error())
        return out

    def _send_multi_read(self, paths: Sequence[str]) -> Any:
        """Send one multiRead of `paths`; kazoo's async result of its answers."""
        client = self._client
        request = MultiRead([_prefix_root(client.chroot, self.abs(p)) for p in paths])
        answer = client.handler.async_result()
        # kazoo's request queue, as its own calls use it: it sends any request of its shape.
        client._call(request, answer)
        return answer

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

    # -- ACLs -------------------------------------------------------------------------------

    def acl(self, path: str) -> list[ACL] | None:
        """The ACL of `path`, or None when it does not exist."""
        try:
            found, _stat = self._call(f"get ACL of {path}", self._client.get_acls, self.abs(path))
        except NotFound:
            return None
        return list(found)

    def secure_tree(
        self,
        acl: Sequence[ACL],
        keep_going: Callable[[], bool] = lambda: True,
        batch: int = 500,
    ) -> AclReport:
        """Put `acl` on the namespace root and every node below it whose ACL differs.

        Walks the tree level by level with pipelined requests, `batch` nodes at a time (reads
        every node's ACL and children; writes only where the ACL differs), so a large tree costs
        round trips per batch, not per node. A node's children are listed after its ACL is known
        to be `acl` (ZooKeeper answers one session's requests in order), so a child created by
        someone without these credentials just before the change is not missed; once the walk
        is complete nobody else can add a node anywhere below. A node whose ACL does not let
        these credentials administer it is listed in `refused` and left alone (with what is
        below it); a node deleted meanwhile is skipped.

        Blocks the calling thread. Raises RegistryError when ZooKeeper fails or does not answer,
        NotLeader when `keep_going()` turns False between batches.
        """
        wanted = sorted(_acl_key(a) for a in acl)
        checked = changed = 0
        refused: list[str] = []
        level = [self._root]

        def answer(result: Any, path: str) -> Any:
            """The result, or None for a node deleted meanwhile or one that refuses us."""
            try:
                return result.get(timeout=self._timeout_s)
            except NoNodeError:
                return None
            except NoAuthError:
                refused.append(path)
                return None

        try:
            while level:
                below: list[str] = []
                for start in range(0, len(level), batch):
                    if not keep_going():
                        raise NotLeader("ACL walk: this replica stopped acting as leader")
                    chunk = level[start : start + batch]
                    reads = [
                        (p, self._client.get_acls_async(p), self._client.get_children_async(p))
                        for p in chunk
                    ]
                    stale: list[str] = []
                    for path, acl_result, kids_result in reads:
                        got = answer(acl_result, path)
                        names = answer(kids_result, path) if got is not None else None
                        if got is None or names is None:
                            continue
                        checked += 1
                        if sorted(_acl_key(a) for a in got[0]) != wanted:
                            stale.append(path)  # its children are listed again once it is ours
                        else:
                            below.extend(_children_paths(path, names))
                    writes = [
                        (
                            p,
                            self._client.set_acls_async(p, list(acl)),
                            self._client.get_children_async(p),
                        )
                        for p in stale
                    ]
                    for path, set_result, kids_result in writes:
                        if answer(set_result, path) is None:
                            continue
                        changed += 1
                        names = answer(kids_result, path)
                        if names is not None:
                            below.extend(_children_paths(path, names))
                level = below
        except (KazooException, KazooTimeoutError) as exc:
            raise self._failed("ACL walk", exc) from exc
        return AclReport(checked, changed, refused)

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
            return self._delete_tree(path, partial(self._delete_each, path))
        try:
            self._call_once(f"delete {path}", self._client.delete, self.abs(path))
        except NotFound:
            return False
        return True

    def _delete_each(self, path: str, targets: list[str]) -> None:
        for full in targets[:-1]:
            try:
                self._call_once(f"delete {path}", self._client.delete, full)
            except NotFound:
                pass  # deleted meanwhile
        self._call_once(f"delete {path}", self._client.delete, targets[-1])

    def _delete_tree(self, path: str, delete_listed: Callable[[list[str]], None]) -> bool:
        """Delete `path`'s subtree, listed deepest first, with `delete_listed`.

        Another writer may add or remove a node under `path` between the listing and the
        deletes (the status handler queues a failover entry while a user disables the job):
        ZooKeeper then refuses a delete (NotEmpty or NoNode), and the subtree is listed again
        and deleted anew. False when `path` does not exist (any more).
        """
        for _ in range(_DELETE_TRIES):
            if not self.exists(path):
                return False
            try:
                delete_listed(list(self._subtree(path)))
            except (NotFound, Conflict):
                continue  # the subtree changed since it was listed
            return True
        raise Conflict(f"delete {path}: its subtree kept changing ({_DELETE_TRIES} tries)")

    def compare_and_set(
        self, path: str, update: Callable[[bytes | None], bytes | None], max_tries: int = 50
    ) -> bytes | None:
        """Apply `update` to the node's data with a versioned write, retrying on races.

        `update(old)` gets None for a missing node and returns the new data, or None to delete
        the node. Returns what was written. Raises Conflict after `max_tries` lost races.
        """
        return self._cas(path, update, max_tries, fence=None)

    def fenced(self, fence: Fence) -> FencedWriter:
        """Writes that succeed only while `fence` holds (see module docstring)."""
        return FencedWriter(self, fence)

    # -- transactions (shared with FencedWriter) --------------------------------------------

    def _transact(self, what: str, ops: list[Callable[[Any], None]], fence: Fence | None) -> None:
        self._outcome(what, self._send_transaction(what, ops, fence), fence)

    def _send_transaction(
        self, what: str, ops: list[Callable[[Any], None]], fence: Fence | None
    ) -> Any:
        """Send the transaction (the fence's check first); kazoo's async result of it."""
        _check_acting(fence, what)
        txn = self._client.transaction()
        if fence is not None:
            txn.check(fence.node_path, -1)
        for op in ops:
            op(txn)
        return txn.commit_async()

    def _outcome(self, what: str, sent: Any, fence: Fence | None) -> None:
        """Wait for a transaction's answer; raises as `FencedWriter.commit`."""
        results = self._answer(what, lambda: sent.get(timeout=self._timeout_s))
        failures = [r for r in results if isinstance(r, Exception)]
        if not failures:
            return
        if fence is not None and isinstance(results[0], NoNodeError):
            raise NotLeader(f"{what}: leadership lost (election node is gone)")
        first = next((r for r in failures if not isinstance(r, RolledBackError)), failures[0])
        raise _translate(first, what) from first

    def _cas(
        self,
        path: str,
        update: Callable[[bytes | None], bytes | None],
        max_tries: int,
        fence: Fence | None,
    ) -> bytes | None:
        full = self.abs(path)
        attempt = 0
        for _ in range(max_tries):
            _check_acting(fence, f"compare-and-set {path}")
            got = self.get_versioned(path)
            old, version = (None, -1) if got is None else got
            new = update(old)
            if got is None and new is None:
                return None
            if got is None:
                self.ensure(path.rsplit("/", 1)[0] or "/")
            ops = [_cas_op(full, new, version, got is None)]
            try:
                self._transact(f"compare-and-set {path}", ops, fence)
            except (Conflict, NotFound):
                # Lost a race: back off a little (jittered, growing) so contenders spread out.
                attempt += 1
                time.sleep(random.uniform(0, min(0.05, 0.002 * 2**attempt)))
                continue
            return new
        raise Conflict(f"compare-and-set {path}: too many concurrent changes")

    def _subtree(self, path: str) -> Iterator[str]:
        """Absolute paths of `path`'s descendants, deepest first, then `path` itself."""
        for child in self.children(path):
            yield from self._subtree(f"{path.rstrip('/')}/{child}")
        yield self.abs(path)


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
                data, stat = self._registry._answer(
                    f"get {path}", partial(result.get, timeout=self._timeout_s)
                )
            except NotFound:
                yield path, None
                continue
            yield path, ((data or b""), int(stat.version))


class FencedWriter:
    """Leader-only writes: each is a transaction that checks the leader's election node."""

    def __init__(self, registry: Registry, fence: Fence) -> None:
        self._registry = registry
        self._fence = fence

    def create(self, path: str, data: bytes) -> None:
        """Create `path` (parents are ensured first). Raises Conflict when it exists."""
        reg = self._registry
        _check_acting(self._fence, f"create {path}")
        reg.ensure(path.rsplit("/", 1)[0] or "/")
        reg._transact(f"create {path}", [lambda t: t.create(reg.abs(path), data)], self._fence)

    def put(self, path: str, data: bytes) -> None:
        """Create `path` or overwrite its data."""
        self._registry._cas(path, lambda _old: data, 50, self._fence)

    def set(self, path: str, data: bytes, version: int = -1) -> None:
        """Overwrite existing `path` (at `version` unless -1). NotFound / Conflict on mismatch."""
        reg = self._registry
        reg._transact(
            f"set {path}", [lambda t: t.set_data(reg.abs(path), data, version)], self._fence
        )

    def delete(self, path: str, *, recursive: bool = True) -> bool:
        """Delete `path` (and its subtree, in one transaction); False when it did not exist.
        A subtree changed by another writer meanwhile is listed again (Registry._delete_tree).
        """
        reg = self._registry
        _check_acting(self._fence, f"delete {path}")
        if recursive:
            return reg._delete_tree(path, partial(self._delete_in_one, path))
        if not reg.exists(path):
            return False
        try:
            self._delete_in_one(path, [reg.abs(path)])
        except NotFound:
            return False
        return True

    def _delete_in_one(self, path: str, targets: list[str]) -> None:
        """Delete `targets` (absolute paths under `path`) in one fenced transaction."""
        ops = [_delete_op(p) for p in targets]
        self._registry._transact(f"delete {path}", ops, self._fence)

    def commit(self, what: str, ops: list[Op]) -> None:
        """Apply `ops` atomically, fenced: all or none. NotFound / Conflict when one fails."""
        reg = self._registry
        reg._transact(what, [partial(_apply_op, reg, op) for op in ops], self._fence)

    def send(self, what: str, ops: list[Op]) -> Callable[[], None]:
        """`commit` in two halves: the transaction goes now (so that a request this client
        sends later is applied after it: ZooKeeper applies one session's requests in order),
        and the returned call waits for its answer and raises as `commit` would."""
        reg = self._registry
        sent = reg._send_transaction(what, [partial(_apply_op, reg, op) for op in ops], self._fence)
        return partial(reg._outcome, what, sent, self._fence)

    def compare_and_set(
        self, path: str, update: Callable[[bytes | None], bytes | None], max_tries: int = 50
    ) -> bytes | None:
        """As Registry.compare_and_set, fenced."""
        return self._registry._cas(path, update, max_tries, self._fence)

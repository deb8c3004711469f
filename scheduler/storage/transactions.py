"""ZooKeeper transactions: the one step type (`Op`), the leader's fenced writes, compare-and-set.

Every multi-node write is a list of `Op`s sent as one ZooKeeper transaction: all are applied or
none. Leader-only writes go through a `FencedWriter`: each of its writes is one transaction that
also checks the leader's own election node (the `Fence`), so a leader whose session has expired
(its node is gone) cannot write even after kazoo has quietly opened a new session; and before
anything is sent, the fence's `is_acting` must still hold (it turns False at once when the
session is SUSPENDED).

Errors as the registry's: `NotFound` / `Conflict` when an op fails (a node missing, present, at
another version, or not empty), `NotLeader` when the fence fails, `RegistryError` when ZooKeeper
fails or does not answer.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from functools import partial
from typing import Any

from kazoo.exceptions import NoNodeError, RolledBackError
from kazoo.protocol.serialization import CheckVersion, Create, Delete, SetData, Transaction
from kazoo.security import OPEN_ACL_UNSAFE

from scheduler.model.errors import Conflict, NotFound, NotLeader
from scheduler.storage.registry import Registry, zk_error

__all__ = ["Fence", "FencedWriter", "Op", "OpKind", "compare_and_set"]

_CAS_TRIES = 50


@dataclass(frozen=True)
class Fence:
    """What a leader-only write must prove: the term is acting and its election node exists.

    `node_path` is absolute (not namespace-relative); `is_acting` is checked before the write is
    sent (it turns False at once when the session is SUSPENDED).
    """

    node_path: str
    is_acting: Callable[[], bool]
    term: int = 0


class OpKind(Enum):
    """What one step of a transaction does."""

    CREATE = "create"
    """Create the node with `data` (its parent must exist)."""
    SET = "set"
    """Set the node's data at `version` (-1: any)."""
    DELETE = "delete"
    """Delete the node at `version` (-1: any; it must have no children)."""
    CHECK = "check"
    """Write nothing: the transaction fails unless the node is at `version`."""


@dataclass(frozen=True)
class Op:
    """One step of a transaction; `path` is namespace-relative."""

    kind: OpKind
    path: str
    data: bytes = b""
    version: int = -1

    @classmethod
    def create(cls, path: str, data: bytes = b"") -> Op:
        return cls(OpKind.CREATE, path, data)

    @classmethod
    def set(cls, path: str, data: bytes, version: int = -1) -> Op:
        return cls(OpKind.SET, path, data, version)

    @classmethod
    def delete(cls, path: str, version: int = -1) -> Op:
        return cls(OpKind.DELETE, path, version=version)

    @classmethod
    def check(cls, path: str, version: int) -> Op:
        return cls(OpKind.CHECK, path, version=version)

    @property
    def writes(self) -> bool:
        """Whether the step changes a node (every kind but CHECK)."""
        return self.kind is not OpKind.CHECK

    def request(self, wire_path: str, acl: Any) -> Any:
        """This step as kazoo's request of a transaction, at `wire_path` (the server's path:
        absolute, the connection's chroot included); a node it creates gets `acl`."""
        match self.kind:
            case OpKind.CREATE:
                return Create(wire_path, self.data, acl, 0)
            case OpKind.SET:
                return SetData(wire_path, self.data, self.version)
            case OpKind.DELETE:
                return Delete(wire_path, self.version)
            case OpKind.CHECK:
                return CheckVersion(wire_path, self.version)


def _check_acting(fence: Fence | None, what: str) -> None:
    if fence is not None and not fence.is_acting():
        raise NotLeader(f"{what}: this replica is not acting as leader")


def _send(registry: Registry, what: str, ops: list[Op], fence: Fence | None) -> Any:
    """Send `ops` as one transaction (the fence's check first); kazoo's async result of it.

    The requests are built here rather than through kazoo's `TransactionRequest`, whose checks
    and path normalizing cost 14 µs an op (a 500-task launch round's 1,500 ops: 21 ms of the
    leader's time, issue 29): our ops' paths are built normalized, their types are checked by
    their type, and nodes are created with the ACL kazoo would give them (the client's
    `default_acl`, else open)."""
    _check_acting(fence, what)
    acl = registry.client.default_acl or OPEN_ACL_UNSAFE
    wire = registry.wire
    requests = [] if fence is None else [CheckVersion(wire(fence.node_path), -1)]
    requests += [op.request(wire(registry.abs(op.path)), acl) for op in ops]
    return registry.send(Transaction(requests))


def _outcome(registry: Registry, what: str, sent: Any, fence: Fence | None) -> None:
    """Wait for a transaction's answer; raises as `FencedWriter.commit`."""
    results = registry.wait(what, sent)
    failures = [r for r in results if isinstance(r, Exception)]
    if not failures:
        return
    if fence is not None and isinstance(results[0], NoNodeError):
        raise NotLeader(f"{what}: leadership lost (election node is gone)")
    first = next((r for r in failures if not isinstance(r, RolledBackError)), failures[0])
    raise zk_error(first, what) from first


def _transact(registry: Registry, what: str, ops: list[Op], fence: Fence | None) -> None:
    _outcome(registry, what, _send(registry, what, ops, fence), fence)


def compare_and_set(
    registry: Registry,
    path: str,
    update: Callable[[bytes | None], bytes | None],
    max_tries: int = _CAS_TRIES,
    fence: Fence | None = None,
) -> bytes | None:
    """Apply `update` to the node's data with a versioned write, retrying on races.

    `update(old)` gets None for a missing node and returns the new data, or None to delete
    the node. Returns what was written. Raises Conflict after `max_tries` lost races; with
    `fence`, each write is fenced (NotLeader).
    """
    attempt = 0
    for _ in range(max_tries):
        _check_acting(fence, f"compare-and-set {path}")
        got = registry.get_versioned(path)
        old, version = (None, -1) if got is None else got
        new = update(old)
        if got is None and new is None:
            return None
        if got is None:
            registry.ensure(path.rsplit("/", 1)[0] or "/")
            op = Op.create(path, new or b"")
        elif new is None:
            op = Op.delete(path, version)
        else:
            op = Op.set(path, new, version)
        try:
            _transact(registry, f"compare-and-set {path}", [op], fence)
        except (Conflict, NotFound):
            # Lost a race: back off a little (jittered, growing) so contenders spread out.
            attempt += 1
            time.sleep(random.uniform(0, min(0.05, 0.002 * 2**attempt)))
            continue
        return new
    raise Conflict(f"compare-and-set {path}: too many concurrent changes")


class FencedWriter:
    """Leader-only writes: each is a transaction that checks the leader's election node."""

    def __init__(self, registry: Registry, fence: Fence) -> None:
        self._registry = registry
        self._fence = fence

    def create(self, path: str, data: bytes) -> None:
        """Create `path` (parents are ensured first). Raises Conflict when it exists."""
        _check_acting(self._fence, f"create {path}")
        self._registry.ensure(path.rsplit("/", 1)[0] or "/")
        self.commit(f"create {path}", [Op.create(path, data)])

    def put(self, path: str, data: bytes) -> None:
        """Create `path` or overwrite its data."""
        compare_and_set(self._registry, path, lambda _old: data, fence=self._fence)

    def set(self, path: str, data: bytes, version: int = -1) -> None:
        """Overwrite existing `path` (at `version` unless -1). NotFound / Conflict on mismatch."""
        self.commit(f"set {path}", [Op.set(path, data, version)])

    def delete(self, path: str, *, recursive: bool = True) -> bool:
        """Delete `path` (and its subtree, in one transaction); False when it did not exist.
        A subtree changed by another writer meanwhile is listed again (Registry.delete_tree).
        """
        reg = self._registry
        _check_acting(self._fence, f"delete {path}")
        if recursive:
            return reg.delete_tree(path, partial(self._delete_in_one, path))
        if not reg.exists(path):
            return False
        try:
            self._delete_in_one(path, [path])
        except NotFound:
            return False
        return True

    def _delete_in_one(self, path: str, targets: list[str]) -> None:
        """Delete `targets` (paths under `path`, deepest first) in one fenced transaction."""
        self.commit(f"delete {path}", [Op.delete(target) for target in targets])

    def commit(self, what: str, ops: list[Op]) -> None:
        """Apply `ops` atomically, fenced: all or none. NotFound / Conflict when one fails."""
        _transact(self._registry, what, ops, self._fence)

    def send(self, what: str, ops: list[Op]) -> Callable[[], None]:
        """`commit` in two halves: the transaction goes now (so that a request this client
        sends later is applied after it: ZooKeeper applies one session's requests in order),
        and the returned call waits for its answer and raises as `commit` would."""
        sent = _send(self._registry, what, ops, self._fence)
        return partial(_outcome, self._registry, what, sent, self._fence)

    def compare_and_set(
        self, path: str, update: Callable[[bytes | None], bytes | None], max_tries: int = 50
    ) -> bytes | None:
        """`compare_and_set`, fenced."""
        return compare_and_set(self._registry, path, update, max_tries, self._fence)

"""Digest ACLs: the client that authenticates with `zk_digest`, the CREATOR_ALL ACL it gives
what it creates, and the walk that puts that ACL on a namespace written before (or without) it.

Why: with `zk_digest` set, only these credentials may touch a node the replicas created; but
nodes created before digest auth was switched on (or by a replica without it) stay
world-writable until a leader walks the namespace (`secure_namespace`, before any component of
its term starts).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoAuthError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry
from kazoo.security import ACL, make_digest_acl

from scheduler.model.errors import NotLeader, SchedulerError
from scheduler.model.settings import Settings
from scheduler.storage.layout import ACL_MARKER
from scheduler.storage.registry import Registry
from scheduler.storage.transactions import Fence, FencedWriter
from scheduler.storage.zk_handler import PollingHandler, use_buffered_reads

__all__ = ["AclReport", "digest_acl", "make_client", "secure_namespace", "secure_tree"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AclReport:
    """What `secure_tree` did: nodes seen, ACLs changed, nodes that refused the change."""

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
    client = KazooClient(
        hosts=settings.zk_servers,
        timeout=settings.zk_session_timeout_seconds,
        # Reconnect promptly and forever; the replica decides what a long outage means.
        connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0),
        handler=PollingHandler(),  # a select of one system call (zk_handler.py)
        **kwargs,
    )
    return use_buffered_reads(client)  # frames cut from chunks (zk_handler.py)


def _acl_key(acl: ACL) -> tuple[int, str, str]:
    return int(acl.perms), str(acl.id.scheme), str(acl.id.id)


def _children_paths(parent: str, names: list[str]) -> list[str]:
    prefix = "" if parent == "/" else parent
    return [f"{prefix}/{name}" for name in names]


def secure_tree(
    registry: Registry,
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
    these credentials administer it is listed in `refused` (absolute paths) and left alone
    (with what is below it); a node deleted meanwhile is skipped.

    Blocks the calling thread. Raises RegistryError when ZooKeeper fails or does not answer,
    NotLeader when `keep_going()` turns False between batches.
    """
    client = registry.client
    wanted = sorted(_acl_key(a) for a in acl)
    checked = changed = 0
    refused: list[str] = []
    level = [registry.abs("/")]

    def answer(result: Any, path: str) -> Any:
        """The result, or None for a node deleted meanwhile or one that refuses us."""
        try:
            return registry.wait_raw(result)
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
                reads = [(p, client.get_acls_async(p), client.get_children_async(p)) for p in chunk]
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
                    (p, client.set_acls_async(p, list(acl)), client.get_children_async(p))
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
        raise registry.failed("ACL walk", exc) from exc
    return AclReport(checked, changed, refused)


def secure_namespace(
    registry: Registry, fence: Fence, term: int, zk_digest: str, namespace: str
) -> None:
    """Put the CREATOR_ALL ACL of `zk_digest` on every node of the namespace that lacks it
    (a leader does it once it won `term`, before any of the term's components starts).

    Nodes created before digest auth was switched on (or by a replica without it) are
    world-writable until this runs. Once one walk has found no node it could not secure,
    nobody without the digest can add a node anywhere in the namespace (creating needs the
    parent's permission), so that walk leaves a marker (`layout.ACL_MARKER`) with the digest's
    ACL and later terms that find it skip the walk. Blocks; raises RegistryError / NotLeader
    (the term is given up).
    """
    acl = digest_acl(zk_digest)
    try:
        marker_acl = registry.acl(ACL_MARKER)
    except SchedulerError:
        marker_acl = None  # not readable with this digest: walk, and say what refuses it
    if marker_acl == acl:
        log.info(
            "leader: term %s: CREATOR_ALL ACL already on every node under /%s (%s); 0 nodes "
            "changed",
            term,
            namespace,
            ACL_MARKER,
        )
        return
    began = time.monotonic()
    report = secure_tree(registry, acl, fence.is_acting)
    log.info(
        "leader: term %s: CREATOR_ALL ACL set on %d of %d nodes under /%s in %.0f ms",
        term,
        report.changed,
        report.checked,
        namespace,
        (time.monotonic() - began) * 1000,
    )
    if report.refused:
        log.warning(
            "leader: term %s: %d nodes under /%s do not let zk_digest administer them and "
            "keep their ACL, with everything below them (first: %s); every term checks again",
            term,
            len(report.refused),
            namespace,
            ", ".join(report.refused[:5]),
        )
        return
    record = {
        "term": term,
        "securedAt": time.time(),
        "nodes": report.checked,
        "changed": report.changed,
    }
    FencedWriter(registry, fence).put(ACL_MARKER, json.dumps(record).encode())

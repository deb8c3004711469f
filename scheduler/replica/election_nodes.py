"""The election's nodes as the replica reads and secures them through its own kazoo client:
whether the client can still reconnect, the election path's ACL, and the contenders in lock
order. Every function raises KazooException when ZooKeeper fails."""

from __future__ import annotations

import re
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoAuthError, NodeExistsError, NotEmptyError

from scheduler.replica.vouching import election_locked
from scheduler.storage.acl import digest_acl

# Contenders read per pass at most: a flood of forged nodes cannot make a pass read them all.
_MAX_CONTENDERS = 64
# Longer than any `host:port` (a DNS name has at most 253 characters).
_MAX_IDENTITY_CHARS = 300
# kazoo's Lock names each node `<uuid>__lock__<10 digits>`; the lowest sequence holds the lock.
_LOCK_NODE = re.compile(r"__lock__(-?\d{10})$")


def client_death(client: KazooClient) -> str | None:
    """Why `client` (started, not stopped by us) can never reconnect, or None while it can.

    Reads kazoo internals defensively: its connection thread, and the worker threads that deliver
    state changes and watches.
    """
    routine = getattr(getattr(client, "_connection", None), "_connection_routine", None)
    if routine is None or not routine.is_alive():
        return f"its connection thread has ended (client state {client.client_state})"
    if not client.handler.running:
        return "its callback threads have stopped"
    return None


def secure_election_path(client: KazooClient, path: str, zk_digest: str) -> str:
    """Give the election path the digest's ACL (called at start, before contending).

    A path created by a replica with the digest has it from the start. An older open one is,
    while it has no children, replaced by a fresh node with the digest's ACL in one transaction
    (so nothing made while it was open survives, and vouching by (a) holds; a replica starting
    at the same moment that replaced it first is noticed on the next read); one with children
    only gets its ACL changed (then challenges decide). Returns what it did, for the log.
    Raises KazooException when ZooKeeper fails.
    """
    acl = digest_acl(zk_digest)
    client.ensure_path(path, acl=acl)
    for _attempt in range(3):
        found, stat = client.get_acls(path)
        if election_locked(found, stat.aversion, zk_digest):
            return "already secured"
        if stat.numChildren > 0:
            break
        txn = client.transaction()
        txn.delete(path, version=stat.version)
        txn.create(path, b"", acl=acl)
        try:
            results = txn.commit()
        except KazooException:
            results = [None]
        if not any(isinstance(r, Exception) for r in results):
            return "re-created with the digest's ACL"
    if list(found) == acl:
        return "has the digest's ACL, given after its members joined (they are challenged)"
    try:
        client.set_acls(path, acl)
    except NoAuthError:
        return "left as it is: its ACL does not let zk_digest administer it"
    except (NotEmptyError, NodeExistsError):
        return "left as it is"
    return "ACL set (it had members; they are vouched for by challenge)"


def read_contenders(client: KazooClient, path: str) -> tuple[list[str], Any]:
    """The election's identities in lock order (leader first), and the path's ACL and stat.

    Like kazoo's `Election.contenders`, but data that is not UTF-8 is read with replacement
    characters instead of raising, and cut at `_MAX_IDENTITY_CHARS` (neither is ever a
    `host:port`, so neither is vouched for; a forged megabyte does not reach every `/health`),
    and at most `_MAX_CONTENDERS` are read. Raises KazooException.
    """
    acls, stat = client.get_acls(path)
    children = client.get_children(path)
    matched = [(m.group(1), child) for child in children if (m := _LOCK_NODE.search(child))]
    identities: list[str] = []
    for _seq, child in sorted(matched)[:_MAX_CONTENDERS]:
        try:
            data, _ = client.get(f"{path}/{child}")
        except KazooException:
            continue  # gone meanwhile
        text = (data or b"")[: _MAX_IDENTITY_CHARS * 4].decode("utf-8", errors="replace")
        identities.append(text[:_MAX_IDENTITY_CHARS])
    return identities, (acls, stat)

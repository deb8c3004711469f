"""Which replicas' identities (`host:port` from the election) this replica vouches for.

The election's data is only a claim: with the default set-up (no `zk_digest`) anyone who can
write to ZooKeeper can add a node that names any address, and if it comes first every standby
would send API clients, credentials and all, to that address. So a replica lists, redirects to
and grants CORS to only the identities it vouches for (issue 23). It vouches for one when:

(a) `zk_digest` is set and the election path has granted CREATE and ADMIN to nobody but the
    digest's identity since it was created (its ACL version is 0): every election node was then
    created by a holder of the digest. A path secured later (ACL version > 0) may still hold a
    node made while it was open, so then (b) decides; or
(b) the other replica proves it shares this cluster's settings: this replica sends
    `GET /health?challenge=<64 hex>` to `host:port` (https when this replica serves TLS; no
    redirects; a whole-request deadline) and the answer's `proof` must be
    HMAC-SHA256(cluster_key(settings, "vouch"), challenge + "\\n" + "host:port") in hex. The
    identity is the one this replica expects, so a server that relays the challenge to a real
    replica gets that replica's proof, which does not match.

It always vouches for itself. Checks run only in the replica's `sched-leader-watch` thread
(`Vouching.update`); request threads read the published snapshot (`vouched`, `is_vouched`).
A result is kept per identity while it stays in the election: a leader is checked again when
the leadership changes to it, an identity that failed is checked again after a back-off of 2 s
doubling to 30 s, and at most `_MAX_CHECKS_PER_PASS` identities besides the leader are checked
in one pass, so a flood of forged nodes costs bounded time.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import secrets
import socket
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.model.cluster_key import cluster_key
from scheduler.model.settings import Settings
from scheduler.storage.acl import digest_acl

log = logging.getLogger(__name__)

__all__ = [
    "IDENTITY",
    "Vouching",
    "election_locked",
    "proof",
    "valid_challenge",
]

# Matched whole (`fullmatch`): `$` would let a trailing newline through.
IDENTITY = re.compile(r"[A-Za-z0-9._-]+:[0-9]{1,5}|\[[0-9A-Fa-f:.]+\]:[0-9]{1,5}")
_CHALLENGE = re.compile(r"[0-9a-f]{64}")
_CHECK_DEADLINE_S = 2.0
_MAX_ANSWER_BYTES = 65536
_RETRY_FIRST_S = 2.0
_RETRY_MAX_S = 30.0
_MAX_CHECKS_PER_PASS = 3
_MAX_CACHED = 64
# ZooKeeper's permission bits (kazoo.security.Permissions; kazoo stays in the replica).
_CREATE = 1 << 2
_ADMIN = 1 << 4


def valid_challenge(challenge: str) -> bool:
    """Whether `challenge` is exactly 64 lower-case hex characters."""
    return _CHALLENGE.fullmatch(challenge) is not None


def proof(key: bytes, challenge: str, identity: str) -> str:
    """HMAC-SHA256 of `challenge` + "\\n" + `identity` under `key`, in hex."""
    return hmac.new(key, f"{challenge}\n{identity}".encode(), hashlib.sha256).hexdigest()


def election_locked(acls: Sequence[Any], acl_version: int, zk_digest: str) -> bool:
    """Whether an election path with `acls` at ACL version `acl_version` proves its nodes.

    True when the ACL grants CREATE and ADMIN to the identity of `zk_digest` alone and has never
    been changed since the node was created, so every child was created by a holder of the
    digest. An ACL id of another digest is just a string anyone may write into an ACL, which is
    why the ACL's age matters as well as its content.
    """
    if not zk_digest or acl_version != 0:
        return False
    own = digest_acl(zk_digest)[0].id
    guarded = _CREATE | _ADMIN
    granted = False
    for acl in acls:
        if acl.perms & guarded:
            if acl.id.scheme != own.scheme or acl.id.id != own.id:
                return False
            granted = True
    return granted


@dataclass
class _Entry:
    vouched: bool
    checked_at: float
    failures: int = 0
    next_check: float = 0.0
    why: str = ""


def _challenge(identity: str, key: bytes, tls: bool, deadline_s: float) -> tuple[bool, str]:
    """Ask `identity` to prove itself; (vouched, why not). Blocks up to `deadline_s`."""
    if IDENTITY.fullmatch(identity) is None:
        return False, "not a host:port address"
    host, _, port_text = identity.rpartition(":")
    host = host.strip("[]")
    challenge = secrets.token_hex(32)
    deadline = time.monotonic() + deadline_s
    request = (
        f"GET /health?challenge={challenge} HTTP/1.1\r\nHost: {identity}\r\n"
        "Accept: application/json\r\nConnection: close\r\n\r\n"
    ).encode()
    try:
        raw = _exchange(host, int(port_text), request, tls, deadline)
    except (OSError, ValueError) as exc:
        return False, f"no answer ({type(exc).__name__}: {exc})"
    head, sep, body = raw.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = status_line.split(" ", 2)
    if not sep or len(parts) < 2 or parts[1] not in ("200", "503"):
        return False, f"answered {status_line[:60]!r}, not /health"
    try:
        given = json.loads(body.decode("utf-8")).get("proof")
    except (ValueError, AttributeError):
        return False, "answered something that is not /health's JSON"
    expected = proof(key, challenge, identity)
    if not isinstance(given, str) or not hmac.compare_digest(given, expected):
        return False, "its proof does not match (not a replica of this cluster)"
    return True, ""


def _exchange(host: str, port: int, request: bytes, tls: bool, deadline: float) -> bytes:
    """Send `request`, read the whole answer (until close), all before `deadline`."""

    def remaining() -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no whole answer within the deadline")
        return left

    sock: socket.socket = socket.create_connection((host, port), timeout=remaining())
    try:
        if tls:
            # The HMAC proof is what authenticates the replica; its certificate may well be
            # self-signed, and the challenge and proof carry no secret worth the connection's
            # confidentiality.
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            sock.settimeout(remaining())
            sock = context.wrap_socket(sock, server_hostname=host)
        sock.settimeout(remaining())
        sock.sendall(request)
        chunks: list[bytes] = []
        size = 0
        while True:
            sock.settimeout(remaining())
            chunk = sock.recv(8192)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > _MAX_ANSWER_BYTES:
                raise ValueError(f"answer larger than {_MAX_ANSWER_BYTES} bytes")
            if _complete(b"".join(chunks)):
                break
        return b"".join(chunks)
    finally:
        sock.close()


def _complete(raw: bytes) -> bool:
    """Whether `raw` holds a whole answer with a Content-Length body."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            try:
                return len(body) >= int(value.strip())
            except ValueError:
                return False
    return False


class Vouching:
    """The identities this replica vouches for, kept by its leader-watch thread.

    `update` (thread `sched-leader-watch` only; may block about 2 s per identity it checks)
    refreshes the snapshot; `vouched` and `is_vouched` (any thread, never block) read it.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        check: Callable[[str], tuple[bool, str]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._own = settings.identity
        self._digest = settings.zk_digest
        self._key = cluster_key(settings, "vouch")
        tls = bool(settings.http_tls_cert_file)
        self._check = check or (lambda ident: _challenge(ident, self._key, tls, _CHECK_DEADLINE_S))
        self._clock = clock
        self._cache: dict[str, _Entry] = {}
        self._leader: str | None = None
        self._snapshot: frozenset[str] = frozenset({self._own})
        self._by_acl = False

    def answer(self, challenge: str) -> str | None:
        """This replica's proof for `challenge`, or None when it is not 64 lower-case hex."""
        if not valid_challenge(challenge):
            return None
        return proof(self._key, challenge, self._own)

    def is_vouched(self, identity: str | None) -> bool:
        return identity is not None and identity in self._snapshot

    @property
    def by_acl(self) -> bool:
        """Whether the last pass trusted the election because of its digest ACL."""
        return self._by_acl

    def vouched(self, contenders: Sequence[str]) -> list[str]:
        """`contenders` that are vouched for, in order, then this replica if it is missing."""
        snapshot = self._snapshot
        listed = [c for c in dict.fromkeys(contenders) if c in snapshot]
        return listed if self._own in listed else [*listed, self._own]

    def why_not(self, identity: str) -> str:
        entry = self._cache.get(identity)
        return entry.why if entry is not None else "not checked yet"

    def update(
        self,
        contenders: Sequence[str],
        acls: Sequence[Any],
        acl_version: int,
        leader_decided: Callable[[], None] = lambda: None,
    ) -> None:
        """Decide who is vouched for among `contenders` (leader first) and publish it.

        The leader is decided first and published, then `leader_decided` is called (the replica
        publishes the leader), and only then are the other members checked: members that do not
        answer never delay what a standby knows about its leader.
        """
        identities = list(dict.fromkeys(contenders))
        leader = identities[0] if identities else None
        leader_changed = leader != self._leader
        self._leader = leader
        if election_locked(acls, acl_version, self._digest):
            self._by_acl = True
            self._snapshot = frozenset({*identities, self._own})
            leader_decided()
            return
        self._by_acl = False
        present = set(identities)
        for gone in [i for i in self._cache if i not in present]:
            del self._cache[gone]
        if leader is not None and leader != self._own:
            entry = self._cache.get(leader)
            if entry is None or leader_changed or self._retry_due(entry):
                self._record(leader, entry, *self._check(leader))
        self._publish()
        leader_decided()
        budget = _MAX_CHECKS_PER_PASS
        for identity in identities[1:]:
            if budget <= 0:
                break
            entry = self._cache.get(identity)
            if identity == self._own or not (entry is None or self._retry_due(entry)):
                continue
            budget -= 1
            self._record(identity, entry, *self._check(identity))
        if len(self._cache) > _MAX_CACHED:
            for old in sorted(self._cache, key=lambda i: self._cache[i].checked_at)[
                : len(self._cache) - _MAX_CACHED
            ]:
                del self._cache[old]
        self._publish()

    def _retry_due(self, entry: _Entry) -> bool:
        return not entry.vouched and self._clock() >= entry.next_check

    def _publish(self) -> None:
        vouched = {i for i, e in self._cache.items() if e.vouched}
        self._snapshot = frozenset({*vouched, self._own})

    def _record(self, identity: str, entry: _Entry | None, ok: bool, why: str) -> None:
        now = self._clock()
        if ok:
            if entry is None or not entry.vouched:
                log.info("vouching: replica %s proved it belongs to this cluster", identity[:80])
            self._cache[identity] = _Entry(True, now)
            return
        failures = (entry.failures if entry is not None else 0) + 1
        retry_s = min(_RETRY_MAX_S, _RETRY_FIRST_S * 2 ** (failures - 1))
        if entry is None or entry.vouched or entry.why != why:
            log.warning(
                "vouching: election member %r is not vouched for: %s; it gets no redirects, "
                "CORS or listing (checked again in %.0f s)",
                identity[:80],
                why,
                retry_s,
            )
        self._cache[identity] = _Entry(False, now, failures, now + retry_s, why)

"""Console sessions: signed tokens any replica can check, revocable cluster-wide by logging out.

A login (`POST /api/session`, scheduler.api.auth) issues a token that the console keeps in an
HttpOnly, SameSite=Strict cookie (`Secure` over https): the password never stays in the browser.
The token is `base64url(payload) "." base64url(HMAC-SHA256)`, the payload holding a random id,
the user name, the role (`root`/`guest`), the issue and expiry times in milliseconds and (since
issue 26) the principal it was issued to: its kind (`settings` for the settings' accounts, `user`
for a stored user, `token` for an API token) and name (the token's public id for a token); the
key is `cluster_key(settings, "session")`, the same on every replica of the cluster, so the
session survives a leader change with no state of its own, and changing a password or the
digest ends every session.

Logging out revokes the token's id everywhere: the leader creates
`/{namespace}/auth/revoked_sessions/{expiresAtMs}-{id}` (a fenced write) and every replica follows
that folder with ZooKeeper watches: the watch only sets a flag and wakes the replica's
`sched-leader-watch` thread, which reads the folder again (`Sessions.follow`, also on a new
ZooKeeper client or session, and once a minute whatever happens), so within the watch's delay
(milliseconds) no replica accepts the token; the replica that logged it out refuses it at once. A
node's name carries its expiry, so nothing is read but the names, and every logout deletes up to
`PRUNE_PER_LOGOUT` revocations whose token has expired anyway. At most `MAX_REVOKED` revocations
are kept: a logout beyond that ends every session issued so far instead (the folder's own data
then holds the time before which no session is accepted), which is safe and bounded.

Thread-safety: `check` and `verify` are called from the HTTP server's workers and never block;
the watches' callbacks (kazoo's thread) only set a flag and wake the reader.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import math
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from scheduler.model.cluster_key import cluster_key
from scheduler.model.errors import Conflict
from scheduler.model.settings import Settings
from scheduler.storage.layout import REVOKED_SESSIONS
from scheduler.storage.registry import Registry
from scheduler.storage.transactions import FencedWriter

log = logging.getLogger(__name__)

__all__ = [
    "COOKIE_NAME",
    "MAX_REVOKED",
    "Session",
    "Sessions",
    "clear_cookie",
    "session_cookie",
    "session_token",
]

COOKIE_NAME = "ejcloud_session"
REREAD_S = 60.0  # revocations are read again at least this often, watch or not
MAX_REVOKED = 10_000
PRUNE_PER_LOGOUT = 200
MAX_TOKEN_CHARS = 600
MAX_COOKIE_HEADER_CHARS = 8192
_VERSION = 2  # 1: before issue 26, without the principal (a settings account's)
_KINDS = frozenset({"settings", "user", "token"})
_ID = re.compile(r"^[0-9a-f]{32}$")
_REVOKED_NODE = re.compile(r"^([0-9]{1,15})-([0-9a-f]{32})$")
_B64 = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass(frozen=True)
class Session:
    """What a valid token says: who, with which role, from when until when (epoch ms).

    `kind` and `principal_name` name the principal (model/access/roles.Principal); a session of
    a stored user or a token is checked against the access records at each request by the
    authenticator (ended when the user or token is gone), and its role follows their rights.
    """

    id: str
    username: str
    identify: str
    issued_at_ms: int
    expires_at_ms: int
    kind: str = "settings"
    principal_name: str = ""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes | None:
    if not _B64.match(text):
        return None
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None


class Sessions:
    """Issues and checks session tokens, and knows which ones were revoked (see module doc)."""

    def __init__(self, settings: Settings, *, clock: Callable[[], float] = time.time) -> None:
        self._key = cluster_key(settings, "session")
        self.timeout_s = settings.auth_session_timeout_seconds
        self._clock = clock
        self._lock = threading.Lock()
        # id -> expiry (ms): from the watch (replaced whole), and those this replica revoked
        # itself, kept until they expire so a watch event older than the write cannot undo them.
        self._watched: dict[str, int] = {}
        self._local: dict[str, int] = {}
        self._not_before_ms = 0
        # (client, session id) the revocations were last read on, and when; `_dirty`: a watch
        # fired since (set on kazoo's thread).
        self._read_on: tuple[int, Any] | None = None
        self._read_at = 0.0
        self._dirty = threading.Event()

    # -- tokens ------------------------------------------------------------------------------

    def issue(
        self,
        username: str,
        identify: str,
        *,
        kind: str = "settings",
        principal_name: str | None = None,
        not_after_ms: int | None = None,
    ) -> tuple[str, Session]:
        """A new token for `username` with role `identify`, and what it says. `kind` and
        `principal_name` (default: `username`) name its principal; `not_after_ms` caps its
        expiry (an API token's own)."""
        now_ms = int(self._clock() * 1000)
        expires_ms = now_ms + math.ceil(self.timeout_s * 1000)
        if not_after_ms is not None:
            expires_ms = min(expires_ms, not_after_ms)
        name = username if principal_name is None else principal_name
        session = Session(secrets.token_hex(16), username, identify, now_ms, expires_ms, kind, name)
        payload = [
            _VERSION,
            session.id,
            username,
            identify,
            session.issued_at_ms,
            session.expires_at_ms,
            kind,
            name,
        ]
        body = _b64(json.dumps(payload, separators=(",", ":")).encode())
        return f"{body}.{self._mac(body)}", session

    def verify(self, token: str) -> Session | None:
        """What `token` says if this cluster signed it and it has not expired; None otherwise
        (revocations are not looked at: see `check`)."""
        if len(token) > MAX_TOKEN_CHARS:
            return None
        body, dot, mac = token.partition(".")
        if not dot or not hmac.compare_digest(mac.encode(), self._mac(body).encode()):
            return None
        raw = _unb64(body)
        try:
            fields = json.loads(raw) if raw is not None else None
        except ValueError:
            return None
        if not isinstance(fields, list) or len(fields) < 6:
            return None
        if fields[0] == 1 and len(fields) == 6:
            # Before issue 26: a settings account's session.
            fields = [_VERSION, *fields[1:], "settings", fields[2]]
        if fields[0] != _VERSION or len(fields) != 8:
            return None
        _, sid, username, identify, issued, expires, kind, name = fields
        if kind not in _KINDS or not isinstance(name, str):
            return None
        if not (isinstance(sid, str) and _ID.match(sid)):
            return None
        if not (isinstance(username, str) and isinstance(identify, str)):
            return None
        if not (isinstance(issued, int) and isinstance(expires, int)):
            return None
        if expires <= int(self._clock() * 1000):
            return None
        return Session(sid, username, identify, issued, expires, kind, name)

    def check(self, token: str) -> Session | None:
        """`verify`, and not revoked (logged out, or issued before every session was ended)."""
        session = self.verify(token)
        if session is None:
            return None
        with self._lock:
            if session.id in self._watched or session.id in self._local:
                return None
            if session.issued_at_ms < self._not_before_ms:
                return None
        return session

    def _mac(self, body: str) -> str:
        return _b64(hmac.new(self._key, body.encode(), hashlib.sha256).digest())

    # -- revocation --------------------------------------------------------------------------

    def revoke(self, registry: Registry, writer: FencedWriter, session: Session) -> None:
        """Revoke `session` on every replica (the leader, with its term's `writer`).

        Refused at once here; the others follow the node. Raises the registry's errors
        (NotLeader when the term is over): then the session was revoked here only.
        """
        now_ms = int(self._clock() * 1000)
        with self._lock:
            self._local = {i: e for i, e in self._local.items() if e > now_ms}
            self._local[session.id] = session.expires_at_ms
        names = registry.children(REVOKED_SESSIONS)
        stale = [n for n in names if _expiry_of(n) <= now_ms][:PRUNE_PER_LOGOUT]
        for name in stale:
            writer.delete(f"{REVOKED_SESSIONS}/{name}", recursive=False)
        if len(names) - len(stale) >= MAX_REVOKED:
            # Bounded: rather than one more node, end every session issued until now.
            writer.put(REVOKED_SESSIONS, str(now_ms + 1).encode())
            log.warning(
                "sessions: %d revoked sessions still valid; ended every session instead",
                len(names) - len(stale),
            )
            return
        try:
            writer.create(f"{REVOKED_SESSIONS}/{session.expires_at_ms}-{session.id}", b"")
        except Conflict:
            pass  # logged out twice

    def follow(self, registry: Registry, wake: Callable[[], None]) -> bool:
        """Read the revocations again, with watches, when a watch fired, the ZooKeeper client
        or session is new, or `REREAD_S` passed; else do nothing. True when it read them.

        Called by the replica's `sched-leader-watch` thread on each pass; a watch calls `wake`
        (which wakes that thread) and nothing else. Raises the registry's errors (the next pass
        tries again)."""
        client = registry.client
        on = (id(client), client.client_id)
        stale = time.monotonic() - self._read_at >= REREAD_S
        if on == self._read_on and not self._dirty.is_set() and not stale:
            return False
        self._dirty.clear()

        def changed(_event: Any) -> None:
            self._dirty.set()
            wake()

        names = registry.watch_children(REVOKED_SESSIONS, changed)
        got = registry.watch_data(REVOKED_SESSIONS, changed)
        found: dict[str, int] = {}
        for name in names:
            match = _REVOKED_NODE.match(name)
            if match:
                found[match.group(2)] = int(match.group(1))
        not_before_ms = 0
        if got is not None and got[0]:
            try:
                not_before_ms = int(got[0].decode("ascii"))
            except (UnicodeDecodeError, ValueError):
                log.warning("sessions: %s holds no number; ignored", REVOKED_SESSIONS)
        with self._lock:
            self._watched = found
            self._not_before_ms = not_before_ms
        self._read_on = on
        self._read_at = time.monotonic()
        return True

    def revoked_count(self) -> int:
        """Revocations known here (watched and local)."""
        with self._lock:
            return len(self._watched.keys() | self._local.keys())


def _expiry_of(name: str) -> int:
    match = _REVOKED_NODE.match(name)
    return int(match.group(1)) if match else 0  # a foreign name: pruned


def session_token(cookie_header: str | None) -> str | None:
    """The session token in a `Cookie` header, or None (absent, or the header too long)."""
    if not cookie_header or len(cookie_header) > MAX_COOKIE_HEADER_CHARS:
        return None
    for part in cookie_header.split(";"):
        name, eq, value = part.strip().partition("=")
        if eq and name == COOKIE_NAME and value:
            return value.strip('"')
    return None


def session_cookie(token: str, max_age_s: int, secure: bool) -> str:
    """The `Set-Cookie` value that stores `token` in the browser."""
    flags = f"Path=/; Max-Age={max_age_s}; HttpOnly; SameSite=Strict"
    return f"{COOKIE_NAME}={token}; {flags}" + ("; Secure" if secure else "")


def clear_cookie(secure: bool) -> str:
    """The `Set-Cookie` value that removes the session cookie."""
    flags = "Path=/; Max-Age=0; HttpOnly; SameSite=Strict"
    return f"{COOKIE_NAME}=; {flags}" + ("; Secure" if secure else "")

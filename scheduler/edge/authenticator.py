"""HTTP Basic credentials checked at a bounded cost: one per replica process, shared by every term.

A password hash (werkzeug's scrypt by default: 32 MiB and about 0.2 s of CPU each) is the only
expensive thing a client can make the server do without credentials, so it is bounded four ways:

- a credential costs at most one hash per process lifetime: the outcome of every check, accepted
  or refused, is cached under an HMAC-SHA256 of user and password with a per-process random key
  (no plaintext is kept), in two LRU maps (so refused guesses never evict accepted credentials)
  with a TTL; concurrent requests with the same credential wait for one hash instead of each
  computing it;
- at most `auth_max_concurrent_hashes` hashes run at once, and at most `WAITERS_PER_SLOT` times
  as many requests wait for a slot; a request that would wait longer than `HASH_WAIT_S`, or would
  join too many waiters, is refused with 503 and `Retry-After`;
- a user name that matches no account is checked against a dummy hash of the same method and
  parameters as the configured one, and names are compared as fixed-length digests in constant
  time, so unknown users cost the same as wrong passwords (no enumeration by timing);
- each client address may fail `auth_max_failures` times within `auth_failure_window_seconds`
  (checks in flight count against that budget); after that it gets 429 with `Retry-After` and no
  hash is computed, whatever it sends. Failed logins are logged at WARNING with the user name
  (escaped, bounded) and the address.

Stored users and API tokens (issue 26). After the settings' two accounts, Basic credentials are
checked against the users of the access records (`scheduler.storage.access_follower`: the
replica's watched copy, no ZooKeeper round trip here), with exactly the bounds above: their
werkzeug hashes go through the same cache, slots and limiter, and a name that matches no account
and no user is checked against a dummy hash of the stored users' method and parameters. The cache
key includes the stored hash, so an acceptance never outlives the user's deletion or re-creation
(with another password). `Authorization: Bearer ejc_<id>_<secret>` is an API token: its secret's
SHA-256 compared in constant time with the stored digest (a dummy digest for an unknown id, so a
wrong token costs what a right one does: microseconds, no hash, no cache); an expired token is
refused; a wrong, unknown or malformed token is a failed login for the limiter, as a wrong
password is. The secret never appears in a log line or an error. Every accepted result carries
its `principal` and its `rights`, looked up in the current directory at each check, so a revoked
grant takes effect at once even for cached credentials and console sessions.

A console session (scheduler.edge.sessions: a signed token in an HttpOnly cookie, issued by a login)
is an alternative to Basic credentials for requests without an `Authorization` header: it costs
an HMAC, no hash, and a token that is forged, expired or logged out is a 401 that counts as no
failure (nothing was guessed).

The client address is the TCP peer (`REMOTE_ADDR`), which the edge has already replaced by the
client a trusted proxy names when the peer is in `http_trusted_proxies` (the setting to use
behind a proxy). `X-Forwarded-For` is otherwise ignored unless the older
`auth_trust_x_forwarded_for` is set (only safe when every request comes through a proxy that
appends the peer it saw); then its last entry, the one that proxy appended, is used.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import math
import secrets
import string
import threading
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from werkzeug.security import check_password_hash

from scheduler.edge.sessions import Session, Sessions, session_token
from scheduler.model.access.roles import USER_PREFIX, Principal, Rights
from scheduler.model.access.tokens import SECRET_CHARS, parse_token, secret_matches
from scheduler.model.settings import Settings
from scheduler.storage.access_follower import AccessFollower, settings_rights

log = logging.getLogger(__name__)

CACHE_SIZE = 1024  # entries in each of the accepted and refused caches
CACHE_TTL_S = 600.0
HASH_WAIT_S = 1.5  # longest a request waits for a hash slot (or for the same credential's hash)
WAITERS_PER_SLOT = 2  # requests that may wait per hash slot; the next one is refused at once
MAX_ADDRESSES = 10_000  # client addresses the failure limiter remembers (least recent dropped)
MAX_HEADER_CHARS = 4096  # a longer Authorization header is refused without decoding it
LOGGED_NAME_CHARS = 64
BUSY_LOG_INTERVAL_S = 10.0

ROOT = "root"  # the original console's role names, sent back in the `identify` header
GUEST = "guest"


@dataclass(frozen=True)
class AuthResult:
    """The outcome of one check: `identify` is set when accepted, else `status` says why not.

    `status` is 200 (accepted), 401 (no, malformed or wrong credentials), 429 (this client
    address failed too often; retry after `retry_after_s`) or 503 (too many password checks
    waiting; retry after `retry_after_s`). `kind` is the error type for a JSON answer.
    """

    status: int
    identify: str | None = None
    username: str = ""
    message: str = ""
    kind: str = ""
    retry_after_s: int = 0
    session: Session | None = None  # set when a console session was accepted
    principal: Principal | None = None  # set when accepted: who the request acts as
    rights: Rights | None = None  # set when accepted: what it may do now (issue 26)


_NO_CREDENTIALS = AuthResult(401, message="authentication required", kind="Unauthorized")
_WRONG = AuthResult(401, message="wrong user name or password", kind="Unauthorized")
_SESSION_ENDED = AuthResult(
    401, message="the console session has expired or was ended; log in again", kind="Unauthorized"
)
_WRONG_TOKEN = AuthResult(401, message="wrong, unknown or revoked API token", kind="Unauthorized")
_EXPIRED_TOKEN = AuthResult(401, message="the API token has expired", kind="Unauthorized")
_ANONYMOUS = Principal("anonymous", "")
_NO_SECRET = "0" * SECRET_CHARS  # compared for a malformed token: the same cost as any other


def _limited(retry_after_s: int) -> AuthResult:
    return AuthResult(
        429,
        message=f"too many failed logins from this address; retry in {retry_after_s} s",
        kind="TooManyFailedLogins",
        retry_after_s=retry_after_s,
    )


@dataclass(frozen=True)
class _Account:
    username: str
    password: str
    password_hash: str
    identify: str


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _name_digest(name: str) -> bytes:
    # Fixed-length digests, so the comparison takes the same time whatever the lengths.
    return hashlib.sha256(_utf8(name)).digest()


def _dummy_hash_like(password_hash: str) -> str:
    """A hash string with the same method, parameters and salt length as `password_hash` that
    no password matches: checking it costs exactly what checking the real one costs."""
    method, _, rest = password_hash.partition("$")
    salt, _, digest = rest.partition("$")
    alphabet = string.ascii_letters + string.digits
    fake_salt = "".join(secrets.choice(alphabet) for _ in salt)
    return f"{method}${fake_salt}${secrets.token_hex(max(len(digest), 2) // 2)}"


def _printable(text: str, limit: int = LOGGED_NAME_CHARS) -> str:
    """`text` quoted for a log line: control, format and separator characters escaped (no forged
    lines, no terminal escapes), cut to `limit` characters."""
    shown = repr(text[:limit])
    return shown + "..." if len(text) > limit else shown


def _bearer_text(header: str) -> str:
    """The token of `Bearer <token>` (bounded: a longer header yields nothing to parse)."""
    if len(header) > MAX_HEADER_CHARS:
        return ""
    return header.strip().partition(" ")[2].strip()


def _parse_basic(header: str) -> tuple[str, str] | None:
    """(user, password) from `Basic <base64>`, or None when malformed. The bytes are UTF-8, or
    Latin-1 when they are not (every byte then stands for one character)."""
    if len(header) > MAX_HEADER_CHARS:
        return None
    _, _, token = header.strip().partition(" ")
    try:
        raw = base64.b64decode(token.strip().encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error, ValueError):
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    user, colon, password = text.partition(":")
    return (user, password) if colon else None


class _ExpiringLru:
    """digest -> identify (or None for refused), at most `size` entries, each for `ttl_s`."""

    def __init__(self, size: int, ttl_s: float) -> None:
        self._size = size
        self._ttl_s = ttl_s
        self._entries: OrderedDict[bytes, tuple[str | None, float]] = OrderedDict()

    def get(self, key: bytes, now: float) -> tuple[bool, str | None]:
        entry = self._entries.get(key)
        if entry is None:
            return False, None
        if entry[1] <= now:
            del self._entries[key]
            return False, None
        self._entries.move_to_end(key)
        return True, entry[0]

    def put(self, key: bytes, value: str | None, now: float) -> None:
        self._entries[key] = (value, now + self._ttl_s)
        self._entries.move_to_end(key)
        while len(self._entries) > self._size:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


@dataclass
class _Client:
    failures: deque[float]  # times of the latest failures, oldest first
    checking: set[bytes] = field(default_factory=set)  # credentials being hashed for it
    block_logged: bool = False


class _FailureLimiter:
    """Failed logins per client address within a sliding window.

    Hashes in flight count against the same budget (`reserve`), so a burst of concurrent
    different guesses cannot run more hashes than the budget before the first one fails.
    """

    def __init__(self, max_failures: int, window_s: float, max_clients: int) -> None:
        self.max_failures = max_failures
        self.window_s = window_s
        self._max_clients = max_clients
        self._clients: OrderedDict[str, _Client] = OrderedDict()

    def blocked_for(self, address: str, now: float) -> int:
        """Seconds until `address` may try again; 0 when it may now."""
        client = self._clients.get(address)
        if client is None:
            return 0
        self._prune(client, now)
        if len(client.failures) < self.max_failures:
            return 0
        return max(1, math.ceil(client.failures[0] + self.window_s - now))

    def reserve(self, address: str, key: bytes, now: float) -> int:
        """Count a hash of credential `key` for `address` against its budget: 0 when it may
        run, else seconds until it may (the budget is spent on failures or hashes running)."""
        client = self._client(address)
        self._prune(client, now)
        if len(client.failures) + len(client.checking) >= self.max_failures:
            return self.blocked_for(address, now) or 1
        client.checking.add(key)
        return 0

    def release(self, address: str, key: bytes) -> None:
        client = self._clients.get(address)
        if client is not None:
            client.checking.discard(key)
            self._forget_if_clean(address, client)

    def record_failure(self, address: str, now: float) -> bool:
        """Count a failed login. True when it spends the last try of the window (logged once
        per block by the caller)."""
        client = self._client(address)
        self._prune(client, now)
        client.failures.append(now)
        if len(client.failures) >= self.max_failures and not client.block_logged:
            client.block_logged = True
            return True
        return False

    def _client(self, address: str) -> _Client:
        client = self._clients.get(address)
        if client is None:
            client = self._clients[address] = _Client(deque(maxlen=self.max_failures))
            while len(self._clients) > self._max_clients:
                self._clients.popitem(last=False)
        self._clients.move_to_end(address)
        return client

    def _prune(self, client: _Client, now: float) -> None:
        while client.failures and client.failures[0] <= now - self.window_s:
            client.failures.popleft()
        if len(client.failures) < self.max_failures:
            client.block_logged = False

    def _forget_if_clean(self, address: str, client: _Client) -> None:
        if not client.failures and not client.checking:
            self._clients.pop(address, None)

    def __len__(self) -> int:
        return len(self._clients)


class Authenticator:
    """Checks HTTP Basic credentials against the two configured accounts (admin and guest) and
    the stored users, API tokens (Bearer) and console sessions.

    Thread-safe; `check` and `identify` block for at most about `HASH_WAIT_S` plus one hash.
    Build one per process with `authenticator_for(settings)` so the caches and the limiter
    outlive leader terms. `access` is the process's `AccessFollower` (the replica follows it).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        verify_hash: Callable[[str, str], bool] = check_password_hash,
        clock: Callable[[], float] = time.monotonic,
        cache_size: int = CACHE_SIZE,
        cache_ttl_s: float = CACHE_TTL_S,
        hash_wait_s: float = HASH_WAIT_S,
        max_addresses: int = MAX_ADDRESSES,
        access: AccessFollower | None = None,
    ) -> None:
        self.enabled = settings.auth_enabled
        self._trust_forwarded_for = settings.auth_trust_x_forwarded_for
        self._accounts = (
            _Account(
                settings.auth_admin_username,
                settings.auth_admin_password,
                settings.auth_admin_password_hash,
                ROOT,
            ),
            _Account(
                settings.auth_guest_username,
                settings.auth_guest_password,
                settings.auth_guest_password_hash,
                GUEST,
            ),
        )
        self._name_digests = tuple(_name_digest(a.username) for a in self._accounts)
        hashed = [a.password_hash for a in self._accounts if a.password_hash]
        self._dummy_hash = _dummy_hash_like(hashed[0]) if hashed else ""
        self._dummy_password = secrets.token_urlsafe(32)
        # Dummy hashes like the stored users' (by method and parameters), made once each.
        self._user_dummies: dict[str, str] = {}
        self._verify_hash = verify_hash
        self._clock = clock
        self._key = secrets.token_bytes(32)
        self._hash_wait_s = hash_wait_s
        self._lock = threading.Lock()
        self._accepted = _ExpiringLru(cache_size, cache_ttl_s)
        self._refused = _ExpiringLru(cache_size, cache_ttl_s)
        self._in_flight: dict[bytes, threading.Event] = {}
        slots = settings.auth_max_concurrent_hashes
        self._slots = threading.BoundedSemaphore(slots)
        self._max_waiting = slots * WAITERS_PER_SLOT
        self._waiting = 0
        self._limiter = _FailureLimiter(
            settings.auth_max_failures, settings.auth_failure_window_seconds, max_addresses
        )
        self._last_busy_log = -BUSY_LOG_INTERVAL_S
        self.counters: dict[str, int] = dict.fromkeys(
            ("hashes", "accepted", "failed", "limited", "busy", "tokens"), 0
        )
        self.sessions = Sessions(settings, clock=time.time)
        self.access = (
            access
            if access is not None
            else AccessFollower(
                settings_rights(settings.auth_admin_username, settings.auth_guest_username)
            )
        )

    # -- what callers use ----------------------------------------------------------------

    def client_address(self, environ: Mapping[str, Any]) -> str:
        """The address failed logins are counted against (see the module docstring)."""
        if self._trust_forwarded_for:
            forwarded = str(environ.get("HTTP_X_FORWARDED_FOR", ""))
            last = forwarded.rsplit(",", 1)[-1].strip()
            if last:
                return last[:100]
        return str(environ.get("REMOTE_ADDR", "") or "unknown")

    def identify(self, authorization: str | None, remote_addr: str) -> str | None:
        """`"root"` or `"guest"` when the `Authorization` header value is accepted, else None
        (missing, wrong, refused for this address, or busy); `"root"` while auth is off."""
        return self.check(authorization, remote_addr).identify

    def check_request(self, environ: Mapping[str, Any]) -> AuthResult:
        """Check a WSGI request: its `Authorization` header when it has one, else its session
        cookie (see AuthResult; `session` is set when the cookie was accepted)."""
        if not self.enabled:
            return self._anonymous()
        header = environ.get("HTTP_AUTHORIZATION")
        if header:
            return self.check(str(header), self.client_address(environ))
        token = session_token(environ.get("HTTP_COOKIE"))
        if token is None:
            return _NO_CREDENTIALS
        session = self.sessions.check(token)
        if session is None:
            return _SESSION_ENDED
        return self._session_result(session)

    def check(self, authorization: str | None, remote_addr: str) -> AuthResult:
        """Check an `Authorization` header value sent from `remote_addr` (see AuthResult):
        `Basic` credentials or a `Bearer` API token."""
        if not self.enabled:
            return self._anonymous()
        scheme = authorization.split(" ", 1)[0].lower() if authorization else ""
        if scheme == "bearer" and authorization is not None:
            return self.check_token(_bearer_text(authorization), remote_addr)
        if scheme != "basic" or authorization is None:
            return _NO_CREDENTIALS  # nothing guessed: not a failure
        return self._checked(_parse_basic(authorization), remote_addr)

    def check_credentials(self, user: str, password: str, remote_addr: str) -> AuthResult:
        """Check a user name and password (a console login), as `check` checks Basic ones."""
        if not self.enabled:
            return self._anonymous()
        return self._checked((user, password), remote_addr)

    def check_token(self, text: str, remote_addr: str) -> AuthResult:
        """Check an API token's text (`ejc_<id>_<secret>`) sent from `remote_addr`: a Bearer
        header's or a console login's. Never blocks; costs one SHA-256 whatever the text."""
        if not self.enabled:
            return self._anonymous()
        with self._lock:
            retry_after_s = self._limiter.blocked_for(remote_addr, self._clock())
            if retry_after_s:
                self.counters["limited"] += 1
        if retry_after_s:
            return _limited(retry_after_s)
        parsed = parse_token(text) if len(text) <= MAX_HEADER_CHARS else None
        directory = self.access.directory
        record = directory.tokens.get(parsed.id) if parsed is not None else None
        secret = parsed.secret if parsed is not None else _NO_SECRET
        ok = secret_matches(secret, record.digest if record is not None else None)
        if ok and record is not None:
            if record.expired(int(time.time() * 1000)):
                return _EXPIRED_TOKEN  # the secret was right: nothing guessed
            with self._lock:
                self.counters["accepted"] += 1
                self.counters["tokens"] += 1
            return self._accepted_result(Principal("token", record.id), record.id, GUEST)
        with self._lock:
            self.counters["failed"] += 1
            blocked = self._limiter.record_failure(remote_addr, self._clock())
        # The id is public; the secret (or a malformed text that may hold one) is never logged.
        shown = "<malformed token>" if parsed is None else f"id {parsed.id}"
        log.warning("auth: failed token login (%s) from %s", shown, _printable(remote_addr))
        if blocked:
            self._log_blocked(remote_addr)
        return _WRONG_TOKEN

    def _checked(self, parsed: tuple[str, str] | None, remote_addr: str) -> AuthResult:
        """The failure budget, the bounded check and its accounting (None: malformed)."""
        with self._lock:
            retry_after_s = self._limiter.blocked_for(remote_addr, self._clock())
            if retry_after_s:
                self.counters["limited"] += 1
        if retry_after_s:
            return _limited(retry_after_s)
        result = _WRONG if parsed is None else self._verify(parsed[0], parsed[1], remote_addr)
        with self._lock:
            blocked = False
            if result.status == 401:
                self.counters["failed"] += 1
                blocked = self._limiter.record_failure(remote_addr, self._clock())
            elif result.status == 200:
                self.counters["accepted"] += 1
        if result.status == 401:
            user = "<malformed credentials>" if parsed is None else parsed[0]
            log.warning(
                "auth: failed login for user %s from %s", _printable(user), _printable(remote_addr)
            )
            if blocked:
                self._log_blocked(remote_addr)
        return result

    def _log_blocked(self, remote_addr: str) -> None:
        log.warning(
            "auth: client %s refused (429) after %d failed logins within %g s",
            _printable(remote_addr),
            self._limiter.max_failures,
            self._limiter.window_s,
        )

    # -- who an accepted check is ----------------------------------------------------------

    def _anonymous(self) -> AuthResult:
        """Auth is off: every request is the anonymous cluster-admin, as the admin was."""
        return AuthResult(200, identify=ROOT, principal=_ANONYMOUS, rights=Rights.cluster_admin())

    def _accepted_result(
        self, principal: Principal, username: str, identify: str | None = None
    ) -> AuthResult:
        """An acceptance with the principal's rights as the current directory has them.

        `identify` is fixed for the settings' accounts; for users and tokens it follows the
        rights (`root` for a cluster-admin, `guest` otherwise: the original console's roles).
        """
        rights = self.access.directory.rights_of(principal)
        if principal.kind != "settings":
            identify = ROOT if rights.is_cluster_admin else GUEST
        return AuthResult(
            200, identify=identify, username=username, principal=principal, rights=rights
        )

    def _session_result(self, session: Session) -> AuthResult:
        """A console session's acceptance, or `_SESSION_ENDED` when the user it was issued to
        is gone (or was created again since) or its token was revoked or expired."""
        directory = self.access.directory
        if session.kind == "user":
            user = directory.users.get(session.principal_name)
            if user is None or user.created_at_ms > session.issued_at_ms:
                return _SESSION_ENDED
        elif session.kind == "token":
            token = directory.tokens.get(session.principal_name)
            if token is None or token.expired(int(time.time() * 1000)):
                return _SESSION_ENDED
        elif session.kind != "settings":
            return _SESSION_ENDED
        principal = Principal(session.kind, session.principal_name)
        result = self._accepted_result(principal, session.username, session.identify)
        return AuthResult(
            200,
            identify=result.identify,
            username=result.username,
            session=session,
            principal=principal,
            rights=result.rights,
        )

    # -- the cost-bounded part -----------------------------------------------------------

    def _verify(self, user: str, password: str, remote_addr: str) -> AuthResult:
        # Who a right password makes the caller: a settings account's identify ("root" or
        # "guest"), a stored user's `user:NAME`, or None (no such name: a dummy is checked).
        who: str | None
        account = self._account_named(user)
        if account is not None:
            stored, plain, who = account.password_hash, account.password, account.identify
        else:
            directory = self.access.directory
            record = directory.users.get(user)
            if record is not None:
                stored, plain, who = record.password_hash, self._dummy_password, USER_PREFIX + user
            else:
                stored, plain, who = self._unknown_user_hash(), self._dummy_password, None
        if not stored:  # plain passwords only: a constant-time comparison, nothing to bound
            ok = hmac.compare_digest(_utf8(password), _utf8(plain))
            return self._outcome(who if ok else None)
        # The stored hash is part of the key: a user deleted, or created again with another
        # password, never meets an outcome cached for the old record.
        key = self._credential_key(user, password, stored)
        deadline = self._clock() + self._hash_wait_s
        while True:
            with self._lock:
                now = self._clock()
                found, cached = self._accepted.get(key, now)
                if not found:
                    found, cached = self._refused.get(key, now)
                if found:
                    return self._outcome(cached)
                pending = self._in_flight.get(key)
                if pending is None:
                    if self._waiting >= self._max_waiting:
                        return self._busy()
                    retry_after_s = self._limiter.reserve(remote_addr, key, now)
                    if retry_after_s:
                        self.counters["limited"] += 1
                        return _limited(retry_after_s)
                    done = self._in_flight[key] = threading.Event()
                    self._waiting += 1
                    break
            # Another request is hashing this very credential (a console opening several views
            # at once, say): wait for its outcome, not counted as a waiter since it costs no
            # hash, then read it from the cache (or hash it here if that request gave up).
            arrived = pending.wait(max(0.0, deadline - self._clock()) + self._hash_wait_s)
            if not arrived:
                with self._lock:
                    return self._busy()
        try:
            acquired = self._slots.acquire(timeout=max(0.0, deadline - self._clock()))
            with self._lock:
                self._waiting -= 1
                if not acquired:
                    return self._busy()
                self.counters["hashes"] += 1
            try:
                ok = self._safe_verify(stored, password)
            finally:
                self._slots.release()
            outcome = who if ok else None
            with self._lock:
                cache = self._accepted if outcome else self._refused
                cache.put(key, outcome, self._clock())
            return self._outcome(outcome)
        finally:
            with self._lock:
                del self._in_flight[key]
                self._limiter.release(remote_addr, key)
            done.set()

    def _unknown_user_hash(self) -> str:
        """What a name that matches no account and no user is checked against: while there are
        stored users, a dummy like theirs (so a stored user's name costs what any name costs);
        else the settings' dummy, as before stored users existed."""
        users = self.access.directory.users
        if not users:
            return self._dummy_hash
        sample = next(iter(users.values())).password_hash
        method = sample.partition("$")[0]
        dummy = self._user_dummies.get(method)
        if dummy is None:
            dummy = _dummy_hash_like(sample)
            if len(self._user_dummies) < 16:  # a few methods at most; never unbounded
                self._user_dummies[method] = dummy
        return dummy

    def _account_named(self, user: str) -> _Account | None:
        digest = _name_digest(user)
        found: _Account | None = None
        for account, name_digest in zip(self._accounts, self._name_digests, strict=True):
            # Every name is compared, in constant time, whichever matches.
            if hmac.compare_digest(digest, name_digest) and found is None:
                found = account
        return found

    def _safe_verify(self, stored: str, password: str) -> bool:
        try:
            return self._verify_hash(stored, password)
        except (ValueError, UnicodeError):
            # Settings validate the hash format at start; an odd password is just wrong.
            log.exception("auth: a password hash could not be checked")
            return False

    def _credential_key(self, user: str, password: str, stored: str) -> bytes:
        user_b = _utf8(user)
        stored_b = _utf8(stored)
        data = (
            len(user_b).to_bytes(4, "big")
            + user_b
            + len(stored_b).to_bytes(4, "big")
            + stored_b
            + _utf8(password)
        )
        return hmac.new(self._key, data, hashlib.sha256).digest()

    def _outcome(self, who: str | None) -> AuthResult:
        if who is None:
            return _WRONG
        if who.startswith(USER_PREFIX):
            name = who[len(USER_PREFIX) :]
            return self._accepted_result(Principal("user", name), name)
        account = self._accounts[0] if who == ROOT else self._accounts[1]
        return self._accepted_result(
            Principal("settings", account.username), account.username, account.identify
        )

    def _busy(self) -> AuthResult:
        """Called with the lock held."""
        self.counters["busy"] += 1
        now = self._clock()
        if now - self._last_busy_log >= BUSY_LOG_INTERVAL_S:
            self._last_busy_log = now
            log.warning(
                "auth: password checks saturated (%d waiting); refusing with 503",
                self._waiting,
            )
        return AuthResult(
            503,
            message="too many password checks in progress; retry shortly",
            kind="AuthenticationBusy",
            retry_after_s=1,
        )

    def cache_sizes(self) -> tuple[int, int, int]:
        """(accepted, refused, client addresses) currently remembered."""
        with self._lock:
            return len(self._accepted), len(self._refused), len(self._limiter)


_by_settings: dict[int, tuple[weakref.ref[Settings], Authenticator]] = {}
_by_settings_lock = threading.Lock()


def authenticator_for(settings: Settings) -> Authenticator:
    """The process's Authenticator for this Settings object, built on first use.

    A replica loads its settings once and hands the same object to every term, so every term's
    API (and the health endpoint) shares one cache, one hash semaphore and one limiter. Keyed by
    the object, not its value: a different Settings object (a test's) gets its own.
    """
    with _by_settings_lock:
        for ident in [i for i, (ref, _) in _by_settings.items() if ref() is None]:
            del _by_settings[ident]
        entry = _by_settings.get(id(settings))
        if entry is not None and entry[0]() is settings:
            return entry[1]
        auth = Authenticator(settings)
        _by_settings[id(settings)] = (weakref.ref(settings), auth)
        return auth

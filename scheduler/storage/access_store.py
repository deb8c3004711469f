"""The leader's writes of the access records (issue 26): users, grants and API tokens.

Every write is fenced (`FencedWriter`): only the acting leader changes who may do what, and a
deposed one cannot. Records are immutable: a change is a delete and a create. What this store
guarantees beyond single writes:

- **Quotas** (`max_access_users|grants|tokens`): a create beyond one is a 409 `QuotaExceeded`
  naming it, counted with one stat request (the folder's numChildren). The writes of one store
  (one term's API) are serialised by a lock, so concurrent requests cannot pass a quota together,
  and a grant cannot slip in beside the deletion of its user.
- **A grant or token needs its user**: its transaction also checks that the user's node exists,
  so a grant is never written for a user deleted meanwhile.
- **Deleting a user** deletes its grants and its tokens (with their last-use nodes) and the user
  in one transaction, found by reading the stored records (not a follower's copy, which may
  lag). A user with more than `_OPS_PER_TRANSACTION` of them is cleaned up in several
  transactions, the user's own node in the last: a failure half-way leaves the user with fewer
  rights, never grants that would come back with a new user of the same name.
- **Grant ids are derived from what they grant** (principal, role, app): the same grant twice is
  a 409 from ZooKeeper itself, not from a check that a concurrent request could race.
- **Passwords** are hashed with werkzeug's `generate_password_hash` (scrypt) before they reach
  this module's writes; neither passwords nor token secrets are stored, returned or logged.

Reads here go to ZooKeeper directly, for the leader's own checks before a write; the API's lists
read the replica's followed copy (`storage/access_follower.py`), which may lag a little.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from werkzeug.security import generate_password_hash

from scheduler.model.access.records import (
    TokenRecord,
    UserRecord,
    decode_grant,
    decode_token,
    decode_user,
    encode_grant,
    encode_token,
    encode_user,
)
from scheduler.model.access.roles import USER_PREFIX, Grant, Role
from scheduler.model.access.tokens import new_token, secret_digest
from scheduler.model.errors import Conflict, NotFound, QuotaExceeded
from scheduler.model.settings import Settings
from scheduler.storage.layout import (
    ACCESS_GRANTS,
    ACCESS_TOKENS,
    ACCESS_USERS,
    access_grant_path,
    access_token_path,
    access_token_used_path,
    access_user_path,
)
from scheduler.storage.registry import Registry
from scheduler.storage.transactions import FencedWriter, Op

log = logging.getLogger(__name__)

_T = TypeVar("_T")

_OPS_PER_TRANSACTION = 1000
"""Deletes per transaction when a user goes: about 80 bytes each, far below ZooKeeper's 1 MiB
request limit (jute.maxbuffer)."""


@dataclass(frozen=True)
class AccessQuotas:
    """The most users, grants and tokens the records may hold."""

    max_users: int = 10_000
    max_grants: int = 100_000
    max_tokens: int = 100_000

    @classmethod
    def from_settings(cls, settings: Settings) -> AccessQuotas:
        return cls(
            settings.max_access_users, settings.max_access_grants, settings.max_access_tokens
        )


@dataclass(frozen=True)
class DeletedUser:
    """What deleting a user removed."""

    user: UserRecord
    grants: tuple[Grant, ...]
    tokens: tuple[TokenRecord, ...]


@dataclass(frozen=True)
class MadeToken:
    """A new token: its record, and the text to show once (`ejc_<id>_<secret>`)."""

    record: TokenRecord
    text: str


def grant_id(principal: str, role: Role, app: str) -> str:
    """The id of the grant of `role` on `app` to `principal`: 16 hex characters of a SHA-256 of
    the three, so one grant has one id and writing it twice collides in ZooKeeper."""
    digest = hashlib.sha256(f"{principal}\n{role.wire}\n{app}".encode()).hexdigest()
    return digest[:16]


def _now_ms() -> int:
    return int(time.time() * 1000)


class AccessStore:
    """Fenced writes of the access records of one term, and direct reads of them.

    Called by the API's request threads; every method blocks on ZooKeeper (each request with
    the registry's deadline) and raises as the registry does (`RegistryError` 503, `NotLeader`
    503), plus what each method names.
    """

    def __init__(
        self,
        registry: Registry,
        writer: FencedWriter,
        quotas: AccessQuotas | None = None,
        clock_ms: Callable[[], int] = _now_ms,
    ) -> None:
        self._registry = registry
        self._writer = writer
        self.quotas = quotas or AccessQuotas()
        self._clock_ms = clock_ms
        self._lock = threading.Lock()

    @property
    def registry(self) -> Registry:
        return self._registry

    # -- reads (ZooKeeper, not a follower's copy) ---------------------------------------------

    def user(self, name: str) -> UserRecord | None:
        data = self._registry.get(access_user_path(name))
        return None if data is None else decode_user(data)

    def grant(self, gid: str) -> Grant | None:
        data = self._registry.get(access_grant_path(gid))
        return None if data is None else decode_grant(data)

    def token(self, tid: str) -> TokenRecord | None:
        data = self._registry.get(access_token_path(tid))
        return None if data is None else decode_token(data)

    def users(self) -> list[UserRecord]:
        return self._read_all(ACCESS_USERS, access_user_path, decode_user, "user")

    def grants(self) -> list[Grant]:
        return self._read_all(ACCESS_GRANTS, access_grant_path, decode_grant, "grant")

    def tokens(self) -> list[TokenRecord]:
        return self._read_all(ACCESS_TOKENS, access_token_path, decode_token, "token")

    def _read_all(
        self,
        folder: str,
        path_of: Callable[[str], str],
        decode: Callable[[bytes], _T | None],
        what: str,
    ) -> list[_T]:
        names = self._registry.children(folder)
        found = self._registry.get_many([path_of(name) for name in names])
        out: list[_T] = []
        for path, got in sorted(found.items()):
            if got is None:
                continue  # deleted between the listing and the read
            record = decode(got[0])
            if record is None:
                log.warning("access: %s record %s cannot be read; ignored", what, path)
                continue
            out.append(record)
        return out

    # -- users --------------------------------------------------------------------------------

    def add_user(self, name: str, password: str) -> UserRecord:
        """Create user `name` with `password` (hashed here; checked by the caller).

        Conflict when it exists; QuotaExceeded at `max_access_users`."""
        # Hashed before the lock: scrypt takes a tenth of a second, and other writes need not
        # wait for it.
        record = UserRecord(name, generate_password_hash(password), self._clock_ms())
        with self._lock:
            self._check_quota(ACCESS_USERS, self.quotas.max_users, "max_access_users", "users")
            path = access_user_path(name)
            if self._registry.exists(path):
                raise Conflict(f"user {name} exists")
            self._writer.create(path, encode_user(record))
        log.info("access: user %s created", name)
        return record

    def delete_user(self, name: str) -> DeletedUser:
        """Delete user `name` with its grants and tokens (see the module docstring).

        NotFound when it does not exist."""
        with self._lock:
            user = self.user(name)
            if user is None:
                raise NotFound(f"user {name} does not exist")
            actor = USER_PREFIX + name
            grants = tuple(g for g in self.grants() if g.principal == actor)
            tokens = tuple(t for t in self.tokens() if t.owner == actor)
            ops = self._deletions(grants, tokens)
            ops.append(Op.delete(access_user_path(name)))
            # The user's own node goes in the last transaction (module docstring).
            self._commit_in_batches(f"delete user {name}", ops)
        log.info(
            "access: user %s deleted with %d grants and %d tokens", name, len(grants), len(tokens)
        )
        return DeletedUser(user, grants, tokens)

    # -- grants -------------------------------------------------------------------------------

    def add_grant(self, principal: str, role: Role, app: str) -> Grant:
        """Grant `role` on `app` (or `*`) to `principal` (`user:NAME`, a stored user: NotFound
        otherwise). Conflict when the same grant exists; QuotaExceeded at `max_access_grants`."""
        grant = Grant(grant_id(principal, role, app), principal, role, app)
        user_path = access_user_path(principal[len(USER_PREFIX) :])
        with self._lock:
            self._check_quota(ACCESS_GRANTS, self.quotas.max_grants, "max_access_grants", "grants")
            if not self._registry.exists(user_path):
                raise NotFound(f"{principal} does not exist")
            path = access_grant_path(grant.id)
            if self._registry.exists(path):
                raise Conflict(f"{principal} already has {role.wire} on {app} (grant {grant.id})")
            self._registry.ensure(ACCESS_GRANTS)
            self._writer.commit(
                f"create grant {grant.id}",
                [Op.check(user_path, -1), Op.create(path, encode_grant(grant))],
            )
        log.info("access: grant %s: %s is %s on %s", grant.id, principal, role.wire, app)
        return grant

    def delete_grant(self, gid: str) -> Grant:
        """Delete grant `gid`; NotFound when it does not exist."""
        with self._lock:
            grant = self.grant(gid)
            if grant is None:
                raise NotFound(f"grant {gid} does not exist")
            self._writer.commit(f"delete grant {gid}", [Op.delete(access_grant_path(gid))])
        log.info(
            "access: grant %s deleted (%s was %s on %s)",
            gid,
            grant.principal,
            grant.role.wire,
            grant.app,
        )
        return grant

    # -- tokens -------------------------------------------------------------------------------

    def add_token(
        self,
        name: str,
        owner: str,
        role: Role,
        app: str,
        expires_in_s: int | None,
        *,
        owner_is_stored: bool = True,
    ) -> MadeToken:
        """Make a token `name` owned by `owner` (`user:NAME`), with `role` on `app` (or `*`),
        expiring after `expires_in_s` (None: never). The owner's node is checked in the same
        transaction unless `owner_is_stored` is False (a settings account). The secret is in
        the answer only; the record holds its digest. NotFound when the owner is a stored user
        no more; QuotaExceeded at `max_access_tokens`."""
        text, parts = new_token()
        now_ms = self._clock_ms()
        record = TokenRecord(
            id=parts.id,
            name=name,
            owner=owner,
            role=role,
            app=app,
            digest=secret_digest(parts.secret),
            created_at_ms=now_ms,
            expires_at_ms=None if expires_in_s is None else now_ms + expires_in_s * 1000,
        )
        ops: list[Op] = []
        if owner_is_stored:
            ops.append(Op.check(access_user_path(owner[len(USER_PREFIX) :]), -1))
        ops.append(Op.create(access_token_path(record.id), encode_token(record)))
        with self._lock:
            self._check_quota(ACCESS_TOKENS, self.quotas.max_tokens, "max_access_tokens", "tokens")
            self._registry.ensure(ACCESS_TOKENS)
            try:
                self._writer.commit(f"create token {record.id}", ops)
            except NotFound as exc:
                raise NotFound(f"{owner} does not exist") from exc
        log.info("access: token %s made by %s: %s on %s", record.id, owner, role.wire, app)
        return MadeToken(record, text)

    def revoke_token(self, tid: str) -> TokenRecord:
        """Delete token `tid` (and its last-use node); NotFound when it does not exist. In force
        on every replica as soon as its follower sees the deletion (a watch)."""
        with self._lock:
            token = self.token(tid)
            if token is None:
                raise NotFound(f"token {tid} does not exist")
            ops = [Op.delete(access_token_path(tid))]
            if self._registry.exists(access_token_used_path(tid)):
                ops.append(Op.delete(access_token_used_path(tid)))
            self._writer.commit(f"revoke token {tid}", ops)
        log.info("access: token %s revoked", tid)
        return token

    # -- apps ---------------------------------------------------------------------------------

    def forget_app(self, app: str) -> tuple[tuple[Grant, ...], tuple[TokenRecord, ...]]:
        """Delete every grant on `app` and every token scoped to it, with their last-use nodes.

        Called before an app is deleted and when one is created: a new app of an old name must
        not open to the grants and tokens made for the old one. Grants and tokens on `*` stay.
        """
        with self._lock:
            grants = tuple(g for g in self.grants() if g.app == app)
            tokens = tuple(t for t in self.tokens() if t.app == app)
            if not grants and not tokens:
                return grants, tokens
            self._commit_in_batches(f"forget app {app}", self._deletions(grants, tokens))
        log.info(
            "access: app %s: %d grants and %d tokens on it deleted", app, len(grants), len(tokens)
        )
        return grants, tokens

    def _deletions(self, grants: tuple[Grant, ...], tokens: tuple[TokenRecord, ...]) -> list[Op]:
        """The steps that delete `grants` and `tokens` with the tokens' last-use nodes."""
        used_paths = [access_token_used_path(t.id) for t in tokens]
        used = (
            {p for p, got in self._registry.get_many(used_paths).items() if got}
            if used_paths
            else set()
        )
        ops = [Op.delete(access_grant_path(g.id)) for g in grants]
        for token in tokens:
            ops.append(Op.delete(access_token_path(token.id)))
            if access_token_used_path(token.id) in used:
                ops.append(Op.delete(access_token_used_path(token.id)))
        return ops

    def _commit_in_batches(self, why: str, ops: list[Op]) -> None:
        """`ops` in transactions of at most `_OPS_PER_TRANSACTION` steps, in order."""
        for start in range(0, len(ops), _OPS_PER_TRANSACTION):
            self._writer.commit(why, ops[start : start + _OPS_PER_TRANSACTION])

    # -- quotas -------------------------------------------------------------------------------

    def _check_quota(self, folder: str, limit: int, setting: str, what: str) -> None:
        """QuotaExceeded when `folder` holds `limit` records (called under the lock)."""
        if self._registry.child_count(folder) >= limit:
            raise QuotaExceeded(
                setting,
                f"quota {setting}={limit} reached: {limit} {what} are stored already; "
                f"delete one or raise {setting}",
            )

"""The stored access records (users, grants, tokens): their checks and their JSON in ZooKeeper.

A decoder never raises: a record another writer left unreadable decodes as None and is ignored
(logged by the reader), so one bad node cannot stop a replica from following the rest.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from typing import Any

from scheduler.model.access.roles import ANY_APP, USER_PREFIX, Grant, Role
from scheduler.model.access.tokens import is_token_id

USER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
USER_NAME_RULE = "1-64 characters: letters, digits and . _ @ -, starting with a letter or digit"
MIN_PASSWORD_CHARS = 8
MAX_PASSWORD_CHARS = 1024
MAX_TOKEN_NAME_CHARS = 100
GRANT_ID = re.compile(r"^[0-9a-f]{16}$")
MAX_TOKEN_TTL_S = 10 * 365 * 86400


@dataclass(frozen=True)
class UserRecord:
    name: str
    password_hash: str  # werkzeug's format (scrypt); never the password
    created_at_ms: int


@dataclass(frozen=True)
class TokenRecord:
    id: str
    name: str
    owner: str  # the actor that made it: `user:NAME`
    role: Role
    app: str  # an app name or ANY_APP
    digest: str  # secret_digest of its secret
    created_at_ms: int
    expires_at_ms: int | None  # None: never

    def expired(self, now_ms: int) -> bool:
        return self.expires_at_ms is not None and now_ms >= self.expires_at_ms


def new_grant_id() -> str:
    return secrets.token_hex(8)


def user_name_problem(name: object) -> str | None:
    if not isinstance(name, str) or not USER_NAME.match(name):
        return f"must be {USER_NAME_RULE}"
    return None


def password_problem(password: object) -> str | None:
    if not isinstance(password, str) or len(password) < MIN_PASSWORD_CHARS:
        return f"must be a string of at least {MIN_PASSWORD_CHARS} characters"
    if len(password) > MAX_PASSWORD_CHARS:
        return f"must be at most {MAX_PASSWORD_CHARS} characters"
    return None


def principal_user(principal: object) -> str | None:
    """The user name in a grant's principal `user:NAME`, or None when it is not one."""
    if not isinstance(principal, str) or not principal.startswith(USER_PREFIX):
        return None
    name = principal[len(USER_PREFIX) :]
    return name if USER_NAME.match(name) else None


# -- JSON in ZooKeeper -----------------------------------------------------------------------


def encode_user(user: UserRecord) -> bytes:
    return json.dumps(
        {"name": user.name, "passwordHash": user.password_hash, "createdAt": user.created_at_ms}
    ).encode()


def decode_user(data: bytes) -> UserRecord | None:
    raw = _object(data)
    try:
        name, hashed, created = raw["name"], raw["passwordHash"], raw["createdAt"]
    except (KeyError, TypeError):
        return None
    if not (isinstance(name, str) and isinstance(hashed, str) and isinstance(created, int)):
        return None
    return UserRecord(name, hashed, created)


def encode_grant(grant: Grant) -> bytes:
    return json.dumps(
        {"id": grant.id, "principal": grant.principal, "role": grant.role.wire, "app": grant.app}
    ).encode()


def decode_grant(data: bytes) -> Grant | None:
    raw = _object(data)
    try:
        gid, principal, role, app = raw["id"], raw["principal"], raw["role"], raw["app"]
        parsed = Role.parse(role)
    except (KeyError, TypeError, ValueError):
        return None
    if not (isinstance(gid, str) and GRANT_ID.match(gid)) or principal_user(principal) is None:
        return None
    if not isinstance(app, str) or not app:
        return None
    return Grant(gid, principal, parsed, app)


def encode_token(token: TokenRecord) -> bytes:
    return json.dumps(
        {
            "id": token.id,
            "name": token.name,
            "owner": token.owner,
            "role": token.role.wire,
            "app": token.app,
            "digest": token.digest,
            "createdAt": token.created_at_ms,
            "expiresAt": token.expires_at_ms,
        }
    ).encode()


def decode_token(data: bytes) -> TokenRecord | None:
    raw = _object(data)
    try:
        role = Role.parse(raw["role"])
        tid, name, owner, app = raw["id"], raw["name"], raw["owner"], raw["app"]
        digest, created, expires = raw["digest"], raw["createdAt"], raw.get("expiresAt")
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    if not (isinstance(tid, str) and is_token_id(tid)):
        return None
    if not all(isinstance(v, str) for v in (name, owner, app, digest)):
        return None
    if not isinstance(created, int) or not (expires is None or isinstance(expires, int)):
        return None
    return TokenRecord(tid, name, owner, role, app or ANY_APP, digest, created, expires)


def _object(data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}

"""API tokens: `ejc_<id>_<secret>`, the id public, the secret shown once and stored as a digest.

The secret is 192 random bits, so a plain SHA-256 of it is as good as a slow password hash
(nobody can guess through it) and costs microseconds; comparisons are in constant time, and a
token whose id is unknown is compared against a dummy digest, so a wrong token costs what a
right one does.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

PREFIX = "ejc"
ID_CHARS = 12  # hex
SECRET_CHARS = 48  # hex
TOKEN_CHARS = len(PREFIX) + 1 + ID_CHARS + 1 + SECRET_CHARS
_TOKEN = re.compile(rf"^{PREFIX}_([0-9a-f]{{{ID_CHARS}}})_([0-9a-f]{{{SECRET_CHARS}}})$")
_ID = re.compile(rf"^[0-9a-f]{{{ID_CHARS}}}$")
_DUMMY_DIGEST = hashlib.sha256(b"no token has this secret").hexdigest()


@dataclass(frozen=True)
class TokenText:
    """A token as a client sends it, split into its public id and its secret."""

    id: str
    secret: str


def new_token() -> tuple[str, TokenText]:
    """A fresh token: (the text to show once, its parts)."""
    parts = TokenText(secrets.token_hex(ID_CHARS // 2), secrets.token_hex(SECRET_CHARS // 2))
    return f"{PREFIX}_{parts.id}_{parts.secret}", parts


def parse_token(text: str) -> TokenText | None:
    """The parts of `ejc_<id>_<secret>`, or None when `text` is not one (no exception)."""
    if len(text) != TOKEN_CHARS:
        return None
    match = _TOKEN.match(text)
    return TokenText(match.group(1), match.group(2)) if match else None


def is_token_id(text: str) -> bool:
    return bool(_ID.match(text))


def secret_digest(secret: str) -> str:
    """What is stored of a secret (hex SHA-256)."""
    return hashlib.sha256(secret.encode("ascii")).hexdigest()


def secret_matches(secret: str, stored_digest: str | None) -> bool:
    """Whether `secret` has `stored_digest` (None: an unknown id; compared against a dummy
    digest so the answer takes the same time)."""
    expected = stored_digest if stored_digest is not None else _DUMMY_DIGEST
    ok = hmac.compare_digest(secret_digest(secret).encode(), expected.encode())
    return ok and stored_digest is not None

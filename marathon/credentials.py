"""Which scheduler settings are secrets, and checks of the password hashes the deploy command takes.

A secret reaches the replicas through Marathon's `secrets` field: the app names a source in the
cluster's secret store and an environment variable refers to it, so the value never appears in
the app definition. The command cannot write to a secret store; it only refers to one.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from werkzeug.security import check_password_hash

from marathon.errors import InvalidOptions
from scheduler.model.settings import ENV_PREFIX, KEYS_BY_NAME

# Plain passwords never travel through the deploy command, not even with --insecure.
PLAIN_PASSWORDS = frozenset({"auth_admin_password", "auth_guest_password"})
# Every other secret setting of the scheduler (hashes, zk_digest, framework_secret, ...).
SECRET_SETTINGS = frozenset(
    name for name, key in KEYS_BY_NAME.items() if key.secret and name not in PLAIN_PASSWORDS
)


@dataclass(frozen=True)
class Account:
    """One login of the REST API: the setting its hash goes to and the options that give it."""

    role: str  # "admin" or "guest"
    setting: str  # the scheduler setting holding the hash
    username_setting: str
    default_password: str  # what the replica accepts when no hash is set

    @property
    def hash_option(self) -> str:
        return f"--{self.role}-password-hash"

    @property
    def secret_option(self) -> str:
        return f"--{self.role}-password-hash-secret"

    @property
    def environment_variable(self) -> str:
        return ENV_PREFIX + self.setting.upper()

    def username(self, env: Mapping[str, str]) -> str:
        """The user name the replicas will use, given the app's plain `env`."""
        for name in (ENV_PREFIX + self.username_setting.upper(), self.username_setting):
            if env.get(name, "").strip():
                return env[name].strip()
        return str(KEYS_BY_NAME[self.username_setting].default)


ACCOUNTS = (
    Account("admin", "auth_admin_password_hash", "auth_admin_username", "root"),
    Account("guest", "auth_guest_password_hash", "auth_guest_username", "guest"),
)


def setting_of(env_name: str) -> str | None:
    """The scheduler setting an environment variable sets (`zk_digest`, `EJC_ZK_DIGEST`)."""
    if env_name in KEYS_BY_NAME:
        return env_name
    rest = env_name.removeprefix(ENV_PREFIX)
    if rest != env_name and rest.lower() in KEYS_BY_NAME and rest == rest.lower().upper():
        return rest.lower()
    return None


def holds_secret(setting: str | None, value: str) -> bool:
    """Whether `value` of `setting` is a secret (a database URL is one only with a password)."""
    if setting not in SECRET_SETTINGS:
        return False
    if setting == "event_trace_rdb_url":
        try:
            has_password = urlsplit(value.strip().removeprefix("jdbc:")).password is not None
        except ValueError:
            return True
        return has_password or "password=" in value.lower()
    return True


_SOURCE = re.compile(r"[\x21-\x7e]{1,512}")


def source_problem(source: str) -> str | None:
    """Why `source` cannot name a secret in a store, or None."""
    if not _SOURCE.fullmatch(source):
        return "must be 1-512 printable ASCII characters without spaces"
    return None


_SALT = re.compile(r"[A-Za-z0-9]{8,64}")
_HEX = re.compile(r"[0-9a-f]+")
_MAX_SCRYPT_BYTES = 256 * 1024 * 1024  # what one check may cost a replica, 8x the default
_PBKDF2_DIGESTS = frozenset({"sha224", "sha256", "sha384", "sha512"})


def _method_problem(method: str) -> tuple[str | None, int]:
    """Why the method part of a hash is unusable (or None), and the hex length of its digest."""
    name, *params = method.split(":")
    if name == "scrypt":
        if len(params) != 3 or not all(p.isdigit() for p in params):
            return "scrypt needs its parameters (scrypt:N:r:p)", 0
        n, r, p = (int(x) for x in params)
        if n < 2**14 or n & (n - 1) or r < 1 or p < 1:
            return "scrypt parameters out of range (N a power of two >= 16384, r and p >= 1)", 0
        if 128 * n * r * p > _MAX_SCRYPT_BYTES:
            return "scrypt parameters cost more than 256 MiB per check", 0
        return None, 128
    if name == "pbkdf2":
        if len(params) != 2 or not params[1].isdigit():
            return "pbkdf2 needs a digest and an iteration count (pbkdf2:sha256:N)", 0
        digest, iterations = params[0], int(params[1])
        if digest not in _PBKDF2_DIGESTS:
            return "pbkdf2 takes sha224, sha256, sha384 or sha512", 0
        if not 100_000 <= iterations <= 10_000_000:
            return "pbkdf2 iterations must be 100,000-10,000,000", 0
        return None, 2 * hashlib.new(digest).digest_size
    return "the method must be scrypt or pbkdf2", 0


def hash_problem(password_hash: str, forbidden: Iterable[str]) -> str | None:
    """Why `password_hash` is unusable, or None.

    It must be what `python -m scheduler.api.auth hash` prints (werkzeug's `method$salt$hex`,
    scrypt or pbkdf2 with bounded cost) and must not match any of the `forbidden` passwords
    (the defaults, the user name, the empty password). The answer never quotes the value: a
    password pasted by mistake must not end up on the terminal.
    """
    parts = password_hash.split("$")
    if len(parts) != 3:
        return "not a password hash (python -m scheduler.api.auth hash prints method$salt$hex)"
    method, salt, digest = parts
    why, hex_length = _method_problem(method)
    if why:
        return why
    if not _SALT.fullmatch(salt):
        return "the salt must be 8-64 letters or digits"
    if len(digest) != hex_length or not _HEX.fullmatch(digest):
        return f"the digest must be {hex_length} lower-case hex digits"
    for password in dict.fromkeys(forbidden):
        if check_password_hash(password_hash, password):
            shown = repr(password) if password else "the empty password"
            return f"it is a hash of {shown}, a default or trivial password"
    return None


def read_hash(
    option_value: str | None, file: Path | None, environ: Mapping[str, str], account: Account
) -> str | None:
    """The hash given for `account`: from its option, its file, or its environment variable.

    Raises InvalidOptions when the file cannot be read or holds more than one line.
    """
    if option_value is not None:
        return option_value.strip()
    if file is not None:
        option = f"{account.hash_option}-file"
        try:
            with file.open(encoding="utf-8") as handle:
                text = handle.read(4097)
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidOptions(f"{option} {file}: cannot read it ({exc})") from exc
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if len(text) > 4096 or len(lines) != 1:
            raise InvalidOptions(f"{option} {file}: expected one line holding the hash")
        return lines[0]
    value = environ.get(account.environment_variable)
    return value.strip() if value is not None else None

"""HTTP Basic auth for `/api/*`, enforced on the server: admin reads and writes, guest reads.

The original only protected its console pages and left `/api/*` open; here every API call is
checked unless `auth_enabled` is false. Successful answers carry the `identify` header
(`root` or `guest`) that the original console reads to enable or disable its buttons.

`python -m scheduler.api.auth hash` prints a password hash for `auth_*_password_hash`.
"""

from __future__ import annotations

import getpass
import hmac
import logging
import sys
from dataclasses import dataclass

from flask import Flask, Response, g, request
from werkzeug.security import check_password_hash, generate_password_hash

from scheduler.api.errors import error_response
from scheduler.settings import Settings

log = logging.getLogger(__name__)

REALM = "Elastic Job Console Auth"
_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True)
class _Account:
    username: str
    password: str
    password_hash: str
    identify: str  # the original console's role name

    def accepts(self, username: str, password: str) -> bool:
        if not hmac.compare_digest(username.encode(), self.username.encode()):
            return False
        if self.password_hash:
            return check_password_hash(self.password_hash, password)
        return hmac.compare_digest(password.encode(), self.password.encode())


def _accounts(settings: Settings) -> tuple[_Account, _Account]:
    admin = _Account(
        settings.auth_admin_username,
        settings.auth_admin_password,
        settings.auth_admin_password_hash,
        "root",
    )
    guest = _Account(
        settings.auth_guest_username,
        settings.auth_guest_password,
        settings.auth_guest_password_hash,
        "guest",
    )
    return admin, guest


def warn_about_defaults(settings: Settings) -> None:
    """Log a WARNING while auth is off or a default password is in use."""
    if not settings.auth_enabled:
        log.warning("auth: disabled (auth_enabled=false): anyone who reaches /api may write")
        return
    for account in _accounts(settings):
        if not account.password_hash and account.password == account.username:
            log.warning(
                "auth: user %s still has its default password; set auth_%s_password(_hash)",
                account.username,
                "admin" if account.identify == "root" else "guest",
            )


def install_auth(app: Flask, settings: Settings) -> None:
    """Check credentials before every request of `app`."""
    admin, guest = _accounts(settings)

    @app.before_request
    def _authenticate() -> Response | None:
        if not settings.auth_enabled:
            g.identify = "root"
            return None
        creds = request.authorization
        if creds is None or creds.type != "basic":
            return _challenge("authentication required")
        username, password = creds.username or "", creds.password or ""
        if admin.accepts(username, password):
            g.identify = admin.identify
            return None
        if guest.accepts(username, password):
            g.identify = guest.identify
            if request.method not in _READ_METHODS:
                return error_response(403, f"user {username} may only read", "Forbidden")
            return None
        return _challenge("wrong user name or password")

    @app.after_request
    def _identify(response: Response) -> Response:
        identify = g.get("identify")
        if identify:
            response.headers["identify"] = identify
            response.headers["Cache-Control"] = "no-store"
        return response


def _challenge(message: str) -> Response:
    response = error_response(401, message, "Unauthorized")
    response.headers["WWW-Authenticate"] = f'Basic realm="{REALM}"'
    return response


def main(argv: list[str]) -> int:
    if argv != ["hash"]:
        print("usage: python -m scheduler.api.auth hash", file=sys.stderr)
        return 2
    password = getpass.getpass("password: ") if sys.stdin.isatty() else sys.stdin.readline()
    print(generate_password_hash(password.rstrip("\n")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

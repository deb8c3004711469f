"""HTTP Basic auth for `/api/*`, enforced on the server: admin reads and writes, guest reads.

The original only protected its console pages and left `/api/*` open; here every API call is
checked unless `auth_enabled` is false. Successful answers carry the `identify` header
(`root` or `guest`) that the original console reads to enable or disable its buttons.
What a check may cost (one password hash per credential, a few at once, a failure budget per
client address) is bounded by the process's `Authenticator`: 401 for missing or wrong
credentials, 429 with `Retry-After` for an address that failed too often, 503 with `Retry-After`
while too many password checks wait.

`python -m scheduler.api.auth hash` prints a password hash for `auth_*_password_hash`.
"""

from __future__ import annotations

import getpass
import logging
import sys

from flask import Flask, Response, g, request
from werkzeug.security import generate_password_hash

from scheduler.api.errors import error_response
from scheduler.authenticator import GUEST, Authenticator, AuthResult, authenticator_for
from scheduler.model.settings import Settings

log = logging.getLogger(__name__)

REALM = "Elastic Job Console Auth"
_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def warn_about_defaults(settings: Settings) -> None:
    """Log a WARNING while auth is off or a default password is in use."""
    if not settings.auth_enabled:
        log.warning("auth: disabled (auth_enabled=false): anyone who reaches /api may write")
        return
    for key, username, password, password_hash in (
        (
            "admin",
            settings.auth_admin_username,
            settings.auth_admin_password,
            settings.auth_admin_password_hash,
        ),
        (
            "guest",
            settings.auth_guest_username,
            settings.auth_guest_password,
            settings.auth_guest_password_hash,
        ),
    ):
        if not password_hash and password == username:
            log.warning(
                "auth: user %s still has its default password; set auth_%s_password(_hash)",
                username,
                key,
            )


def install_auth(
    app: Flask, settings: Settings, authenticator: Authenticator | None = None
) -> None:
    """Check credentials before every request of `app`.

    `authenticator` defaults to the process's one for `settings` (authenticator_for), so every
    term's app shares its caches and failure counts.
    """
    auth = authenticator if authenticator is not None else authenticator_for(settings)

    @app.before_request
    def _authenticate() -> Response | None:
        result = auth.check(
            request.headers.get("Authorization"), auth.client_address(request.environ)
        )
        if result.identify is None:
            return _refusal(result)
        g.identify = result.identify
        if result.identify == GUEST and request.method not in _READ_METHODS:
            return error_response(403, f"user {result.username} may only read", "Forbidden")
        return None

    @app.after_request
    def _identify(response: Response) -> Response:
        identify = g.get("identify")
        if identify:
            response.headers["identify"] = identify
            response.headers["Cache-Control"] = "no-store"
        return response


def _refusal(result: AuthResult) -> Response:
    response = error_response(result.status, result.message, result.kind)
    if result.status == 401:
        response.headers["WWW-Authenticate"] = f'Basic realm="{REALM}"'
    if result.retry_after_s:
        response.headers["Retry-After"] = str(result.retry_after_s)
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

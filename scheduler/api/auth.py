"""HTTP Basic auth for `/api/*`, enforced on the server: admin reads and writes, guest reads.

The original only protected its console pages and left `/api/*` open; here every API call is
checked unless `auth_enabled` is false. Successful answers carry the `identify` header
(`root` or `guest`) that the original console reads to enable or disable its buttons.
What a check may cost (one password hash per credential, a few at once, a failure budget per
client address) is bounded by the process's `Authenticator`: 401 for missing or wrong
credentials, 429 with `Retry-After` for an address that failed too often, 503 with `Retry-After`
while too many password checks wait.

Users and API tokens (issue 26): Basic credentials of a stored user and `Authorization: Bearer
ejc_...` tokens are accepted too (scheduler.edge.authenticator); every accepted request gets
`g.principal` (model/access/roles.Principal) and `g.rights` (its Rights now) besides
`g.identify` (`root` for a cluster-admin, `guest` otherwise). A token's use is noted, and on the
leader written to `/access/tokens_used` at most once a minute (the term's fenced writer).

Console sessions (scheduler.edge.sessions): `POST /api/session` with `{"user": ..., "password":
...}`, `{"token": "ejc_..."}` (or Basic credentials and no body) checks them as above and answers
`{"user", "role", "expiresAt", "principal", "rights"}` with a session cookie (HttpOnly,
SameSite=Strict, `Secure` over https, expiring after `auth_session_timeout_seconds`; a token's
session ends when the token is revoked or expires, a user's when the user is deleted); `GET
/api/session` says who the request's credentials are (`"role": null`, `"principal": null`: none,
or refused ones); `DELETE /api/session` revokes the cookie's session on every replica
and removes the cookie. A request without `Authorization` is authenticated by its cookie. A write
authenticated by the cookie must also come from this server's own origin: its `Origin` header must
be present and name the scheme, host and port the request was sent to (SameSite=Strict already keeps
other sites' requests from carrying it; this also refuses a same-site page of another port).

`python -m scheduler hash-password` (this module's `main`) prints a password hash for
`auth_*_password_hash`.
"""

from __future__ import annotations

import getpass
import logging
import math
import sys
from datetime import UTC, datetime
from typing import Any

from flask import Flask, Response, g, jsonify, request
from werkzeug.security import generate_password_hash

from scheduler.api.access_control import requires
from scheduler.api.bodies import json_body
from scheduler.api.errors import error_response
from scheduler.edge.authenticator import Authenticator, AuthResult, authenticator_for
from scheduler.edge.sessions import Session, clear_cookie, session_cookie
from scheduler.model.access.roles import Principal, Rights
from scheduler.model.errors import InvalidRequest, SchedulerError
from scheduler.model.settings import Settings
from scheduler.storage.registry import Registry
from scheduler.storage.transactions import FencedWriter

log = logging.getLogger(__name__)

REALM = "Elastic Job Console Auth"
_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
SESSION_PATH = "/api/session"
_LOGIN_FIELDS = frozenset({"user", "password"})
_TOKEN_LOGIN_FIELDS = frozenset({"token"})
_MAX_CREDENTIAL_CHARS = 1024
_DEFAULT_PORTS = {"http": "80", "https": "443"}


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
    app: Flask,
    settings: Settings,
    authenticator: Authenticator | None = None,
    revocations: tuple[Registry, FencedWriter] | None = None,
) -> None:
    """Check credentials before every request of `app`, and serve `/api/session`.

    `authenticator` defaults to the process's one for `settings` (authenticator_for), so every
    term's app shares its caches, failure counts and sessions. `revocations` is the term's
    registry and fenced writer, with which a logout revokes a session cluster-wide (None: a
    logout only removes the cookie and refuses the session on this replica). With
    `revocations` (a term's leader), the tokens' last-use times are read again for the term and
    a token's use is written with its writer at most once a minute.
    """
    auth = authenticator if authenticator is not None else authenticator_for(settings)
    app.extensions["ejc_authenticator"] = auth  # its `access`: the records this replica follows
    if revocations is not None:
        auth.access.reload_used()

    @app.before_request
    def _authenticate() -> Response | None:
        if request.path == SESSION_PATH and request.method in ("GET", "POST", "DELETE"):
            # A login checks the credentials it is given; "who am I" and a logout need none.
            return None
        result = auth.check_request(request.environ)
        if result.identify is None:
            return _refusal(result)
        _accept(result)
        if result.principal is not None and result.principal.kind == "token":
            _note_token_use(auth, result.principal.name, revocations)
        if result.session is not None and request.method not in _READ_METHODS:
            refused = _cross_origin_session_write()
            if refused is not None:
                return refused
        return None  # what the caller may do is api/access_control's (@requires) to say

    @app.post(SESSION_PATH)
    @requires(None, scope="public")  # checks the credentials it is given
    def _login() -> Response:
        user, password, api_token = _login_credentials()
        address = auth.client_address(request.environ)
        if api_token is not None:
            result = auth.check_token(api_token, address)
        else:
            result = auth.check_credentials(user, password, address)
        if result.identify is None:
            return _refusal(result)
        _accept(result)
        if not auth.enabled:
            return jsonify({"user": "", "role": result.identify, "expiresAt": None, **_who(result)})
        principal = result.principal or Principal("settings", result.username)
        not_after_ms = None
        if principal.kind == "token":
            record = auth.access.directory.tokens.get(principal.name)
            not_after_ms = record.expires_at_ms if record is not None else None
        token, session = auth.sessions.issue(
            result.username,
            result.identify,
            kind=principal.kind,
            principal_name=principal.name,
            not_after_ms=not_after_ms,
        )
        log.info("auth: console session for %s started", _shown(principal.actor))
        response = jsonify({**_describe(session), **_who(result)})
        max_age_s = max(1, math.floor(auth.sessions.timeout_s))
        response.headers["Set-Cookie"] = session_cookie(token, max_age_s, _secure())
        return response

    @app.get(SESSION_PATH)
    @requires(None, scope="public")  # says who the credentials are, if anyone
    def _whoami() -> Response:
        result = auth.check_request(request.environ)
        if result.status in (429, 503):
            return _refusal(result)
        if result.identify is not None:
            _accept(result)
        if result.session is not None:
            return jsonify({**_describe(result.session), **_who(result)})
        # Nobody (no, wrong or ended credentials): 200, so that a page asking is no error.
        return jsonify(
            {"user": result.username, "role": result.identify, "expiresAt": None, **_who(result)}
        )

    @app.delete(SESSION_PATH)
    @requires(None, scope="public")  # ends the cookie's session, if any
    def _logout() -> Response:
        result = auth.check_request(request.environ)
        session = result.session
        if session is not None:
            if revocations is not None:
                auth.sessions.revoke(revocations[0], revocations[1], session)
            log.info("auth: console session for user %s ended", _shown(session.username))
        response = Response(status=204)
        response.headers["Set-Cookie"] = clear_cookie(_secure())
        return response

    @app.after_request
    def _identify(response: Response) -> Response:
        identify = g.get("identify")
        if identify:
            response.headers["identify"] = identify
            response.headers["Cache-Control"] = "no-store"
        return response


def _accept(result: AuthResult) -> None:
    """Who the request is, for the handlers (and the audit log): `g.identify`, `g.principal`
    and `g.rights` (api/access_control reads the last two)."""
    g.identify = result.identify
    g.principal = result.principal
    g.rights = result.rights if result.rights is not None else Rights.none()


def _who(result: AuthResult) -> dict[str, Any]:
    """`principal` (`user:NAME`, `token:ID`, `anonymous`; None: nobody) and `rights`."""
    if result.principal is None or result.identify is None:
        return {"principal": None, "rights": None}
    rights = result.rights if result.rights is not None else Rights.none()
    return {"principal": result.principal.actor, "rights": rights.summary()}


def _note_token_use(
    auth: Authenticator, token_id: str, revocations: tuple[Registry, FencedWriter] | None
) -> None:
    """Note an API token's use; on the leader, write it when due (once a minute at most). A
    failed write is logged, never the request's failure."""
    auth.access.note_used(token_id)
    if revocations is None:
        return
    try:
        auth.access.persist_used(token_id, revocations[1])
    except SchedulerError as exc:
        log.warning("auth: last use of token %s not written: %s", token_id, exc.message)


def _login_credentials() -> tuple[str, str, str | None]:
    """(user, password, None) from the login's JSON body, or from Basic credentials without a
    body; ("", "", token) from `{"token": ...}`; InvalidRequest naming the problem otherwise."""
    if not request.content_length and request.authorization is not None:
        basic = request.authorization
        return str(basic.username or ""), str(basic.password or ""), None
    body: Any = json_body()  # 415 unless JSON; 400 when it does not parse or nests too deep
    if not isinstance(body, dict):
        raise InvalidRequest('send {"user": ..., "password": ...} or {"token": ...} as JSON')
    problems: dict[str, str] = {}
    if "token" in body:
        for name in sorted(set(body) - _TOKEN_LOGIN_FIELDS):
            problems[str(name)[:100]] = "unknown field (a token login sends only the token)"
        value = body["token"]
        if not isinstance(value, str) or not value:
            problems["token"] = "is required (a string)"
        elif len(value) > _MAX_CREDENTIAL_CHARS:
            problems["token"] = f"must be at most {_MAX_CREDENTIAL_CHARS} characters"
        if problems:
            raise InvalidRequest("invalid login: " + ", ".join(sorted(problems)), problems)
        return "", "", value
    for name in sorted(set(body) - _LOGIN_FIELDS):
        problems[str(name)[:100]] = "unknown field"
    for name in sorted(_LOGIN_FIELDS):
        value = body.get(name)
        if not isinstance(value, str) or not value:
            problems[name] = "is required (a string)"
        elif len(value) > _MAX_CREDENTIAL_CHARS:
            problems[name] = f"must be at most {_MAX_CREDENTIAL_CHARS} characters"
    if problems:
        raise InvalidRequest("invalid login: " + ", ".join(sorted(problems)), problems)
    return body["user"], body["password"], None


def _describe(session: Session) -> dict[str, Any]:
    expires = datetime.fromtimestamp(session.expires_at_ms / 1000, UTC)
    return {
        "user": session.username,
        "role": session.identify,
        "expiresAt": expires.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
    }


def _secure() -> bool:
    """Whether the request came over https (directly, or through a trusted proxy that said so:
    the HTTP front sets the WSGI scheme from it)."""
    return request.scheme == "https"


def _own_origin() -> str:
    scheme = request.scheme
    host = request.host.lower()
    default = _DEFAULT_PORTS.get(scheme)
    if default and host.endswith(f":{default}") and not host.endswith("]"):
        host = host[: -len(default) - 1]
    return f"{scheme}://{host}"


def _cross_origin_session_write() -> Response | None:
    """403 unless a write carried by the session cookie names this server's origin."""
    origin = request.headers.get("Origin")
    own = _own_origin()
    if origin is not None and origin.strip().lower().rstrip("/") == own:
        return None
    shown = "no Origin header" if origin is None else f"Origin {_shown(origin)}"
    return error_response(
        403,
        f"a write with the console's session cookie needs the console's own origin ({own}); "
        f"it came with {shown}",
        "CrossOriginRefused",
    )


def _shown(text: str) -> str:
    return repr(text[:64])


def _refusal(result: AuthResult) -> Response:
    response = error_response(result.status, result.message, result.kind)
    mode = request.headers.get("Sec-Fetch-Mode")
    if result.status == 401 and mode in (None, "navigate"):
        # Not to a page's script (fetch sends Sec-Fetch-Mode: cors): a browser would answer
        # the challenge with its own password dialog instead of the console's login.
        response.headers["WWW-Authenticate"] = f'Basic realm="{REALM}"'
    if result.retry_after_s:
        response.headers["Retry-After"] = str(result.retry_after_s)
    return response


def main(argv: list[str]) -> int:
    if argv != ["hash"]:
        print("usage: python -m scheduler hash-password", file=sys.stderr)
        return 2
    password = getpass.getpass("password: ") if sys.stdin.isatty() else sys.stdin.readline()
    print(generate_password_hash(password.rstrip("\n")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""`/api/access/users|grants|tokens`: managing who may do what (issue 26).

The contract (JSON, camelCase):

- `POST /api/access/users` `{"name", "password"}` -> 201 `{"name", "createdAt"}`;
  `GET /api/access/users` -> `{"items": [{"name", "createdAt"}], "nextCursor"}`;
  `DELETE /api/access/users/{name}` -> 204 (its grants and tokens go with it). Cluster-admin only.
- `POST /api/access/grants` `{"principal": "user:NAME", "role", "app": "APP" | "*"}` -> 201
  `{"id", "principal", "role", "app"}`; `GET /api/access/grants[?app=&principal=]`;
  `DELETE /api/access/grants/{id}` -> 204. A grant on one app, up to `app-admin`, is made and
  deleted by an app-admin of that app; one on `*`, or of `cluster-admin` (always on `*`), by a
  cluster-admin. The user must exist (400 otherwise).
- `POST /api/access/tokens` `{"name", "role", "app": "APP" | "*", "expiresInSeconds"?}` -> 201
  `{"id", "token", "name", "owner", "role", "app", "createdAt", "expiresAt"}`, the secret in
  this answer only; `GET /api/access/tokens` (items without secret or digest, with
  `lastUsedAt`); `DELETE /api/access/tokens/{id}` -> 204 (revoked on every replica at once).
  A token with role R on app X is made by a principal holding R and app-admin there (on `*`:
  a cluster-admin); its owner is the user behind the request (for a token, that token's
  owner). Revoked by its owner, an app-admin of its app, or a cluster-admin.

What a list shows: a cluster-admin everything; an app-admin the grants and tokens of its apps;
everybody their own grants and tokens (a token acting: its owner's, on the apps the token
sees). An item the caller may not see is a 404 when named (never a 403 that confirms it). Lists
take `?limit=&cursor=` as the API's other lists do (`paging`), and answer at most
`max_list_items` without them.

Bodies are checked whole before anything is written: unknown fields, types and lengths, each
problem named in a 400. Reads come from the replica's followed copy of the records (the
authenticator's), refreshed after each write so the next request sees it; writes go through the
term's `AccessStore` (fenced, with the `max_access_*` quotas). Passwords, secrets and digests are
never logged, answered (but the new token once) or given to the audit log.
"""

from __future__ import annotations

import logging
import re
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from flask import Blueprint, Flask, Response, current_app, g, jsonify, request

from scheduler.api.access_control import current_principal, current_rights, require_app, requires
from scheduler.api.audit_hooks import note_change, note_resource
from scheduler.api.bodies import json_body
from scheduler.api.inputs import reference_problem
from scheduler.api.paging import encode_cursor, page_asked
from scheduler.api.quotas import quotas
from scheduler.edge.authenticator import Authenticator
from scheduler.model.access.directory import AccessDirectory
from scheduler.model.access.records import (
    GRANT_ID,
    MAX_TOKEN_NAME_CHARS,
    MAX_TOKEN_TTL_S,
    TokenRecord,
    UserRecord,
    password_problem,
    principal_user,
    user_name_problem,
)
from scheduler.model.access.roles import ANY_APP, USER_PREFIX, Grant, Principal, Rights, Role
from scheduler.model.access.tokens import is_token_id
from scheduler.model.errors import (
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    SchedulerError,
)
from scheduler.replica.term import LeaderContext
from scheduler.storage.access_follower import AccessFollower
from scheduler.storage.access_store import AccessQuotas, AccessStore
from scheduler.storage.transactions import FencedWriter

log = logging.getLogger(__name__)

bp = Blueprint("access", __name__, url_prefix="/api/access")

MIN_TOKEN_TTL_S = 60
_USER_FIELDS = frozenset({"name", "password"})
_GRANT_FIELDS = frozenset({"principal", "role", "app"})
_TOKEN_FIELDS = frozenset({"name", "role", "app", "expiresInSeconds"})
_PAGE_ARGS = frozenset({"limit", "cursor"})
_MAX_QUERY_CHARS = 200
# A token's name is shown in lists and the console: printable text, no control characters.
_TOKEN_NAME_REFUSED = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_EXTENSION = "ejc_access"
_T = TypeVar("_T")


def install(app: Flask, ctx: LeaderContext) -> None:
    """Register the blueprint on the term's `app` with a store fenced by the term."""
    store = AccessStore(
        ctx.registry,
        FencedWriter(ctx.registry, ctx.term.fence),
        AccessQuotas.from_settings(ctx.settings),
    )
    app.extensions[_EXTENSION] = store
    app.register_blueprint(bp)


def _store() -> AccessStore:
    found: AccessStore = current_app.extensions[_EXTENSION]
    return found


def _follower() -> AccessFollower:
    """The access records this replica follows (the authenticator's copy, kept by watches)."""
    auth: Authenticator = current_app.extensions["ejc_authenticator"]
    return auth.access


def _directory() -> AccessDirectory:
    return _follower().directory


def _refresh() -> None:
    """Make this replica's copy of the records current at once after a write, so the next
    request sees it (the other replicas follow by their watches). The write is done either way:
    a failed read is logged, not answered, and the follower's watch catches up."""
    try:
        _follower().refresh(_store().registry)
    except SchedulerError as exc:
        log.warning("access: re-reading the records after a write failed: %s", exc.message)


def forget_app(app_name: str) -> None:
    """Delete the grants on `app_name` and the tokens scoped to it (the app is being deleted,
    or created under a name that had them), and make this replica's copy current."""
    grants, tokens = _store().forget_app(app_name)
    if grants or tokens:
        _refresh()


# -- users --------------------------------------------------------------------------------------


@bp.post("/users")
@requires(Role.CLUSTER_ADMIN)
def create_user() -> tuple[Response, int]:
    body = _object_body(_USER_FIELDS, '{"name": ..., "password": ...}')
    problems: dict[str, str] = {}
    _check(problems, "name", user_name_problem(body.get("name")))
    _check(problems, "password", password_problem(body.get("password")))
    _refuse_if(problems, "user")
    name: str = body["name"]
    if USER_PREFIX + name in _directory().settings_rights:
        raise Conflict(f"user {name} is an account of the settings; choose another name")
    user = _store().add_user(name, body["password"])
    note_change(f"user/{name}", None, {"name": name})
    _refresh()
    return jsonify(_user_json(user)), 201


@bp.get("/users")
@requires(Role.CLUSTER_ADMIN)
def list_users() -> Response:
    _check_query(frozenset())
    users = _directory().users.values()
    return _paged("access-users", list(users), lambda u: (u.name,), _user_json)


@bp.delete("/users/<name>")
@requires(Role.CLUSTER_ADMIN)
def delete_user(name: str) -> Response:
    problem = user_name_problem(name)
    if problem is not None:
        raise InvalidRequest(f"user name {problem}", {"name": problem})
    deleted = _store().delete_user(name)
    note_change(
        f"user/{name}",
        {
            "name": name,
            "grants": sorted(g.id for g in deleted.grants),
            "tokens": sorted(t.id for t in deleted.tokens),
        },
        None,
    )
    _refresh()
    return Response(status=204)


def _user_json(user: UserRecord) -> dict[str, Any]:
    return {"name": user.name, "createdAt": _iso(user.created_at_ms)}


# -- grants -------------------------------------------------------------------------------------


@bp.post("/grants")
@requires(Role.APP_ADMIN, scope="app")
def create_grant() -> tuple[Response, int]:
    body = _object_body(_GRANT_FIELDS, '{"principal": "user:NAME", "role": ..., "app": ...}')
    problems: dict[str, str] = {}
    principal = body.get("principal")
    if principal_user(principal) is None:
        problems["principal"] = "must be user:NAME, NAME a user's name"
    role = _role(problems, body.get("role"))
    app = _app(problems, body.get("app"))
    if role is Role.CLUSTER_ADMIN and app is not None and app != ANY_APP:
        problems["app"] = "cluster-admin is cluster-wide: give app '*'"
    _refuse_if(problems, "grant")
    assert role is not None and app is not None and isinstance(principal, str)
    _require_granting(role, app)
    directory = _directory()
    if principal in directory.settings_rights:
        problem = "is an account of the settings, whose rights are fixed"
        raise InvalidRequest(f"principal {principal} {problem}", {"principal": problem})
    try:
        grant = _store().add_grant(principal, role, app)
    except NotFound as exc:
        problem = "no such user"
        raise InvalidRequest(f"principal {principal}: {problem}", {"principal": problem}) from exc
    note_change(f"grant/{grant.id}", None, _grant_fields(grant), _app_of(grant.app))
    _refresh()
    return jsonify(_grant_json(grant)), 201


@bp.get("/grants")
@requires(None, scope="authenticated")
def list_grants() -> Response:
    _check_query(frozenset({"app", "principal"}))
    app = _query_app()
    principal = _query_principal()
    viewer = _Viewer.now()
    items = [
        grant
        for grant in _directory().grants.values()
        if (app is None or grant.app == app)
        and (principal is None or grant.principal == principal)
        and viewer.sees_grant(grant)
    ]
    return _paged("access-grants", items, lambda x: (x.id,), _grant_json)


@bp.delete("/grants/<grant_id>")
@requires(Role.APP_ADMIN, scope="app")
def delete_grant(grant_id: str) -> Response:
    if not GRANT_ID.match(grant_id):
        problem = "must be 16 hexadecimal characters"
        raise InvalidRequest(f"grant id {problem}", {"id": problem})
    grant = _store().grant(grant_id)
    if grant is None or not _Viewer.now().sees_grant(grant):
        if grant is not None:
            _refused("hidden", f"grant/{grant_id}", _app_of(grant.app))
        raise NotFound(f"grant {grant_id} does not exist")
    _require_granting(grant.role, grant.app)
    _store().delete_grant(grant_id)
    note_change(f"grant/{grant_id}", _grant_fields(grant), None, _app_of(grant.app))
    _refresh()
    return Response(status=204)


def _require_granting(role: Role, app: str) -> None:
    """Refuse unless the caller may grant (or delete a grant of) `role` on `app`: app-admin of
    the app for up to app-admin there, cluster-admin for `*` and for cluster-admin."""
    if app == ANY_APP or role is Role.CLUSTER_ADMIN:
        _require_cluster_admin(f"a grant of {role.wire} on {app}")
    else:
        require_app(Role.APP_ADMIN, app)


def _grant_json(grant: Grant) -> dict[str, Any]:
    return {"id": grant.id, **_grant_fields(grant)}


def _grant_fields(grant: Grant) -> dict[str, Any]:
    return {"principal": grant.principal, "role": grant.role.wire, "app": grant.app}


# -- tokens -------------------------------------------------------------------------------------


@bp.post("/tokens")
@requires(Role.APP_ADMIN, scope="app")
def create_token() -> tuple[Response, int]:
    body = _object_body(_TOKEN_FIELDS, '{"name": ..., "role": ..., "app": ...}')
    problems: dict[str, str] = {}
    name = body.get("name")
    _check(problems, "name", _token_name_problem(name))
    role = _role(problems, body.get("role"))
    app = _app(problems, body.get("app"))
    if role is Role.CLUSTER_ADMIN and app is not None and app != ANY_APP:
        problems["app"] = "a cluster-admin token is cluster-wide: give app '*'"
    ttl_s = body.get("expiresInSeconds")
    _check(problems, "expiresInSeconds", _ttl_problem(ttl_s))
    _refuse_if(problems, "token")
    assert isinstance(name, str) and role is not None and app is not None
    if app == ANY_APP:
        _require_cluster_admin(f"a token on {ANY_APP}")
    else:
        require_app(max(role, Role.APP_ADMIN), app)  # first: another app's name is a 404
    if current_principal().kind == "token":
        # A token made by a token would outlive it: revoking or expiring the first must end
        # everything it could do, so tokens are made by their owners only.
        _refused("forbidden", "token", _app_of(app))
        raise Forbidden("a token cannot make tokens; its owner makes them (log in as the user)")
    directory = _directory()
    owner = _owner(current_principal(), directory)
    made = _store().add_token(
        name,
        owner,
        role,
        app,
        ttl_s,
        owner_is_stored=owner not in directory.settings_rights,
    )
    record = made.record
    note_change(f"token/{record.id}", None, _token_fields(record), _app_of(app))
    _refresh()
    answer = {"id": record.id, "token": made.text, **_token_fields(record)}
    return jsonify(answer), 201


@bp.get("/tokens")
@requires(None, scope="authenticated")
def list_tokens() -> Response:
    _check_query(frozenset())
    viewer = _Viewer.now()
    items = [t for t in _directory().tokens.values() if viewer.sees_token(t)]
    follower = _follower()

    def page_json(chosen: Sequence[TokenRecord]) -> list[dict[str, Any]]:
        return [_token_json(t, follower.last_used_ms(t.id)) for t in chosen]

    return _paged_batch("access-tokens", items, lambda t: (t.id,), page_json)


@bp.delete("/tokens/<token_id>")
@requires(None, scope="authenticated")
def revoke_token(token_id: str) -> Response:
    if not is_token_id(token_id):
        problem = "must be 12 hexadecimal characters (the id in ejc_<id>_<secret>)"
        raise InvalidRequest(f"token id {problem}", {"id": problem})
    token = _store().token(token_id)
    viewer = _Viewer.now()
    if token is None or not viewer.sees_token(token):
        if token is not None:
            _refused("hidden", f"token/{token_id}", _app_of(token.app))
        raise NotFound(f"token {token_id} does not exist")
    _store().revoke_token(token_id)
    note_change(f"token/{token_id}", _token_fields(token), None, _app_of(token.app))
    _refresh()
    return Response(status=204)


def _owner(principal: Principal, directory: AccessDirectory) -> str:
    """The user behind the request, who owns the token it makes: the user, or a token's owner.
    Anonymous callers (auth off) own nothing: a token of theirs would grant nothing."""
    if principal.kind == "token":
        token = directory.tokens.get(principal.name)
        if token is None:  # revoked since this request was accepted
            raise Forbidden("the token this request was sent with is revoked")
        return token.owner
    if principal.kind == "anonymous":
        raise Conflict(
            "auth_enabled is false: every request already acts as cluster-admin, and a token "
            "needs a user to own it"
        )
    return principal.actor


def _token_fields(token: TokenRecord) -> dict[str, Any]:
    return {
        "name": token.name,
        "owner": token.owner,
        "role": token.role.wire,
        "app": token.app,
        "createdAt": _iso(token.created_at_ms),
        "expiresAt": None if token.expires_at_ms is None else _iso(token.expires_at_ms),
    }


def _token_json(token: TokenRecord, last_used_ms: int | None) -> dict[str, Any]:
    return {
        "id": token.id,
        **_token_fields(token),
        "lastUsedAt": None if last_used_ms is None else _iso(last_used_ms),
    }


def _token_name_problem(name: object) -> str | None:
    if not isinstance(name, str) or not name.strip():
        return "is required (a string)"
    if len(name) > MAX_TOKEN_NAME_CHARS:
        return f"must be at most {MAX_TOKEN_NAME_CHARS} characters"
    if _TOKEN_NAME_REFUSED.search(name) or not name.isprintable():
        return "must be printable text, without control characters"
    return None


def _ttl_problem(ttl: object) -> str | None:
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, int):
        return f"must be a whole number of seconds from {MIN_TOKEN_TTL_S} to {MAX_TOKEN_TTL_S}"
    if not MIN_TOKEN_TTL_S <= ttl <= MAX_TOKEN_TTL_S:
        return f"must be from {MIN_TOKEN_TTL_S} to {MAX_TOKEN_TTL_S} (10 years)"
    return None


# -- who sees what ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Viewer:
    """The caller, as the lists and the deletes judge it (module docstring)."""

    rights: Rights
    user: str | None  # the user behind the request (a token's owner), or None
    via_token: bool

    @classmethod
    def now(cls) -> _Viewer:
        principal = current_principal()
        user: str | None = None
        if principal.kind == "token":
            token = _directory().tokens.get(principal.name)
            user = None if token is None else token.owner
        elif principal.kind != "anonymous":
            user = principal.actor
        return cls(current_rights(), user, principal.kind == "token")

    def _sees_app(self, app: str) -> bool:
        if app == ANY_APP:
            return self.rights.everywhere is not None
        return self.rights.sees(app)

    def _administers(self, app: str) -> bool:
        if self.rights.is_cluster_admin:
            return True
        return app != ANY_APP and self.rights.may(Role.APP_ADMIN, app)

    def _owns(self, actor: str, app: str) -> bool:
        if self.user is None or actor != self.user:
            return False
        return not self.via_token or self._sees_app(app)

    def sees_grant(self, grant: Grant) -> bool:
        if self.rights.is_cluster_admin:
            return True
        if grant.role is not Role.CLUSTER_ADMIN and self._administers(grant.app):
            return True
        return self._owns(grant.principal, grant.app)

    def sees_token(self, token: TokenRecord) -> bool:
        """Whether the caller sees the token, and so may revoke it."""
        return self._administers(token.app) or self._owns(token.owner, token.app)


def _require_cluster_admin(what: str) -> None:
    """Forbidden unless the caller is a cluster-admin (what a grant or token on `*` needs).
    Then `require_app` on `*`, which passes, records the check for the app-scope guard."""
    rights = current_rights()
    if not rights.is_cluster_admin:
        _refused("forbidden", "cluster", None)
        held = "no role" if rights.everywhere is None else rights.everywhere.wire
        caller = current_principal().actor
        raise Forbidden(f"{what} needs cluster-admin; {caller} holds {held} on every app")
    require_app(Role.CLUSTER_ADMIN, ANY_APP)


def _refused(kind: str, resource: str, app: str | None) -> None:
    """Tell the audit log of a refusal made here (as `access_control` does for its own)."""
    g.access_refusal = kind
    note_resource(resource, app)


# -- bodies, queries, answers -------------------------------------------------------------------


def _object_body(fields: frozenset[str], shape: str) -> dict[str, Any]:
    body = json_body()
    if not isinstance(body, dict):
        raise InvalidRequest(f"send a JSON object: {shape}")
    unknown = sorted(str(k)[:100] for k in set(body) - fields)
    if unknown:
        problems = dict.fromkeys(unknown, "unknown field")
        raise InvalidRequest("unknown field: " + ", ".join(unknown), problems)
    return body


def _check(problems: dict[str, str], field: str, problem: str | None) -> None:
    if problem is not None:
        problems[field] = problem


def _refuse_if(problems: dict[str, str], what: str) -> None:
    if problems:
        shown = "; ".join(f"{field} {why}" for field, why in sorted(problems.items()))
        raise InvalidRequest(f"invalid {what}: {shown}", problems)


def _role(problems: dict[str, str], value: object) -> Role | None:
    try:
        return Role.parse(value)
    except ValueError as exc:
        problems["role"] = str(exc)
        return None


def _app(problems: dict[str, str], value: object) -> str | None:
    if value == ANY_APP:
        return ANY_APP
    if not isinstance(value, str) or not value:
        problems["app"] = "is required: an app's name or '*'"
        return None
    problem = reference_problem(value)
    if problem is not None:
        problems["app"] = problem
        return None
    return value


def _app_of(app: str) -> str | None:
    """The app an audit record is filed under (none for `*`)."""
    return None if app == ANY_APP else app


def _check_query(allowed: frozenset[str]) -> None:
    known = allowed | _PAGE_ARGS
    unknown = sorted(k[:100] for k in request.args if k not in known)
    if unknown:
        problems = dict.fromkeys(unknown, "unknown query parameter")
        raise InvalidRequest("unknown query parameter: " + ", ".join(unknown), problems)
    for key in request.args:
        values = request.args.getlist(key)
        if len(values) > 1:
            raise InvalidRequest(f"{key} given more than once", {key: "given more than once"})
        if len(values[0]) > _MAX_QUERY_CHARS:
            problem = f"must be at most {_MAX_QUERY_CHARS} characters"
            raise InvalidRequest(f"{key} {problem}", {key: problem})


def _query_app() -> str | None:
    value = request.args.get("app")
    if value is None:
        return None
    problems: dict[str, str] = {}
    app = _app(problems, value)
    _refuse_if(problems, "app filter")
    return app


def _query_principal() -> str | None:
    value = request.args.get("principal")
    if value is None:
        return None
    if principal_user(value) is None:
        problem = "must be user:NAME"
        raise InvalidRequest(f"principal {problem}", {"principal": problem})
    return value


def _paged(
    kind: str,
    items: list[_T],
    key: Callable[[_T], tuple[str, ...]],
    to_json: Callable[[_T], dict[str, Any]],
) -> Response:
    return _paged_batch(kind, items, key, lambda chosen: [to_json(item) for item in chosen])


def _paged_batch(
    kind: str,
    items: list[_T],
    key: Callable[[_T], tuple[str, ...]],
    page_json: Callable[[Sequence[_T]], list[dict[str, Any]]],
) -> Response:
    """`{"items": [...], "nextCursor"}` of `items` sorted by `key`: the page the request asks
    (`?limit=&cursor=`), else the first `max_list_items`; `X-Total-Count` counts them all."""
    ordered = sorted(items, key=key)
    page = page_asked(kind)
    keys = [key(item) for item in ordered]
    if page is None:
        start, limit = 0, quotas().max_list_items
    else:
        limit = page.limit
        start = 0 if page.after is None else bisect_right(keys, page.after)
    chosen = ordered[start : start + limit]
    next_cursor = None
    if chosen and start + limit < len(ordered):
        next_cursor = encode_cursor(kind, key(chosen[-1]))
    response = jsonify({"items": page_json(chosen), "nextCursor": next_cursor})
    response.headers["X-Total-Count"] = str(len(ordered))
    return response


def _iso(epoch_ms: int) -> str:
    moment = datetime.fromtimestamp(epoch_ms / 1000, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")

"""The audit log's face in the API (issue 26): a request id per request, one audit record per
change and per refusal, `audit_mode`, and `GET /api/audit`.

- Every answer carries `X-Request-Id` (a fresh random id, also in the request's record).
- After a request, one record (`leader/statistics/audit.py`'s `AuditEntry`) when it was a change
  (any method but GET, HEAD and OPTIONS that reached its handler, whatever its status) or a
  refusal (401, 403, and the 404 that hides another app's resource: `g.access_refusal ==
  "hidden"`, set by `api/access_control`). Its actor is the principal (`user:NAME`,
  `token:ID`; `anonymous` with auth off; for a 401 the Basic user name tried, or the id of the
  token tried, else `unknown`), its source the client address (`REMOTE_ADDR`, which the edge
  set by the trusted-proxy rule), its action the route's stable name (`ACTIONS`; a route not in
  the table is named after its endpoint), its resource, app and changes what the handler told
  `audit_hooks` (else derived from the URL and body), secrets masked.
- `audit_mode=best_effort`: the record is buffered for the writer thread (never delays the
  answer). `enforced`: a change is refused with 503 `AuditUnavailable` before its handler runs
  unless the audit database takes writes (`AuditLog.writable`), and its record is written before
  the answer leaves. The window that remains: the database may fail between that check and the
  record's write, after the change was made; the change stands (it cannot be undone), the
  answer says what was done, and the record is kept in memory and retried, counted as a
  failure and logged. Logins and logouts (`/api/session`) are recorded but never refused.
- `GET /api/audit`: newest first, filtered (`actor`, `app`, `job`, `action`, `outcome`,
  `since`, `until`), `limit` (1-1000, default 100) and an opaque `cursor`. A cluster-admin
  reads every record; anyone else only the records of the apps it is app-admin of.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
import secrets
from datetime import UTC, datetime
from typing import Any

from flask import Blueprint, Flask, Response, current_app, g, jsonify, request

from scheduler.api.access_control import current_principal, current_rights, requires
from scheduler.api.paging import MAX_LIMIT, encode_cursor
from scheduler.api.term_access import term_access
from scheduler.leader.statistics.audit import (
    OUTCOMES,
    AuditEntry,
    AuditLog,
    AuditQuery,
    AuditUnavailable,
    mask_secrets,
)
from scheduler.model.access.roles import Role
from scheduler.model.access.tokens import parse_token
from scheduler.model.config import parse_json
from scheduler.model.errors import InvalidRequest, SchedulerError
from scheduler.model.task_id import InvalidTaskId, TaskId
from scheduler.replica.term import LeaderContext

__all__ = ["ACTIONS", "REQUEST_ID_HEADER", "action_of", "bp", "install_audit"]

log = logging.getLogger(__name__)

REQUEST_ID_HEADER = "X-Request-Id"
_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_EXTENSION = "ejc_audit"
_SESSION_PATH = "/api/session"
_MAX_BODY_PEEK_BYTES = 1 << 20
_DEFAULT_LIMIT = 100
_MAX_FILTER_CHARS = 320
_CURSOR_KIND = "audit"

# The stable action name of each route that changes something, by Flask endpoint (blueprint
# name, dot, view function). docs/security.md ("Audit log") lists them. The access management
# routes are named by their path (`_access_action`); any other route by its endpoint.
ACTIONS: dict[str, str] = {
    "apps.register_app": "app.create",
    "apps.update_app": "app.update",
    "apps.disable_app": "app.disable",
    "apps.enable_app": "app.enable",
    "apps.delete_app": "app.delete",
    "jobs.register_job": "job.register",
    "jobs.update_job": "job.update",
    "jobs.deregister_job": "job.deregister",
    "jobs.deregister_job_by_path": "job.deregister",
    "jobs.disable_job": "job.disable",
    "jobs.enable_job": "job.enable",
    "jobs.trigger_job": "job.trigger",
    "kill.kill_job": "job.kill",
    "kill.kill_task": "task.kill",
    "operate.reconcile_explicit": "reconcile",
    "operate.reconcile_implicit": "reconcile",
    "workflows.register": "workflow.register",
    "workflows.update": "workflow.update",
    "workflows.delete": "workflow.delete",
    "workflows.disable": "workflow.disable",
    "workflows.enable": "workflow.enable",
    "workflows.trigger": "workflow.trigger",
    "workflows.cancel": "workflow.cancel",
    "workflows.retry": "workflow.retry",
    "workflows.mark_success": "workflow.mark-success",
}
# Configuration changes: the stored fields before and after are read around the handler when
# it did not tell them (`audit_hooks.note_change`).
_CONFIG_KINDS = {
    "apps.register_app": "app",
    "apps.update_app": "app",
    "apps.delete_app": "app",
    "jobs.register_job": "job",
    "jobs.update_job": "job",
    "jobs.deregister_job": "job",
    "jobs.deregister_job_by_path": "job",
}
_ACCESS_KINDS = {"users": "user", "grants": "grant", "tokens": "token"}
_ACCESS_VERBS = {"POST": "create", "PUT": "update", "PATCH": "update"}
_ACCESS_DELETE = {"user": "delete", "grant": "revoke", "token": "revoke"}
_ACCESS_PATH = re.compile(r"^/api/access/(users|grants|tokens)(/|$)")

bp = Blueprint("audit", __name__, url_prefix="/api")


def action_of(endpoint: str | None, method: str, path: str) -> str:
    """The stable name of what a request does (see `ACTIONS`)."""
    if path.startswith(_SESSION_PATH):
        return {"POST": "session.login", "DELETE": "session.logout"}.get(method, "session.read")
    access = _ACCESS_PATH.match(path)
    if access is not None:
        kind = _ACCESS_KINDS[access.group(1)]
        if method in _READ_METHODS:
            return f"{kind}.read"
        if method == "DELETE":
            return f"{kind}.{_ACCESS_DELETE[kind]}"
        return f"{kind}.{_ACCESS_VERBS.get(method, method.lower())}"
    if endpoint is None:
        return "unknown"
    return ACTIONS.get(endpoint, endpoint)


def install_audit(app: Flask, ctx: LeaderContext, audit: AuditLog | None) -> None:
    """Give every request of `app` an id and its audit record (see the module docstring).
    Install it after authentication and access control: its check before a change runs last,
    and its hook after a request runs after every other one (it records the final status)."""
    log_ = audit if audit is not None else AuditLog(file_path=ctx.settings.audit_file)
    app.extensions[_EXTENSION] = log_
    enforced = ctx.settings.audit_mode == "enforced"
    auth_on = ctx.settings.auth_enabled
    term = ctx.term.number

    @app.before_request
    def _reached() -> None:
        """Runs last before the handler: everyone before it let the request through."""
        g.audit_reached = True
        if request.method in _READ_METHODS:
            return
        g.audit_job_app = _job_app_before()
        g.audit_before = _config_now()
        if enforced and not request.path.startswith(_SESSION_PATH) and not log_.writable():
            g.audit_refused_by_audit = True
            raise AuditUnavailable(
                "audit_mode is enforced and the audit log's database cannot be written now; "
                "nothing was changed, retry later"
            )

    def _after(response: Response) -> Response:
        request_id = g.get("request_id") or secrets.token_hex(16)
        response.headers[REQUEST_ID_HEADER] = request_id
        try:
            entry = _entry_of(response.status_code, request_id, term, auth_on)
        except Exception:
            log.exception("audit log: record of %s %s not made", request.method, request.path)
            return response
        if entry is None:
            return response
        if enforced and entry.outcome != "denied" and not g.get("audit_refused_by_audit"):
            try:
                log_.write_now(entry)
            except AuditUnavailable as exc:
                log.error(
                    "audit log: %s %s (%s) was done but its record not written: %s; "
                    "kept for a retry",
                    request.method,
                    request.path,
                    entry.action,
                    exc.message,
                )
            return response
        log_.record(entry)
        return response

    # Last of all after-request hooks (Flask runs them in reverse order of registration):
    # the record holds the status the client gets, after access control's guard.
    app.after_request_funcs.setdefault(None, []).insert(0, _after)

    @app.before_request
    def _request_id() -> None:
        g.request_id = secrets.token_hex(16)

    # First of all before-request hooks: a request refused before its handler has its id too.
    funcs = app.before_request_funcs.setdefault(None, [])
    funcs.insert(0, funcs.pop())


def _entry_of(status: int, request_id: str, term: int, auth_on: bool) -> AuditEntry | None:
    """The request's record, None when it needs none."""
    method = request.method
    refusal = g.get("access_refusal")
    denied = status in (401, 403) or (status == 404 and refusal == "hidden")
    change = method not in _READ_METHODS and bool(g.get("audit_reached"))
    if not denied and not change and not g.get("audit_refused_by_audit"):
        return None
    rule = request.url_rule
    endpoint = rule.endpoint if rule is not None else None
    outcome = "denied" if denied else ("ok" if status < 400 else "error")
    resource, app_name, job = _resource(endpoint)
    changes = g.get("audit_changes")
    if not isinstance(changes, dict) and status < 400:
        changes = _config_changes()
    return AuditEntry.make(
        actor=_actor(status, auth_on),
        source=str(request.remote_addr or ""),
        action=action_of(endpoint, method, request.path),
        resource=resource,
        app=app_name,
        job=job,
        outcome=outcome,
        status=status,
        request_id=request_id,
        term=term,
        changes=mask_secrets(changes) if isinstance(changes, dict) else None,
    )


def _actor(status: int, auth_on: bool) -> str:
    if not auth_on:
        return "anonymous"
    if status == 401 or not (g.get("principal") or g.get("identify")):
        return _tried()
    return current_principal().actor


def _tried() -> str:
    """Who a refused request claimed to be: the Basic user name, the token's public id."""
    header = request.headers.get("Authorization", "")
    if header[:7].lower() == "bearer ":
        parts = parse_token(header[7:].strip())
        return f"token:{parts.id}" if parts is not None else "unknown"
    basic = request.authorization
    if basic is not None and basic.type == "basic" and basic.username:
        return "user:" + _printable(str(basic.username))[:100]
    if request.path == _SESSION_PATH and request.method == "POST":
        return _login_tried()
    return "unknown"


def _login_tried() -> str:
    """Who a console login claimed to be: its body's `user`, or the id of its `token`."""
    if (request.content_length or 0) > _MAX_BODY_PEEK_BYTES:
        return "unknown"
    try:
        body = parse_json(request.get_data(cache=True), "request body")
    except SchedulerError:
        return "unknown"
    if not isinstance(body, dict):
        return "unknown"
    user, token = body.get("user"), body.get("token")
    if isinstance(user, str) and user:
        return "user:" + _printable(user)[:100]
    parts = parse_token(token.strip()) if isinstance(token, str) else None
    return f"token:{parts.id}" if parts is not None else "unknown"


def _printable(text: str) -> str:
    return "".join(ch if ch.isprintable() else "?" for ch in text)


def _resource(endpoint: str | None) -> tuple[str, str | None, str | None]:
    """(resource, app, job): what the handler noted, else what the URL and body name."""
    noted = g.get("audit_resource")
    app_name: str | None = g.get("audit_app")
    args = request.view_args or {}
    job = args.get("job_name")
    if job is None and endpoint in ACTIONS:
        body = _body_names()
        job = body.get("jobName")
        app_name = app_name or body.get("appName")
    app_name = app_name or args.get("app_name") or g.get("audit_job_app")
    task = args.get("taskId")
    if task is not None and job is None:
        try:
            job = TaskId.parse(str(task)).job_name
        except InvalidTaskId:
            job = None
    if isinstance(noted, str) and noted:
        resource = noted
        if job is None and noted.startswith("job/"):
            job = noted[4:]
    elif task is not None:
        resource = f"task/{task}"
    elif job is not None:
        resource = f"job/{job}"
    elif app_name is not None:
        resource = f"app/{app_name}"
    else:
        resource = request.path
    return (
        _printable(resource),
        None if app_name is None else _printable(str(app_name)),
        None if job is None else _printable(str(job)),
    )


def _body_names() -> dict[str, str]:
    """`jobName` and `appName` of the request's body (a JSON object, a JSON string or a raw
    name: a job name), {} when it has none or cannot be read."""
    if (request.content_length or 0) > _MAX_BODY_PEEK_BYTES:
        return {}
    raw = request.get_data(cache=True)
    if not raw:
        return {}
    try:
        text = raw.decode("utf-8").strip()
        value: Any = parse_json(raw, "request body") if text[:1] in ('"', "{") else text
    except (UnicodeDecodeError, SchedulerError):
        return {}
    if isinstance(value, str):
        return {"jobName": value[:_MAX_FILTER_CHARS]} if value else {}
    if not isinstance(value, dict):
        return {}
    return {
        key: value[key][:_MAX_FILTER_CHARS]
        for key in ("jobName", "appName")
        if isinstance(value.get(key), str) and value[key]
    }


def _config_target() -> tuple[str, str] | None:
    """(kind, name) of the app or job a configuration change names, None for other routes."""
    rule = request.url_rule
    kind = _CONFIG_KINDS.get(rule.endpoint) if rule is not None else None
    if kind is None:
        return None
    args = request.view_args or {}
    name = args.get(f"{kind}_name") or _body_names().get(f"{kind}Name")
    if not isinstance(name, str) or not name or len(name) > 100 or "/" in name:
        return None
    return kind, name


def _config_now() -> tuple[tuple[str, str], dict[str, Any] | None] | None:
    """The stored fields of the app or job a configuration change names (None inside: it does
    not exist), or None when the request is no configuration change or they cannot be read."""
    target = _config_target()
    if target is None:
        return None
    kind, name = target
    try:
        config = term_access().config
        stored = config.app(name) if kind == "app" else config.job(name)
    except Exception:  # noqa: BLE001 - the record goes without its changes
        return None
    return target, (None if stored is None else dict(stored.to_json()))


def _config_changes() -> dict[str, Any] | None:
    """{"before", "after"} of a configuration change that did not tell them, read around it."""
    before = g.get("audit_before")
    if before is None:
        return None
    after = _config_now()
    if after is None or after[0] != before[0]:
        return None
    if before[1] == after[1]:
        return None
    return {"before": before[1], "after": after[1]}


def _job_app_before() -> str | None:
    """The app of the job a change names, read before the handler runs (a deregistration
    deletes it), so that the record is one of that app's."""
    args = request.view_args or {}
    name = args.get("job_name")
    if name is None:
        rule = request.url_rule
        endpoint = rule.endpoint if rule is not None else None
        if endpoint in ACTIONS and endpoint is not None and endpoint.startswith(("jobs.", "kill.")):
            name = _body_names().get("jobName")
        task = args.get("taskId")
        if name is None and task is not None:
            try:
                name = TaskId.parse(str(task)).job_name
            except InvalidTaskId:
                return None
    if not isinstance(name, str) or not name or len(name) > 100 or "/" in name:
        return None
    try:
        job = term_access().config.job(name)
    except Exception:  # noqa: BLE001 - the record goes without its app; the handler decides
        return None
    return None if job is None else job.app_name


# -- GET /api/audit ----------------------------------------------------------------------------

_PARAMETERS = frozenset(
    {"actor", "app", "job", "action", "outcome", "since", "until", "limit", "cursor"}
)


@bp.get("/audit")
@requires(Role.APP_ADMIN, scope="list")
def list_audit() -> Response:
    """A page of audit records, newest first (see the module docstring)."""
    query = _query_asked()
    audit: AuditLog = current_app.extensions[_EXTENSION]
    entries, last = audit.query(query)
    next_cursor = (
        None
        if last is None
        else encode_cursor(_CURSOR_KIND, [last.time.isoformat(timespec="microseconds"), last.id])
    )
    return jsonify({"items": [entry.to_json() for entry in entries], "nextCursor": next_cursor})


def _query_asked() -> AuditQuery:
    """The request's filters, page and the caller's reach; InvalidRequest naming every bad
    parameter."""
    args = request.args
    problems: dict[str, str] = {}
    for name in sorted(set(args) - _PARAMETERS):
        problems[_printable(name)[:100]] = "unknown parameter"
    for name in sorted(set(args) & _PARAMETERS):
        if len(args.getlist(name)) > 1:
            problems[name] = "given more than once"
    texts: dict[str, str | None] = {}
    for name in ("actor", "app", "job", "action"):
        value = args.get(name)
        if value is not None and not (0 < len(value) <= _MAX_FILTER_CHARS and value.isprintable()):
            problems[name] = f"must be 1 to {_MAX_FILTER_CHARS} printable characters"
        texts[name] = value
    outcome = args.get("outcome")
    if outcome is not None and outcome not in OUTCOMES:
        problems["outcome"] = f"must be one of {', '.join(OUTCOMES)}"
    since = _time_arg("since", problems)
    until = _time_arg("until", problems)
    limit = _DEFAULT_LIMIT
    limit_text = args.get("limit")
    if limit_text is not None:
        text = limit_text.strip()
        if text.isascii() and text.isdigit() and len(text) <= 4 and 1 <= int(text) <= MAX_LIMIT:
            limit = int(text)
        else:
            problems["limit"] = f"must be a whole number from 1 to {MAX_LIMIT}"
    after = None
    cursor = args.get("cursor")
    if cursor:
        after = _decode_cursor(cursor)
        if after is None:
            problems["cursor"] = "is not a nextCursor this list gave"
    if problems:
        raise InvalidRequest(
            "invalid audit query: " + ", ".join(f"{k} {v}" for k, v in sorted(problems.items())),
            problems,
        )
    apps, any_app = _reach()
    return AuditQuery(
        limit=limit,
        actor=texts["actor"],
        app=texts["app"],
        job=texts["job"],
        action=texts["action"],
        outcome=outcome,
        since=since,
        until=until,
        after=after,
        apps=apps,
        any_app=any_app,
    )


def _reach() -> tuple[frozenset[str] | None, bool]:
    """(apps whose records the caller reads, or None for every record; whether every app's)."""
    rights = current_rights()
    if rights.is_cluster_admin:
        return None, False
    if rights.may_everywhere(Role.APP_ADMIN):
        return frozenset(), True
    own = frozenset(app for app, role in rights.per_app.items() if role >= Role.APP_ADMIN)
    return own, False


def _time_arg(name: str, problems: dict[str, str]) -> datetime | None:
    """`name` as naive UTC: ISO 8601 (`2026-11-26T19:00:00Z`, an offset, or UTC without one)
    or epoch milliseconds."""
    value = request.args.get(name)
    if value is None:
        return None
    text = value.strip()
    problem = "must be an ISO 8601 time (2026-11-26T19:00:00Z) or epoch milliseconds"
    if not text or len(text) > 40 or not text.isascii():
        problems[name] = problem
        return None
    try:
        if text.isdigit():
            moment = datetime.fromtimestamp(int(text) / 1000, UTC)
        else:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
            if moment.tzinfo is not None:
                moment = moment.astimezone(UTC)
    except (ValueError, OverflowError, OSError):
        problems[name] = problem
        return None
    return moment.replace(tzinfo=None)


def _decode_cursor(cursor: str) -> tuple[datetime, str] | None:
    if len(cursor) > 256 or not cursor.isascii():
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        decoded = json.loads(raw.decode("utf-8"))
    except (binascii.Error, ValueError):
        return None
    if not (
        isinstance(decoded, list)
        and len(decoded) == 3
        and decoded[0] == _CURSOR_KIND
        and all(isinstance(part, str) for part in decoded[1:])
        and re.fullmatch(r"[0-9a-f]{32}", decoded[2])
    ):
        return None
    try:
        moment = datetime.fromisoformat(decoded[1])
    except ValueError:
        return None
    return (moment, decoded[2]) if moment.tzinfo is None else None

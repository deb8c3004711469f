"""The audit log's hooks in the API (issue 26): a request id per request, one audit record per
change and per refusal, and `audit_mode`.

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

`GET /api/audit`, which reads the records back: `audit_list.py`.
"""

from __future__ import annotations

import logging
import re
import secrets
from typing import Any

from flask import Flask, Response, g, request

from scheduler.api.access_control import current_principal
from scheduler.api.term_access import term_access
from scheduler.leader.statistics.audit import AuditEntry, AuditUnavailable, mask_secrets
from scheduler.leader.statistics.audit_log import AuditLog
from scheduler.model.access.tokens import parse_token
from scheduler.model.config import parse_json
from scheduler.model.errors import SchedulerError
from scheduler.model.task_id import InvalidTaskId, TaskId
from scheduler.replica.term import LeaderContext

__all__ = ["ACTIONS", "AUDIT_EXTENSION", "REQUEST_ID_HEADER", "action_of", "install_audit"]

log = logging.getLogger(__name__)

REQUEST_ID_HEADER = "X-Request-Id"
_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
AUDIT_EXTENSION = "ejc_audit"
"""The key of the app's `AuditLog` in `app.extensions`."""
_SESSION_PATH = "/api/session"
_MAX_BODY_PEEK_BYTES = 1 << 20
_MAX_NAME_CHARS = 320

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
    "job_batches.register_many": "job.register-many",  # issue 29: one record per request
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
    # Calendars (issue 28).
    "calendars.register": "calendar.create",
    "calendars.update": "calendar.update",
    "calendars.update_named": "calendar.update",
    "calendars.delete": "calendar.delete",
    # Concurrency pools and backfills (issue 28).
    "pools.create": "pool.create",
    "pools.update": "pool.update",
    "pools.update_named": "pool.update",
    "pools.delete": "pool.delete",
    "backfills.create": "backfill.create",
    "backfills.pause": "backfill.pause",
    "backfills.resume": "backfill.resume",
    "backfills.cancel": "backfill.cancel",
    "workflow_backfills.create": "workflow.backfill",
    "workflow_backfills.pause": "workflow.backfill-pause",
    "workflow_backfills.resume": "workflow.backfill-resume",
    "workflow_backfills.cancel": "workflow.backfill-cancel",
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
    app.extensions[AUDIT_EXTENSION] = log_
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
        return {"jobName": value[:_MAX_NAME_CHARS]} if value else {}
    if not isinstance(value, dict):
        return {}
    return {
        key: value[key][:_MAX_NAME_CHARS]
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

"""`GET /api/audit` (issue 26): the audit log's records, newest first.

Filters `actor`, `app`, `job`, `action`, `outcome` (exact values), `since` and `until` (ISO
8601 or epoch milliseconds), `limit` (1-1000, default 100) and an opaque `cursor` (the
`nextCursor` of the page before: the (time, id) key of its last record, in api/paging's
encoding). Every parameter is checked and bounded; a bad one is a 400 naming it. A cluster-admin
reads every record; anyone else only the records of the apps it is app-admin of (none for
less: an empty list, never a refusal that says whose records exist).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from datetime import UTC, datetime

from flask import Blueprint, Response, current_app, jsonify, request

from scheduler.api.access_control import current_rights, requires
from scheduler.api.audit import AUDIT_EXTENSION
from scheduler.api.paging import MAX_LIMIT, encode_cursor
from scheduler.leader.statistics.audit import OUTCOMES, AuditQuery
from scheduler.leader.statistics.audit_log import AuditLog
from scheduler.model.access.roles import Role
from scheduler.model.errors import InvalidRequest

__all__ = ["bp"]

_DEFAULT_LIMIT = 100
_MAX_FILTER_CHARS = 320
_CURSOR_KIND = "audit"

bp = Blueprint("audit", __name__, url_prefix="/api")


def _printable(text: str) -> str:
    return "".join(ch if ch.isprintable() else "?" for ch in text)


_PARAMETERS = frozenset(
    {"actor", "app", "job", "action", "outcome", "since", "until", "limit", "cursor"}
)


@bp.get("/audit")
@requires(Role.APP_ADMIN, scope="list")
def list_audit() -> Response:
    """A page of audit records, newest first (see the module docstring)."""
    query = _query_asked()
    audit: AuditLog = current_app.extensions[AUDIT_EXTENSION]
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

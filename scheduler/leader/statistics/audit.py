"""The audit log's records (issue 26): who changed what through the API, and who was refused.

- `AuditEntry`: one record, made by the API's audit hook (`api/audit.py`) after a request;
  `mask_secrets` hides what a record must never hold (passwords, secrets, tokens, digests, the
  userinfo and query of URLs) before it is made.
- `AuditQuery` and `select_page`: the newest-first pages of `GET /api/audit`, filtered and
  limited to the apps the caller administers, walked by (time, id) keys.

Where records go (the database, the JSON lines file), and when: `audit_log.py`.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from sqlalchemy import Select, and_, or_, select

from scheduler.leader.statistics.models import AuditRecord
from scheduler.model.errors import SchedulerError

__all__ = [
    "MASK",
    "OUTCOMES",
    "AuditEntry",
    "AuditQuery",
    "AuditUnavailable",
    "mask_secrets",
    "select_page",
]

OUTCOMES = ("ok", "denied", "error")
MASK = "***"
_MAX_CHANGES_CHARS = 100_000
_MAX_DEPTH = 12
# A field whose name says it holds a secret: its value is never recorded.
_SECRET_NAME = re.compile(
    r"pass(word|wd|phrase)?|secret|token|digest|credential|api_?key|authorization|private_?key",
    re.IGNORECASE,
)
# A field holding a webhook's URL: its path may be the secret (a chat service's hook path is
# its key), so only its scheme and host are kept.
_HOOK_NAME = re.compile(r"hook|callback", re.IGNORECASE)


class AuditUnavailable(SchedulerError):
    """`audit_mode=enforced` and the audit record of a change cannot be written now: the change
    is refused before it runs (503; retry later)."""

    http_status = 503


def _column_limits() -> dict[str, int]:
    return {
        name: int(column.type.length)  # type: ignore[attr-defined]
        for name, column in AuditRecord.__table__.columns.items()
        if getattr(column.type, "length", None)
    }


_LIMITS = _column_limits()


@dataclass(frozen=True)
class AuditEntry:
    """One audit record. `time` is naive UTC; `changes` (already masked) is None but for
    configuration changes; text fields are cut to their columns' lengths when made."""

    time: datetime
    actor: str
    source: str
    action: str
    resource: str
    outcome: str
    status: int
    request_id: str
    term: int
    app: str | None = None
    job: str | None = None
    changes: Mapping[str, Any] | None = None
    id: str = field(default_factory=lambda: uuid.uuid4().hex)

    @classmethod
    def make(cls, **fields: Any) -> AuditEntry:
        """An entry with each text field cut to its column's length (`time` default: now)."""
        for name, value in list(fields.items()):
            limit = _LIMITS.get(name)
            if limit is not None and isinstance(value, str):
                fields[name] = value[:limit]
        fields.setdefault("time", datetime.now(UTC).replace(tzinfo=None))
        return cls(**fields)

    def changes_text(self) -> str | None:
        if self.changes is None:
            return None
        text_ = json.dumps(self.changes, separators=(",", ":"), sort_keys=True, default=str)
        if len(text_) > _MAX_CHANGES_CHARS:
            return json.dumps({"truncated": True, "chars": len(text_)})
        return text_

    def to_json(self) -> dict[str, Any]:
        """As `GET /api/audit` and the JSON lines file show it."""
        out: dict[str, Any] = {
            "time": _iso(self.time),
            "actor": self.actor,
            "source": self.source,
            "action": self.action,
            "resource": self.resource,
            "app": self.app,
            "job": self.job,
            "outcome": self.outcome,
            "status": self.status,
            "requestId": self.request_id,
            "term": self.term,
        }
        if self.changes is not None:
            out["changes"] = self.changes
        return out

    def row(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "time": self.time,
            "actor": self.actor,
            "source": self.source,
            "action": self.action,
            "resource": self.resource,
            "app": self.app,
            "job": self.job,
            "outcome": self.outcome,
            "status": self.status,
            "request_id": self.request_id,
            "term": self.term,
            "changes": self.changes_text(),
        }

    @classmethod
    def from_row(cls, row: AuditRecord) -> AuditEntry:
        changes: Any = None
        if row.changes is not None:
            try:
                changes = json.loads(row.changes)
            except ValueError:
                changes = {"unreadable": True}
        return cls(
            time=row.time,
            actor=row.actor,
            source=row.source,
            action=row.action,
            resource=row.resource,
            outcome=row.outcome,
            status=row.status,
            request_id=row.request_id,
            term=row.term,
            app=row.app,
            job=row.job,
            changes=changes,
            id=row.id,
        )


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def mask_secrets(value: Any, _depth: int = 0) -> Any:
    """`value` (JSON-like) with secrets hidden: the value of every field whose name says it is a
    password, secret, token, digest, credential or key becomes `***`, a webhook's URL keeps
    only its scheme and host (`https://hooks.example.com/***`: a hook's path is often its key),
    and every other URL keeps its scheme, host and path but not its userinfo or query (an app's
    URL may carry credentials there). Nested deeper than 12 levels: `***` (nothing a config
    holds)."""
    if _depth > _MAX_DEPTH:
        return MASK
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = str(key)
            if _SECRET_NAME.search(name) and item not in (None, ""):
                out[name] = MASK
            elif _HOOK_NAME.search(name) and isinstance(item, str) and item:
                out[name] = _mask_url(item, keep_path=False)
            else:
                out[name] = mask_secrets(item, _depth + 1)
        return out
    if isinstance(value, list | tuple):
        return [mask_secrets(item, _depth + 1) for item in value]
    if isinstance(value, str):
        return _mask_url(value)
    return value


def _mask_url(text_: str, keep_path: bool = True) -> str:
    if "://" not in text_:
        return text_ if keep_path else MASK
    if keep_path and "@" not in text_ and "?" not in text_:
        return text_
    try:
        parts = urlsplit(text_.strip())
        host = parts.hostname
        port = parts.port
    except ValueError:
        return MASK  # a URL too broken to split: it may hold anything
    if not parts.scheme or not parts.netloc:
        return text_ if keep_path else MASK
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{MASK}@{host or ''}" + (f":{port}" if port is not None else "")
    if not keep_path:
        hidden = parts.path not in ("", "/") or parts.query
        return urlunsplit((parts.scheme, netloc, f"/{MASK}" if hidden else parts.path, "", ""))
    query = MASK if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


@dataclass(frozen=True)
class AuditQuery:
    """A page of `GET /api/audit`: the filters (None: any), the apps whose records the caller
    may read (`apps` None: every record; else the records of these apps, and of every app with
    `any_app`), at most `limit` records older than the (time, id) key `after`."""

    limit: int
    actor: str | None = None
    app: str | None = None
    job: str | None = None
    action: str | None = None
    outcome: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    after: tuple[datetime, str] | None = None
    apps: frozenset[str] | None = None
    any_app: bool = False


def select_page(query: AuditQuery) -> Select[Any]:
    """The statement of one page, newest first; one row more than `limit` (whether there is a
    next page)."""
    table = AuditRecord
    statement = select(table)
    for column, wanted in (
        (table.actor, query.actor),
        (table.app, query.app),
        (table.job, query.job),
        (table.action, query.action),
        (table.outcome, query.outcome),
    ):
        if wanted is not None:
            statement = statement.where(column == wanted)
    if query.since is not None:
        statement = statement.where(table.time >= query.since)
    if query.until is not None:
        statement = statement.where(table.time < query.until)
    if query.after is not None:
        at, record_id = query.after
        statement = statement.where(
            or_(table.time < at, and_(table.time == at, table.id < record_id))
        )
    if query.apps is not None:
        if query.any_app:
            statement = statement.where(table.app.is_not(None))
        else:
            statement = statement.where(table.app.in_(sorted(query.apps)))
    return statement.order_by(table.time.desc(), table.id.desc()).limit(query.limit + 1)

"""`POST /api/job/register-many` (issue 29): register up to 1,000 jobs in one request, all or
none.

The body is `{"jobs": [job, ...]}` (a plain JSON array of jobs is read the same way). Each job
is checked as `POST /api/job/register` checks one (`api/jobs.py`): its fields, its app's
existence as the caller may know it, the caller's `editor` role on each distinct app, an
internal webhook, its calendars and pool, placement, `max_job_bytes` and
`min_fire_interval_seconds`. Then, in this order, nothing being written on any refusal:

- 400 `InvalidRequest` when any job is bad: `jobs` lists each bad one (`index`, `jobName`, its
  `error`, `type` and `fields`), `fields` the same flat (`jobs[3].cron`);
- 403/404 as a single registration for an app the caller may not register in;
- 409 `Conflict` naming (in `jobs`) each job whose name exists already, is repeated in the
  request, or whose app is disabled;
- 409 `QuotaExceeded` when `max_jobs` cannot hold them all;
- 413 `RequestTooLarge` when the request has more than 1,000 jobs or its jobs would not fit one
  ZooKeeper transaction (`config_store.JOBS_TXN_BUDGET_BYTES`, 896 KiB with paths and
  headers: 1,000 jobs of about 600 bytes stored each); the message says how many of them fit.

Why one transaction, never several: a write in several transactions is not all or none when
the leader loses its term between two of them (a deposed leader may not delete what it wrote),
and the config listener would schedule the first ones meanwhile. So a request is refused whole
when it does not fit one, and the client sends fewer jobs per request (`ejcloud job add -f`
splits by count and by size).

The answer is 200 `{"registered": N}`; the jobs are scheduled by the config listener exactly as
a single registration's (it follows `/config/job`). One audit record per request,
`job.register-many`, whose changes name the count and the jobs.
"""

from __future__ import annotations

import logging
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from flask import Blueprint, Response, jsonify

from scheduler.api.access_control import require_app, requires, visible
from scheduler.api.audit_hooks import note_change
from scheduler.api.bodies import json_body
from scheduler.api.calendars import references_held, refuse_unknown_references
from scheduler.api.errors import error_response
from scheduler.api.job_views import refuse_internal_webhook
from scheduler.api.quotas import quotas
from scheduler.api.term_access import term_access
from scheduler.model.access.roles import Role
from scheduler.model.config.app import AppConfig
from scheduler.model.config.job import JobConfig
from scheduler.model.errors import InvalidRequest, QuotaExceeded, SchedulerError
from scheduler.storage.config_store import JOBS_TXN_BUDGET_BYTES

__all__ = ["MAX_JOBS_PER_REQUEST", "RequestTooLarge", "bp"]

log = logging.getLogger(__name__)

bp = Blueprint("job_batches", __name__, url_prefix="/api/job")

MAX_JOBS_PER_REQUEST = 1000
_NAMED_IN_MESSAGE = 10
"""The message names this many refused jobs (and counts the rest); `jobs` lists every one."""
_MAX_NAME_CHARS = 100


class RequestTooLarge(SchedulerError):
    """More jobs, or more bytes of them, than one request may register (413)."""

    http_status = 413


@dataclass(frozen=True)
class _Refused:
    """One job's refusal, as the answer's `jobs` lists it."""

    index: int
    job_name: str | None
    error: str
    kind: str
    fields: dict[str, str]
    quota: str | None = None

    @classmethod
    def of(cls, index: int, job_name: str | None, exc: SchedulerError) -> _Refused:
        fields = exc.fields if isinstance(exc, InvalidRequest) else {}
        quota = exc.quota if isinstance(exc, QuotaExceeded) else None
        return cls(index, job_name, exc.message, type(exc).__name__, dict(fields), quota)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "index": self.index,
            "jobName": self.job_name,
            "error": self.error,
            "type": self.kind,
            "fields": self.fields,
        }
        if self.quota is not None:
            out["quota"] = self.quota
        return out

    @property
    def label(self) -> str:
        return f"#{self.index}" + (f" '{self.job_name}'" if self.job_name else "")


@bp.post("/register-many")
@requires(Role.EDITOR, scope="app")
def register_many() -> Response:
    """Register every job of the body or none (see the module docstring)."""
    access = term_access()
    items = _items(json_body())
    # 1. Each job's fields (its app's existence as the caller may know it: asked once per app).
    known_apps: dict[str, bool] = {}

    def app_exists(name: str) -> bool:
        if name not in known_apps:
            known_apps[name] = visible(name) and access.config.app_exists(name)
        return known_apps[name]

    jobs: list[tuple[int, JobConfig]] = []
    refused: list[_Refused] = []
    for index, data in enumerate(items):
        try:
            job = JobConfig.from_json(
                data, default_time_zone=access.config.default_time_zone, app_exists=app_exists
            )
        except InvalidRequest as exc:
            refused.append(_Refused.of(index, _name_in(data), exc))
        else:
            jobs.append((index, job))
    if refused:
        return _refusal(400, "InvalidRequest", "invalid", refused, len(items))
    # 2. The caller's role on each app (403, or the 404 of an app it may not see).
    apps = sorted({job.app_name for _index, job in jobs})
    for app in apps:
        require_app(Role.EDITOR, app)
    # 3. What a single registration checks next, each job's problems collected.
    stored = [(job.job_name, job.to_bytes()) for _index, job in jobs]  # made once: it costs
    refused = _checked(jobs, apps, stored)
    if refused:
        return _refusal(400, "InvalidRequest", "invalid", refused, len(items))
    # 4. Names taken or repeated, apps disabled: 409.
    refused = _conflicts(jobs, apps)
    if refused:
        return _refusal(409, "Conflict", "in conflict", refused, len(items))
    # 5. One transaction, or a 413 saying how many fit.
    configs = [job for _index, job in jobs]
    _refuse_over_budget(stored)
    with ExitStack() as held:
        with_calendars = [job for job in configs if job.exclude_calendars]
        if with_calendars:
            # Holds the calendars' references lock, so that none of them is deleted before the
            # jobs that list it are written; the others are checked again under it.
            held.enter_context(references_held(with_calendars[0]))
            for job in with_calendars[1:]:
                refuse_unknown_references(job)
        held.enter_context(quotas().registering_jobs(access.config, len(configs)))
        access.config.add_jobs(stored)
    names = [job.job_name for job in configs]
    note_change(
        "jobs",
        None,
        {"count": len(names), "apps": apps, "jobNames": names},
        app=apps[0] if len(apps) == 1 else None,
    )
    log.info("api: %d jobs registered (%s ... %s)", len(names), names[0], names[-1])
    return jsonify({"registered": len(names)})


def _items(body: Any) -> list[Any]:
    """The body's jobs: `{"jobs": [...]}` or `[...]`, 1 to `MAX_JOBS_PER_REQUEST` of them."""
    if isinstance(body, dict):
        extra = sorted(key for key in body if key != "jobs")[:5]
        if extra:
            raise InvalidRequest(
                f'unknown field {", ".join(extra)}: send {{"jobs": [job, ...]}}',
                {key[:_MAX_NAME_CHARS]: "unknown field" for key in extra},
            )
        body = body.get("jobs")
    if not isinstance(body, list):
        raise InvalidRequest(
            'send {"jobs": [job, ...]} (or a JSON array of jobs)', {"jobs": "not a list of jobs"}
        )
    if not body:
        raise InvalidRequest("no jobs to register", {"jobs": "empty"})
    if len(body) > MAX_JOBS_PER_REQUEST:
        raise RequestTooLarge(
            f"{len(body)} jobs in one request; at most {MAX_JOBS_PER_REQUEST} are registered "
            "by one request: send them in several"
        )
    return body


def _name_in(data: Any) -> str | None:
    """The `jobName` a refused item claims, for naming it (cut, printable), if any."""
    name = data.get("jobName") if isinstance(data, dict) else None
    if not isinstance(name, str) or not name:
        return None
    return "".join(ch if ch.isprintable() else "?" for ch in name[:_MAX_NAME_CHARS])


def _checked(
    jobs: list[tuple[int, JobConfig]], apps: list[str], stored: list[tuple[str, bytes]]
) -> list[_Refused]:
    """Each job's refusals by the checks `register_job` makes after its role: an internal
    webhook, calendars and pool, placement, size and fire interval (each app read once; a
    webhook URL judged once)."""
    access = term_access()
    app_configs: dict[str, AppConfig] = {a.app_name: a for a in access.config.apps_named(apps)}
    webhooks: dict[str, InvalidRequest | None] = {}
    limits = quotas()
    refused = []
    for (index, job), (_name, data) in zip(jobs, stored, strict=True):
        try:
            url = job.notify_webhook_url
            if url:
                if url not in webhooks:
                    webhooks[url] = _webhook_problem(job)
                if (problem := webhooks[url]) is not None:
                    raise problem
            refuse_unknown_references(job)
            app = app_configs.get(job.app_name)
            if access.capacity is not None and app is not None:
                found = access.capacity.check(job, app)
                if found is not None:
                    raise InvalidRequest(found.reason, found.fields)
            limits.check_job(job, len(data))
        except (InvalidRequest, QuotaExceeded) as exc:
            refused.append(_Refused.of(index, job.job_name, exc))
    return refused


def _webhook_problem(job: JobConfig) -> InvalidRequest | None:
    try:
        refuse_internal_webhook(job)
    except InvalidRequest as exc:
        return exc
    return None


def _conflicts(jobs: list[tuple[int, JobConfig]], apps: list[str]) -> list[_Refused]:
    access = term_access()
    counts = Counter(job.job_name for _index, job in jobs)
    existing = set(access.config.existing_jobs([name for name in counts if counts[name] == 1]))
    disabled = {app for app in apps if access.disabled.is_app_disabled(app)}
    refused = []
    for index, job in jobs:
        name = job.job_name
        if counts[name] > 1:
            why = f"job '{name}' is named {counts[name]} times in the request"
        elif name in existing:
            why = f"job '{name}' already exists"
        elif job.app_name in disabled:
            why = f"app '{job.app_name}' is disabled; enable it before registering jobs"
        else:
            continue
        refused.append(_Refused(index, name, why, "Conflict", {}))
    return refused


def _refuse_over_budget(jobs: list[tuple[str, bytes]]) -> None:
    config = term_access().config
    size = config.jobs_txn_bytes(jobs)
    if size <= JOBS_TXN_BUDGET_BYTES:
        return
    fit = _how_many_fit(jobs)
    raise RequestTooLarge(
        f"these {len(jobs)} jobs take about {size} bytes in one ZooKeeper transaction, over the "
        f"{JOBS_TXN_BUDGET_BYTES} one request may write (all or none); the first {fit} of them "
        "fit: send fewer jobs per request"
    )


def _how_many_fit(jobs: list[tuple[str, bytes]]) -> int:
    """How many of the first `jobs` fit the budget (bisection: the size grows with the count)."""
    config = term_access().config
    low, high = 0, len(jobs)
    while low < high:
        middle = (low + high + 1) // 2
        if config.jobs_txn_bytes(jobs[:middle]) <= JOBS_TXN_BUDGET_BYTES:
            low = middle
        else:
            high = middle - 1
    return low


def _refusal(
    status: int, kind: str, adjective: str, refused: list[_Refused], total: int
) -> Response:
    shown = "; ".join(f"{r.label}: {r.error}" for r in refused[:_NAMED_IN_MESSAGE])
    more = len(refused) - _NAMED_IN_MESSAGE
    message = (
        f"{len(refused)} of the {total} jobs {'is' if len(refused) == 1 else 'are'} {adjective}, "
        f"so none was registered: {shown}" + (f"; and {more} more" if more > 0 else "")
    )
    fields = {f"jobs[{r.index}].{field}": why for r in refused for field, why in r.fields.items()}
    extra: dict[str, Any] = {"jobs": [r.to_json() for r in refused]}
    if fields:
        extra["fields"] = fields
    return error_response(status, message, kind, **extra)

"""`/api/job/{job}/backfill` and `/api/job/{job}/backfills` (issue 28): run a job's past fires.

- `POST /api/job/{job}/backfill` `{"from", "to", "firesPerMinute"?, "dryRun"?, "overlapPolicy"?}`
  (checked by `BackfillRequest.from_json`): the job's cron fires in `[from, to]` in its zone, the
  fires its calendars (`excludeCalendars`) exclude left out and counted, at most
  `max_backfill_fires` (a 400 naming the count and the cap). A dry run writes nothing and
  answers the preview (200); otherwise the backfill is recorded RUNNING (201) and the term's
  backfill engine (`leader/backfill`) launches its fires: `{"backfillId", "fires": N,
  "fireTimes": [the first 100], ...}` (the backfill's summary).
- `GET /api/job/{job}/backfills`: the job's backfills, newest first, each its summary with its
  outcome (`succeeded`, `failed`: fires that ended); `GET /api/job/{job}/backfills/{id}`: one.
- `POST /api/job/{job}/backfills/{id}/pause|resume|cancel`: the transitions of
  `model/backfill/state.py` (409 for an impossible one, such as resuming a cancelled backfill);
  cancel withdraws a fire queued and not launched yet, and with the body `{"killRunning": true}`
  kills the tasks of its fires still running.

Roles: creating, pausing, resuming and cancelling need `operator` on the job's app, reads
`viewer` there (`require_job`: a job of an app the caller cannot see is a 404). A job without a
cron (fired only by triggers or workflows) and a DAEMON job (its cron runs in the executor) have
no fires to replay: 400 naming why. Every change is audited.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from flask import Blueprint, Flask, Response, current_app, jsonify, request

from scheduler.api.access_control import require_job, requires
from scheduler.api.audit_hooks import note_change, note_resource
from scheduler.api.bodies import json_body
from scheduler.api.inputs import reference_name
from scheduler.api.paging import encode_cursor, page_asked
from scheduler.leader.backfill import BackfillEngine
from scheduler.model.access.roles import Role
from scheduler.model.backfill import (
    Backfill,
    BackfillRequest,
    FireList,
    backfill_fires,
    backfill_id_problem,
    preview_json,
)
from scheduler.model.calendar import excluded_by
from scheduler.model.config._wire import require_object
from scheduler.model.config.cron import CronSpec
from scheduler.model.config.job import JobConfig, JobExecutionType
from scheduler.model.errors import InvalidRequest, NotFound
from scheduler.replica.term import LeaderContext
from scheduler.storage.backfill_store import BackfillStore, Outcome
from scheduler.storage.calendar_store import CalendarStore
from scheduler.storage.term_stores import TermStores
from scheduler.storage.workflow_store import WorkflowQueue

log = logging.getLogger(__name__)

bp = Blueprint("backfills", __name__, url_prefix="/api")

_EXTENSION = "ejc_backfills"


@dataclass(frozen=True)
class BackfillAccess:
    """What the handlers use: the term's backfill engine, its calendars (a job's exclusions)
    and the cap on one backfill's fires."""

    engine: BackfillEngine
    calendars: CalendarStore
    max_fires: int


def backfill_access(
    ctx: LeaderContext, stores: TermStores, engine: BackfillEngine | None
) -> BackfillAccess:
    """The handlers' access for the term of `ctx`: its engine (None, as in API tests: one built
    here over the term's stores, never started, so that the operations work and no fire
    launches)."""
    settings = ctx.settings
    if engine is None:
        engine = BackfillEngine(
            BackfillStore(stores.registry, stores.fence, settings.max_active_backfills),
            stores,
            ctx.term,
            WorkflowQueue(),
            kill=lambda _task_id: False,
        )
    return BackfillAccess(engine, stores.calendars, settings.max_backfill_fires)


def install(app: Flask, access: BackfillAccess) -> None:
    """Register the routes on `app`, serving `access`."""
    app.extensions[_EXTENSION] = access
    app.register_blueprint(bp)


def _access() -> BackfillAccess:
    found: BackfillAccess = current_app.extensions[_EXTENSION]
    return found


def _job(role: Role, job_name: str) -> JobConfig:
    job = require_job(role, reference_name(job_name, "jobName"))
    note_resource(f"job/{job.job_name}", job.app_name)
    return job


# -- shared with api/workflow_backfills.py (a workflow's backfills) -------------------------


def checked_backfill_id(text: str) -> str:
    """A backfill id from a URL, checked before it reaches a path (400 otherwise)."""
    problem = backfill_id_problem(text)
    if problem is not None:
        raise InvalidRequest(f"backfillId {problem}", {"backfillId": problem})
    return text


def _view(backfill: Backfill, outcome: Outcome) -> dict[str, object]:
    return {**backfill.summary_json(), "succeeded": outcome.succeeded, "failed": outcome.failed}


def fires_in(
    spec: CronSpec, exclude_calendars: Iterable[str], checked: BackfillRequest
) -> FireList:
    """The fires of `spec` in the request's range, those the named calendars exclude left out
    and counted, at most `max_backfill_fires` (TooManyFires, a 400, beyond)."""
    access = _access()
    calendars = access.calendars.calendars(exclude_calendars)

    def excluded(fire: datetime) -> bool:
        return excluded_by(calendars, fire) is not None

    return backfill_fires(
        spec, checked.start, checked.end, excluded=excluded, max_fires=access.max_fires
    )


def note_created(resource: str, backfill: Backfill, app_name: str) -> None:
    """The audit record's change of a backfill's creation."""
    policy = backfill.overlap_policy
    note_change(
        resource,
        None,
        {
            "from": backfill.start.isoformat(),
            "to": backfill.end.isoformat(),
            "fires": backfill.fires,
            "firesPerMinute": backfill.fires_per_minute,
            "overlapPolicy": None if policy is None else policy.value,
        },
        app_name,
    )


def note_operated(
    resource: str, before: Backfill, after: Backfill, what: str, kill_running: bool, app: str
) -> None:
    """The audit record's change of a pause, resume or cancel (`what`)."""
    note_change(
        resource,
        {"status": before.status.value},
        {
            "status": after.status.value,
            "operation": what,
            **({"killRunning": True} if kill_running else {}),
        },
        app,
    )


def listed(
    store: BackfillStore, owner: str, view: Callable[[Backfill, Outcome], dict[str, object]]
) -> Response:
    """The backfills of `owner` (a job or a workflow) in `store`, newest first, with their
    outcomes: all of them as one page (at most `ENDED_KEPT` ended ones are kept, and
    `max_active_backfills` active ones), or with `?limit=N[&cursor=C]` a page of N as the other
    lists page (ids sort by creation time: the walk goes on after the cursor's id)."""
    ids = store.ids(owner)  # newest first
    page = page_asked(_BACKFILLS)
    next_cursor = None
    if page is not None:
        start = 0
        if page.after is not None:
            older = (n for n, backfill_id in enumerate(ids) if backfill_id < page.after[0])
            start = next(older, len(ids))
        ids, more = ids[start : start + page.limit], start + page.limit < len(ids)
        next_cursor = encode_cursor(_BACKFILLS, [ids[-1]]) if ids and more else None
    outcomes = store.outcomes(owner, ids)
    items = [view(b, outcomes[b.backfill_id]) for b in store.backfills(owner, ids)]
    return jsonify({"items": items, "nextCursor": next_cursor})


_BACKFILLS = "backfills"


def stored(store: BackfillStore, owner: str, kind: str, backfill_id: str) -> Backfill:
    """The backfill `backfill_id` of job or workflow (`kind`) `owner`; NotFound without one."""
    got = store.get(owner, backfill_id)
    if got is None:
        raise NotFound(f"{kind} '{owner}' has no backfill '{backfill_id}'")
    return got[0]


# -- a job's backfills --------------------------------------------------------------------


def _fires_of(job: JobConfig, checked: BackfillRequest) -> FireList:
    """The fires of `job`'s cron in the request's range, its calendars' exclusions applied."""
    if job.execution_type is JobExecutionType.DAEMON:
        why = "a DAEMON job runs its cron inside the executor: it has no fires to backfill"
        raise InvalidRequest(f"job '{job.job_name}': {why}", {"jobName": why})
    if not job.has_cron:
        why = "the job has no cron (it runs when triggered or in a workflow): no fires to backfill"
        raise InvalidRequest(f"job '{job.job_name}': {why}", {"jobName": why})
    return fires_in(job.cron_spec, job.exclude_calendars, checked)


@bp.post("/job/<job_name>/backfill")
@requires(Role.OPERATOR, scope="app")
def create(job_name: str) -> tuple[Response, int]:
    access = _access()
    job = _job(Role.OPERATOR, job_name)
    checked = BackfillRequest.from_json(json_body(), now=datetime.now(UTC))
    fires = _fires_of(job, checked)
    if checked.dry_run:
        return jsonify(preview_json(fires)), 200
    backfill = access.engine.create(job, checked, fires)
    note_created(f"job/{job.job_name}/backfill/{backfill.backfill_id}", backfill, job.app_name)
    return jsonify(_view(backfill, Outcome())), 201


@bp.get("/job/<job_name>/backfills")
@requires(Role.VIEWER, scope="app")
def listing(job_name: str) -> Response:
    """The job's backfills, newest first (at most `ENDED_KEPT` ended ones are kept)."""
    job = _job(Role.VIEWER, job_name)
    return listed(_access().engine.store, job.job_name, _view)


@bp.get("/job/<job_name>/backfills/<backfill_id>")
@requires(Role.VIEWER, scope="app")
def show(job_name: str, backfill_id: str) -> Response:
    job = _job(Role.VIEWER, job_name)
    checked = checked_backfill_id(backfill_id)
    store = _access().engine.store
    found = stored(store, job.job_name, "job", checked)
    return jsonify(_view(found, store.outcome(job.job_name, checked)))


def _operate(job_name: str, backfill_id: str, what: str) -> Response:
    access = _access()
    job = _job(Role.OPERATOR, job_name)
    checked = checked_backfill_id(backfill_id)
    kill_running = kill_running_asked() if what == "cancel" else False
    store = access.engine.store
    before = stored(store, job.job_name, "job", checked)
    engine = access.engine
    if what == "pause":
        after = engine.pause_backfill(job.job_name, checked)
    elif what == "resume":
        after = engine.resume_backfill(job.job_name, checked)
    else:
        after = engine.cancel_backfill(job.job_name, checked, kill_running=kill_running)
    resource = f"job/{job.job_name}/backfill/{checked}"
    note_operated(resource, before, after, what, kill_running, job.app_name)
    log.info("api: backfill %s of %s: %s", checked, job.job_name, what)
    return jsonify(_view(after, store.outcome(job.job_name, checked)))


def kill_running_asked() -> bool:
    """The cancel's optional body `{"killRunning": bool}` (none: false)."""
    if not request.get_data(cache=True).strip():
        return False
    data = require_object(json_body(), "a cancel")
    unknown = [str(key)[:40] for key in data if key != "killRunning"][:5]
    if unknown:
        raise InvalidRequest(
            "unknown field(s) of a cancel: " + ", ".join(repr(k) for k in unknown),
            dict.fromkeys(unknown, "is not a field of a cancel"),
        )
    value = data.get("killRunning", False)
    if not isinstance(value, bool):
        raise InvalidRequest(
            "killRunning must be true or false", {"killRunning": "must be a boolean"}
        )
    return value


@bp.post("/job/<job_name>/backfills/<backfill_id>/pause")
@requires(Role.OPERATOR, scope="app")
def pause(job_name: str, backfill_id: str) -> Response:
    return _operate(job_name, backfill_id, "pause")


@bp.post("/job/<job_name>/backfills/<backfill_id>/resume")
@requires(Role.OPERATOR, scope="app")
def resume(job_name: str, backfill_id: str) -> Response:
    return _operate(job_name, backfill_id, "resume")


@bp.post("/job/<job_name>/backfills/<backfill_id>/cancel")
@requires(Role.OPERATOR, scope="app")
def cancel(job_name: str, backfill_id: str) -> Response:
    return _operate(job_name, backfill_id, "cancel")

"""`/api/calendar` and `/api/calendars` (issue 28): register, update, read, list and delete the
named calendars whose periods a job's `excludeCalendars` skip.

Calendars are cluster-wide (no app): registering, updating and deleting one needs `editor` on
every app (scope `cluster`), reading any authenticated caller. A body is checked whole by
`Calendar.from_json` (an `ics` text is converted there, `model/calendar/ics.py`) before
anything is written; the store (`storage/calendar_store.py`) writes fenced and bounds the count
(`max_calendars`). A calendar that a job lists cannot be deleted (409 naming the jobs). The read
of one calendar adds `usedBy`: the jobs the caller sees that list it.

`job_references` (for `api/jobs.py`): a job's `excludeCalendars` must name calendars that exist
and its `pool` a pool that exists and can hold one run of the job, else 400 naming the field.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from flask import Blueprint, Flask, Response, current_app, jsonify

from scheduler.api.access_control import requires, sees_every_app, visible_jobs
from scheduler.api.audit_hooks import note_change, note_resource
from scheduler.api.bodies import json_body
from scheduler.api.inputs import reference_name
from scheduler.api.paging import keyed_list
from scheduler.model.access.roles import Role
from scheduler.model.calendar import Calendar
from scheduler.model.config._wire import require_object
from scheduler.model.config.job import JobConfig
from scheduler.model.errors import Conflict, InvalidRequest, NotFound
from scheduler.model.pools import fit_problem
from scheduler.storage.calendar_store import CalendarStore
from scheduler.storage.pool_store import PoolStore
from scheduler.storage.term_stores import TermStores

__all__ = ["CalendarAccess", "bp", "install", "references_held", "refuse_unknown_references"]

log = logging.getLogger(__name__)

bp = Blueprint("calendars", __name__, url_prefix="/api")

_EXTENSION = "ejc_calendars"
_USERS_NAMED = 20
"""A refused delete names at most this many users (and counts the rest)."""


@dataclass(frozen=True)
class CalendarAccess:
    """What the handlers use: the term's calendar and pool stores and the list bound."""

    store: CalendarStore
    pools: PoolStore
    max_list_items: int


def install(app: Flask, stores: TermStores, max_list_items: int) -> None:
    """Register the routes on `app`, serving the calendars of `stores`."""
    app.extensions[_EXTENSION] = CalendarAccess(stores.calendars, stores.pools, max_list_items)
    app.register_blueprint(bp)


def _access() -> CalendarAccess:
    found: CalendarAccess = current_app.extensions[_EXTENSION]
    return found


def _name(name: str) -> str:
    return reference_name(name, "calendarName")


def _calendar(name: str) -> Calendar:
    checked = _name(name)
    note_resource(f"calendar/{checked}")
    found = _access().store.get(checked)
    if found is None:
        raise NotFound(f"calendar '{checked}' does not exist")
    return found


def _read_body(path_name: str | None = None) -> Calendar:
    """The body checked whole; with `path_name` (PUT /calendar/NAME) the body may leave
    `calendarName` out, and may not name another calendar."""
    data = require_object(json_body(), "a calendar")
    if path_name is not None:
        named = data.get("calendarName")
        if named is None:
            data = {**data, "calendarName": path_name}
        elif named != path_name:
            raise InvalidRequest(
                "calendarName differs from the calendar of the path",
                {"calendarName": f"must be {path_name!r} (the path's) or absent"},
            )
    return Calendar.from_json(data, default_time_zone=_access().store.default_time_zone)


@bp.post("/calendar")
@requires(Role.EDITOR, scope="cluster")
def register() -> tuple[Response, int]:
    calendar = _read_body()
    _access().store.save(calendar, create=True)
    note_change(f"calendar/{calendar.calendar_name}", None, calendar.to_json())
    log.info("api: calendar %s registered", calendar.calendar_name)
    return jsonify(calendar.to_json()), 201


@bp.put("/calendar")
@requires(Role.EDITOR, scope="cluster")
def update() -> Response:
    return _update(_read_body())


@bp.put("/calendar/<name>")
@requires(Role.EDITOR, scope="cluster")
def update_named(name: str) -> Response:
    return _update(_read_body(_name(name)))


def _update(calendar: Calendar) -> Response:
    before = _calendar(calendar.calendar_name)
    _access().store.save(calendar, create=False)
    note_change(f"calendar/{calendar.calendar_name}", before.to_json(), calendar.to_json())
    log.info("api: calendar %s updated", calendar.calendar_name)
    return jsonify(calendar.to_json())


@bp.get("/calendar/<name>")
@requires(None, scope="authenticated")
def show(name: str) -> Response:
    """The calendar with `usedBy`: the names of the jobs that list it, of those the caller
    sees (and of the workflows that do, for a caller who sees every app)."""
    calendar = _calendar(name)
    users = _access().store.users(calendar.calendar_name)
    seen = visible_jobs(users.jobs)
    shown = {**calendar.to_json(), "usedBy": [job for job in users.jobs if job in seen]}
    if sees_every_app():
        shown["usedByWorkflows"] = list(users.workflows)
    return jsonify(shown)


@bp.get("/calendars")
@requires(None, scope="authenticated")
def listing() -> Response:
    """Every calendar, by name (paged with `limit`/`cursor` as the other lists)."""
    access = _access()
    return keyed_list(
        "calendars",
        access.store.all(),
        lambda c: (c.calendar_name,),
        lambda c: c.to_json(),
        access.max_list_items,
    )


@bp.delete("/calendar/<name>")
@requires(Role.EDITOR, scope="cluster")
def delete(name: str) -> Response:
    """Delete the calendar; 409 naming the jobs that still list it (nothing deleted)."""
    access = _access()
    calendar = _calendar(name)
    with access.store.references:  # no job registered naming it between the check and delete
        users = access.store.users(calendar.calendar_name)
        if users:
            labels = users.labels()
            named = ", ".join(labels[:_USERS_NAMED])
            more = len(labels) - _USERS_NAMED
            raise Conflict(
                f"calendar '{calendar.calendar_name}' is used by {named}"
                + (f" and {more} more" if more > 0 else "")
                + "; remove it from their excludeCalendars first"
            )
        access.store.delete(calendar.calendar_name)
    note_change(f"calendar/{calendar.calendar_name}", calendar.to_json(), None)
    log.info("api: calendar %s deleted", calendar.calendar_name)
    return Response(status=204)


@contextmanager
def references_held(job: JobConfig) -> Iterator[None]:
    """Around the write of `job`: when it lists calendars, hold the calendar store's
    `references` lock and check them again (`refuse_unknown_references`), so that a calendar
    deleted since the first check is not written as one of its calendars."""
    if not job.exclude_calendars:
        yield
        return
    with _access().store.references:
        refuse_unknown_references(job)
        yield


def refuse_unknown_references(job: JobConfig) -> None:
    """InvalidRequest (400) naming `excludeCalendars` when the job lists a calendar that does
    not exist, and `pool` when its pool does not exist or cannot hold one run of the job."""
    access = _access()
    problems: dict[str, str] = {}
    if job.exclude_calendars:
        found = {c.calendar_name for c in access.store.calendars(job.exclude_calendars)}
        missing = [name for name in job.exclude_calendars if name not in found]
        if missing:
            listed = ", ".join(f"'{name}'" for name in missing[:10])
            problems["excludeCalendars"] = (
                f"calendar {listed} does not exist"
                if len(missing) == 1
                else f"calendars {listed} do not exist"
            )
    if job.pool is not None:
        pool = access.pools.get(job.pool)
        if pool is None:
            problems["pool"] = f"pool '{job.pool}' does not exist"
        elif (
            why := fit_problem(job.sharding_total_count, job.pool_slots, pool.pool_name, pool.size)
        ) is not None:
            problems["pool"] = why
    if problems:
        text = "; ".join(f"{key}: {why}" for key, why in problems.items())
        raise InvalidRequest(f"invalid job: {text}", problems)

"""Next fire times: of a registered job, and of a cron expression before it is registered.

Both answer `{"nextFireTimes": ["2026-11-22T10:00:10+01:00", ...]}`: ISO 8601 times to the
second with the offset of the job's zone (its `timeZone`, else the `time_zone` setting), fewer
than asked when the cron's schedule ends, none for a job without a cron (it fires only when
triggered or in a workflow). `count` is 1-100 (default 5). A disabled job still
answers with its cron's times (it does not fire while disabled: `GET /api/job/{job}/disable`).

A job with `excludeCalendars` (issue 28) answers the fires that will really run: its cron's
times that none of its calendars excludes, as the producer judges them, and three more keys:
`excludeCalendars` (the calendars that applied: those of the job's that exist),
`excludedFires` (the excluded times passed over before the last one shown) and `gaveUp` (true
when more than MAX_SKIPPED_SHOWN times in a row were excluded: the times found so far are
shown, and whether more follow is not known). A job without calendars answers as before.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from flask import Blueprint, Response, jsonify, request

from scheduler.api.access_control import require_job, requires
from scheduler.api.term_access import term_access
from scheduler.model.access.roles import Role
from scheduler.model.calendar import Calendar, cron_candidates, next_allowed
from scheduler.model.config import CRON_MAX_BYTES, CronSpec, parse_cron, shown
from scheduler.model.errors import Conflict, InvalidRequest

bp = Blueprint("fire_times", __name__, url_prefix="/api")

DEFAULT_COUNT = 5
MAX_COUNT = 100
_ZONE_MAX_LENGTH = 255
_COUNT = re.compile(r"[0-9]{1,6}")
MAX_SKIPPED_SHOWN = 20_000
"""Excluded times the preview passes over at most (about half a second of work): an every-
second cron through an excluded weekend is beyond it, and the answer says so (`gaveUp`)."""


def _count() -> int:
    raw = request.args.get("count")
    if raw is None:
        return DEFAULT_COUNT
    if not _COUNT.fullmatch(raw.strip()) or not 1 <= int(raw) <= MAX_COUNT:
        problem = f"must be a whole number from 1 to {MAX_COUNT}, not {shown(raw)}"
        raise InvalidRequest(f"count {problem}", {"count": problem})
    return int(raw)


def _answer(spec: CronSpec, count: int) -> Response:
    times = spec.next_fire_times(datetime.now(UTC), count)
    return jsonify({"nextFireTimes": [t.isoformat(timespec="seconds") for t in times]})


def allowed_fire_times(
    spec: CronSpec, calendars: list[Calendar], count: int, after: datetime
) -> dict[str, object]:
    """The answer for a job with calendars: the first `count` fire times after `after` that no
    calendar of `calendars` excludes (see the module docstring)."""
    found = next_allowed(
        cron_candidates(spec, after), calendars, count, max_skipped=MAX_SKIPPED_SHOWN
    )
    return {
        "nextFireTimes": [t.isoformat(timespec="seconds") for t in found.fire_times],
        "excludeCalendars": [c.calendar_name for c in calendars],
        "excludedFires": found.skipped,
        "gaveUp": found.gave_up,
    }


@bp.get("/job/<job_name>/next-fire-times")
@requires(Role.VIEWER, scope="app")
def job_next_fire_times(job_name: str) -> Response:
    count = _count()
    job = require_job(Role.VIEWER, job_name)
    if not job.has_cron:
        # Fires only when triggered or in a workflow: no time is next.
        return jsonify({"nextFireTimes": []})
    try:
        spec = job.cron_spec
    except InvalidRequest as exc:  # stored by another tool with a cron we cannot schedule
        raise Conflict(
            f"job '{job_name}' has a cron that cannot be scheduled: {exc.message}"
        ) from exc
    store = term_access().calendars
    if job.exclude_calendars and store is not None:
        calendars = store.calendars(job.exclude_calendars)
        return jsonify(allowed_fire_times(spec, calendars, count, datetime.now(UTC)))
    return _answer(spec, count)


@bp.get("/cron/next-fire-times")
@requires(None, scope="authenticated")  # a pure cron preview: no app's data
def cron_next_fire_times() -> Response:
    count = _count()
    cron = request.args.get("cron", "")
    if not cron.strip():
        raise InvalidRequest("the query parameter cron is required", {"cron": "is required"})
    if len(cron.encode("utf-8", "surrogatepass")) > CRON_MAX_BYTES:
        problem = f"must be at most {CRON_MAX_BYTES} bytes"
        raise InvalidRequest(f"cron {problem}", {"cron": problem})
    zone = request.args.get("timeZone", "").strip() or term_access().config.default_time_zone
    if len(zone) > _ZONE_MAX_LENGTH:
        problem = f"must be at most {_ZONE_MAX_LENGTH} characters"
        raise InvalidRequest(f"timeZone {problem}", {"timeZone": problem})
    return _answer(parse_cron(cron, zone), count)

"""`/api/operate`: reconciliation on demand and app sandboxes.

`GET /api/operate/sandbox?appName=` lists where the app's executors (and the running command
tasks of its SCRIPT jobs) have their sandboxes: `[{"hostname", "path", "executorId"}]`, `path`
below the agent's work directory (`/slaves/<agent>/frameworks/...`) as Elastic-Job-Cloud showed
it. The directory comes from each agent's own `/state`, as on real Mesos.
"""

from __future__ import annotations

import math

from flask import Blueprint, Response, jsonify, request

from scheduler.api.access_control import require_app, requires
from scheduler.api.errors import error_response
from scheduler.api.inputs import reference_name
from scheduler.api.term_access import term_access
from scheduler.model.access.roles import Role
from scheduler.model.errors import InvalidRequest

bp = Blueprint("operate", __name__, url_prefix="/api/operate")


def _reconcile(explicit: bool) -> Response:
    access = term_access()
    wait_s = access.reconcile_throttle.try_acquire()
    if wait_s > 0:
        # The original answered 500 "Repeat explicitReconcile"; this says when to come back.
        response = error_response(
            429, f"a reconciliation ran less than 10 s ago; retry in {wait_s:.1f} s", "Throttled"
        )
        response.headers["Retry-After"] = str(math.ceil(wait_s))
        return response
    access.actions.reconcile(explicit)
    return Response(status=204)


@bp.post("/reconcile/explicit")
@requires(Role.CLUSTER_ADMIN)
def reconcile_explicit() -> Response:
    return _reconcile(True)


@bp.post("/reconcile/implicit")
@requires(Role.CLUSTER_ADMIN)
def reconcile_implicit() -> Response:
    return _reconcile(False)


@bp.get("/sandbox")
@requires(Role.VIEWER, scope="app")
def sandbox() -> Response:
    app_name = request.args.get("appName", "").strip()
    if not app_name:
        raise InvalidRequest("the query parameter appName is required", {"appName": "missing"})
    reference_name(app_name, "appName")
    require_app(Role.VIEWER, app_name)
    access = term_access()
    access.config.require_app(app_name)
    jobs = [job.job_name for job in access.config.jobs(app_name)]
    return jsonify(access.actions.sandboxes(app_name, jobs))

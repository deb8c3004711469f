"""`/api/app`: register, update, read, list, enable/disable and delete apps."""

from __future__ import annotations

import logging

from flask import Blueprint, Response, jsonify

from scheduler.api.access import forget_app
from scheduler.api.access_control import require_app, requires, sees_every_app, visible
from scheduler.api.bodies import json_body
from scheduler.api.paging import named_list
from scheduler.api.quotas import quotas
from scheduler.api.term_access import term_access
from scheduler.model.access.roles import Role
from scheduler.model.config.app import AppConfig
from scheduler.model.errors import Conflict

log = logging.getLogger(__name__)

bp = Blueprint("apps", __name__, url_prefix="/api/app")


def _no_content() -> Response:
    return Response(status=204)


@bp.post("")
@requires(Role.CLUSTER_ADMIN)
def register_app() -> Response:
    app = AppConfig.from_json(json_body())
    access = term_access()
    if access.config.app_exists(app.app_name):
        raise Conflict(f"app '{app.app_name}' already exists")
    with quotas().registering_app(access.config, app):  # max_apps, max_job_bytes
        # Grants and tokens left on this name (an app deleted before they were cleaned up)
        # must not open the new app to the old app's team.
        forget_app(app.app_name)
        access.config.add_app(app)
    log.info("api: app %s registered", app.app_name)
    return _no_content()


@bp.put("")
@requires(Role.EDITOR, scope="app")
def update_app() -> Response:
    body = json_body()
    access = term_access()
    # Name, field names and strings are checked before the stored app is read; the rest on
    # the merged whole.
    name = AppConfig.check_patch(body)
    require_app(Role.EDITOR, name)
    existing = access.config.require_app(name)
    updated = existing.merged(body)
    quotas().check_app_size(updated)
    access.config.update_app(updated)
    log.info("api: app %s updated", updated.app_name)
    return _no_content()


@bp.get("/list")
@requires(Role.VIEWER, scope="list")
def list_apps() -> Response:
    """Every app the caller sees (paged with `limit`/`cursor`; see `paging`)."""
    config = term_access().config
    names = config.app_names()
    if not sees_every_app():
        names = [name for name in names if visible(name)]
    return named_list(
        "apps",
        names,
        lambda names: [app.to_json() for app in config.apps_named(names)],
        quotas().max_list_items,
    )


@bp.get("/<app_name>")
@requires(Role.VIEWER, scope="app")
def get_app(app_name: str) -> Response:
    require_app(Role.VIEWER, app_name)
    return jsonify(term_access().config.require_app(app_name).to_json())


@bp.get("/<app_name>/disable")
@requires(Role.VIEWER, scope="app")
def is_app_disabled(app_name: str) -> Response:
    require_app(Role.VIEWER, app_name)
    access = term_access()
    access.config.require_app(app_name)
    return jsonify(access.disabled.is_app_disabled(app_name))


@bp.post("/<app_name>/disable")
@requires(Role.OPERATOR, scope="app")
def disable_app(app_name: str) -> Response:
    require_app(Role.OPERATOR, app_name)
    access = term_access()
    access.config.require_app(app_name)
    if not access.disabled.disable_app(app_name):
        raise Conflict("the disabled-app list is full (job_state_queue_size)")
    # Pending runs and failover relaunches of its jobs are dropped: enabling later brings no
    # burst of stale runs.
    for job in access.config.jobs(app_name):
        access.ready.remove(job.job_name)
        access.failover.remove_job(job.job_name)
    log.info("api: app %s disabled", app_name)
    return _no_content()


@bp.delete("/<app_name>/disable")
@bp.post("/<app_name>/enable")
@requires(Role.OPERATOR, scope="app")
def enable_app(app_name: str) -> Response:
    require_app(Role.OPERATOR, app_name)
    access = term_access()
    access.config.require_app(app_name)
    access.disabled.enable_app(app_name)
    log.info("api: app %s enabled", app_name)
    return _no_content()


@bp.delete("/<app_name>")
@requires(Role.APP_ADMIN, scope="app")
def delete_app(app_name: str) -> Response:
    require_app(Role.APP_ADMIN, app_name)
    access = term_access()
    access.config.require_app(app_name)
    # The grants and tokens go first: a failure half-way leaves an app nobody but the
    # cluster-admins may use, never grants that a new app of this name would inherit.
    forget_app(app_name)
    for job in access.config.jobs(app_name):
        remove_job_everywhere(job.job_name)
    access.disabled.enable_app(app_name)
    access.config.delete_app(app_name)
    access.actions.stop_app_executors(app_name)
    log.info("api: app %s deleted with its jobs", app_name)
    return _no_content()


def remove_job_everywhere(job_name: str) -> None:
    """Delete a job's configuration and its pending state (running tasks are killed by the
    scheduling pipeline when it sees the configuration go)."""
    access = term_access()
    access.config.delete_job(job_name)
    access.disabled.enable_job(job_name)
    access.ready.remove(job_name)
    access.failover.remove_job(job_name)

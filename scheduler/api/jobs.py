"""`/api/job`: register, update, deregister, read, enable/disable, trigger, and task views."""

from __future__ import annotations

import logging

from flask import Blueprint, Response, jsonify

from scheduler.api.access_control import (
    current_rights,
    require_app,
    require_job,
    requires,
    sees_every_app,
    visible,
    visible_jobs,
)
from scheduler.api.apps import remove_job_everywhere
from scheduler.api.bodies import json_body, name_body
from scheduler.api.calendars import references_held, refuse_unknown_references
from scheduler.api.job_views import job_json, refuse_internal_webhook
from scheduler.api.paging import keyed_list, named_list
from scheduler.api.placement import refuse_unplaceable
from scheduler.api.quotas import quotas
from scheduler.api.term_access import term_access
from scheduler.model.access.roles import Role
from scheduler.model.config import OverlapPolicy
from scheduler.model.config.job import JobConfig, JobExecutionType
from scheduler.model.errors import Conflict
from scheduler.model.task_id import TaskId

log = logging.getLogger(__name__)

bp = Blueprint("jobs", __name__, url_prefix="/api/job")


def _no_content() -> Response:
    return Response(status=204)


@bp.post("/register")
@requires(Role.EDITOR, scope="app")
def register_job() -> Response:
    access = term_access()
    job = JobConfig.from_json(
        json_body(),
        default_time_zone=access.config.default_time_zone,
        app_exists=_visible_app_exists,
    )
    require_app(Role.EDITOR, job.app_name)  # the body's appName decides
    refuse_internal_webhook(job)  # 400 for a webhook the leader may not POST to
    refuse_unknown_references(job)  # 400 for a calendar or pool that does not exist (issue 28)
    if access.config.job(job.job_name) is not None:
        raise Conflict(f"job '{job.job_name}' already exists")
    if access.disabled.is_app_disabled(job.app_name):
        raise Conflict(f"app '{job.app_name}' is disabled; enable it before registering jobs")
    refuse_unplaceable(job)
    with (
        references_held(job),  # its calendars checked again, none deleted until it is written
        quotas().registering_job(access.config, job),  # max_jobs, max_job_bytes, cron
    ):
        access.disabled.enable_job(job.job_name)  # a stale disable node must not hide the job
        access.config.add_job(job)
    log.info("api: job %s registered", job.job_name)
    return _no_content()


@bp.put("/update")
@requires(Role.EDITOR, scope="app")
def update_job() -> Response:
    access = term_access()
    body = json_body()
    # Name, field names and strings are checked before the stored job is read.
    existing = require_job(Role.EDITOR, JobConfig.check_patch(body))
    updated = existing.merged(body, app_exists=_visible_app_exists)
    if updated.app_name != existing.app_name:
        require_app(Role.EDITOR, updated.app_name)  # moving a job needs both apps
    refuse_internal_webhook(updated)  # 400 for a webhook the leader may not POST to
    refuse_unknown_references(updated)  # 400 for a calendar or pool that does not exist
    refuse_unplaceable(updated)
    quotas().check_job(updated)  # max_job_bytes, min_fire_interval_seconds
    with references_held(updated):  # its calendars checked again, none deleted meanwhile
        access.config.update_job(updated)
    log.info("api: job %s updated", updated.job_name)
    return _no_content()


@bp.delete("/deregister")
@requires(Role.EDITOR, scope="app")
def deregister_job() -> Response:
    return _deregister(name_body())


@bp.delete("/<job_name>/deregister")
@requires(Role.EDITOR, scope="app")
def deregister_job_by_path(job_name: str) -> Response:
    return _deregister(job_name)


def _deregister(job_name: str) -> Response:
    require_job(Role.EDITOR, job_name)
    remove_job_everywhere(job_name)
    log.info("api: job %s deregistered", job_name)
    return _no_content()


@bp.get("/jobs")
@requires(Role.VIEWER, scope="list")
def list_jobs() -> Response:
    """Every job the caller sees (paged with `limit`/`cursor`; see `paging`), read and written a
    batch at a time. For a caller who does not see every app the names are first kept to the
    visible ones by each job's app in the term's `JobApps` (no read per job; the pages and
    `X-Total-Count` count only the visible ones), and each config read for the answer is checked
    again, so a job moved to another app meanwhile is left out (`tests/bench/
    bench_access_lists.py` measures both callers)."""
    config = term_access().config
    if sees_every_app():
        return named_list(
            "jobs",
            config.job_names(),
            lambda names: [_job_json(job) for job in config.jobs_named(names)],
            quotas().max_list_items,
        )
    rights = current_rights()
    return named_list(
        "jobs",
        sorted(visible_jobs(config.job_names())),
        lambda names: [
            _job_json(job) for job in config.jobs_named(names) if rights.sees(job.app_name)
        ],
        quotas().max_list_items,
    )


def _job_json(job: JobConfig) -> dict[str, object]:
    """A job as the job list shows it (its webhook hidden from readers)."""
    return job_json(job)


@bp.get("/jobs/<job_name>")
@requires(Role.VIEWER, scope="app")
def get_job(job_name: str) -> Response:
    return jsonify(job_json(require_job(Role.VIEWER, job_name)))


@bp.get("/<job_name>/disable")
@requires(Role.VIEWER, scope="app")
def is_job_disabled(job_name: str) -> Response:
    access = term_access()
    job = require_job(Role.VIEWER, job_name)
    disabled = access.disabled.is_job_disabled(job_name) or access.disabled.is_app_disabled(
        job.app_name
    )
    return jsonify(disabled)


@bp.post("/<job_name>/disable")
@requires(Role.OPERATOR, scope="app")
def disable_job(job_name: str) -> Response:
    access = term_access()
    require_job(Role.OPERATOR, job_name)
    if not access.disabled.disable_job(job_name):
        raise Conflict("the disabled-job list is full (job_state_queue_size)")
    access.ready.remove(job_name)  # no burst of stale runs on enable (the original's #367)
    access.failover.remove_job(job_name)  # nor stale failover relaunches
    log.info("api: job %s disabled", job_name)
    return _no_content()


@bp.delete("/<job_name>/disable")
@bp.post("/<job_name>/enable")
@requires(Role.OPERATOR, scope="app")
def enable_job(job_name: str) -> Response:
    access = term_access()
    require_job(Role.OPERATOR, job_name)
    access.disabled.enable_job(job_name)
    log.info("api: job %s enabled", job_name)
    return _no_content()


@bp.post("/trigger")
@requires(Role.OPERATOR, scope="app")
def trigger_job() -> Response:
    access = term_access()
    job_name = name_body()
    job = require_job(Role.OPERATOR, job_name)
    if job.execution_type is JobExecutionType.DAEMON:
        raise Conflict(f"daemon job '{job_name}' cannot be triggered")
    if access.disabled.is_job_disabled(job_name) or access.disabled.is_app_disabled(job.app_name):
        raise Conflict(f"job '{job_name}' is disabled; enable it first")
    if not job.misfire and job.overlap is OverlapPolicy.FORBID and access.running.tasks(job_name):
        # As a cron fire would be: with misfire off a run does not wait for the one in progress.
        raise Conflict(
            f"job '{job_name}' is running; with overlapPolicy FORBID and misfire off a trigger "
            "does not wait for it (turn misfire on to queue runs, or use ALLOW or REPLACE)"
        )
    if not access.ready.add_transient(job_name, job.misfire):
        raise Conflict("the ready queue is full (job_state_queue_size)")
    log.info("api: job %s triggered", job_name)
    return _no_content()


@bp.get("/tasks/running")
@requires(Role.VIEWER, scope="list")
def running_tasks() -> Response:
    tasks = term_access().running.tasks()
    if not sees_every_app():
        seen = visible_jobs(_job_of(t.task_id) for t in tasks)
        tasks = [t for t in tasks if _job_of(t.task_id) in seen]
    return keyed_list(
        "running",
        tasks,
        lambda t: (t.task_id,),  # `{job}@-@{item}@-@...`: by job, then shard
        lambda t: t.to_json(),
        quotas().max_list_items,
    )


@bp.get("/tasks/ready")
@requires(Role.VIEWER, scope="list")
def ready_tasks() -> Response:
    counts = term_access().ready.counts()
    if not sees_every_app():
        seen = visible_jobs(counts)
        counts = {job: times for job, times in counts.items() if job in seen}
    return keyed_list(
        "ready",
        list(counts.items()),
        lambda entry: (entry[0],),
        lambda entry: {"jobName": entry[0], "times": str(entry[1])},
        quotas().max_list_items,
    )


@bp.get("/tasks/failover")
@requires(Role.VIEWER, scope="list")
def failover_tasks() -> Response:
    entries = term_access().failover.entries()
    if not sees_every_app():
        seen = visible_jobs(entry[0] for entry in entries)
        entries = [entry for entry in entries if entry[0] in seen]
    return keyed_list(
        "failover",
        entries,
        # Items in numeric order (zero-padded: keys compare as text).
        lambda entry: (entry[0], f"{entry[1]:010d}", entry[2]),
        lambda entry: {
            "taskInfo": {"jobName": entry[0], "shardingItems": [entry[1]]},
            "originalTaskId": entry[2],
        },
        quotas().max_list_items,
    )


def _visible_app_exists(name: str) -> bool:
    """Whether app `name` exists as far as the caller may know: an app it cannot see is
    answered as one that does not exist (the same 400 either way)."""
    return visible(name) and term_access().config.app_exists(name)


def _job_of(task_id: str) -> str:
    """The job of a stored task id ("" for one that does not parse: seen only by callers who
    see every app)."""
    try:
        return TaskId.parse(task_id).job_name
    except ValueError:  # InvalidTaskId is one
        return ""

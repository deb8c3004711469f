"""`/api/job`: register, update, deregister, read, enable/disable, trigger, and task views."""

from __future__ import annotations

import logging

from flask import Blueprint, Response, jsonify

from scheduler.api.apps import remove_job_everywhere
from scheduler.api.bodies import json_body, name_body
from scheduler.api.job_views import job_json, refuse_internal_webhook
from scheduler.api.paging import keyed_list, named_list
from scheduler.api.placement import refuse_unplaceable
from scheduler.api.quotas import quotas
from scheduler.api.term_access import term_access
from scheduler.model.config import OverlapPolicy
from scheduler.model.config.job import JobConfig, JobExecutionType
from scheduler.model.errors import Conflict

log = logging.getLogger(__name__)

bp = Blueprint("jobs", __name__, url_prefix="/api/job")


def _no_content() -> Response:
    return Response(status=204)


@bp.post("/register")
def register_job() -> Response:
    access = term_access()
    job = JobConfig.from_json(
        json_body(),
        default_time_zone=access.config.default_time_zone,
        app_exists=access.config.app_exists,
    )
    refuse_internal_webhook(job)  # 400 for a webhook the leader may not POST to
    if access.config.job(job.job_name) is not None:
        raise Conflict(f"job '{job.job_name}' already exists")
    if access.disabled.is_app_disabled(job.app_name):
        raise Conflict(f"app '{job.app_name}' is disabled; enable it before registering jobs")
    refuse_unplaceable(job)
    with quotas().registering_job(access.config, job):  # max_jobs, max_job_bytes, cron
        access.disabled.enable_job(job.job_name)  # a stale disable node must not hide the job
        access.config.add_job(job)
    log.info("api: job %s registered", job.job_name)
    return _no_content()


@bp.put("/update")
def update_job() -> Response:
    access = term_access()
    body = json_body()
    # Name, field names and strings are checked before the stored job is read.
    existing = access.config.require_job(JobConfig.check_patch(body))
    updated = existing.merged(body, app_exists=access.config.app_exists)
    refuse_internal_webhook(updated)  # 400 for a webhook the leader may not POST to
    refuse_unplaceable(updated)
    quotas().check_job(updated)  # max_job_bytes, min_fire_interval_seconds
    access.config.update_job(updated)
    log.info("api: job %s updated", updated.job_name)
    return _no_content()


@bp.delete("/deregister")
def deregister_job() -> Response:
    return _deregister(name_body())


@bp.delete("/<job_name>/deregister")
def deregister_job_by_path(job_name: str) -> Response:
    return _deregister(job_name)


def _deregister(job_name: str) -> Response:
    term_access().config.require_job(job_name)
    remove_job_everywhere(job_name)
    log.info("api: job %s deregistered", job_name)
    return _no_content()


@bp.get("/jobs")
def list_jobs() -> Response:
    """Every job (paged with `limit`/`cursor`; see `paging`), read and written a batch at a
    time."""
    config = term_access().config
    return named_list(
        "jobs",
        config.job_names(),
        lambda names: [_job_json(job) for job in config.jobs_named(names)],
        quotas().max_list_items,
    )


def _job_json(job: JobConfig) -> dict[str, object]:
    """A job as the job list shows it (its webhook hidden from readers)."""
    return job_json(job)


@bp.get("/jobs/<job_name>")
def get_job(job_name: str) -> Response:
    return jsonify(job_json(term_access().config.require_job(job_name)))


@bp.get("/<job_name>/disable")
def is_job_disabled(job_name: str) -> Response:
    access = term_access()
    job = access.config.require_job(job_name)
    disabled = access.disabled.is_job_disabled(job_name) or access.disabled.is_app_disabled(
        job.app_name
    )
    return jsonify(disabled)


@bp.post("/<job_name>/disable")
def disable_job(job_name: str) -> Response:
    access = term_access()
    access.config.require_job(job_name)
    if not access.disabled.disable_job(job_name):
        raise Conflict("the disabled-job list is full (job_state_queue_size)")
    access.ready.remove(job_name)  # no burst of stale runs on enable (the original's #367)
    access.failover.remove_job(job_name)  # nor stale failover relaunches
    log.info("api: job %s disabled", job_name)
    return _no_content()


@bp.delete("/<job_name>/disable")
@bp.post("/<job_name>/enable")
def enable_job(job_name: str) -> Response:
    access = term_access()
    access.config.require_job(job_name)
    access.disabled.enable_job(job_name)
    log.info("api: job %s enabled", job_name)
    return _no_content()


@bp.post("/trigger")
def trigger_job() -> Response:
    access = term_access()
    job_name = name_body()
    job = access.config.require_job(job_name)
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
def running_tasks() -> Response:
    return keyed_list(
        "running",
        term_access().running.tasks(),
        lambda t: (t.task_id,),  # `{job}@-@{item}@-@...`: by job, then shard
        lambda t: t.to_json(),
        quotas().max_list_items,
    )


@bp.get("/tasks/ready")
def ready_tasks() -> Response:
    return keyed_list(
        "ready",
        list(term_access().ready.counts().items()),
        lambda entry: (entry[0],),
        lambda entry: {"jobName": entry[0], "times": str(entry[1])},
        quotas().max_list_items,
    )


@bp.get("/tasks/failover")
def failover_tasks() -> Response:
    return keyed_list(
        "failover",
        term_access().failover.entries(),
        # Items in numeric order (zero-padded: keys compare as text).
        lambda entry: (entry[0], f"{entry[1]:010d}", entry[2]),
        lambda entry: {
            "taskInfo": {"jobName": entry[0], "shardingItems": [entry[1]]},
            "originalTaskId": entry[2],
        },
        quotas().max_list_items,
    )

"""`/api/job/events/*` and `/api/job/statistics/*`, served from the statistics component's
database in the original's shapes.

With the trace off (`event_trace_rdb_url=none`) or its schema not migrated yet, they answer the
original's empty results (as the original did without a database); the job counts come live from
ZooKeeper either way. A database that cannot be reached answers 503 TraceDatabaseUnavailable.

Access (issue 26): a caller who does not see every app gets the events of the jobs of the apps
it sees, result counts and job counts of those jobs alone, and empty time series of the
cluster's totals (running tasks and jobs, registered jobs, results per minute), which would show
other apps' activity and cannot be split by app.
"""

from __future__ import annotations

import logging

from flask import Blueprint, Response, jsonify, request
from sqlalchemy.engine import Engine

from scheduler.api.access_control import (
    requires,
    sees_every_app,
    visible_job_configs,
    visible_jobs,
)
from scheduler.api.term_access import term_access
from scheduler.leader.statistics import queries
from scheduler.model.access.roles import Role
from scheduler.model.config import shown
from scheduler.model.config.job import JobConfig, JobExecutionType, JobType
from scheduler.model.errors import InvalidRequest

log = logging.getLogger(__name__)

bp = Blueprint("history", __name__, url_prefix="/api/job")


_PERIODS = ("online", "lastWeek", "lastHour", "lastMinute")


def _engine() -> Engine | None:
    return term_access().trace_engine


def _only_jobs() -> set[str] | None:
    """The jobs whose rows the caller may see; None: every row (a role on every app)."""
    if sees_every_app():
        return None
    return visible_jobs(term_access().config.job_names())


def _cluster_totals() -> Engine | None:
    """The engine for a series of the cluster's totals; None (an empty series) for a caller who
    does not see every app."""
    return _engine() if sees_every_app() else None


def _visible_job_configs() -> list[JobConfig]:
    """The configs of the jobs the caller sees, read in bulk (100 to a multiRead where the
    server has it); for a caller who does not see every app, only the visible ones are read."""
    config = term_access().config
    if sees_every_app():
        return config.jobs_named(config.job_names())
    return list(visible_job_configs(config.job_names()).values())


@bp.get("/events/executions")
@requires(Role.VIEWER, scope="list")
def executions() -> Response:
    engine = _engine()
    if engine is None:
        queries.check_executions(request.args)  # bad input is an error either way
        return jsonify({"total": 0, "rows": []})
    return jsonify(queries.executions(engine, request.args, _only_jobs()))


@bp.get("/events/statusTraces")
@requires(Role.VIEWER, scope="list")
def status_traces() -> Response:
    engine = _engine()
    if engine is None:
        queries.check_status_traces(request.args)
        return jsonify({"total": 0, "rows": []})
    return jsonify(queries.status_traces(engine, request.args, _only_jobs()))


@bp.get("/statistics/tasks/results")
@requires(Role.VIEWER, scope="list")
def task_results() -> Response:
    engine = _cluster_totals()
    if engine is None:
        return jsonify([])
    return jsonify(queries.task_result_statistics(engine, request.args.get("since")))


@bp.get("/statistics/tasks/results/<period>")
@requires(Role.VIEWER, scope="list")
def task_results_period(period: str) -> Response:
    if period not in _PERIODS:
        raise InvalidRequest(
            f"period must be one of {', '.join(_PERIODS)}", {"period": f"unknown {shown(period)}"}
        )
    engine = _engine()
    if engine is None:
        return jsonify({"successCount": 0, "failedCount": 0})
    only = _only_jobs()
    if only is not None:
        return jsonify(queries.job_result_summary(engine, period, only))
    return jsonify(queries.task_result_summary(engine, period))


@bp.get("/statistics/tasks/running")
@requires(Role.VIEWER, scope="list")
def tasks_running() -> Response:
    engine = _cluster_totals()
    since = request.args.get("since")
    return jsonify([] if engine is None else queries.task_running_statistics(engine, since))


@bp.get("/statistics/jobs/running")
@requires(Role.VIEWER, scope="list")
def jobs_running() -> Response:
    engine = _cluster_totals()
    since = request.args.get("since")
    return jsonify([] if engine is None else queries.job_running_statistics(engine, since))


@bp.get("/statistics/jobs/register")
@requires(Role.VIEWER, scope="list")
def jobs_register() -> Response:
    engine = _cluster_totals()
    return jsonify([] if engine is None else queries.job_register_statistics(engine))


@bp.get("/statistics/jobs/type")
@requires(Role.VIEWER, scope="list")
def jobs_type() -> Response:
    jobs = _visible_job_configs()
    return jsonify(
        {
            "scriptJobCount": sum(j.job_type is JobType.SCRIPT for j in jobs),
            "simpleJobCount": sum(j.job_type is JobType.SIMPLE for j in jobs),
            "dataflowJobCount": sum(j.job_type is JobType.DATAFLOW for j in jobs),
        }
    )


@bp.get("/statistics/jobs/executionType")
@requires(Role.VIEWER, scope="list")
def jobs_execution_type() -> Response:
    jobs = _visible_job_configs()
    return jsonify(
        {
            "transientJobCount": sum(j.execution_type is JobExecutionType.TRANSIENT for j in jobs),
            "daemonJobCount": sum(j.execution_type is JobExecutionType.DAEMON for j in jobs),
        }
    )

"""`/api/job/events/*` and `/api/job/statistics/*`, served from the statistics component's
database in the original's shapes.

With the trace off (`event_trace_rdb_url=none`) or its schema not migrated yet, they answer the
original's empty results (as the original did without a database); the job counts come live from
ZooKeeper either way. A database that cannot be reached answers 503 TraceDatabaseUnavailable.
"""

from __future__ import annotations

import logging

from flask import Blueprint, Response, jsonify, request
from sqlalchemy.engine import Engine

from scheduler.api.term_access import term_access
from scheduler.leader.statistics import queries
from scheduler.model.config import shown
from scheduler.model.config.job import JobExecutionType, JobType
from scheduler.model.errors import InvalidRequest

log = logging.getLogger(__name__)

bp = Blueprint("history", __name__, url_prefix="/api/job")


_PERIODS = ("online", "lastWeek", "lastHour", "lastMinute")


def _engine() -> Engine | None:
    return term_access().trace_engine


@bp.get("/events/executions")
def executions() -> Response:
    engine = _engine()
    if engine is None:
        queries.check_executions(request.args)  # bad input is an error either way
        return jsonify({"total": 0, "rows": []})
    return jsonify(queries.executions(engine, request.args))


@bp.get("/events/statusTraces")
def status_traces() -> Response:
    engine = _engine()
    if engine is None:
        queries.check_status_traces(request.args)
        return jsonify({"total": 0, "rows": []})
    return jsonify(queries.status_traces(engine, request.args))


@bp.get("/statistics/tasks/results")
def task_results() -> Response:
    engine = _engine()
    if engine is None:
        return jsonify([])
    return jsonify(queries.task_result_statistics(engine, request.args.get("since")))


@bp.get("/statistics/tasks/results/<period>")
def task_results_period(period: str) -> Response:
    if period not in _PERIODS:
        raise InvalidRequest(
            f"period must be one of {', '.join(_PERIODS)}", {"period": f"unknown {shown(period)}"}
        )
    engine = _engine()
    if engine is None:
        return jsonify({"successCount": 0, "failedCount": 0})
    return jsonify(queries.task_result_summary(engine, period))


@bp.get("/statistics/tasks/running")
def tasks_running() -> Response:
    engine = _engine()
    since = request.args.get("since")
    return jsonify([] if engine is None else queries.task_running_statistics(engine, since))


@bp.get("/statistics/jobs/running")
def jobs_running() -> Response:
    engine = _engine()
    since = request.args.get("since")
    return jsonify([] if engine is None else queries.job_running_statistics(engine, since))


@bp.get("/statistics/jobs/register")
def jobs_register() -> Response:
    engine = _engine()
    return jsonify([] if engine is None else queries.job_register_statistics(engine))


@bp.get("/statistics/jobs/type")
def jobs_type() -> Response:
    jobs = term_access().config.jobs()
    return jsonify(
        {
            "scriptJobCount": sum(j.job_type is JobType.SCRIPT for j in jobs),
            "simpleJobCount": sum(j.job_type is JobType.SIMPLE for j in jobs),
            "dataflowJobCount": sum(j.job_type is JobType.DATAFLOW for j in jobs),
        }
    )


@bp.get("/statistics/jobs/executionType")
def jobs_execution_type() -> Response:
    jobs = term_access().config.jobs()
    return jsonify(
        {
            "transientJobCount": sum(j.execution_type is JobExecutionType.TRANSIENT for j in jobs),
            "daemonJobCount": sum(j.execution_type is JobExecutionType.DAEMON for j in jobs),
        }
    )

"""Whether a job's runs can ever be placed on the Mesos agents the leader knows.

`GET /api/job/{jobName}/placement` answers for any job; `refuse_unplaceable` is what register
and update call, so that a job no known agent could ever run is refused (400) instead of
waiting forever. While no agent is known (a leader that has not heard from Mesos yet), every
job is accepted; the launcher then reports and passes over the runs that can never fit.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify

from scheduler.api.access_control import require_job, requires
from scheduler.api.term_access import term_access
from scheduler.model.access.roles import Role
from scheduler.model.config.job import JobConfig
from scheduler.model.errors import InvalidRequest

bp = Blueprint("placement", __name__, url_prefix="/api/job")


def refuse_unplaceable(job: JobConfig) -> None:
    """Raise InvalidRequest (400, naming `cpuCount`, `memoryMB` or `shardingTotalCount`) when
    the known agents could never run one of `job`'s runs; nothing when no agent is known."""
    access = term_access()
    app = access.config.app(job.app_name)
    if access.capacity is None or app is None:
        return
    found = access.capacity.check(job, app)
    if found is not None:
        raise InvalidRequest(found.reason, found.fields)


@bp.get("/<job_name>/placement")
@requires(Role.VIEWER, scope="app")
def job_placement(job_name: str) -> Response:
    access = term_access()
    job = require_job(Role.VIEWER, job_name)
    app = access.config.app(job.app_name)
    capacity = access.capacity
    agents = capacity.agents() if capacity is not None and capacity.settled else []
    body: dict[str, Any] = {
        "jobName": job_name,
        "placeable": None,
        "reason": None,
        "fields": {},
        "agentsKnown": len(agents),
        "largestAgentCpus": max((a.cpus for a in agents), default=None),
        "largestAgentMemoryMB": max((a.mem_mb for a in agents), default=None),
    }
    if app is None:
        body["reason"] = f"app '{job.app_name}' does not exist"
    elif capacity is None or not agents:
        body["reason"] = "no Mesos agent is known yet"
    else:
        found = capacity.check(job, app)
        body["placeable"] = found is None
        if found is not None:
            body["reason"], body["fields"] = found.reason, found.fields
    return jsonify(body)

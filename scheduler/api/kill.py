"""Kill: every running task of a job, or one task.

A kill is recorded on the task's running node (`killReason: user`) before it is sent to Mesos,
so whichever leader gets the task's end knows it is no failure: it is not relaunched (no
failover), counted as neither success nor failure, and sends no failure webhook. The task gets
SIGTERM, then SIGKILL after its kill grace. A daemon job's tasks start again once gone (disable
the job to stop it). Both answer 202 with `{"taskIds": [...]}`: the kills sent.
"""

from __future__ import annotations

import logging

from flask import Blueprint, Response, jsonify

from scheduler.api.access_control import require_job, requires
from scheduler.api.inputs import reference_problem
from scheduler.api.term_access import TermAccess, term_access
from scheduler.leader.mesos.operator_actions import MesosUnavailable
from scheduler.model.access.roles import Role
from scheduler.model.config import shown
from scheduler.model.errors import InvalidRequest, NotFound
from scheduler.model.task_id import InvalidTaskId, TaskId
from scheduler.storage.state import KILLED_BY_USER

log = logging.getLogger(__name__)

bp = Blueprint("kill", __name__, url_prefix="/api/job")

_TASK_ID_MAX_LENGTH = 1024


def _kill(access: TermAccess, task_ids: list[str]) -> list[str]:
    if task_ids and not access.actions.can_kill():
        raise MesosUnavailable("not connected to Mesos; no kill was sent, try again")
    sent = []
    for task_id in task_ids:
        if not access.running.mark_killed(task_id, KILLED_BY_USER):
            continue  # it ended meanwhile
        access.actions.kill_task(task_id)
        sent.append(task_id)
    return sent


def _accepted(task_ids: list[str]) -> Response:
    response = jsonify({"taskIds": task_ids})
    response.status_code = 202
    return response


@bp.post("/<job_name>/kill")
@requires(Role.OPERATOR, scope="app")
def kill_job(job_name: str) -> Response:
    access = term_access()
    require_job(Role.OPERATOR, job_name)
    sent = _kill(access, [t.task_id for t in access.running.tasks(job_name)])
    log.info("api: job %s: kill sent to %s tasks", job_name, len(sent))
    return _accepted(sent)


@bp.post("/tasks/<taskId>/kill")
@requires(Role.OPERATOR, scope="app")
def kill_task(taskId: str) -> Response:  # the path parameter keeps its wire name
    if len(taskId) > _TASK_ID_MAX_LENGTH:
        problem = f"must be at most {_TASK_ID_MAX_LENGTH} characters"
        raise InvalidRequest(f"taskId {problem}", {"taskId": problem})
    try:
        parsed = TaskId.parse(taskId)
    except InvalidTaskId as exc:
        problem = f"{shown(taskId)} is not a task id of this scheduler ({exc})"
        raise InvalidRequest(f"taskId: {problem}", {"taskId": problem}) from None
    if (why := reference_problem(parsed.job_name)) is not None:
        raise InvalidRequest(f"taskId: its job name {why}", {"taskId": f"its job name {why}"})
    try:
        require_job(Role.OPERATOR, parsed.job_name)  # the task's job's app decides
    except NotFound:
        # No such job, or one of an app the caller cannot see: as for any task not running.
        raise NotFound(f"task '{taskId}' is not running") from None
    access = term_access()
    if taskId not in {t.task_id for t in access.running.tasks(parsed.job_name)}:
        raise NotFound(f"task '{taskId}' is not running")
    sent = _kill(access, [taskId])
    if not sent:
        raise NotFound(f"task '{taskId}' is not running")
    log.info("api: task %s: kill sent", taskId)
    return _accepted(sent)

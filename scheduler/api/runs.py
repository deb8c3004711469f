"""A job's runs and each run's output.

`GET /api/job/{jobName}/runs?limit=&before=`: the job's runs from the event trace, newest launch
first: `{"runs": [...], "next": <before of the next page> | null}`. Cron fires a calendar
excluded (issue 28) are listed among them with result `fire_excluded`, the reason naming the
calendar, and no task (`taskId` null; `launchTime` when the fire was accounted). `limit` is
1-1000 (default 20); `before` is the `next` of the previous page (a task id of the job, or a
time when the page ended on an excluded fire) or a time (ISO 8601, or `yyyy-MM-dd HH:mm:ss` in
UTC): only runs launched before it. With the trace off (`event_trace_rdb_url=none`) or not
ready yet, the runs are the job's running tasks.

`GET /api/job/{jobName}/runs/{taskId}/log?stream=stdout|stderr&offset=&length=`: the run's
output, read from the file its executor named (for a command task, its sandbox's `stdout` or
`stderr`) through the Mesos agent's `/files/read`. The answer is as the agent's, `{"data",
"offset"}`, plus `nextOffset`: `offset` is where `data` starts in the file (in bytes), `offset=-1`
asks for the file's size (in `offset`, no data), `length` is at most 1 MiB (default) and the
agent may give fewer (a real one reads at most 64 KiB at a time). `data` is the bytes decoded as
UTF-8: a character cut at the end of the read is left for the next one, and bytes that are not
UTF-8 become U+FFFD. `nextOffset` is where the next read starts: `offset` plus the bytes that
`data` holds, which is `offset` plus the UTF-8 length of `data` unless bytes were replaced.

400 names a bad parameter; 404: no such job, run, agent or file; 502: the agent cannot be
reached; 503: no Mesos master, or the trace database is down.
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime
from typing import Any

from flask import Blueprint, Response, jsonify, request

from executor.records import OUTPUT_STREAMS, task_output_dir
from scheduler.api.access_control import require_job, requires
from scheduler.api.inputs import reference_problem
from scheduler.api.term_access import TermAccess, term_access
from scheduler.leader.mesos.taskinfo import runs_as_command_task
from scheduler.leader.statistics import runs as trace_runs
from scheduler.model.access.roles import Role
from scheduler.model.config import shown
from scheduler.model.errors import InvalidRequest, NotFound
from scheduler.model.task_id import InvalidTaskId, TaskId

log = logging.getLogger(__name__)

bp = Blueprint("runs", __name__, url_prefix="/api/job")

DEFAULT_RUNS = 20
MAX_RUNS = 1000
MAX_LOG_BYTES = 1024 * 1024
MAX_OFFSET = 2**53  # beyond any file, and exact in every JSON reader
_TASK_ID_MAX_LENGTH = 1024
_TEXT_MAX_LENGTH = 64
_WHOLE = re.compile(r"-?[0-9]{1,20}")


# -- parameters ---------------------------------------------------------------------------


def _integer(name: str, default: int, lowest: int, highest: int, problems: dict[str, str]) -> int:
    text = request.args.get(name, "").strip()
    if not text:
        return default
    if len(text) > _TEXT_MAX_LENGTH or not _WHOLE.fullmatch(text):
        problems[name] = "not a whole number"
        return default
    value = int(text)
    if not lowest <= value <= highest:
        problems[name] = f"must be between {lowest} and {highest}"
        return default
    return value


def _task_id(text: str, job_name: str) -> TaskId:
    """`text` as a task id of `job_name`; InvalidRequest naming taskId, NotFound."""
    if len(text) > _TASK_ID_MAX_LENGTH:
        problem = f"must be at most {_TASK_ID_MAX_LENGTH} characters"
        raise InvalidRequest(f"taskId {problem}", {"taskId": problem})
    try:
        parsed = TaskId.parse(text)
    except InvalidTaskId:
        problem = f"{shown(text)} is not a task id (job@-@item@-@READY|FAILOVER@-@agent@-@uuid)"
        raise InvalidRequest(f"taskId: {problem}", {"taskId": problem}) from None
    if (why := reference_problem(parsed.job_name)) is not None:
        raise InvalidRequest(f"taskId: its job name {why}", {"taskId": f"its job name {why}"})
    if parsed.job_name != job_name:
        raise NotFound(f"job '{job_name}' has no run '{text}'")
    return parsed


def _time(text: str) -> datetime | None:
    """A time in UTC (naive), or None when `text` is not one."""
    try:
        moment = datetime.strptime(text, "%Y-%m-%d %H:%M:%S")
    except ValueError:
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            return None
    if moment.tzinfo is not None:
        try:
            moment = moment.astimezone(UTC).replace(tzinfo=None)
        except OverflowError:
            return None
    return moment


def _before(
    access: TermAccess, job_name: str, problems: dict[str, str]
) -> tuple[datetime, str] | None:
    text = request.args.get("before", "").strip()
    if not text:
        return None
    if len(text) > _TASK_ID_MAX_LENGTH:
        problems["before"] = f"must be at most {_TASK_ID_MAX_LENGTH} characters"
        return None
    if "@-@" in text:
        try:
            parsed = TaskId.parse(text)
        except InvalidTaskId:
            problems["before"] = "not a task id of the job, nor a time"
            return None
        engine = access.trace_engine
        launched = None
        if parsed.job_name == job_name and engine is not None:
            launched = trace_runs.launch_of(engine, job_name, text)
        if launched is None:
            problems["before"] = f"no run {shown(text)} of job {shown(job_name)} in the trace"
            return None
        return launched, text
    moment = _time(text) if len(text) <= _TEXT_MAX_LENGTH else None
    if moment is None:
        problems["before"] = "not a task id of the job, nor a time (ISO 8601)"
        return None
    return moment, ""


def _checked(problems: dict[str, str]) -> None:
    if problems:
        text = "; ".join(f"{name}: {why}" for name, why in problems.items())
        raise InvalidRequest(f"invalid parameters: {text}", problems)


# -- runs ---------------------------------------------------------------------------------


@bp.get("/<job_name>/runs")
@requires(Role.VIEWER, scope="app")
def job_runs(job_name: str) -> Response:
    access = term_access()
    problems: dict[str, str] = {}
    limit = _integer("limit", DEFAULT_RUNS, 1, MAX_RUNS, problems)
    _checked(problems)
    # Before `before` is looked up in the trace: whether a run of a job of an app the caller
    # cannot see is there must not show in the answer.
    require_job(Role.VIEWER, job_name)
    before = _before(access, job_name, problems)
    _checked(problems)
    engine = access.trace_engine
    if engine is None:
        return jsonify({"runs": _running(access, job_name)[:limit], "next": None})
    found, cursor = trace_runs.runs_and_exclusions(engine, job_name, limit, before)
    # A page ending on an excluded fire (no task) goes on from its time, to the microsecond.
    after = None if cursor is None else cursor[1] or cursor[0].isoformat(timespec="microseconds")
    return jsonify({"runs": [run.to_json() for run in found], "next": after})


def _running(access: TermAccess, job_name: str) -> list[dict[str, Any]]:
    """The job's running tasks as runs (no event trace to read history from)."""
    out = []
    for task in sorted(access.running.tasks(job_name), key=lambda t: -t.launched_at):
        try:
            parsed = task.parsed
        except ValueError:
            continue
        launched = (
            datetime.fromtimestamp(task.launched_at, UTC).isoformat(timespec="milliseconds")
            if task.launched_at
            else None
        )
        out.append(
            {
                "taskId": task.task_id,
                "jobName": parsed.job_name,
                "shardingItem": parsed.item,
                "type": parsed.type.value,
                "agentId": task.agent_id,
                "launchTime": launched,
                "fireTime": None,
                "startTime": None,
                "endTime": None,
                "state": task.state,
                "result": "running",
                "reason": None,
                "message": "",
                "exitStatus": None,
            }
        )
    return out


# -- a run's output -----------------------------------------------------------------------


@bp.get("/<job_name>/runs/<taskId>/log")
@requires(Role.VIEWER, scope="app")
def run_log(job_name: str, taskId: str) -> Response:  # the path parameter keeps its wire name
    problems: dict[str, str] = {}
    stream = request.args.get("stream", "").strip() or "stdout"
    if stream not in OUTPUT_STREAMS:
        problems["stream"] = "must be stdout or stderr"
    offset = _integer("offset", 0, -1, MAX_OFFSET, problems)
    length = _integer("length", MAX_LOG_BYTES, 0, MAX_LOG_BYTES, problems)
    _checked(problems)
    parsed = _task_id(taskId, job_name)
    access = term_access()
    job = require_job(Role.VIEWER, job_name)
    agent_id, path = _where(access, parsed, stream, command_task=runs_as_command_task(job))
    chunk = access.actions.read_run_file(taskId, agent_id, path, offset, length)
    if offset == -1:
        return jsonify({"data": "", "offset": chunk.offset, "nextOffset": chunk.offset})
    whole = _whole_characters(chunk.data)
    data = chunk.data[:whole].decode("utf-8", "replace")
    return jsonify({"data": data, "offset": chunk.offset, "nextOffset": chunk.offset + whole})


def _where(
    access: TermAccess, parsed: TaskId, stream: str, *, command_task: bool
) -> tuple[str, str]:
    """(agent id, file path in the sandbox) of the run's `stream`; NotFound for a run that
    neither the trace nor the running tasks know."""
    task_id = str(parsed)
    engine = access.trace_engine
    run = trace_runs.run_of(engine, parsed.job_name, task_id) if engine is not None else None
    if run is not None:
        if run.output is not None:
            return run.agent_id, run.output[stream]
        agent_id = run.agent_id
    else:
        running = {t.task_id: t for t in access.running.tasks(parsed.job_name)}
        task = running.get(task_id)
        if task is None and engine is not None:
            raise NotFound(f"job '{parsed.job_name}' has no run '{task_id}'")
        agent_id = task.agent_id if task is not None else parsed.agent_id
    # Not named by the executor (the trace missed it, or is off): where ours writes it.
    if command_task:
        return agent_id, stream
    return agent_id, f"{task_output_dir(task_id)}/{stream}"


def _whole_characters(raw: bytes) -> int:
    """The length of `raw` without a UTF-8 character cut short at its end."""
    end = len(raw)
    for back in range(1, min(4, end) + 1):
        byte = raw[end - back]
        if byte & 0xC0 == 0x80:
            continue  # a continuation byte: look further back for its lead
        if byte < 0x80 or byte >= 0xF8:
            return end  # ASCII, or no lead byte at all (decoded as U+FFFD)
        needs = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
        return end - back if back < needs else end
    return end

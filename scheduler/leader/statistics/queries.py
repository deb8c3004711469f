"""Read side for the REST endpoints: event search in the trace log and the statistics tables,
with the original's filters, paging and JSON.

Pure functions of an engine and the request's query parameters. Every value reaches SQL as a
bound parameter; sort columns come from a whitelist. Bad parameters raise `InvalidRequest`
naming each bad field (HTTP 400). Unknown parameters (such as a cache-buster) are ignored, and
empty values mean "no filter", as the console sends them.

Times: stored and compared as UTC. A time without an offset (`yyyy-MM-dd HH:mm:ss`, the
original's format) is read as UTC; ISO 8601 with an offset is converted. Rows carry
ISO 8601 UTC times (`2017-07-10T18:39:02.000Z`), which JavaScript's `Date` parses.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, func, select
from sqlalchemy.orm import InstrumentedAttribute, Session

from scheduler.leader.statistics.models import (
    ExecutionLog,
    JobRegisterStatistics,
    JobRunningStatistics,
    RunningStatistics,
    StatusTraceLog,
    TaskResultStatistics,
    TaskResultStatisticsDay,
    TaskResultStatisticsHour,
    TaskResultStatisticsMinute,
    TaskRunningStatistics,
)
from scheduler.model.errors import InvalidRequest

__all__ = [
    "MAX_PAGE",
    "MAX_PER_PAGE",
    "check_executions",
    "check_status_traces",
    "executions",
    "job_register_statistics",
    "job_result_summary",
    "job_running_statistics",
    "status_traces",
    "task_result_statistics",
    "task_result_summary",
    "task_running_statistics",
]

MAX_PER_PAGE = 1000
# Far beyond any real history (a billion rows at 1000 per page), and small enough that the row
# offset always fits the databases' 64-bit integers.
MAX_PAGE = 1_000_000
# Filters compare with stored ids and names (at most a few hundred characters); control
# characters never occur in them, and PostgreSQL refuses NUL in a text parameter outright.
FILTER_MAX_LENGTH = 1024
_WHOLE_NUMBER = re.compile(r"[0-9]{1,20}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_TIME_MAX_LENGTH = 64
Params = Mapping[str, str | None]
_Column = InstrumentedAttribute[Any]


@dataclass(frozen=True)
class _Search:
    model: type[ExecutionLog] | type[StatusTraceLog]
    time_column: _Column
    sortable: dict[str, _Column]
    filters: dict[str, _Column]


def _sortable(model: Any, wire: dict[str, str]) -> dict[str, _Column]:
    """Whitelist: each camelCase wire name and its snake_case column name -> the column."""
    columns: dict[str, _Column] = {}
    for camel, snake in wire.items():
        column = getattr(model, snake)
        columns[camel] = column
        columns[snake] = column
    return columns


_EXECUTIONS = _Search(
    model=ExecutionLog,
    time_column=ExecutionLog.start_time,
    sortable=_sortable(
        ExecutionLog,
        {
            "id": "id",
            "jobName": "job_name",
            "taskId": "task_id",
            "hostname": "hostname",
            "ip": "ip",
            "shardingItem": "sharding_item",
            "executionSource": "execution_source",
            "source": "execution_source",
            "isSuccess": "is_success",
            "success": "is_success",
            "startTime": "start_time",
            "completeTime": "complete_time",
        },
    ),
    filters={
        "jobName": ExecutionLog.job_name,
        "taskId": ExecutionLog.task_id,
        "ip": ExecutionLog.ip,
        "isSuccess": ExecutionLog.is_success,
    },
)
_STATUS_TRACES = _Search(
    model=StatusTraceLog,
    time_column=StatusTraceLog.creation_time,
    sortable=_sortable(
        StatusTraceLog,
        {
            "id": "id",
            "jobName": "job_name",
            "originalTaskId": "original_task_id",
            "taskId": "task_id",
            "slaveId": "slave_id",
            "source": "source",
            "executionType": "execution_type",
            "shardingItem": "sharding_item",
            "shardingItems": "sharding_item",
            "state": "state",
            "creationTime": "creation_time",
        },
    ),
    filters={
        "jobName": StatusTraceLog.job_name,
        "taskId": StatusTraceLog.task_id,
        "slaveId": StatusTraceLog.slave_id,
        "source": StatusTraceLog.source,
        "executionType": StatusTraceLog.execution_type,
        "state": StatusTraceLog.state,
    },
)


def executions(
    engine: Engine, params: Params, only_jobs: Collection[str] | None = None
) -> dict[str, Any]:
    """`GET /job/events/executions`: `{"total": n, "rows": [JobExecutionEvent]}`; with
    `only_jobs`, the rows of those jobs alone (the jobs a caller may see, issue 26).

    Raises InvalidRequest for a bad page, sort, order, time or isSuccess.
    """
    total, rows = _search(engine, _EXECUTIONS, params, only_jobs)
    return {"total": total, "rows": [_execution_json(row) for row in rows]}


def status_traces(
    engine: Engine, params: Params, only_jobs: Collection[str] | None = None
) -> dict[str, Any]:
    """`GET /job/events/statusTraces`: `{"total": n, "rows": [JobStatusTraceEvent]}`; with
    `only_jobs`, the rows of those jobs alone."""
    total, rows = _search(engine, _STATUS_TRACES, params, only_jobs)
    return {"total": total, "rows": [_trace_json(row) for row in rows]}


def task_result_statistics(
    engine: Engine, since: str | None, now: datetime | None = None
) -> list[dict[str, Any]]:
    """`GET /job/statistics/tasks/results?since=last24hours`: MINUTE rows; other `since` -> []."""
    if since != "last24hours":
        return []
    start = _now(now) - timedelta(hours=24)
    return _rows_since(engine, TaskResultStatisticsMinute, start, _result_json)


def task_result_summary(engine: Engine, period: str, now: datetime | None = None) -> dict[str, Any]:
    """`GET /job/statistics/tasks/results/{period}`: one row of counts.

    `online`: sum of every DAY row (since the first one recorded, not a hard-coded date);
    `lastWeek`: DAY rows of the last 7 days; `lastHour`/`lastMinute`: the latest HOUR/MINUTE
    row of a period that has ended (the current period's row is still growing). Anything
    else, or no data: zeros (as the original answers).
    """
    moment = _now(now)
    with Session(engine) as session:
        if period in ("online", "lastWeek"):
            table = TaskResultStatisticsDay
            query = select(
                func.coalesce(func.sum(table.success_count), 0),
                func.coalesce(func.sum(table.failed_count), 0),
            )
            if period == "lastWeek":
                query = query.where(table.statistics_time >= moment - timedelta(days=7))
            success, failed = session.execute(query).one()
            return {
                "successCount": int(success),
                "failedCount": int(failed),
                "statisticInterval": "DAY",
                "creationTime": _iso(moment),
            }
        latest: tuple[type[TaskResultStatistics], timedelta] | None = {
            "lastHour": (TaskResultStatisticsHour, timedelta(hours=1)),
            "lastMinute": (TaskResultStatisticsMinute, timedelta(minutes=1)),
        }.get(period)
        if latest is not None:
            # The latest *ended* period: the current one's row is still being added to.
            recent, length = latest
            row = session.scalars(
                select(recent)
                .where(recent.statistics_time <= moment - length)
                .order_by(recent.statistics_time.desc(), recent.id.desc())
                .limit(1)
            ).first()
            if row is not None:
                return _result_json(row)
    return {"successCount": 0, "failedCount": 0}


def job_result_summary(
    engine: Engine, period: str, jobs: Collection[str], now: datetime | None = None
) -> dict[str, Any]:
    """`task_result_summary` counted from the execution log of `jobs` alone: for a caller who
    sees only some apps (issue 26), whose counts the cluster-wide statistics tables cannot give.

    The same periods: `online` every run, `lastWeek` runs completed in the last 7 days,
    `lastHour`/`lastMinute` those completed in the latest ended hour or minute. Anything
    else, or no jobs: zeros.
    """
    moment = _now(now)
    windows: dict[str, tuple[datetime | None, datetime | None]] = {
        "online": (None, None),
        "lastWeek": (moment - timedelta(days=7), None),
    }
    hour = moment.replace(minute=0, second=0, microsecond=0)
    minute = moment.replace(second=0, microsecond=0)
    windows["lastHour"] = (hour - timedelta(hours=1), hour)
    windows["lastMinute"] = (minute - timedelta(minutes=1), minute)
    window = windows.get(period)
    if window is None or not jobs:
        return {"successCount": 0, "failedCount": 0}
    start, end = window
    where: list[Any] = [ExecutionLog.job_name.in_(sorted(jobs))]
    if start is not None:
        where.append(ExecutionLog.complete_time >= start)
    if end is not None:
        where.append(ExecutionLog.complete_time < end)
    query = (
        select(ExecutionLog.is_success, func.count())
        .where(*where, ExecutionLog.is_success.is_not(None))
        .group_by(ExecutionLog.is_success)
    )
    with Session(engine) as session:
        counts = {bool(flag): int(n) for flag, n in session.execute(query).all()}
    return {
        "successCount": counts.get(True, 0),
        "failedCount": counts.get(False, 0),
        "statisticInterval": "DAY" if period in ("online", "lastWeek") else period[4:].upper(),
        "creationTime": _iso(moment),
    }


def task_running_statistics(
    engine: Engine, since: str | None, now: datetime | None = None
) -> list[dict[str, Any]]:
    """`GET /job/statistics/tasks/running?since=lastWeek`; other `since` -> []."""
    return _running_since(engine, TaskRunningStatistics, since, now)


def job_running_statistics(
    engine: Engine, since: str | None, now: datetime | None = None
) -> list[dict[str, Any]]:
    """`GET /job/statistics/jobs/running?since=lastWeek`; other `since` -> []."""
    return _running_since(engine, JobRunningStatistics, since, now)


def job_register_statistics(engine: Engine) -> list[dict[str, Any]]:
    """`GET /job/statistics/jobs/register`: every row, oldest first (no hard-coded date)."""
    return _rows_since(engine, JobRegisterStatistics, None, _register_json)


def _running_since(
    engine: Engine, table: type[RunningStatistics], since: str | None, now: datetime | None
) -> list[dict[str, Any]]:
    if since != "lastWeek":
        return []
    return _rows_since(engine, table, _now(now) - timedelta(days=7), _running_json)


def _rows_since(engine: Engine, table: Any, start: datetime | None, to_json: Any) -> list[Any]:
    query = select(table).order_by(table.statistics_time, table.id)
    if start is not None:
        query = query.where(table.statistics_time >= start)
    with Session(engine) as session:
        return [to_json(row) for row in session.scalars(query)]


def check_executions(params: Params) -> None:
    """Raise InvalidRequest for bad `/job/events/executions` parameters (without a database)."""
    _where(_EXECUTIONS, params)


def check_status_traces(params: Params) -> None:
    """Raise InvalidRequest for bad `/job/events/statusTraces` parameters."""
    _where(_STATUS_TRACES, params)


@dataclass(frozen=True)
class _Query:
    where: list[Any]
    sort_column: _Column | None
    descending: bool
    per_page: int
    page: int


def _search(
    engine: Engine, search: _Search, params: Params, only_jobs: Collection[str] | None = None
) -> tuple[int, list[Any]]:
    q = _where(search, params)
    if only_jobs is not None:
        if not only_jobs:
            return 0, []
        q.where.append(search.model.job_name.in_(sorted(only_jobs)))
    count = select(func.count()).select_from(search.model).where(*q.where)
    query = select(search.model).where(*q.where)
    if q.sort_column is not None:
        query = query.order_by(q.sort_column.desc() if q.descending else q.sort_column.asc())
    query = query.order_by(search.model.id).limit(q.per_page).offset((q.page - 1) * q.per_page)
    with Session(engine) as session:
        total = int(session.execute(count).scalar_one())
        rows = list(session.scalars(query))
    return total, rows


def _where(search: _Search, params: Params) -> _Query:
    problems: dict[str, str] = {}
    per_page = _positive(params, "per_page", 10, problems, MAX_PER_PAGE)
    page = _positive(params, "page", 1, problems, MAX_PAGE)
    start = _time(params, "startTime", problems)
    end = _time(params, "endTime", problems)
    if start is not None and end is not None and start > end:
        problems["endTime"] = "is before startTime"
    sort_name = (params.get("sort") or "").strip()
    sort_column = search.sortable.get(sort_name) if sort_name else None
    if sort_name and sort_column is None:
        problems["sort"] = "not a sortable field: " + ", ".join(
            sorted(name for name in search.sortable if name[:1].islower() and "_" not in name)
        )
    order = (params.get("order") or "asc").strip().lower()
    if order not in ("asc", "desc"):
        problems["order"] = "must be asc or desc"
    where: list[Any] = []
    for name, column in search.filters.items():
        value = params.get(name)
        if value is None or value == "":
            continue
        if len(value) > FILTER_MAX_LENGTH or _CONTROL.search(value):
            problems[name] = (
                f"must be at most {FILTER_MAX_LENGTH} characters, without control characters"
            )
            continue
        if name == "isSuccess":
            flag = _boolean(value)
            if flag is None:
                problems[name] = "must be true or false"
                continue
            where.append(column == flag)
        else:
            where.append(column == value)
    if problems:
        raise InvalidRequest("invalid query: " + ", ".join(sorted(problems)), problems)
    if start is not None:
        where.append(search.time_column >= start)
    if end is not None:
        where.append(search.time_column <= end)
    return _Query(where, sort_column, order == "desc", per_page, page)


def _positive(params: Params, name: str, default: int, problems: dict[str, str], most: int) -> int:
    text = (params.get(name) or "").strip()
    if not text:
        return default
    # ASCII digits only: int() would also take "1_000" and other scripts' digits.
    if not _WHOLE_NUMBER.fullmatch(text):
        problems[name] = "not a whole number"
        return default
    value = int(text)
    if not 1 <= value <= most:
        problems[name] = f"must be between 1 and {most}"
        return default
    return value


def _time(params: Params, name: str, problems: dict[str, str]) -> datetime | None:
    text = (params.get(name) or "").strip()
    if not text:
        return None
    not_a_time = "not a time (yyyy-MM-dd HH:mm:ss or ISO 8601)"
    if len(text) > _TIME_MAX_LENGTH:
        problems[name] = not_a_time
        return None
    try:
        moment = datetime.strptime(text, "%Y-%m-%d %H:%M:%S")
    except ValueError:
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            problems[name] = not_a_time
            return None
    if moment.tzinfo is not None:
        try:
            moment = moment.astimezone(UTC).replace(tzinfo=None)
        except OverflowError:  # 0001-01-01T00:00:00+14:00 is before year 1 in UTC
            problems[name] = "is outside the years 1-9999 in UTC"
            return None
    return moment


def _boolean(text: str) -> bool | None:
    return {"true": True, "1": True, "false": False, "0": False}.get(text.strip().lower())


def _now(now: datetime | None) -> datetime:
    moment = now or datetime.now(UTC)
    return moment.astimezone(UTC).replace(tzinfo=None) if moment.tzinfo else moment


def _iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"


def _drop_none(doc: dict[str, Any]) -> dict[str, Any]:
    """Gson omits null fields; so do we."""
    return {key: value for key, value in doc.items() if value is not None}


def _execution_json(row: ExecutionLog) -> dict[str, Any]:
    return _drop_none(
        {
            "id": row.id,
            "hostname": row.hostname,
            "ip": row.ip,
            "taskId": row.task_id,
            "jobName": row.job_name,
            "source": row.execution_source,
            "shardingItem": row.sharding_item,
            "startTime": _iso(row.start_time),
            "completeTime": _iso(row.complete_time),
            "success": row.is_success,
            "failureCause": {"plainText": row.failure_cause} if row.failure_cause else None,
        }
    )


def _trace_json(row: StatusTraceLog) -> dict[str, Any]:
    return _drop_none(
        {
            "id": row.id,
            "jobName": row.job_name,
            "originalTaskId": row.original_task_id,
            "taskId": row.task_id,
            "slaveId": row.slave_id,
            "source": row.source,
            "executionType": row.execution_type,
            "shardingItems": row.sharding_item,
            "state": row.state,
            "message": row.message,
            "creationTime": _iso(row.creation_time),
        }
    )


def _result_json(row: TaskResultStatistics) -> dict[str, Any]:
    return {
        "id": row.id,
        "successCount": row.success_count,
        "failedCount": row.failed_count,
        "statisticInterval": row.statistic_interval,
        "statisticsTime": _iso(row.statistics_time),
        "creationTime": _iso(row.creation_time),
    }


def _running_json(row: RunningStatistics) -> dict[str, Any]:
    return {
        "id": row.id,
        "runningCount": row.running_count,
        "statisticsTime": _iso(row.statistics_time),
        "creationTime": _iso(row.creation_time),
    }


def _register_json(row: JobRegisterStatistics) -> dict[str, Any]:
    return {
        "id": row.id,
        "registeredCount": row.registered_count,
        "statisticsTime": _iso(row.statistics_time),
        "creationTime": _iso(row.creation_time),
    }

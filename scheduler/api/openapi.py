"""The OpenAPI 3 document of `/api` (served at `/api/openapi.json`).

The document is data: the schemas named once under `components` (`SCHEMAS`), one row per
operation (`ROUTES`) and the error answers every operation shares. A few small functions assemble
it; a path's `{name}` parameters are read from the path itself, so a row lists only its queries.
The API serves the document with its keys in the order written here (its JSON is not sorted).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from flask import Blueprint, Response, jsonify

from scheduler.api.access_control import requires

bp = Blueprint("openapi", __name__, url_prefix="/api")

Schema = dict[str, Any]


def _schema(kind: str, about: str | None = None, **keywords: Any) -> Schema:
    """A schema of `kind` with `keywords` (enum, format, items, nullable...), then `about`."""
    found: Schema = {"type": kind, **keywords}
    if about is not None:
        found["description"] = about
    return found


def _object(properties: Schema, **keywords: Any) -> Schema:
    """An object schema: its `keywords` (description, required...) before its properties."""
    return {"type": "object", **keywords, "properties": properties}


def _array(items: Schema, about: str | None = None) -> Schema:
    return _schema("array", about, items=items)


def _text(max_bytes: int, description: str = "") -> Schema:
    """A string field; maxLength is in characters, the server's bound is UTF-8 bytes."""
    about = f"at most {max_bytes} bytes in UTF-8" + (f"; {description}" if description else "")
    return {"type": "string", "maxLength": max_bytes, "description": about}


def _legacy_text(max_bytes: int) -> Schema:
    """A field the original took on jobs before 2.0.5: still accepted, then ignored."""
    return {**_text(max_bytes, "accepted and ignored (before 2.0.5)"), "deprecated": True}


_STRING = _schema("string")
_INTEGER = _schema("integer")
_BOOLEAN = _schema("boolean")
_OBJECT = _schema("object")
_OBJECTS = _array(_OBJECT)
_STRING_MAP = _schema("object", additionalProperties=_STRING)
_NAME = _schema("string", pattern="^[A-Za-z0-9_][A-Za-z0-9_.-]*$", maxLength=100)
_NUMBER_TEXT = _schema("string", maxLength=64)
_FLAG = {"oneOf": [_BOOLEAN, _schema("string", enum=["true", "false"])]}
_INT = {"oneOf": [_INTEGER, _STRING]}
_TIME = _schema("string", format="date-time", nullable=True)
_TASK_TYPE = _schema("string", enum=["READY", "FAILOVER"])


def _bounded(kind: str, low: float, high: float, about: str) -> Schema:
    """A number within [low, high], or the same number written as text."""
    return {"oneOf": [_schema(kind, minimum=low, maximum=high), _NUMBER_TEXT], "description": about}


def _refusing(what: str, required: str, properties: Schema) -> Schema:
    """A request body that refuses unknown fields; `required` names fields, space-separated."""
    about = f"unknown fields are refused; the whole {what} is at most 256 KiB stored"
    closed = {"additionalProperties": False, "required": required.split()}
    return _object(properties, description=about, **closed)


_CPUS = _bounded("number", 0.001, 1024, "CPUs, 0.001-1024")
_MEMORY = _bounded("number", 1, 16777216, "MB, 1-16777216 (16 TiB)")

_APP = _refusing(
    "app",
    "appName appURL bootstrapScript",
    {
        "appName": _NAME,
        "appURL": _text(4096),
        "bootstrapScript": _text(16384),
        "cpuCount": _CPUS,
        "memoryMB": _MEMORY,
        "appCacheEnable": _FLAG,
        "eventTraceSamplingCount": _INT,
    },
)
_JOB_CLASS = "package.module:callable or package.module.Class"
_TIMEOUT = (
    "a run still going this long after it started is stopped (SIGTERM, then SIGKILL after the "
    "grace) and fails, 'timed out after N s'; absent: no limit"
)
_RETRIES = (
    "relaunches of a failed shard per fire (with failover, or a daemon job); absent: unlimited, "
    "with back-off"
)
_OVERLAP = (
    "a fire (or trigger) while the job runs: FORBID (default) waits with misfire on and is "
    "skipped without; ALLOW runs beside; REPLACE kills the running tasks first. TRANSIENT jobs only"
)
_WEBHOOK = (
    "http(s) URL the leader POSTs this job's failure events to (run_failed, run_timed_out, "
    "fire_skipped, fire_capped); overrides the notify_webhook_url setting. No credentials "
    "(user:password@), no #fragment; not an internal address or name (loopback, private, "
    "link-local, metadata, ...) unless notify_webhook_allowed_targets allows it (400 otherwise). "
    "A reader (guest) is shown only scheme://host[:port]/..."
)
_JOB = _refusing(
    "job",
    "jobName cron shardingTotalCount jobType appName cpuCount memoryMB jobExecutionType",
    {
        "jobName": _NAME,
        "jobClass": _schema("string", _JOB_CLASS, maxLength=255),
        "jobType": _schema("string", enum=["SIMPLE", "DATAFLOW", "SCRIPT"]),
        "cron": _text(256, "Quartz (with seconds) or 5-field crontab"),
        "timeZone": _text(255, "IANA zone; default: time_zone setting"),
        "shardingTotalCount": _INT,
        "shardingItemParameters": {**_text(65536), "example": "0=a,1=b"},
        "jobParameter": _text(65536),
        "failover": _FLAG,
        "misfire": _FLAG,
        "description": _text(16384),
        "jobProperties": _object(
            {"job_exception_handler": _text(4096), "executor_service_handler": _text(4096)},
            additionalProperties=False,
        ),
        "streamingProcess": _FLAG,
        "scriptCommandLine": _text(16384),
        "appName": _NAME,
        "cpuCount": _CPUS,
        "memoryMB": _MEMORY,
        "jobExecutionType": _schema("string", enum=["TRANSIENT", "DAEMON"]),
        "beanName": _text(4096),
        "applicationContext": _text(4096),
        "appURL": _legacy_text(4096),
        "bootstrapScript": _legacy_text(16384),
        "timeoutSeconds": _bounded("integer", 1, 604800, _TIMEOUT),
        "maxRetries": _bounded("integer", 0, 1000, _RETRIES),
        "overlapPolicy": _schema("string", _OVERLAP, enum=["FORBID", "ALLOW", "REPLACE"]),
        "notifyWebhookUrl": _schema("string", _WEBHOOK, maxLength=2048),
        # Issue 28: docs/calendars.md, docs/pools.md.
        "excludeCalendars": _array(_NAME, "calendars whose excluded periods the cron skips"),
        "pool": _schema("string", "the concurrency pool of the job's tasks", nullable=True),
        "poolSlots": _bounded("integer", 1, 1000, "pool slots one shard takes (default 1)"),
    },
)
_KILL_REASON = (
    "present once the scheduler sent a kill: by a user, or by overlapPolicy REPLACE (neither is "
    "a failure)"
)
_TASK_CONTEXT = _object(
    {
        "id": _STRING,
        "metaInfo": _object({"jobName": _STRING, "shardingItems": _array(_INTEGER)}),
        "type": _TASK_TYPE,
        "slaveId": _STRING,
        "idle": _BOOLEAN,
        "hostname": _STRING,
        "state": _STRING,
        "launchedAt": _schema("number", "epoch seconds"),
        "killReason": _schema("string", _KILL_REASON, enum=["user", "replace"]),
    }
)
_FIRE_TIMES = {
    **_array(
        _schema("string", format="date-time"),
        "ISO 8601 to the second, with the offset of the cron's zone",
    ),
    "example": ["2026-11-22T10:00:10+01:00", "2026-11-22T10:00:20+01:00"],
}
_PLACEMENT = _object(
    {
        "jobName": _STRING,
        "placeable": _schema(
            "boolean",
            "null while no Mesos agent is known (or the app is missing)",
            nullable=True,
        ),
        "reason": _schema("string", nullable=True),
        "fields": _STRING_MAP,
        "agentsKnown": _INTEGER,
        "largestAgentCpus": _schema("number", nullable=True),
        "largestAgentMemoryMB": _schema("number", nullable=True),
    }
)
_RUN = _object(
    {
        # Null (and type, agentId, shardingItem) for a fire a calendar excluded (issue 28).
        "taskId": _schema("string", nullable=True),
        "jobName": _STRING,
        "shardingItem": _schema("integer", nullable=True),
        "type": {**_TASK_TYPE, "nullable": True},
        "agentId": _schema("string", nullable=True),
        "launchTime": _TIME,
        "fireTime": {**_TIME, "description": "the cron fire it runs for, when known"},
        "startTime": _TIME,
        "endTime": _TIME,
        "state": _schema("string", "the latest Mesos task state; FIRE_EXCLUDED: no task"),
        "result": _schema(
            "string", enum=["running", "success", "failure", "killed", "fire_excluded"]
        ),
        "reason": _schema("string", "why it did not succeed", nullable=True),
        "message": _schema("string", "the last status message"),
        "exitStatus": _schema("integer", nullable=True),
    },
    description="one task: a shard of a fire (a daemon job's task is one run of many), or a "
    "cron fire a calendar excluded (result fire_excluded: no task ran)",
)
_RUN_LOG = _object(
    {
        "data": _schema("string", "UTF-8 text (U+FFFD for other bytes)"),
        "offset": _schema("integer", "where data starts (bytes); the size"),
        "nextOffset": _schema("integer", "where the next read starts"),
    }
)
_ERROR = _object(
    {
        "error": _schema("string", "what is wrong, naming the field or object"),
        "type": _STRING,
        "fields": _STRING_MAP,
    },
    required=["error", "type"],
)
SCHEMAS: dict[str, Schema] = {
    "Error": _ERROR,
    "App": _APP,
    "Job": _JOB,
    "TaskContext": _TASK_CONTEXT,
    "NextFireTimes": _object(
        {
            "nextFireTimes": _FIRE_TIMES,
            # Issue 28: only for a job with excludeCalendars (the times then skip what they
            # exclude).
            "excludeCalendars": _array(_STRING, "the job's calendars that applied"),
            "excludedFires": _schema("integer", "excluded times passed over"),
            "gaveUp": _schema("boolean", "over 20,000 excluded times in a row: more unknown"),
        }
    ),
    "Killed": _object({"taskIds": _array(_STRING, "the tasks a kill was sent to")}),
    "Placement": _PLACEMENT,
    "Run": _RUN,
    "RunLog": _RUN_LOG,
}


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: Schema) -> Schema:
    return {"content": {"application/json": {"schema": schema}}}


def _error(description: str) -> Schema:
    return {"description": description, **_json(_ref("Error"))}


_ERRORS = {
    "400": _error("invalid input"),
    "401": _error("authentication required"),
    "403": _error(
        "the caller sees the app but lacks the route's role (docs/routes.md; type Forbidden), "
        "or a write from another web origin (Origin header)"
    ),
    "404": _error("unknown app or job, or one of an app the caller holds no role on"),
    "409": _error(
        "conflict: exists, disabled, or not allowed for the job; or a quota (max_apps, max_jobs) "
        "reached (type QuotaExceeded)"
    ),
    "413": _error(
        "the request body is too large, or the app or job as stored is larger than "
        "max_job_bytes (type TooLarge)"
    ),
    "415": _error("a write whose body or Content-Type is not JSON (forms and text are refused)"),
    "503": _error("not the leader, or ZooKeeper unavailable"),
}
# The answer an operation that reads a Mesos agent may also give.
_AGENT_ERROR = {"502": _error("the Mesos agent cannot be reached, or answered as no agent does")}

_APP_BODY = {"required": True, **_json(_ref("App"))}
_JOB_BODY = {"required": True, **_json(_ref("Job"))}
_NAME_BODY = {
    "required": True,
    "description": (
        "the job name with Content-Type: application/json, as the raw name (foo_job, as the "
        'original documents it), a JSON string ("foo_job") or {"jobName": "foo_job"}'
    ),
    **_json({"oneOf": [_STRING, _object({"jobName": _STRING})]}),
}


def _query(
    name: str, about: str | None = None, schema: Schema = _STRING, required: bool = False
) -> Schema:
    found: Schema = {"name": name, "in": "query", "required": required, "schema": schema}
    if about is not None:
        found["description"] = about
    return found


def _queries(names: str) -> tuple[Schema, ...]:
    """Optional string queries without a description; `names` space-separated."""
    return tuple(_query(name) for name in names.split())


_COUNT = _query("count", schema=_schema("integer", minimum=1, maximum=100, default=5))
_SINCE = _queries("since")
_PAGE = _queries("per_page page sort order startTime endTime jobName taskId")
_EXECUTION_QUERIES = _PAGE + _queries("ip isSuccess")
_TRACE_QUERIES = _PAGE + _queries("slaveId source executionType state")
_CRON_QUERIES = (
    _query("cron", "Quartz (6-7 fields) or crontab (5)", required=True),
    _query("timeZone", "IANA zone; default: time_zone"),
    _COUNT,
)
_BEFORE = (
    "next of the previous page, or a time (ISO 8601 or yyyy-MM-dd HH:mm:ss UTC): runs launched "
    "before it"
)
_RUNS_QUERIES = (_query("limit", "1-1000, default 20", _INTEGER), _query("before", _BEFORE))
_LOG_QUERIES = (
    _query("stream", "stdout (default) or stderr"),
    _query("offset", "bytes from the start (default 0); -1: the size", _INTEGER),
    _query("length", "0-1048576 bytes (default 1048576)", _INTEGER),
)
_SANDBOX_QUERIES = (_query("appName", required=True),)
# Every list pages (scheduler/api/paging.py).
_LIST_QUERIES = (
    _query(
        "limit",
        "1-1000: answer a page {items, nextCursor}; without it the plain array, at most "
        "max_list_items long (X-Total-Count: how many there are)",
        _INTEGER,
    ),
    _query("cursor", "the nextCursor of the previous page (opaque; needs limit)"),
)


@dataclass(frozen=True)
class Reply:
    """The answer of an operation that succeeds: its status, and what it returns if anything."""

    status: str
    description: str
    schema: Schema | None = None

    def responses(self) -> Schema:
        answer = {"description": self.description}
        return {self.status: {**answer, **_json(self.schema)} if self.schema else answer}


_DONE = Reply("204", "done")
_KILLED = Reply("202", "kills sent", _ref("Killed"))
_FIRES = _ref("NextFireTimes")
_PENDING_RUNS = _object({"jobName": _STRING, "times": _STRING})
_NEXT_PAGE = _schema("string", "before of the next page", nullable=True)
_RUNS_PAGE = _object({"runs": _array(_ref("Run")), "next": _NEXT_PAGE})
_SANDBOXES = _array(_object({"hostname": _STRING, "path": _STRING, "executorId": _STRING}))
_ROWS = _object({"total": _INTEGER, "rows": _OBJECTS})


def _listed(items: Schema) -> Schema:
    """A list answer: the plain array (no limit), or a page of it (limit, cursor)."""
    cursor = _schema("string", "cursor of the next page; null: this was the last", nullable=True)
    page = _object({"items": _array(items), "nextCursor": cursor})
    return {"oneOf": [_array(items), page]}


@dataclass(frozen=True)
class Route:
    """One operation of `/api`, a row of the table the document is built from.

    `endpoint` is the method and the path ("GET /api/app/{appName}"); `returns` is the schema of
    a 200 answer, another `Reply`, or None for a bare 204; `agent`: the operation reads a Mesos
    agent, so it may also answer 502.
    """

    endpoint: str
    summary: str
    returns: Schema | Reply | None = None
    queries: tuple[Schema, ...] = ()
    body: Schema | None = None
    agent: bool = False

    def reply(self) -> Reply:
        if isinstance(self.returns, Reply):
            return self.returns
        return _DONE if self.returns is None else Reply("200", "ok", self.returns)


# The summaries too long for a row of the table.
_JOB_DISABLE = "disable the job (drops its pending runs and failover relaunches)"
_PLACEABLE = "can the job's runs ever be placed on the known Mesos agents"
_JOB_FIRES = "the job's next fire times (its cron and zone; also while disabled)"
_CRON_FIRES = "preview a cron expression's next fire times before registering it"
_KILL = "(no failover relaunch: not a failure)"
_RUNS = (
    "the job's runs from the event trace, newest first (its running tasks when the trace is off)"
)
_LOG = "a run's stdout or stderr, read through its Mesos agent's /files/read"
_TRIGGER = (
    "run a transient job once now (name as body); 409 while it runs with overlapPolicy FORBID "
    "and misfire off"
)
_RESULTS_24H = "task results per minute, last 24 h"
_RESULTS_OF = "task results of a period (online, lastWeek, lastHour, lastMinute)"
_SANDBOX = (
    "the app's sandboxes (its executors', its running command tasks'), path below the agent's "
    "work directory, from each agent's /state"
)
_RECONCILE = "(at most every 10 s; 429 otherwise)"
_LOGIN = (
    "console login: a session cookie (HttpOnly, SameSite=Strict) expiring after "
    "auth_session_timeout_seconds"
)
_EXPIRES = _schema("string", "ISO 8601; null for Basic credentials", nullable=True)
_SESSION = _object({"user": _STRING, "role": _STRING, "expiresAt": _EXPIRES})
_LOGIN_BODY = {"required": True, **_json(_object({"user": _STRING, "password": _STRING}))}

_WORKFLOW_BODY = {"required": True, **_json(_OBJECT)}
# Backfills (issue 28): scheduler/api/backfills.py, docs/backfill.md.
_BACKFILL_BODY = {
    "required": True,
    **_json(
        _object(
            {
                "from": _schema("string", "ISO 8601 with an offset, included"),
                "to": _schema("string", "ISO 8601 with an offset, included; not after now"),
                "firesPerMinute": _schema("number", "0.01-600; none: as fast as allowed"),
                "dryRun": _schema("boolean", "list the fires, write nothing"),
                "overlapPolicy": _schema("string", enum=["FORBID", "ALLOW", "REPLACE"]),
            }
        )
    ),
}
_BACKFILL_MADE = Reply("201", "recorded (a dry run: 200, the preview)", _OBJECT)
_BACKFILL_CANCEL = (
    "cancel a backfill (a queued fire is withdrawn; body {killRunning: true} kills its tasks)"
)
_BACKFILL_PAGE = _object({"items": _OBJECTS, "nextCursor": _NEXT_PAGE})
# Concurrency pools (issue 28).
_POOL = _object(
    {
        "poolName": _NAME,
        "size": _schema("integer", "slots", minimum=1, maximum=100000),
        "inUse": _schema("integer", "slots held by running tasks (the launcher's last count)"),
        "waiting": _schema("integer", "units waiting for the pool's slots"),
        "jobs": _array(_STRING, "GET /api/pool/{name}: its jobs in the apps the caller sees"),
    }
)
_POOL_BODY = {"required": True, **_json(_object({"poolName": _NAME, "size": _INTEGER}))}
# Calendars (issue 28).
_CALENDAR = _object(
    {
        "calendarName": _NAME,
        "timeZone": _schema("string", "IANA zone of the dates and wall times (default: settings)"),
        "excludeDates": _array(_schema("string", format="date"), "whole local days"),
        "excludeRanges": _array(
            _object({"from": _STRING, "to": _STRING}), "[from, to): ISO 8601 date-times"
        ),
        "weekly": _array(
            _object({"days": _array(_STRING), "from": _STRING, "to": _STRING}),
            'wall-time windows on days MON..SUN ("HH:MM", to up to "24:00")',
        ),
        "yearly": _array(_STRING, '"MM-DD" every year'),
        "ics": _schema("string", "write only: an iCalendar text, converted to the parts above"),
        "usedBy": _array(_STRING, "GET /api/calendar/{name}: its jobs in the apps the caller sees"),
    }
)
_CALENDAR_BODY = {"required": True, **_json(_CALENDAR)}
_WORKFLOW_ADDED = Reply("201", "registered", _OBJECT)
_WORKFLOW_UPDATE = "update a workflow (runs in flight keep their snapshot)"
_WORKFLOW_LIST = "list workflows (?job=NAME: those with a node running the job)"
_WORKFLOW_QUERIES = (*_LIST_QUERIES, _query("job", "a job's name"))
# A page always (all of them, nextCursor null, without limit).
_BACKFILL_QUERIES = (
    _query("limit", "1-1000: a page of that many; without it every one", _INTEGER),
    _query("cursor", "the nextCursor of the previous page (opaque; needs limit)"),
)
_WORKFLOW_TRIGGER = "run a workflow now (optional body {parameter}: every node's job parameter)"
_WORKFLOW_RUN_ID = Reply("201", "a run", _object({"runId": _STRING}))
_WORKFLOW_RUNS = "a workflow's runs, newest first (limit default 20)"
_WORKFLOW_PAGE = _object({"items": _OBJECTS, "nextCursor": _NEXT_PAGE})
# The audit log (issue 26): scheduler/api/audit.py, docs/security.md#audit-log.
_AUDIT_PAGE = _object(
    {
        "items": _array(
            _object(
                {
                    "time": _schema("string", "ISO 8601 UTC"),
                    "actor": _STRING,
                    "source": _STRING,
                    "action": _STRING,
                    "resource": _STRING,
                    "app": _schema("string", nullable=True),
                    "job": _schema("string", nullable=True),
                    "outcome": _schema("string", enum=["ok", "denied", "error"]),
                    "status": _INTEGER,
                    "requestId": _STRING,
                    "term": _INTEGER,
                    "changes": _schema("object", "before and after, secrets masked"),
                }
            )
        ),
        "nextCursor": _schema("string", "cursor of the next page (opaque)", nullable=True),
    }
)
_AUDIT_QUERIES = (
    _query("actor", "user:NAME, token:ID, anonymous or unknown"),
    _query("app"),
    _query("job"),
    _query("action", "job.update, grant.create, ..."),
    _query("outcome", "ok, denied or error"),
    _query("since", "ISO 8601 or epoch milliseconds (included)"),
    _query("until", "ISO 8601 or epoch milliseconds (excluded)"),
    _query("limit", "1-1000 (default 100)", _INTEGER),
    _query("cursor", "the nextCursor of the previous page"),
)
_AUDIT = "audit records, newest first (cluster-admin: all; app-admin: its apps')"
_WORKFLOW_RETRY = "re-run the nodes of an ended run that did not succeed"
_MARK = "count a failed, skipped or cancelled node as succeeded (its children go on)"

# Access management (issue 26): scheduler/api/access.py. Lists always answer a page.
_ROLE = _schema("string", enum=["viewer", "operator", "editor", "app-admin", "cluster-admin"])
_WHEN = _schema("string", "ISO 8601 UTC", nullable=True)
_ACCESS_USER = _object({"name": _STRING, "createdAt": _WHEN})
_ACCESS_GRANT = _object({"id": _STRING, "principal": _STRING, "role": _ROLE, "app": _STRING})
_ACCESS_TOKEN_FIELDS = {
    "id": _STRING,
    "name": _STRING,
    "owner": _STRING,
    "role": _ROLE,
    "app": _STRING,
    "createdAt": _WHEN,
    "expiresAt": _WHEN,
}
_ACCESS_TOKEN = _object({**_ACCESS_TOKEN_FIELDS, "lastUsedAt": _WHEN})
_ACCESS_MADE = _object({**_ACCESS_TOKEN_FIELDS, "token": _schema("string", "shown once")})
_ACCESS_PAGE = (
    _query("limit", "1-1000 (without it: at most max_list_items)", _INTEGER),
    _query("cursor", "the nextCursor of the previous page (opaque; needs limit)"),
)


def _access_page(items: Schema) -> Schema:
    return _object({"items": _array(items), "nextCursor": _NEXT_PAGE})


def _access_body(properties: Schema) -> Schema:
    return {"required": True, **_json(_object(properties))}


_USER_BODY = _access_body({"name": _STRING, "password": _STRING})
_GRANT_BODY = _access_body({"principal": _STRING, "role": _ROLE, "app": _STRING})
_TTL = _schema("integer", "60 to 315360000 (10 years); none: never expires")
_TOKEN_BODY = _access_body(
    {"name": _STRING, "role": _ROLE, "app": _STRING, "expiresInSeconds": _TTL}
)
_GRANTS_QUERIES = (*_ACCESS_PAGE, _query("app", "an app or *"), _query("principal", "user:NAME"))
_TOKEN_MADE = "make an API token (app-admin of its app; *: cluster-admin); its text only here"

ROUTES: tuple[Route, ...] = (
    Route("POST /api/app", "register an app", body=_APP_BODY),
    Route("PUT /api/app", "update an app (omitted fields are kept)", body=_APP_BODY),
    Route("GET /api/app/list", "list apps", _listed(_ref("App")), _LIST_QUERIES),
    Route("GET /api/app/{appName}", "one app", _ref("App")),
    Route("DELETE /api/app/{appName}", "delete an app with its jobs; its executors get STOP"),
    Route("GET /api/app/{appName}/disable", "is the app disabled", _BOOLEAN),
    Route("POST /api/app/{appName}/disable", "disable the app"),
    Route("DELETE /api/app/{appName}/disable", "enable the app"),
    Route("POST /api/app/{appName}/enable", "enable the app"),
    Route("POST /api/job/register", "register a job", body=_JOB_BODY),
    Route(  # issue 29
        "POST /api/job/register-many",
        "register 1 to 1000 jobs, all or none (400/409 list each refused job by index)",
        _object({"registered": _INTEGER}),
        body={
            "required": True,
            **_json(_object({"jobs": _array(_ref("Job"), "1 to 1000; or send the bare array")})),
        },
    ),
    Route("PUT /api/job/update", "update a job (omitted fields are kept)", body=_JOB_BODY),
    Route("DELETE /api/job/deregister", "deregister a job (name as body)", body=_NAME_BODY),
    Route("DELETE /api/job/{jobName}/deregister", "deregister a job"),
    Route("GET /api/job/jobs", "list jobs", _listed(_ref("Job")), _LIST_QUERIES),
    Route("GET /api/job/jobs/{jobName}", "one job", _ref("Job")),
    Route("GET /api/job/{jobName}/disable", "is the job disabled (job or its app)", _BOOLEAN),
    Route("POST /api/job/{jobName}/disable", _JOB_DISABLE),
    Route("DELETE /api/job/{jobName}/disable", "enable the job"),
    Route("POST /api/job/{jobName}/enable", "enable the job"),
    Route("GET /api/job/{jobName}/placement", _PLACEABLE, _ref("Placement")),
    Route("GET /api/job/{jobName}/next-fire-times", _JOB_FIRES, _FIRES, (_COUNT,)),
    Route("GET /api/cron/next-fire-times", _CRON_FIRES, _FIRES, _CRON_QUERIES),
    Route("POST /api/job/{jobName}/kill", f"kill every running task of the job {_KILL}", _KILLED),
    Route("GET /api/job/{jobName}/runs", _RUNS, _RUNS_PAGE, _RUNS_QUERIES),
    Route(
        "GET /api/job/{jobName}/runs/{taskId}/log", _LOG, _ref("RunLog"), _LOG_QUERIES, agent=True
    ),
    Route("POST /api/job/tasks/{taskId}/kill", f"kill one running task {_KILL}", _KILLED),
    Route("POST /api/job/trigger", _TRIGGER, body=_NAME_BODY),
    Route(
        "GET /api/job/tasks/running", "running tasks", _listed(_ref("TaskContext")), _LIST_QUERIES
    ),
    Route("GET /api/job/tasks/ready", "pending runs", _listed(_PENDING_RUNS), _LIST_QUERIES),
    Route(
        "GET /api/job/tasks/failover",
        "shards waiting to fail over",
        _listed(_OBJECT),
        _LIST_QUERIES,
    ),
    Route("GET /api/job/events/executions", "execution history", _ROWS, _EXECUTION_QUERIES),
    Route("GET /api/job/events/statusTraces", "task state history", _ROWS, _TRACE_QUERIES),
    Route("GET /api/job/statistics/tasks/results", _RESULTS_24H, _OBJECTS, _SINCE),
    Route("GET /api/job/statistics/tasks/results/{period}", _RESULTS_OF, _OBJECT),
    Route("GET /api/job/statistics/tasks/running", "running tasks over time", _OBJECTS, _SINCE),
    Route("GET /api/job/statistics/jobs/running", "running jobs over time", _OBJECTS, _SINCE),
    Route("GET /api/job/statistics/jobs/register", "registered jobs over time", _OBJECTS),
    Route("GET /api/job/statistics/jobs/type", "job counts by type", _OBJECT),
    Route("GET /api/job/statistics/jobs/executionType", "job counts by execution type", _OBJECT),
    Route("POST /api/operate/reconcile/explicit", f"reconcile the tracked tasks {_RECONCILE}"),
    Route("POST /api/operate/reconcile/implicit", f"reconcile all tasks {_RECONCILE}"),
    Route("GET /api/operate/sandbox", _SANDBOX, _SANDBOXES, _SANDBOX_QUERIES, agent=True),
    Route("GET /api/openapi.json", "this document", _OBJECT),
    Route("POST /api/session", _LOGIN, _SESSION, body=_LOGIN_BODY),
    Route(
        "GET /api/session", "who the credentials (Basic or cookie) are; role null: none", _SESSION
    ),
    Route("DELETE /api/session", "log out: revoke the cookie's session on every replica"),
    # Backfills (issue 28): scheduler/api/backfills.py, docs/backfill.md.
    Route(
        "POST /api/job/{jobName}/backfill",
        "run the job's fires of a past range {from, to, firesPerMinute?, dryRun?}",
        _BACKFILL_MADE,
        body=_BACKFILL_BODY,
    ),
    Route(
        "GET /api/job/{jobName}/backfills",
        "the job's backfills, newest first",
        _BACKFILL_PAGE,
        _BACKFILL_QUERIES,
    ),
    Route("GET /api/job/{jobName}/backfills/{backfill_id}", "one backfill", _OBJECT),
    Route("POST /api/job/{jobName}/backfills/{backfill_id}/pause", "pause a backfill", _OBJECT),
    Route("POST /api/job/{jobName}/backfills/{backfill_id}/resume", "resume a backfill", _OBJECT),
    Route("POST /api/job/{jobName}/backfills/{backfill_id}/cancel", _BACKFILL_CANCEL, _OBJECT),
    # A workflow's backfills (issue 28): scheduler/api/workflow_backfills.py, docs/backfill.md.
    Route(
        "POST /api/workflow/{name}/backfill",
        "run the workflow's fires of a past range, one run each {from, to, firesPerMinute?, "
        "dryRun?}",
        _BACKFILL_MADE,
        body=_BACKFILL_BODY,
    ),
    Route(
        "GET /api/workflow/{name}/backfills",
        "the workflow's backfills",
        _BACKFILL_PAGE,
        _BACKFILL_QUERIES,
    ),
    Route("GET /api/workflow/{name}/backfills/{backfill_id}", "one backfill", _OBJECT),
    Route("POST /api/workflow/{name}/backfills/{backfill_id}/pause", "pause a backfill", _OBJECT),
    Route("POST /api/workflow/{name}/backfills/{backfill_id}/resume", "resume it", _OBJECT),
    Route(
        "POST /api/workflow/{name}/backfills/{backfill_id}/cancel",
        "cancel a backfill (body {killRunning: true} cancels its runs still running)",
        _OBJECT,
    ),
    # Workflows (issue 27): scheduler/api/workflows.py, docs/workflows.md.
    Route("POST /api/workflow", "register a workflow", _WORKFLOW_ADDED, body=_WORKFLOW_BODY),
    Route("PUT /api/workflow", _WORKFLOW_UPDATE, _OBJECT, body=_WORKFLOW_BODY),
    Route("GET /api/workflows", _WORKFLOW_LIST, _listed(_OBJECT), _WORKFLOW_QUERIES),
    Route("GET /api/workflow/{name}", "one workflow, with enabled", _OBJECT),
    Route("DELETE /api/workflow/{name}", "delete a workflow; its runs in flight are cancelled"),
    Route("POST /api/workflow/{name}/disable", "disable a workflow's cron"),
    Route("POST /api/workflow/{name}/enable", "enable a workflow's cron"),
    Route("POST /api/workflow/{name}/trigger", _WORKFLOW_TRIGGER, _WORKFLOW_RUN_ID),
    Route("GET /api/workflow/{name}/runs", _WORKFLOW_RUNS, _WORKFLOW_PAGE, _LIST_QUERIES),
    Route("GET /api/workflow/{name}/runs/{run_id}", "a run with every node", _OBJECT),
    Route("POST /api/workflow/{name}/runs/{run_id}/cancel", "cancel a run", _OBJECT),
    Route("POST /api/workflow/{name}/runs/{run_id}/retry", _WORKFLOW_RETRY, _OBJECT),
    Route("POST /api/workflow/{name}/runs/{run_id}/nodes/{node}/mark-success", _MARK, _OBJECT),
    # Concurrency pools (issue 28): scheduler/api/pools.py, docs/pools.md.
    Route(
        "POST /api/pool",
        "create a pool {poolName, size}",
        Reply("201", "created", _POOL),
        body=_POOL_BODY,
    ),
    Route("PUT /api/pool", "resize a pool {poolName, size}", _POOL, body=_POOL_BODY),
    Route("PUT /api/pool/{name}", "resize a pool {size}", _POOL, body=_POOL_BODY),
    Route("GET /api/pool/{name}", "a pool with inUse, waiting and its jobs the caller sees", _POOL),
    Route("GET /api/pools", "every pool with inUse and waiting", _listed(_POOL), _LIST_QUERIES),
    Route("DELETE /api/pool/{name}", "delete a pool (409 while a job names it)"),
    # Calendars (issue 28): scheduler/api/calendars.py, docs/calendars.md.
    Route(
        "POST /api/calendar",
        "register a calendar (ics: an iCalendar text converted to its parts)",
        Reply("201", "registered", _CALENDAR),
        body=_CALENDAR_BODY,
    ),
    Route(
        "PUT /api/calendar", "update a calendar (the body names it)", _CALENDAR, body=_CALENDAR_BODY
    ),
    Route("PUT /api/calendar/{name}", "update a calendar", _CALENDAR, body=_CALENDAR_BODY),
    Route("GET /api/calendar/{name}", "a calendar with usedBy", _CALENDAR),
    Route("GET /api/calendars", "every calendar", _listed(_CALENDAR), _LIST_QUERIES),
    Route("DELETE /api/calendar/{name}", "delete a calendar (409 naming the jobs that list it)"),
    Route("GET /api/audit", _AUDIT, _AUDIT_PAGE, _AUDIT_QUERIES),
    # Access management (issue 26): scheduler/api/access.py, docs/access.md.
    Route(
        "POST /api/access/users",
        "create a user (cluster-admin)",
        Reply("201", "created", _ACCESS_USER),
        body=_USER_BODY,
    ),
    Route(
        "GET /api/access/users", "users (cluster-admin)", _access_page(_ACCESS_USER), _ACCESS_PAGE
    ),
    Route("DELETE /api/access/users/{name}", "delete a user with its grants and tokens"),
    Route(
        "POST /api/access/grants",
        "grant a role on an app or * to a user",
        Reply("201", "granted", _ACCESS_GRANT),
        body=_GRANT_BODY,
    ),
    Route(
        "GET /api/access/grants",
        "the grants the caller may see",
        _access_page(_ACCESS_GRANT),
        _GRANTS_QUERIES,
    ),
    Route("DELETE /api/access/grants/{grant_id}", "delete a grant"),
    Route(
        "POST /api/access/tokens", _TOKEN_MADE, Reply("201", "made", _ACCESS_MADE), body=_TOKEN_BODY
    ),
    Route(
        "GET /api/access/tokens",
        "the caller's own tokens and those of the apps it administers (never a secret)",
        _access_page(_ACCESS_TOKEN),
        _ACCESS_PAGE,
    ),
    Route("DELETE /api/access/tokens/{token_id}", "revoke a token on every replica"),
)

_PATH_PARAMETER = re.compile(r"\{(\w+)\}")


def _operation(route: Route, path: str) -> Schema:
    """One operation: its summary, answers (the shared errors too), body, then parameters (the
    path's, in the order they stand in it, before the route's queries)."""
    agent_error = _AGENT_ERROR if route.agent else {}
    responses = {**_ERRORS, **route.reply().responses(), **agent_error}
    found: Schema = {"summary": route.summary, "responses": responses}
    if route.body is not None:
        found["requestBody"] = route.body
    in_path = [
        {"name": name, "in": "path", "required": True, "schema": _STRING}
        for name in _PATH_PARAMETER.findall(path)
    ]
    if in_path or route.queries:
        found["parameters"] = [*in_path, *route.queries]
    return found


def _paths(routes: tuple[Route, ...]) -> Schema:
    """The routes by path, each path's operations by lower-case method, in the table's order."""
    paths: Schema = {}
    for route in routes:
        method, path = route.endpoint.split(" ")
        paths.setdefault(path, {})[method.lower()] = _operation(route, path)
    return paths


def document() -> Schema:
    """The whole OpenAPI 3 document: every route of `/api`, behind HTTP basic auth."""
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "ejcloud scheduler API (Elastic-Job-Cloud 2.1.5 compatible)",
            "version": "1",
        },
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {"basic": {"type": "http", "scheme": "basic"}},
        },
        "security": [{"basic": []}],
        "paths": _paths(ROUTES),
    }


@bp.get("/openapi.json")
@requires(None, scope="authenticated")  # the API's shape: no app's data
def openapi() -> Response:
    return jsonify(document())

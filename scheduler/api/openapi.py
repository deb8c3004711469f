"""The OpenAPI 3 document of `/api` (served at `/api/openapi.json`)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify

bp = Blueprint("openapi", __name__, url_prefix="/api")

_NAME = {"type": "string", "pattern": "^[A-Za-z0-9_][A-Za-z0-9_.-]*$", "maxLength": 100}
_NUMBER = {"oneOf": [{"type": "number"}, {"type": "string", "maxLength": 64}]}
_CPUS = {
    "oneOf": [{"type": "number", "minimum": 0.001, "maximum": 1024}, _NUMBER["oneOf"][1]],
    "description": "CPUs, 0.001-1024",
}
_MEMORY = {
    "oneOf": [{"type": "number", "minimum": 1, "maximum": 16777216}, _NUMBER["oneOf"][1]],
    "description": "MB, 1-16777216 (16 TiB)",
}


def _text(max_bytes: int, description: str = "") -> dict[str, Any]:
    """A string field; maxLength is in characters, the server's bound is UTF-8 bytes."""
    about = f"at most {max_bytes} bytes in UTF-8" + (f"; {description}" if description else "")
    return {"type": "string", "maxLength": max_bytes, "description": about}


_FLAG = {"oneOf": [{"type": "boolean"}, {"type": "string", "enum": ["true", "false"]}]}
_NUMBER_TEXT = {"type": "string", "maxLength": 64}
_INT = {"oneOf": [{"type": "integer"}, {"type": "string"}]}

_SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error", "type"],
        "properties": {
            "error": {"type": "string", "description": "what is wrong, naming the field or object"},
            "type": {"type": "string"},
            "fields": {"type": "object", "additionalProperties": {"type": "string"}},
        },
    },
    "App": {
        "type": "object",
        "description": "unknown fields are refused; the whole app is at most 256 KiB stored",
        "additionalProperties": False,
        "required": ["appName", "appURL", "bootstrapScript"],
        "properties": {
            "appName": _NAME,
            "appURL": _text(4096),
            "bootstrapScript": _text(16384),
            "cpuCount": _CPUS,
            "memoryMB": _MEMORY,
            "appCacheEnable": _FLAG,
            "eventTraceSamplingCount": _INT,
        },
    },
    "Job": {
        "type": "object",
        "description": "unknown fields are refused; the whole job is at most 256 KiB stored",
        "additionalProperties": False,
        "required": [
            "jobName",
            "cron",
            "shardingTotalCount",
            "jobType",
            "appName",
            "cpuCount",
            "memoryMB",
            "jobExecutionType",
        ],
        "properties": {
            "jobName": _NAME,
            "jobClass": {
                "type": "string",
                "maxLength": 255,
                "description": "package.module:callable or package.module.Class",
            },
            "jobType": {"type": "string", "enum": ["SIMPLE", "DATAFLOW", "SCRIPT"]},
            "cron": _text(256, "Quartz (with seconds) or 5-field crontab"),
            "timeZone": _text(255, "IANA zone; default: time_zone setting"),
            "shardingTotalCount": _INT,
            "shardingItemParameters": {**_text(65536), "example": "0=a,1=b"},
            "jobParameter": _text(65536),
            "failover": _FLAG,
            "misfire": _FLAG,
            "description": _text(16384),
            "jobProperties": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "job_exception_handler": _text(4096),
                    "executor_service_handler": _text(4096),
                },
            },
            "streamingProcess": _FLAG,
            "scriptCommandLine": _text(16384),
            "appName": _NAME,
            "cpuCount": _CPUS,
            "memoryMB": _MEMORY,
            "jobExecutionType": {"type": "string", "enum": ["TRANSIENT", "DAEMON"]},
            "beanName": _text(4096),
            "applicationContext": _text(4096),
            "appURL": {**_text(4096, "accepted and ignored (before 2.0.5)"), "deprecated": True},
            "bootstrapScript": {
                **_text(16384, "accepted and ignored (before 2.0.5)"),
                "deprecated": True,
            },
            "timeoutSeconds": {
                "oneOf": [{"type": "integer", "minimum": 1, "maximum": 604800}, _NUMBER_TEXT],
                "description": "a run still going this long after it started is stopped "
                "(SIGTERM, then SIGKILL after the grace) and fails, 'timed out after N s'; "
                "absent: no limit",
            },
            "maxRetries": {
                "oneOf": [{"type": "integer", "minimum": 0, "maximum": 1000}, _NUMBER_TEXT],
                "description": "relaunches of a failed shard per fire (with failover, or a "
                "daemon job); absent: unlimited, with back-off",
            },
            "overlapPolicy": {
                "type": "string",
                "enum": ["FORBID", "ALLOW", "REPLACE"],
                "description": "a fire (or trigger) while the job runs: FORBID (default) waits "
                "with misfire on and is skipped without; ALLOW runs beside; REPLACE kills the "
                "running tasks first. TRANSIENT jobs only",
            },
            "notifyWebhookUrl": {
                "type": "string",
                "maxLength": 2048,
                "description": "http(s) URL the leader POSTs this job's failure events to "
                "(run_failed, run_timed_out, fire_skipped, fire_capped); overrides the "
                "notify_webhook_url setting. No credentials (user:password@), no #fragment",
            },
        },
    },
    "TaskContext": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "metaInfo": {
                "type": "object",
                "properties": {
                    "jobName": {"type": "string"},
                    "shardingItems": {"type": "array", "items": {"type": "integer"}},
                },
            },
            "type": {"type": "string", "enum": ["READY", "FAILOVER"]},
            "slaveId": {"type": "string"},
            "idle": {"type": "boolean"},
            "hostname": {"type": "string"},
            "state": {"type": "string"},
            "launchedAt": {"type": "number", "description": "epoch seconds"},
            "killReason": {
                "type": "string",
                "enum": ["user", "replace"],
                "description": "present once the scheduler sent a kill: by a user, or by "
                "overlapPolicy REPLACE (neither is a failure)",
            },
        },
    },
    "NextFireTimes": {
        "type": "object",
        "properties": {
            "nextFireTimes": {
                "type": "array",
                "items": {"type": "string", "format": "date-time"},
                "description": "ISO 8601 to the second, with the offset of the cron's zone",
                "example": ["2026-11-22T10:00:10+01:00", "2026-11-22T10:00:20+01:00"],
            }
        },
    },
    "Killed": {
        "type": "object",
        "properties": {
            "taskIds": {
                "type": "array",
                "items": {"type": "string"},
                "description": "the tasks a kill was sent to",
            }
        },
    },
    "Placement": {
        "type": "object",
        "properties": {
            "jobName": {"type": "string"},
            "placeable": {
                "type": "boolean",
                "nullable": True,
                "description": "null while no Mesos agent is known (or the app is missing)",
            },
            "reason": {"type": "string", "nullable": True},
            "fields": {"type": "object", "additionalProperties": {"type": "string"}},
            "agentsKnown": {"type": "integer"},
            "largestAgentCpus": {"type": "number", "nullable": True},
            "largestAgentMemoryMB": {"type": "number", "nullable": True},
        },
    },
}


_NULLABLE_TIME = {"type": "string", "format": "date-time", "nullable": True}
_SCHEMAS["Run"] = {
    "type": "object",
    "description": "one task: a shard of a fire (a daemon job's task is one run of many)",
    "properties": {
        "taskId": {"type": "string"},
        "jobName": {"type": "string"},
        "shardingItem": {"type": "integer"},
        "type": {"type": "string", "enum": ["READY", "FAILOVER"]},
        "agentId": {"type": "string"},
        "launchTime": _NULLABLE_TIME,
        "fireTime": {**_NULLABLE_TIME, "description": "the cron fire it runs for, when known"},
        "startTime": _NULLABLE_TIME,
        "endTime": _NULLABLE_TIME,
        "state": {"type": "string", "description": "the latest Mesos task state"},
        "result": {
            "type": "string",
            "enum": ["running", "success", "failure", "killed"],
        },
        "reason": {"type": "string", "nullable": True, "description": "why it did not succeed"},
        "message": {"type": "string", "description": "the last status message"},
        "exitStatus": {"type": "integer", "nullable": True},
    },
}
_SCHEMAS["RunLog"] = {
    "type": "object",
    "properties": {
        "data": {"type": "string", "description": "UTF-8 text (U+FFFD for other bytes)"},
        "offset": {"type": "integer", "description": "where data starts (bytes); the size"},
        "nextOffset": {"type": "integer", "description": "where the next read starts"},
    },
}


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


_ERRORS = {
    str(code): {"description": why, **_json(_ref("Error"))}
    for code, why in (
        (400, "invalid input"),
        (401, "authentication required"),
        (403, "read-only user, or a write from another web origin (Origin header)"),
        (404, "unknown app or job"),
        (409, "conflict: exists, disabled, or not allowed for the job"),
        (415, "a write whose body or Content-Type is not JSON (forms and text are refused)"),
        (503, "not the leader, or ZooKeeper unavailable"),
    )
}
_NAME_BODY = {
    "required": True,
    "description": (
        "the job name with Content-Type: application/json, as the raw name (foo_job, as the "
        'original documents it), a JSON string ("foo_job") or {"jobName": "foo_job"}'
    ),
    "content": {
        "application/json": {
            "schema": {
                "oneOf": [
                    {"type": "string"},
                    {"type": "object", "properties": {"jobName": {"type": "string"}}},
                ]
            }
        },
    },
}


def _op(
    summary: str,
    ok: dict[str, Any] | None = None,
    body: Any = None,
    params: list[Any] | None = None,
) -> dict[str, Any]:
    responses: dict[str, Any] = dict(_ERRORS)
    responses.update(ok or {"204": {"description": "done"}})
    op: dict[str, Any] = {"summary": summary, "responses": responses}
    if body is not None:
        op["requestBody"] = body
    if params:
        op["parameters"] = params
    return op


def _path_param(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}


def _query(name: str, required: bool = False, kind: str = "string") -> dict[str, Any]:
    return {"name": name, "in": "query", "required": required, "schema": {"type": kind}}


def _agent_read(summary: str, ok: dict[str, Any], params: list[Any]) -> dict[str, Any]:
    """An operation that reads a Mesos agent: it may also answer 502."""
    op = _op(summary, ok, params=params)
    op["responses"]["502"] = {
        "description": "the Mesos agent cannot be reached, or answered as no agent does",
        **_json(_ref("Error")),
    }
    return op


def _ok(schema: dict[str, Any]) -> dict[str, Any]:
    return {"200": {"description": "ok", **_json(schema)}}


def document() -> dict[str, Any]:
    app_body = {"required": True, **_json(_ref("App"))}
    job_body = {"required": True, **_json(_ref("Job"))}
    app_p, job_p = [_path_param("appName")], [_path_param("jobName")]
    count = {
        "name": "count",
        "in": "query",
        "required": False,
        "schema": {"type": "integer", "minimum": 1, "maximum": 100, "default": 5},
    }
    accepted = {"202": {"description": "kills sent", **_json(_ref("Killed"))}}
    page = [
        _query(n)
        for n in ("per_page", "page", "sort", "order", "startTime", "endTime", "jobName", "taskId")
    ]
    rows = {
        "type": "object",
        "properties": {
            "total": {"type": "integer"},
            "rows": {"type": "array", "items": {"type": "object"}},
        },
    }
    paths: dict[str, Any] = {
        "/api/app": {
            "post": _op("register an app", body=app_body),
            "put": _op("update an app (omitted fields are kept)", body=app_body),
        },
        "/api/app/list": {"get": _op("list apps", _ok({"type": "array", "items": _ref("App")}))},
        "/api/app/{appName}": {
            "get": _op("one app", _ok(_ref("App")), params=app_p),
            "delete": _op("delete an app with its jobs; its executors get STOP", params=app_p),
        },
        "/api/app/{appName}/disable": {
            "get": _op("is the app disabled", _ok({"type": "boolean"}), params=app_p),
            "post": _op("disable the app", params=app_p),
            "delete": _op("enable the app", params=app_p),
        },
        "/api/app/{appName}/enable": {"post": _op("enable the app", params=app_p)},
        "/api/job/register": {"post": _op("register a job", body=job_body)},
        "/api/job/update": {"put": _op("update a job (omitted fields are kept)", body=job_body)},
        "/api/job/deregister": {"delete": _op("deregister a job (name as body)", body=_NAME_BODY)},
        "/api/job/{jobName}/deregister": {"delete": _op("deregister a job", params=job_p)},
        "/api/job/jobs": {"get": _op("list jobs", _ok({"type": "array", "items": _ref("Job")}))},
        "/api/job/jobs/{jobName}": {"get": _op("one job", _ok(_ref("Job")), params=job_p)},
        "/api/job/{jobName}/disable": {
            "get": _op(
                "is the job disabled (job or its app)", _ok({"type": "boolean"}), params=job_p
            ),
            "post": _op(
                "disable the job (drops its pending runs and failover relaunches)", params=job_p
            ),
            "delete": _op("enable the job", params=job_p),
        },
        "/api/job/{jobName}/enable": {"post": _op("enable the job", params=job_p)},
        "/api/job/{jobName}/placement": {
            "get": _op(
                "can the job's runs ever be placed on the known Mesos agents",
                _ok(_ref("Placement")),
                params=job_p,
            )
        },
        "/api/job/{jobName}/next-fire-times": {
            "get": _op(
                "the job's next fire times (its cron and zone; also while disabled)",
                _ok(_ref("NextFireTimes")),
                params=[*job_p, count],
            )
        },
        "/api/cron/next-fire-times": {
            "get": _op(
                "preview a cron expression's next fire times before registering it",
                _ok(_ref("NextFireTimes")),
                params=[
                    {**_query("cron", True), "description": "Quartz (6-7 fields) or crontab (5)"},
                    {**_query("timeZone"), "description": "IANA zone; default: time_zone"},
                    count,
                ],
            )
        },
        "/api/job/{jobName}/kill": {
            "post": _op(
                "kill every running task of the job (no failover relaunch: not a failure)",
                accepted,
                params=job_p,
            )
        },
        "/api/job/{jobName}/runs": {
            "get": _op(
                "the job's runs from the event trace, newest first (its running tasks when the "
                "trace is off)",
                _ok(
                    {
                        "type": "object",
                        "properties": {
                            "runs": {"type": "array", "items": _ref("Run")},
                            "next": {
                                "type": "string",
                                "nullable": True,
                                "description": "before of the next page",
                            },
                        },
                    }
                ),
                params=[
                    *job_p,
                    {**_query("limit", kind="integer"), "description": "1-1000, default 20"},
                    {
                        **_query("before"),
                        "description": "next of the previous page, or a time (ISO 8601 or "
                        "yyyy-MM-dd HH:mm:ss UTC): runs launched before it",
                    },
                ],
            )
        },
        "/api/job/{jobName}/runs/{taskId}/log": {
            "get": _agent_read(
                "a run's stdout or stderr, read through its Mesos agent's /files/read",
                _ok(_ref("RunLog")),
                params=[
                    *job_p,
                    _path_param("taskId"),
                    {**_query("stream"), "description": "stdout (default) or stderr"},
                    {
                        **_query("offset", kind="integer"),
                        "description": "bytes from the start (default 0); -1: the size",
                    },
                    {
                        **_query("length", kind="integer"),
                        "description": "0-1048576 bytes (default 1048576)",
                    },
                ],
            )
        },
        "/api/job/tasks/{taskId}/kill": {
            "post": _op(
                "kill one running task (no failover relaunch: not a failure)",
                accepted,
                params=[_path_param("taskId")],
            )
        },
        "/api/job/trigger": {
            "post": _op(
                "run a transient job once now (name as body); 409 while it runs with "
                "overlapPolicy FORBID and misfire off",
                body=_NAME_BODY,
            )
        },
        "/api/job/tasks/running": {
            "get": _op("running tasks", _ok({"type": "array", "items": _ref("TaskContext")}))
        },
        "/api/job/tasks/ready": {
            "get": _op(
                "pending runs",
                _ok(
                    {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "jobName": {"type": "string"},
                                "times": {"type": "string"},
                            },
                        },
                    }
                ),
            )
        },
        "/api/job/tasks/failover": {
            "get": _op(
                "shards waiting to fail over", _ok({"type": "array", "items": {"type": "object"}})
            )
        },
        "/api/job/events/executions": {
            "get": _op(
                "execution history", _ok(rows), params=[*page, _query("ip"), _query("isSuccess")]
            )
        },
        "/api/job/events/statusTraces": {
            "get": _op(
                "task state history",
                _ok(rows),
                params=[
                    *page,
                    _query("slaveId"),
                    _query("source"),
                    _query("executionType"),
                    _query("state"),
                ],
            )
        },
        "/api/job/statistics/tasks/results": {
            "get": _op(
                "task results per minute, last 24 h",
                _ok({"type": "array", "items": {"type": "object"}}),
                params=[_query("since")],
            )
        },
        "/api/job/statistics/tasks/results/{period}": {
            "get": _op(
                "task results of a period (online, lastWeek, lastHour, lastMinute)",
                _ok({"type": "object"}),
                params=[_path_param("period")],
            )
        },
        "/api/job/statistics/tasks/running": {
            "get": _op(
                "running tasks over time",
                _ok({"type": "array", "items": {"type": "object"}}),
                params=[_query("since")],
            )
        },
        "/api/job/statistics/jobs/running": {
            "get": _op(
                "running jobs over time",
                _ok({"type": "array", "items": {"type": "object"}}),
                params=[_query("since")],
            )
        },
        "/api/job/statistics/jobs/register": {
            "get": _op(
                "registered jobs over time", _ok({"type": "array", "items": {"type": "object"}})
            )
        },
        "/api/job/statistics/jobs/type": {
            "get": _op("job counts by type", _ok({"type": "object"}))
        },
        "/api/job/statistics/jobs/executionType": {
            "get": _op("job counts by execution type", _ok({"type": "object"}))
        },
        "/api/operate/reconcile/explicit": {
            "post": _op("reconcile the tracked tasks (at most every 10 s; 429 otherwise)")
        },
        "/api/operate/reconcile/implicit": {
            "post": _op("reconcile all tasks (at most every 10 s; 429 otherwise)")
        },
        "/api/operate/sandbox": {
            "get": _agent_read(
                "the app's sandboxes (its executors', its running command tasks'), path below "
                "the agent's work directory, from each agent's /state",
                _ok(
                    {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "hostname": {"type": "string"},
                                "path": {"type": "string"},
                                "executorId": {"type": "string"},
                            },
                        },
                    }
                ),
                params=[_query("appName", True)],
            )
        },
        "/api/openapi.json": {"get": _op("this document", _ok({"type": "object"}))},
    }
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "ejcloud scheduler API (Elastic-Job-Cloud 2.1.5 compatible)",
            "version": "1",
        },
        "components": {
            "schemas": _SCHEMAS,
            "securitySchemes": {"basic": {"type": "http", "scheme": "basic"}},
        },
        "security": [{"basic": []}],
        "paths": paths,
    }


@bp.get("/openapi.json")
def openapi() -> Response:
    return jsonify(document())

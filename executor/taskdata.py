"""The task data codec shared by the scheduler (encoder) and the executor (decoder).

`TaskInfo.data` is base64 of UTF-8 JSON, never pickle (nothing an agent receives can run code
when decoded):

    {"version": 1,
     "executionType": "TRANSIENT" | "DAEMON",
     "shardingContext": {"jobName", "taskId", "shardingTotalCount", "shardingItem",
                         "shardingParameter", "jobParameter"
                         [, "fireTime", "workflowName", "workflowRunId", "backfillId"]},
     "jobConfig": {"jobName", "jobType", "jobClass", "cron", "cronFields", "timeZone",
                   "jobParameter",
                   "streamingProcess", "scriptCommandLine", "jobProperties", "misfire",
                   "eventTraceSamplingCount"[, "timeoutSeconds"]}}

`fireTime` (ISO 8601, UTC) is the logical fire time the run is for, present whenever the
scheduler knows it (issue 28): the cron fire, the trigger, the workflow run's fire, or the past
fire a backfill runs. The workflow fields are present only in a workflow node's shards (issue
27), `backfillId` only in a backfill's. Job code of every type gets them as `EJC_FIRE_TIME`,
`EJC_WORKFLOW_NAME`, `EJC_WORKFLOW_RUN_ID` and `EJC_BACKFILL_ID` in its environment.

`timeoutSeconds` (absent or 0: no limit) bounds each run: the whole transient task, or one run
of a daemon job.

This module has no dependency on flask or apscheduler.
"""

from __future__ import annotations

import base64
import binascii
import json
import shlex
from dataclasses import dataclass, field
from typing import Any

VERSION = 1
JOB_TYPES = ("SIMPLE", "DATAFLOW", "SCRIPT")
EXECUTION_TYPES = ("TRANSIENT", "DAEMON")


# One encoder for every shard: `json.dumps` with separators builds a new one per call (a
# third of a 10,000-task launch round's TaskInfos).
_COMPACT = json.JSONEncoder(separators=(",", ":"))


class TaskDataError(ValueError):
    """Task data that cannot be decoded; the message names each problem."""


@dataclass(frozen=True)
class ShardingContext:
    job_name: str
    task_id: str
    sharding_total_count: int
    sharding_item: int
    sharding_parameter: str = ""
    job_parameter: str = ""
    workflow_name: str = ""
    """The workflow whose node this shard runs ("": not a workflow node's shard)."""
    workflow_run_id: str = ""
    fire_time: str = ""
    """The logical fire time the run is for, ISO 8601 in UTC ("": not known)."""
    backfill_id: str = ""
    """The backfill this shard's run belongs to ("": not a backfill's run)."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "jobName": self.job_name,
            "taskId": self.task_id,
            "shardingTotalCount": self.sharding_total_count,
            "shardingItem": self.sharding_item,
            "shardingParameter": self.sharding_parameter,
            "jobParameter": self.job_parameter,
        }
        # Only when known or relevant: the original's fields are unchanged.
        if self.fire_time:
            out["fireTime"] = self.fire_time
        if self.workflow_name:
            out["workflowName"] = self.workflow_name
            out["workflowRunId"] = self.workflow_run_id
        if self.backfill_id:
            out["backfillId"] = self.backfill_id
        return out

    def as_argument(self) -> str:
        """The context as one shell-quoted JSON argument (for SCRIPT commands)."""
        return shlex.quote(_COMPACT.encode(self.to_json()))

    def as_environment(self) -> dict[str, str]:
        """`EJC_*` environment variables for SCRIPT jobs."""
        return {
            "EJC_JOB_NAME": self.job_name,
            "EJC_TASK_ID": self.task_id,
            "EJC_SHARDING_TOTAL_COUNT": str(self.sharding_total_count),
            "EJC_SHARDING_ITEM": str(self.sharding_item),
            "EJC_SHARDING_PARAMETER": self.sharding_parameter,
            "EJC_JOB_PARAMETER": self.job_parameter,
            **self.run_environment(),
        }

    def run_environment(self) -> dict[str, str]:
        """The variables naming the run this shard belongs to (fire time, workflow run,
        backfill), each only when known; every job type gets them (`worker`)."""
        out: dict[str, str] = {}
        if self.fire_time:
            out["EJC_FIRE_TIME"] = self.fire_time
        if self.workflow_name:
            out["EJC_WORKFLOW_NAME"] = self.workflow_name
            out["EJC_WORKFLOW_RUN_ID"] = self.workflow_run_id
        if self.backfill_id:
            out["EJC_BACKFILL_ID"] = self.backfill_id
        return out


@dataclass(frozen=True)
class JobSpec:
    """What the executor needs of the job's configuration."""

    job_name: str
    job_type: str
    job_class: str = ""
    cron: str = ""
    # The scheduler translates the cron once; the executor builds an APScheduler CronTrigger
    # from these fields (second, minute, hour, day, month, day_of_week, year) and `time_zone`.
    cron_fields: dict[str, str] = field(default_factory=dict)
    time_zone: str = ""
    job_parameter: str = ""
    streaming_process: bool = False
    script_command_line: str = ""
    job_properties: dict[str, str] = field(default_factory=dict)
    misfire: bool = False
    event_trace_sampling_count: int = 0
    timeout_s: int = 0
    """`timeoutSeconds`: a run still going this long after it started is stopped (0: never)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "jobName": self.job_name,
            "jobType": self.job_type,
            "jobClass": self.job_class,
            "cron": self.cron,
            "cronFields": dict(self.cron_fields),
            "timeZone": self.time_zone,
            "jobParameter": self.job_parameter,
            "streamingProcess": self.streaming_process,
            "scriptCommandLine": self.script_command_line,
            "jobProperties": dict(self.job_properties),
            "misfire": self.misfire,
            "eventTraceSamplingCount": self.event_trace_sampling_count,
            **({"timeoutSeconds": self.timeout_s} if self.timeout_s else {}),
        }


@dataclass(frozen=True)
class TaskData:
    execution_type: str
    sharding: ShardingContext
    job: JobSpec

    def to_json(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "executionType": self.execution_type,
            "shardingContext": self.sharding.to_json(),
            "jobConfig": self.job.to_json(),
        }

    def encode(self) -> str:
        """base64 text for `TaskInfo.data`."""
        raw = json.dumps(self.to_json(), separators=(",", ":")).encode("utf-8")
        return base64.b64encode(raw).decode("ascii")

    @classmethod
    def decode(cls, data: str | bytes | None) -> TaskData:
        """Parse `TaskInfo.data` (base64 text). Raises TaskDataError naming every problem."""
        if not data:
            raise TaskDataError("task data is empty")
        try:
            raw = base64.b64decode(data, validate=True)
            doc = json.loads(raw.decode("utf-8"))
        except (binascii.Error, ValueError) as exc:
            raise TaskDataError(f"task data is not base64 of UTF-8 JSON: {exc}") from exc
        return cls.from_json(doc)

    @classmethod
    def from_json(cls, doc: Any) -> TaskData:
        problems: list[str] = []
        if not isinstance(doc, dict):
            raise TaskDataError("task data is not a JSON object")
        if doc.get("version") != VERSION:
            problems.append(f"version: expected {VERSION}, got {doc.get('version')!r}")
        execution_type = doc.get("executionType")
        if execution_type not in EXECUTION_TYPES:
            problems.append(f"executionType: {execution_type!r} is not TRANSIENT or DAEMON")
        ctx = doc.get("shardingContext")
        job = doc.get("jobConfig")
        if not isinstance(ctx, dict):
            problems.append("shardingContext: missing or not an object")
            ctx = {}
        if not isinstance(job, dict):
            problems.append("jobConfig: missing or not an object")
            job = {}

        def text(src: dict[str, Any], key: str, where: str, required: bool = False) -> str:
            value: object = src.get(key, "")
            if value is None:
                value = ""
            if not isinstance(value, str):
                problems.append(f"{where}.{key}: not a string")
                return ""
            if required and not value:
                problems.append(f"{where}.{key}: required")
            return value

        def integer(src: dict[str, Any], key: str, where: str, minimum: int) -> int:
            value = src.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                problems.append(f"{where}.{key}: not a whole number >= {minimum}")
                return minimum
            return value

        sharding = ShardingContext(
            job_name=text(ctx, "jobName", "shardingContext", True),
            task_id=text(ctx, "taskId", "shardingContext", True),
            sharding_total_count=integer(ctx, "shardingTotalCount", "shardingContext", 1),
            sharding_item=integer(ctx, "shardingItem", "shardingContext", 0),
            sharding_parameter=text(ctx, "shardingParameter", "shardingContext"),
            job_parameter=text(ctx, "jobParameter", "shardingContext"),
            workflow_name=text(ctx, "workflowName", "shardingContext"),
            workflow_run_id=text(ctx, "workflowRunId", "shardingContext"),
            fire_time=text(ctx, "fireTime", "shardingContext"),
            backfill_id=text(ctx, "backfillId", "shardingContext"),
        )
        if sharding.sharding_item >= sharding.sharding_total_count:
            problems.append("shardingContext.shardingItem: not below shardingTotalCount")
        job_type = text(job, "jobType", "jobConfig", True)
        if job_type and job_type not in JOB_TYPES:
            problems.append(f"jobConfig.jobType: {job_type!r} is not one of {', '.join(JOB_TYPES)}")
        props = job.get("jobProperties") or {}
        if not isinstance(props, dict) or not all(isinstance(v, str) for v in props.values()):
            problems.append("jobConfig.jobProperties: not an object of strings")
            props = {}
        cron_fields = job.get("cronFields") or {}
        if not isinstance(cron_fields, dict) or not all(
            isinstance(v, str) for v in cron_fields.values()
        ):
            problems.append("jobConfig.cronFields: not an object of strings")
            cron_fields = {}
        sampling = job.get("eventTraceSamplingCount", 0)
        if isinstance(sampling, bool) or not isinstance(sampling, int) or sampling < 0:
            problems.append("jobConfig.eventTraceSamplingCount: not a whole number >= 0")
            sampling = 0
        timeout_s = job.get("timeoutSeconds", 0)
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, int) or timeout_s < 0:
            problems.append("jobConfig.timeoutSeconds: not a whole number >= 0")
            timeout_s = 0
        spec = JobSpec(
            job_name=text(job, "jobName", "jobConfig", True),
            job_type=job_type,
            job_class=text(job, "jobClass", "jobConfig"),
            cron=text(job, "cron", "jobConfig"),
            cron_fields=dict(cron_fields),
            time_zone=text(job, "timeZone", "jobConfig"),
            job_parameter=text(job, "jobParameter", "jobConfig"),
            streaming_process=bool(job.get("streamingProcess", False)),
            script_command_line=text(job, "scriptCommandLine", "jobConfig"),
            job_properties=dict(props),
            misfire=bool(job.get("misfire", False)),
            event_trace_sampling_count=sampling,
            timeout_s=timeout_s,
        )
        if job_type in ("SIMPLE", "DATAFLOW") and not spec.job_class:
            problems.append(f"jobConfig.jobClass: required for {job_type} jobs")
        if job_type == "SCRIPT" and not spec.script_command_line:
            problems.append("jobConfig.scriptCommandLine: required for SCRIPT jobs")
        if execution_type == "DAEMON" and not spec.cron_fields:
            problems.append("jobConfig.cronFields: required for DAEMON jobs")
        if problems:
            raise TaskDataError("invalid task data: " + "; ".join(problems))
        return cls(str(execution_type), sharding, spec)


# -- the app executor's ExecutorInfo ------------------------------------------------------------

ID_SEPARATOR = "@-@"


def executor_id(app_name: str, agent_id: str) -> str:
    """`{app}@-@{agentId}`: one executor per app per agent."""
    return f"{app_name}{ID_SEPARATOR}{agent_id}"


def executor_info(
    *,
    app_name: str,
    agent_id: str,
    app_url: str,
    bootstrap_script: str,
    cpus: float,
    mem_mb: float,
    cache: bool = True,
    role: str | None = None,
) -> dict[str, Any]:
    """The ExecutorInfo (Mesos v1 JSON, as pymesos sends it) of an app's executor on an agent.

    The agent fetches `app_url` into the sandbox (extracting archives) and runs
    `bootstrap_script` there with `sh -c`; for an archive from `python -m executor.package`
    that is `bin/start.sh`. `cache` is the app's `appCacheEnable`; `role` the offer's role.
    """
    resources: list[dict[str, Any]] = [
        {"name": "cpus", "type": "SCALAR", "scalar": {"value": cpus}},
        {"name": "mem", "type": "SCALAR", "scalar": {"value": mem_mb}},
    ]
    if role is not None:
        for resource in resources:
            resource["role"] = role
    return {
        "type": "CUSTOM",
        "executor_id": {"value": executor_id(app_name, agent_id)},
        "name": app_name,
        "command": {
            "value": bootstrap_script,
            "shell": True,
            "uris": [{"value": app_url, "extract": True, "cache": cache}],
        },
        "resources": resources,
    }

"""Build Mesos TaskInfo / ExecutorInfo JSON for one shard: one custom executor per app per
agent (`{app}@-@{agentId}`, the app's bootstrapScript run where appURL was unpacked), task data
in the executor package's JSON codec; TRANSIENT SCRIPT jobs as plain command tasks, with the
job's `timeoutSeconds` as the task's `max_completion_time`."""

from __future__ import annotations

from typing import Any

from executor.taskdata import (
    JobSpec,
    ShardingContext,
    TaskData,
    executor_info,
)
from scheduler.model.config.app import AppConfig
from scheduler.model.config.job import JobConfig, JobExecutionType, JobType
from scheduler.model.task_id import DELIMITER, TaskId
from scheduler.storage.workflow_store import NodeFire, iso_fire_time

_ARCHIVES = (".tar", ".tar.gz", ".tar.bz2", ".tar.xz", ".gz", ".tgz", ".tbz2", ".txz", ".zip")


def _scalar(name: str, value: float) -> dict[str, Any]:
    return {"name": name, "type": "SCALAR", "scalar": {"value": round(float(value), 4)}}


def _uri(app: AppConfig) -> dict[str, Any]:
    archive = app.app_url.lower().endswith(_ARCHIVES)
    return {
        "value": app.app_url,
        "cache": app.app_cache_enable,
        "extract": archive,
        "executable": not archive,
    }


def runs_as_command_task(job: JobConfig) -> bool:
    """TRANSIENT SCRIPT jobs run as Mesos command tasks, without the custom executor."""
    return job.job_type is JobType.SCRIPT and job.execution_type is JobExecutionType.TRANSIENT


def task_data(
    job: JobConfig,
    task_id: TaskId,
    sampling: int,
    workflow: NodeFire | None = None,
    fire_time: float | None = None,
) -> TaskData:
    """The task data of one shard; a workflow node's shard (`workflow`) also carries its run
    and fire time, and the trigger's parameter, if any, instead of the job's (issue 27); a
    backfill's (a `NodeFire` with its `backfill_id`) its backfill and past fire time; any
    other run `fire_time`, the fire it runs for when known (issue 28)."""
    cron_fields: dict[str, str] = {}
    if job.execution_type is JobExecutionType.DAEMON:
        cron_fields = {k: str(v) for k, v in job.cron_spec.fields}
    return TaskData(
        execution_type=job.execution_type.value,
        sharding=_sharding(job, task_id, workflow, fire_time),
        job=JobSpec(
            job_name=job.job_name,
            job_type=job.job_type.value,
            job_class=job.job_class,
            cron=job.cron,
            cron_fields=cron_fields,
            time_zone=job.effective_time_zone,
            job_parameter=job.job_parameter,
            streaming_process=job.streaming_process,
            script_command_line=job.script_command_line,
            job_properties={k: str(v) for k, v in job.job_properties.to_json().items()},
            misfire=job.misfire,
            event_trace_sampling_count=sampling,
            timeout_s=job.timeout_seconds or 0,
        ),
    )


def _sharding(
    job: JobConfig, task_id: TaskId, workflow: NodeFire | None, fire_time: float | None
) -> ShardingContext:
    """The shard's context (what a command task is given alone: a Mesos command task carries
    no task data)."""
    job_parameter = job.job_parameter
    if workflow is not None and workflow.parameter is not None:
        job_parameter = workflow.parameter
    return ShardingContext(
        job_name=job.job_name,
        task_id=str(task_id),
        sharding_total_count=job.sharding_total_count,
        sharding_item=task_id.item,
        sharding_parameter=job.sharding_parameter(task_id.item),
        job_parameter=job_parameter,
        workflow_name=workflow.workflow if workflow is not None else "",
        workflow_run_id=workflow.run_id if workflow is not None else "",
        fire_time=_fire_text(workflow.fire_time if workflow is not None else fire_time),
        backfill_id=workflow.backfill_id if workflow is not None else "",
    )


def _fire_text(fire_time: float | None) -> str:
    return "" if fire_time is None else iso_fire_time(fire_time)


def build_task_info(
    job: JobConfig,
    app: AppConfig,
    task_id: TaskId,
    framework_id: str,
    workflow: NodeFire | None = None,
    fire_time: float | None = None,
) -> dict[str, Any]:
    """The TaskInfo JSON that launches shard `task_id.item` of `job` on `task_id.agent_id`
    (for workflow node or backfill fire `workflow`, if given; else for the fire at epoch
    `fire_time`, when known)."""
    info: dict[str, Any] = {
        "name": DELIMITER.join(
            (job.job_name, str(task_id.item), task_id.type.value, task_id.agent_id)
        ),
        "task_id": {"value": str(task_id)},
        "agent_id": {"value": task_id.agent_id},
        "resources": [_scalar("cpus", job.cpu_count), _scalar("mem", job.memory_mb)],
    }
    if runs_as_command_task(job):
        sharding = _sharding(job, task_id, workflow, fire_time)
        info["command"] = {
            "shell": True,
            "value": f"{job.script_command_line} {sharding.as_argument()}",
            "uris": [_uri(app)] if app.app_url else [],
            "environment": {
                "variables": [{"name": k, "value": v} for k, v in sharding.as_environment().items()]
            },
        }
        if job.timeout_seconds:
            # Mesos's command executor stops the task then (SIGTERM, SIGKILL after the kill
            # grace) and fails it with REASON_MAX_COMPLETION_TIME_REACHED.
            info["max_completion_time"] = {"nanoseconds": job.timeout_seconds * 1_000_000_000}
        return info
    executor = executor_info(
        app_name=app.app_name,
        agent_id=task_id.agent_id,
        app_url=app.app_url,
        bootstrap_script=app.bootstrap_script,
        cpus=round(float(app.cpu_count), 4),
        mem_mb=round(float(app.memory_mb), 4),
        cache=app.app_cache_enable,
    )
    executor["framework_id"] = {"value": framework_id}
    # A single file (not an archive) is fetched executable instead of extracted.
    executor["command"]["uris"] = [_uri(app)] if app.app_url else []
    info["executor"] = executor
    info["data"] = task_data(
        job, task_id, app.event_trace_sampling_count, workflow, fire_time
    ).encode()
    return info

"""`ejcloud job ...`: list, show, add, update, enable, disable, trigger, kill, delete, next."""

from __future__ import annotations

from typing import Any

import click

from ejcloud_cli import paging
from ejcloud_cli.backfills import BACKFILL_COMMANDS
from ejcloud_cli.context import State, confirm, json_option, segment, spec_options
from ejcloud_cli.errors import ApiError, NothingRunning, UsageProblem
from ejcloud_cli.job_files import add_many, read_jobs
from ejcloud_cli.output import cell, format_time, objects, ordered_fields, render_fields
from ejcloud_cli.paging import PAGE_SIZE
from ejcloud_cli.specs import build_body, load_spec, parse_sets

_FIELD_ORDER = (
    "jobName",
    "appName",
    "jobType",
    "jobExecutionType",
    "cron",
    "timeZone",
    "shardingTotalCount",
    "shardingItemParameters",
    "jobParameter",
    "jobClass",
    "scriptCommandLine",
    "streamingProcess",
    "cpuCount",
    "memoryMB",
    "failover",
    "misfire",
    "description",
)
MAX_NEXT_COUNT = 100


@click.group("job")
def job_group() -> None:
    """Jobs: what runs (class or script), when (cron), on how many shards, and how big."""


@job_group.command("list")
@click.option("--app", "app_name", help="Only the jobs of this app.")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    help="At most this many jobs (default: all, asked 500 to a request).",
)
@json_option
@click.pass_obj
def list_jobs(state: State, app_name: str | None, limit: int | None) -> None:
    """List the registered jobs, in name order."""
    jobs: list[Any] = []
    page_size = min(limit, PAGE_SIZE) if limit is not None and app_name is None else PAGE_SIZE
    for job in paging.walk(state.client(), "/api/job/jobs", page_size):
        if app_name is None or (isinstance(job, dict) and job.get("appName") == app_name):
            jobs.append(job)
            if limit is not None and len(jobs) >= limit:
                break
    rows = [
        (
            j.get("jobName"),
            j.get("appName"),
            j.get("jobType"),
            j.get("jobExecutionType"),
            j.get("cron"),
            j.get("shardingTotalCount"),
            j.get("cpuCount"),
            j.get("memoryMB"),
        )
        for j in objects(jobs)
    ]
    headers = ("NAME", "APP", "TYPE", "EXECUTION", "CRON", "SHARDS", "CPUS", "MEM_MB")
    state.show_table(jobs, headers, rows, "no jobs")


@job_group.command("show")
@click.argument("name")
@json_option
@click.pass_obj
def show_job(state: State, name: str) -> None:
    """Show one job (with --json: exactly its JSON, ready for `job update -f`)."""
    client = state.client()
    job = client.call("GET", f"/api/job/jobs/{segment(name)}")
    if state.json_output:
        state.show(job, lambda: "")
        return
    disabled = client.call("GET", f"/api/job/{segment(name)}/disable")
    fields = [*ordered_fields(job, _FIELD_ORDER), ("disabled", disabled)]
    state.show(job, lambda: render_fields(fields))


_TYPES = click.Choice(["SIMPLE", "DATAFLOW", "SCRIPT"], case_sensitive=False)
_EXECUTION_TYPES = click.Choice(["TRANSIENT", "DAEMON"], case_sensitive=False)
_job_fields = spec_options(
    "job",
    [
        click.option("--app", "app_name", help="appName: the app whose code the job runs."),
        click.option("--type", "job_type", type=_TYPES, help="jobType."),
        click.option("--class", "job_class", help="jobClass: module:function or module:Class."),
        click.option("--script", help="scriptCommandLine (SCRIPT jobs)."),
        click.option("--cron", help="cron: Quartz ('0/5 * * * * ?') or 5-field crontab."),
        click.option("--time-zone", help="timeZone of the cron (IANA name)."),
        click.option("--shards", type=int, help="shardingTotalCount."),
        click.option("--shard-params", help="shardingItemParameters ('0=a,1=b')."),
        click.option("--param", help="jobParameter."),
        click.option("--execution", type=_EXECUTION_TYPES, help="jobExecutionType."),
        click.option("--cpu", type=float, help="cpuCount per shard."),
        click.option("--memory", type=float, help="memoryMB per shard."),
        click.option("--failover/--no-failover", default=None, help="failover."),
        click.option("--misfire/--no-misfire", default=None, help="misfire."),
        click.option("--streaming/--no-streaming", default=None, help="streamingProcess."),
        click.option("--description", help="description."),
    ],
)


def _body(
    state: State,
    name: str | None,
    spec_file: str | None,
    spec: dict[str, Any] | None = None,
    **flags: Any,
) -> dict[str, Any]:
    if spec is None and spec_file:
        spec = load_spec(spec_file, state.stdin())
    return build_body(
        "jobName",
        name,
        spec,
        parse_sets(flags["sets"]),
        {
            "appName": flags["app_name"],
            "jobType": flags["job_type"],
            "jobClass": flags["job_class"],
            "scriptCommandLine": flags["script"],
            "cron": flags["cron"],
            "timeZone": flags["time_zone"],
            "shardingTotalCount": flags["shards"],
            "shardingItemParameters": flags["shard_params"],
            "jobParameter": flags["param"],
            "jobExecutionType": flags["execution"],
            "cpuCount": flags["cpu"],
            "memoryMB": flags["memory"],
            "failover": flags["failover"],
            "misfire": flags["misfire"],
            "streamingProcess": flags["streaming"],
            "description": flags["description"],
        },
    )


@job_group.command("add")
@click.argument("name", required=False)
@_job_fields
@click.pass_obj
def add_job(state: State, /, name: str | None, spec_file: str | None, **flags: Any) -> None:
    """Register a job from a file (-f) and/or flags; or many: a file holding a list of jobs
    (or {"jobs": [...]}) is registered through register-many, 1,000 jobs to a request.

    \b
    ejcloud job add hello --app demo_app --type SIMPLE --class demo.jobs:hello \\
        --execution TRANSIENT --cron '0/10 * * * * ?' --shards 2 --cpu 0.1 --memory 32
    """
    spec = read_jobs(spec_file, state.stdin()) if spec_file else None
    if isinstance(spec, list):  # issue 29: many jobs (ejcloud_cli/job_files.py)
        add_many(state, spec, spec_file or "", name, flags)
        return
    body = _body(state, name, spec_file, spec, **flags)
    state.client().call("POST", "/api/job/register", body=body)
    state.done(f"job {body['jobName']} registered", action="registered", jobName=body["jobName"])


@job_group.command("update")
@click.argument("name", required=False)
@_job_fields
@click.pass_obj
def update_job(state: State, /, name: str | None, spec_file: str | None, **flags: Any) -> None:
    """Change fields of a job; the fields not given keep their values."""
    body = _body(state, name, spec_file, **flags)
    if len(body) < 2:
        raise UsageProblem("nothing to update: give fields with flags, --set or -f")
    state.client().call("PUT", "/api/job/update", body=body)
    state.done(f"job {body['jobName']} updated", action="updated", jobName=body["jobName"])


def _simple_action(
    command: str, method: str, path: str, done: str, help_text: str
) -> click.Command:
    @click.argument("name")
    @json_option
    @click.pass_obj
    def action(state: State, name: str) -> None:
        state.client().call(method, path.format(name=segment(name)))
        state.done(f"job {name} {done}", action=done, jobName=name)

    action.__doc__ = help_text
    return job_group.command(command)(action)


_simple_action(
    "enable", "POST", "/api/job/{name}/enable", "enabled", "Enable a job (it fires again)."
)
_simple_action(
    "disable",
    "POST",
    "/api/job/{name}/disable",
    "disabled",
    "Disable a job: it no longer fires, its pending runs are dropped and its tasks killed.",
)


@job_group.command("kill")
@click.argument("name")
@json_option
@click.pass_obj
def kill_job(state: State, name: str) -> None:
    """Kill the running tasks of a job; exit code 7 when none was running (nothing killed)."""
    data = state.client().call("POST", f"/api/job/{segment(name)}/kill")
    task_ids = data.get("taskIds") if isinstance(data, dict) else None
    if not isinstance(task_ids, list):
        raise ApiError(202, "the answer holds no list of taskIds", "UnexpectedAnswer")
    if not task_ids:
        raise NothingRunning(f"job {name} has no running task; nothing was killed")
    count = len(task_ids)
    state.done(
        f"job {name}: kill sent to {count} running task{'' if count == 1 else 's'}",
        action="killed",
        jobName=name,
        taskIds=task_ids,
    )


@job_group.command("trigger")
@click.argument("name")
@json_option
@click.pass_obj
def trigger_job(state: State, name: str) -> None:
    """Run a transient job once now (one run: a task per shard)."""
    # The original takes the job name as the body; a JSON string is one of its accepted forms.
    state.client().call("POST", "/api/job/trigger", body=name)
    state.done(f"job {name} triggered", action="triggered", jobName=name)


@job_group.command("delete")
@click.argument("name")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@json_option
@click.pass_obj
def delete_job(state: State, name: str, yes: bool) -> None:
    """Deregister a job (its running tasks are killed)."""
    confirm(f"Delete job {name}?", yes)
    state.client().call("DELETE", f"/api/job/{segment(name)}/deregister")
    state.done(f"job {name} deleted", action="deleted", jobName=name)


@job_group.command("next")
@click.argument("name")
@click.option(
    "-n",
    "--count",
    type=click.IntRange(1, MAX_NEXT_COUNT),
    default=5,
    show_default=True,
    help="How many fire times.",
)
@json_option
@click.pass_obj
def next_fires(state: State, name: str, count: int) -> None:
    """Show the next fire times of a job's cron."""
    data = state.client().call(
        "GET", f"/api/job/{segment(name)}/next-fire-times", query={"count": count}
    )
    times = data.get("nextFireTimes") if isinstance(data, dict) else data
    if not isinstance(times, list):
        raise ApiError(200, "the answer holds no list of nextFireTimes", "UnexpectedAnswer")
    # Strings are shown as the server wrote them (in the job's zone); numbers as UTC times.
    lines = [cell(t) if isinstance(t, str) else format_time(t) for t in times]
    state.show(data, lambda: "\n".join(lines) or f"job {name} has no next fire time")


for _command in BACKFILL_COMMANDS:  # job backfill, backfills, backfill-show|pause|...
    job_group.add_command(_command)

"""`ejcloud workflow ...`: workflows (jobs that run after other jobs) and their runs.

add, update, show, list, enable, disable, delete define them (`POST/PUT /api/workflow`, ...);
trigger, runs, run, cancel, retry and mark-success act on and read their runs
(`/api/workflow/{name}/runs/...`). A workflow is given as a JSON or YAML file with the API's
field names (`workflowName`, `appName`, `cron`, `nodes: [{name, job, dependsOn, condition}]`),
exactly what `workflow show NAME --json` prints, plus flags for the common fields.
"""

from __future__ import annotations

import time
from typing import Any

import click

from ejcloud_cli import paging
from ejcloud_cli.backfills import backfill_body, backfill_options, report_action, report_started
from ejcloud_cli.context import State, confirm, json_option, segment, spec_options
from ejcloud_cli.errors import EXIT_ERROR, EXIT_OK, ApiError, CliError, UsageProblem
from ejcloud_cli.output import (
    format_duration,
    format_time,
    objects,
    ordered_fields,
    parse_time,
    render_fields,
    render_table,
)
from ejcloud_cli.paging import PAGE_SIZE
from ejcloud_cli.specs import build_body, load_spec, parse_sets

_FIELD_ORDER = (
    "workflowName",
    "appName",
    "enabled",
    "cron",
    "timeZone",
    "misfire",
    "overlapPolicy",
    "timeoutSeconds",
    "failFast",
    "description",
)
# A run's states when it is over (`running` is the only other one).
ENDED_RUN_STATES = frozenset({"succeeded", "failed", "cancelled", "timed_out"})
MAX_RUNS = 1000
REASON_WIDTH = 60
# Read-only fields a `show --json` holds that a register or update body must not carry.
_SHOWN_ONLY = ("enabled",)


@click.group("workflow")
def workflow_group() -> None:
    """Workflows: jobs that run after other jobs, as one run with its own schedule."""


def _base(name: str) -> str:
    return f"/api/workflow/{segment(name)}"


def _run_path(name: str, run_id: str) -> str:
    return f"{_base(name)}/runs/{segment(run_id)}"


def _span(start: Any, end: Any) -> str:
    started, ended = parse_time(start), parse_time(end)
    if started is None or ended is None:
        return "-"
    return format_duration((ended - started).total_seconds())


def _when(value: Any) -> str | None:
    return format_time(value) if value not in (None, "") else None


def _nodes_table(nodes: Any) -> str:
    rows = [
        (
            n.get("name"),
            n.get("job"),
            n.get("condition") or "on_success",
            ",".join(str(p) for p in n.get("dependsOn") or []) or None,
        )
        for n in objects(nodes)
    ]
    return render_table(("NODE", "JOB", "CONDITION", "DEPENDS_ON"), rows) if rows else "no nodes"


@workflow_group.command("list")
@click.option("--app", "app_name", help="Only the workflows of this app.")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    help="At most this many workflows (default: all, asked 500 to a request).",
)
@json_option
@click.pass_obj
def list_workflows(state: State, app_name: str | None, limit: int | None) -> None:
    """List the workflows (those of the apps you may see), in name order."""
    found: list[Any] = []
    page_size = min(limit, PAGE_SIZE) if limit is not None and app_name is None else PAGE_SIZE
    for item in paging.walk(state.client(), "/api/workflows", page_size):
        if app_name is None or (isinstance(item, dict) and item.get("appName") == app_name):
            found.append(item)
            if limit is not None and len(found) >= limit:
                break
    rows = [
        (
            w.get("workflowName"),
            w.get("appName"),
            w.get("cron"),
            len(w["nodes"]) if isinstance(w.get("nodes"), list) else None,
            w.get("enabled"),
            w.get("failFast"),
        )
        for w in objects(found)
    ]
    headers = ("NAME", "APP", "CRON", "NODES", "ENABLED", "FAIL_FAST")
    state.show_table(found, headers, rows, "no workflows")


@workflow_group.command("show")
@click.argument("name")
@json_option
@click.pass_obj
def show_workflow(state: State, name: str) -> None:
    """Show one workflow and its nodes (with --json: its JSON, ready for `update -f`)."""
    found = state.client().call("GET", _base(name))
    fields = [(k, v) for k, v in ordered_fields(found, _FIELD_ORDER) if k != "nodes"]
    nodes = found.get("nodes") if isinstance(found, dict) else None
    state.show(found, lambda: render_fields(fields) + "\n\n" + _nodes_table(nodes))


_workflow_fields = spec_options(
    "workflow",
    [
        click.option("--app", "app_name", help="appName: the app the workflow belongs to."),
        click.option("--cron", help="cron: Quartz or 5-field crontab ('' : only when triggered)."),
        click.option("--time-zone", help="timeZone of the cron (IANA name)."),
        click.option("--fail-fast/--no-fail-fast", default=None, help="failFast."),
        click.option("--misfire/--no-misfire", default=None, help="misfire."),
        click.option(
            "--overlap",
            type=click.Choice(["FORBID", "ALLOW"], case_sensitive=False),
            help="overlapPolicy.",
        ),
        click.option("--timeout", "timeout_s", type=int, help="timeoutSeconds of a whole run."),
        click.option("--description", help="description."),
    ],
)


def _body(state: State, name: str | None, spec_file: str | None, **flags: Any) -> dict[str, Any]:
    spec = load_spec(spec_file, state.stdin()) if spec_file else None
    overlap = flags["overlap"]
    body = build_body(
        "workflowName",
        name,
        spec,
        parse_sets(flags["sets"]),
        {
            "appName": flags["app_name"],
            "cron": flags["cron"],
            "timeZone": flags["time_zone"],
            "failFast": flags["fail_fast"],
            "misfire": flags["misfire"],
            "overlapPolicy": overlap.upper() if overlap else None,
            "timeoutSeconds": flags["timeout_s"],
            "description": flags["description"],
        },
    )
    for key in _SHOWN_ONLY:
        body.pop(key, None)
    return body


@workflow_group.command("add")
@click.argument("name", required=False)
@_workflow_fields
@click.pass_obj
def add_workflow(state: State, /, name: str | None, spec_file: str | None, **flags: Any) -> None:
    """Register a workflow from a file (-f) and/or flags.

    \b
    ejcloud workflow add -f nightly.yaml
    ejcloud workflow add nightly -f nodes.yaml --app demo_app --cron '0 0 2 * * ?'
    """
    body = _body(state, name, spec_file, **flags)
    state.client().call("POST", "/api/workflow", body=body)
    name = body["workflowName"]
    state.done(f"workflow {name} registered", action="registered", workflowName=name)


@workflow_group.command("update")
@click.argument("name", required=False)
@_workflow_fields
@click.pass_obj
def update_workflow(state: State, /, name: str | None, spec_file: str | None, **flags: Any) -> None:
    """Change a workflow; the fields not given keep their values (runs in flight keep theirs).

    The server takes the whole definition, so the fields given are laid over the current one
    (read first); a file's `nodes` replaces the whole list of nodes.
    """
    body = _body(state, name, spec_file, **flags)
    if len(body) < 2:
        raise UsageProblem("nothing to update: give fields with flags, --set or -f")
    client = state.client()
    current = client.call("GET", _base(body["workflowName"]))
    merged = {**(current if isinstance(current, dict) else {}), **body}
    for key in _SHOWN_ONLY:
        merged.pop(key, None)
    client.call("PUT", "/api/workflow", body=merged)
    name = body["workflowName"]
    state.done(f"workflow {name} updated", action="updated", workflowName=name)


def _simple_action(command: str, path: str, done: str, help_text: str) -> click.Command:
    @click.argument("name")
    @json_option
    @click.pass_obj
    def action(state: State, name: str) -> None:
        state.client().call("POST", f"{_base(name)}/{path}")
        state.done(f"workflow {name} {done}", action=done, workflowName=name)

    action.__doc__ = help_text
    return workflow_group.command(command)(action)


_simple_action("enable", "enable", "enabled", "Enable a workflow (its cron fires again).")
_simple_action(
    "disable",
    "disable",
    "disabled",
    "Disable a workflow: its cron no longer fires (runs in flight go on; cancel them apart).",
)


@workflow_group.command("delete")
@click.argument("name")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@json_option
@click.pass_obj
def delete_workflow(state: State, name: str, yes: bool) -> None:
    """Delete a workflow (its runs in flight are cancelled; the jobs stay)."""
    confirm(f"Delete workflow {name}?", yes)
    state.client().call("DELETE", _base(name))
    state.done(f"workflow {name} deleted", action="deleted", workflowName=name)


def _node_rows(run: Any) -> list[tuple[Any, ...]]:
    rows = []
    for node in objects(run.get("nodes") if isinstance(run, dict) else None):
        reason = node.get("reason")
        if isinstance(reason, str) and len(reason) > REASON_WIDTH:
            reason = reason[: REASON_WIDTH - 1] + "…"
        task_ids = node.get("taskIds")
        rows.append(
            (
                node.get("name"),
                node.get("state"),
                _when(node.get("startedAt")),
                _span(node.get("startedAt"), node.get("endedAt")),
                len(set(map(str, task_ids))) if isinstance(task_ids, list) else None,
                reason,
            )
        )
    return rows


def _render_run(run: Any) -> str:
    head = render_fields(
        [
            ("run", run.get("runId")),
            ("state", run.get("state")),
            ("fire time", _when(run.get("fireTime"))),
            ("started", _when(run.get("startedAt"))),
            ("duration", _span(run.get("startedAt"), run.get("endedAt"))),
        ]
    )
    rows = _node_rows(run)
    headers = ("NODE", "STATE", "START_UTC", "DURATION", "TASKS", "REASON")
    return head + "\n\n" + (render_table(headers, rows) if rows else "no nodes")


def _wait_for_end(state: State, name: str, run_id: str, timeout_s: float, poll_s: float) -> Any:
    """The run once its state is an ended one; CliError when `timeout_s` passes first."""
    deadline = time.monotonic() + timeout_s
    while True:
        run = state.client().call("GET", _run_path(name, run_id))
        if isinstance(run, dict) and run.get("state") in ENDED_RUN_STATES:
            return run
        if time.monotonic() >= deadline:
            current = run.get("state") if isinstance(run, dict) else None
            raise CliError(
                f"run {run_id} of workflow {name} is still {current or 'unknown'} after "
                f"{timeout_s:g} s (it goes on; see `ejcloud workflow run {name} {run_id}`)"
            )
        time.sleep(poll_s)


@workflow_group.command("trigger")
@click.argument("name")
@click.option(
    "--param",
    help="Job parameter for every node's shards in this run (overrides each job's jobParameter).",
)
@click.option("--wait", is_flag=True, help="Wait for the run to end; exit 1 unless it succeeded.")
@click.option(
    "--wait-timeout",
    type=click.FloatRange(1, 86400),
    default=600,
    show_default=True,
    help="Seconds to wait with --wait.",
)
@json_option
@click.pass_obj
def trigger_workflow(
    state: State, name: str, param: str | None, wait: bool, wait_timeout: float
) -> int:
    """Start a run of a workflow now (whatever its cron); prints the run id."""
    body = None if param is None else {"parameter": param}
    answer = state.client().call("POST", f"{_base(name)}/trigger", body=body)
    run_id = answer.get("runId") if isinstance(answer, dict) else None
    if not isinstance(run_id, str) or not run_id:
        raise ApiError(200, "the trigger's answer holds no runId", "UnexpectedAnswer")
    if not wait:
        state.done(
            f"workflow {name} triggered: run {run_id}",
            action="triggered",
            workflowName=name,
            runId=run_id,
        )
        return EXIT_OK
    run = _wait_for_end(state, name, run_id, wait_timeout, 1.0)
    state.show(run, lambda: _render_run(run))
    return EXIT_OK if run.get("state") == "succeeded" else EXIT_ERROR


@workflow_group.command("runs")
@click.argument("name")
@click.option(
    "-n",
    "--limit",
    type=click.IntRange(1, MAX_RUNS),
    default=20,
    show_default=True,
    help="How many runs (newest first).",
)
@json_option
@click.pass_obj
def list_runs(state: State, name: str, limit: int) -> None:
    """Show a workflow's recent runs: run id, fire time, state, start, duration."""
    found: list[Any] = []
    for item in paging.walk(state.client(), f"{_base(name)}/runs", min(limit, PAGE_SIZE)):
        found.append(item)
        if len(found) >= limit:
            break
    rows = [
        (
            r.get("runId"),
            _when(r.get("fireTime")),
            r.get("state"),
            _when(r.get("startedAt")),
            _span(r.get("startedAt"), r.get("endedAt")),
        )
        for r in objects(found)
    ]
    headers = ("RUN", "FIRE_TIME_UTC", "STATE", "START_UTC", "DURATION")
    state.show_table(found, headers, rows, f"no runs of workflow {name}")


@workflow_group.command("run")
@click.argument("name")
@click.argument("run_id")
@json_option
@click.pass_obj
def show_run(state: State, name: str, run_id: str) -> None:
    """Show one run: its state and each node's state, start, duration, tasks and reason.

    The nodes' task ids are in --json (`taskIds`); `ejcloud logs TASK_ID` prints one's output.
    """
    run = state.client().call("GET", _run_path(name, run_id))
    state.show(run, lambda: _render_run(run))


@workflow_group.command("cancel")
@click.argument("name")
@click.argument("run_id")
@json_option
@click.pass_obj
def cancel_run(state: State, name: str, run_id: str) -> None:
    """Cancel a run: its running nodes are killed and the rest never start."""
    state.client().call("POST", f"{_run_path(name, run_id)}/cancel")
    state.done(
        f"run {run_id} of workflow {name} cancelled",
        action="cancelled",
        workflowName=name,
        runId=run_id,
    )


@workflow_group.command("retry")
@click.argument("name")
@click.argument("run_id")
@json_option
@click.pass_obj
def retry_run(state: State, name: str, run_id: str) -> None:
    """Run a failed run's failed and skipped nodes again (nothing that succeeded)."""
    state.client().call("POST", f"{_run_path(name, run_id)}/retry")
    state.done(
        f"run {run_id} of workflow {name} retried",
        action="retried",
        workflowName=name,
        runId=run_id,
    )


@workflow_group.command("mark-success")
@click.argument("name")
@click.argument("run_id")
@click.argument("node")
@json_option
@click.pass_obj
def mark_success(state: State, name: str, run_id: str, node: str) -> None:
    """Count a node of a run as succeeded, so that its children go on."""
    state.client().call("POST", f"{_run_path(name, run_id)}/nodes/{segment(node)}/mark-success")
    state.done(
        f"node {node} of run {run_id} marked succeeded",
        action="marked-success",
        workflowName=name,
        runId=run_id,
        node=node,
    )


# -- backfills (issue 28): a workflow's past cron fires, one run each ---------------------------


@workflow_group.command("backfill")
@click.argument("name")
@backfill_options("workflow")
@json_option
@click.pass_obj
def start_backfill(
    state: State,
    name: str,
    start: str,
    end: str,
    rate: float | None,
    overlap_policy: str | None,
    dry_run: bool,
) -> None:
    """Run NAME's cron fires between --from and --to (a past range), one run each, in order.

    \b
    ejcloud workflow backfill nightly --from 2026-11-23T00:00:00Z --to 2026-11-24T12:00:00Z
    """
    body = backfill_body(start, end, rate, overlap_policy, dry_run)
    answer = state.client().call("POST", f"{_base(name)}/backfill", body=body)
    report_started(state, "workflow", name, answer, dry_run)


@workflow_group.command("backfills")
@click.argument("name")
@json_option
@click.pass_obj
def list_backfills(state: State, name: str) -> None:
    """List NAME's backfills, newest first: id, status, fires, runs made, outcome, range."""
    found = list(paging.walk(state.client(), f"{_base(name)}/backfills", PAGE_SIZE))
    rows = [
        (
            b.get("backfillId"),
            b.get("status"),
            b.get("fires"),
            b.get("launched"),
            f"{b.get('succeeded')}/{b.get('failed')}/{b.get('hadRun')}",
            b.get("from"),
            b.get("to"),
        )
        for b in objects(found)
    ]
    headers = ("ID", "STATUS", "FIRES", "LAUNCHED", "OK/FAILED/HAD_RUN", "FROM", "TO")
    state.show_table(found, headers, rows, f"no backfills of workflow {name}")


def _backfill_action(command: str, path: str, done: str, help_text: str) -> click.Command:
    @click.argument("name")
    @click.argument("backfill_id", metavar="ID")
    @json_option
    @click.pass_obj
    def action(state: State, name: str, backfill_id: str) -> None:
        answer = state.client().call(
            "POST", f"{_base(name)}/backfills/{segment(backfill_id)}/{path}"
        )
        report_action(state, "workflow", name, backfill_id, answer, path, done)

    action.__doc__ = help_text
    return workflow_group.command(command)(action)


_backfill_action(
    "backfill-pause", "pause", "paused", "Pause a backfill: no more runs until it is resumed."
)
_backfill_action(
    "backfill-resume", "resume", "resumed", "Resume a paused backfill from its next fire."
)
_backfill_action(
    "backfill-cancel",
    "cancel",
    "cancelled",
    "Cancel a backfill: no more runs (those running end as they do).",
)

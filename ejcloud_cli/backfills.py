"""`ejcloud job backfill ...`: run a job's fires of a past range, and follow those backfills.

backfill starts one (`POST /api/job/{job}/backfill`; `--dry-run` lists the fires and records
nothing), backfills lists a job's, backfill-show shows one, and backfill-pause, backfill-resume
and backfill-cancel act on one (`/api/job/{job}/backfills/{id}/...`). They are commands of the
`job` group (`BACKFILL_COMMANDS`, added there), named `backfill-*` rather than a sub-group
because `job backfill JOB --from ... --to ...` is itself the command that starts one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

import click

from ejcloud_cli import paging
from ejcloud_cli.context import State, json_option, segment
from ejcloud_cli.errors import ApiError, UsageProblem
from ejcloud_cli.output import cell, format_time, objects, ordered_fields, render_fields
from ejcloud_cli.paging import PAGE_SIZE

# The server lists at most this many fire times in an answer (the rest are counted in `fires`).
FIRE_TIMES_SHOWN = 100
_FIELD_ORDER = (
    "backfillId",
    "jobName",
    "status",
    "fires",
    "launched",
    "nextFireTime",
    "from",
    "to",
    "firesPerMinute",
    "overlapPolicy",
    "excludedFires",
    "succeeded",
    "failed",
    "createdAt",
    "lastLaunchedAt",
    "endedAt",
)
_NOT_FIELDS = ("fireTimes", "nextIndex")
_OVERLAP = click.Choice(["FORBID", "ALLOW", "REPLACE"], case_sensitive=False)
_F = TypeVar("_F", bound=Callable[..., Any])


def _base(job: str) -> str:
    return f"/api/job/{segment(job)}"


def _when(value: Any) -> str:
    """A time the server wrote (with its offset) as it wrote it; `-` for none."""
    return cell(value) if isinstance(value, str) else format_time(value)


def _fire_lines(answer: dict[str, Any]) -> list[str]:
    times = answer.get("fireTimes")
    shown = [_when(t) for t in times] if isinstance(times, list) else []
    total = answer.get("fires")
    if isinstance(total, int) and not isinstance(total, bool) and total > len(shown):
        shown.append(f"... and {total - len(shown)} more")
    return shown


def _answer_object(answer: Any, what: str) -> dict[str, Any]:
    if not isinstance(answer, dict):
        raise ApiError(200, f"the answer to {what} is not an object", "UnexpectedAnswer")
    return answer


def backfill_options(what: str) -> Callable[[_F], _F]:
    """The options of a backfill's start (a job's or a workflow's: `what` runs, "job" or
    "workflow", named in the help): --from, --to, --rate, --overlap-policy, --dry-run."""

    def apply(command: _F) -> _F:
        for option in reversed(
            (
                click.option(
                    "--from",
                    "start",
                    required=True,
                    metavar="ISO",
                    help="First instant of the range, with its offset: 2026-11-23T00:00:00Z "
                    "(inclusive).",
                ),
                click.option(
                    "--to",
                    "end",
                    required=True,
                    metavar="ISO",
                    help="Last instant of the range, with its offset, not in the future "
                    "(inclusive).",
                ),
                click.option(
                    "--rate",
                    type=click.FloatRange(0.01, 600),
                    metavar="FIRES_PER_MINUTE",
                    help="Launch at most this many fires a minute (0.01 to 600; default: one "
                    "after the other, as fast as the overlap policy allows).",
                ),
                click.option(
                    "--overlap-policy",
                    type=_OVERLAP,
                    help=f"How a fire meets the {what}'s run still going (default: the {what}'s "
                    "own overlapPolicy).",
                ),
                click.option(
                    "--dry-run",
                    is_flag=True,
                    help="List the fires (count and the first 100); record nothing.",
                ),
            )
        ):
            command = option(command)
        return command

    return apply


@click.command("backfill")
@click.argument("job")
@backfill_options("job")
@json_option
@click.pass_obj
def start_backfill(
    state: State,
    job: str,
    start: str,
    end: str,
    rate: float | None,
    overlap_policy: str | None,
    dry_run: bool,
) -> None:
    """Run the fires of JOB's cron between --from and --to (a past range), in order, once each.

    \b
    ejcloud job backfill nightly --from 2026-11-23T00:00:00Z --to 2026-11-24T12:00:00Z --dry-run
    ejcloud job backfill nightly --from 2026-11-23T00:00:00+01:00 --to 2026-11-24T12:00:00+01:00 \\
        --rate 2 --overlap-policy FORBID
    """
    body = backfill_body(start, end, rate, overlap_policy, dry_run)
    answer = state.client().call("POST", f"{_base(job)}/backfill", body=body)
    report_started(state, "job", job, answer, dry_run)


def backfill_body(
    start: str, end: str, rate: float | None, overlap_policy: str | None, dry_run: bool
) -> dict[str, Any]:
    """The body of `POST .../backfill` (a job's or a workflow's) from the command's options."""
    if rate is not None and not math.isfinite(rate):
        raise UsageProblem("--rate must be a number of fires per minute")
    body: dict[str, Any] = {"from": start, "to": end}
    if rate is not None:
        body["firesPerMinute"] = rate
    if overlap_policy is not None:
        body["overlapPolicy"] = overlap_policy.upper()
    if dry_run:
        body["dryRun"] = True
    return body


def report_started(state: State, kind: str, name: str, answer: Any, dry_run: bool) -> None:
    """What a backfill's start (or dry run) of job or workflow (`kind`) `name` answered."""
    found = _answer_object(answer, "the backfill")
    fires = found.get("fires")
    excluded = found.get("excludedFires")
    excluded_note = f" ({excluded} excluded by the {kind}'s calendars)" if excluded else ""
    if dry_run:
        head = f"{kind} {name}: {cell(fires)} fires{excluded_note}; dry run, nothing was recorded"
        state.show(found, lambda: "\n".join([head, *_fire_lines(found)]))
        return
    backfill_id = found.get("backfillId")
    if not isinstance(backfill_id, str) or not backfill_id:
        raise ApiError(200, "the backfill's answer holds no backfillId", "UnexpectedAnswer")
    state.done(
        f"backfill {backfill_id} of {kind} {name} started: {cell(fires)} fires{excluded_note}",
        action="backfill-started",
        **{f"{kind}Name": name},
        backfillId=backfill_id,
        fires=fires,
    )


@click.command("backfills")
@click.argument("job")
@json_option
@click.pass_obj
def list_backfills(state: State, job: str) -> None:
    """List JOB's backfills, newest first: id, status, fires, launched, range, creation time."""
    found = list(paging.walk(state.client(), f"{_base(job)}/backfills", PAGE_SIZE))
    rows = [
        (
            b.get("backfillId"),
            b.get("status"),
            b.get("fires"),
            b.get("launched"),
            _when(b.get("from")),
            _when(b.get("to")),
            format_time(b.get("createdAt")) if b.get("createdAt") else None,
        )
        for b in objects(found)
    ]
    headers = ("ID", "STATUS", "FIRES", "LAUNCHED", "FROM", "TO", "CREATED_UTC")
    state.show_table(found, headers, rows, f"no backfills of job {job}")


@click.command("backfill-show")
@click.argument("job")
@click.argument("backfill_id", metavar="ID")
@json_option
@click.pass_obj
def show_backfill(state: State, job: str, backfill_id: str) -> None:
    """Show one backfill of JOB: its status, progress, range and its first 100 fire times."""
    answer = state.client().call("GET", f"{_base(job)}/backfills/{segment(backfill_id)}")
    found = _answer_object(answer, "the backfill")
    # nextIndex is `launched` again; the fire times are listed below the fields.
    fields = [(k, v) for k, v in ordered_fields(found, _FIELD_ORDER) if k not in _NOT_FIELDS]
    state.show(
        found,
        lambda: render_fields(fields) + "\n\nfire times:\n" + "\n".join(_fire_lines(found)),
    )


def report_action(
    state: State, kind: str, name: str, backfill_id: str, answer: Any, path: str, done: str
) -> None:
    """What pausing, resuming or cancelling (`path`) a backfill of job or workflow (`kind`)
    `name` answered."""
    status = answer.get("status") if isinstance(answer, dict) else None
    state.done(
        f"backfill {backfill_id} of {kind} {name} {done}"
        + (f" (status {cell(status)})" if status else ""),
        action=f"backfill-{path}",
        **{f"{kind}Name": name},
        backfillId=backfill_id,
        status=status,
    )


def _action(command: str, path: str, done: str, help_text: str) -> click.Command:
    @click.argument("job")
    @click.argument("backfill_id", metavar="ID")
    @json_option
    @click.pass_obj
    def action(state: State, job: str, backfill_id: str) -> None:
        answer = state.client().call(
            "POST", f"{_base(job)}/backfills/{segment(backfill_id)}/{path}"
        )
        report_action(state, "job", job, backfill_id, answer, path, done)

    action.__doc__ = help_text
    return click.command(command)(action)


@click.command("backfill-cancel")
@click.argument("job")
@click.argument("backfill_id", metavar="ID")
@click.option(
    "--kill-running", is_flag=True, help="Also kill the tasks of its fires still running."
)
@json_option
@click.pass_obj
def cancel_backfill(state: State, job: str, backfill_id: str, kill_running: bool) -> None:
    """Cancel a backfill: none of its fires launch any more; the runs of those launched end as
    they do (or are killed, with --kill-running)."""
    answer = state.client().call(
        "POST",
        f"{_base(job)}/backfills/{segment(backfill_id)}/cancel",
        body={"killRunning": True} if kill_running else None,
    )
    report_action(state, "job", job, backfill_id, answer, "cancel", "cancelled")


BACKFILL_COMMANDS = (
    start_backfill,
    list_backfills,
    show_backfill,
    _action(
        "backfill-pause",
        "pause",
        "paused",
        "Pause a backfill: no more of its fires launch until it is resumed (runs going on end).",
    ),
    _action(
        "backfill-resume",
        "resume",
        "resumed",
        "Resume a paused backfill: its fires launch again from the next one.",
    ),
    cancel_backfill,
)
"""The commands `jobs.job_group` adds."""

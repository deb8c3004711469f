"""`ejcloud runs JOB` (a job's recent runs) and `ejcloud logs TASK_ID` (one run's output).

Runs come from `GET /api/job/{job}/runs?limit=&before=`, a list of runs (or an object holding
it under `runs`/`items`/`data`); each run's fields are read under the names the API uses
(`taskId`, `shardingItem`, `fireTime`, `state`, `startTime`, `endTime`, `reason`) or their
common alternatives, and times may be ISO 8601 or epoch numbers. Logs come from
`GET /api/job/{job}/runs/{taskId}/log?stream=&offset=&length=`, which answers as a Mesos agent's
`/files/read` does: `{"data": "...", "offset": N}` with N the offset of `data` in the file, plus
`nextOffset`, where the next read starts (without it: N plus the UTF-8 length of `data`).
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import click

from ejcloud_cli.client import ApiClient
from ejcloud_cli.context import State, json_option, segment
from ejcloud_cli.errors import ApiError, UsageProblem
from ejcloud_cli.output import format_duration, format_time, objects, parse_time

TASK_ID_SEPARATOR = "@-@"
LOG_CHUNK_BYTES = 64 * 1024
REASON_WIDTH = 80
MAX_RUNS = 1000
# What a terminal would act on rather than show: C0 controls but newline and tab, DEL and the C1
# controls (U+0080-U+009F, among them the one-character CSI and OSC). Escaping ESC disarms every
# escape sequence (colours, cursor moves, title changes, OSC 52 clipboard writes).
_TERMINAL_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_KEYS: dict[str, tuple[str, ...]] = {
    "task_id": ("taskId", "id", "task_id"),
    "shard": ("shardingItem", "shard", "item", "shardingItems"),
    "fire_time": ("fireTime", "fire", "firedAt"),
    "state": ("state", "status", "result"),
    "start": ("startTime", "start", "startedAt"),
    "end": ("endTime", "end", "endedAt", "completeTime"),
    "reason": ("reason", "failureCause", "message"),
    "backfill_id": ("backfillId",),
}


@dataclass(frozen=True)
class Run:
    """One run as the runs endpoint described it (any field may be missing: None)."""

    task_id: Any
    shard: Any
    fire_time: Any
    state: Any
    start: Any
    end: Any
    reason: Any
    backfill_id: Any = None
    """The backfill the run belongs to (issue 28), None for a cron fire's or a trigger's."""

    def duration_s(self) -> float | None:
        start, end = parse_time(self.start), parse_time(self.end)
        if start is None or end is None:
            return None
        return (end - start).total_seconds()

    def row(self) -> tuple[Any, ...]:
        shard = self.shard
        if isinstance(shard, list):
            shard = ",".join(str(s) for s in shard)
        reason = self.reason
        if isinstance(reason, str) and len(reason) > REASON_WIDTH:
            reason = reason[: REASON_WIDTH - 1] + "…"
        return (
            self.task_id,
            shard,
            format_time(self.fire_time) if self.fire_time is not None else None,
            self.state,
            format_time(self.start) if self.start is not None else None,
            format_duration(self.duration_s()),
            self.backfill_id,
            reason,
        )


RUN_HEADERS = (
    "TASK",
    "SHARD",
    "FIRE_UTC",
    "STATE",
    "START_UTC",
    "DURATION",
    "BACKFILL",
    "REASON",
)


def parse_runs(data: Any) -> list[Run]:
    """The runs in an answer of the runs endpoint; ApiError when it holds no list of runs."""
    items = data
    if isinstance(data, dict):
        items = next(
            (data[k] for k in ("runs", "items", "data") if isinstance(data.get(k), list)), None
        )
    if not isinstance(items, list):
        raise ApiError(200, "the answer holds no list of runs", "UnexpectedAnswer")
    return [
        Run(**{name: _first(item, keys) for name, keys in _KEYS.items()}) for item in objects(items)
    ]


def _first(item: dict[str, Any], keys: Sequence[str]) -> Any:
    return next((item[k] for k in keys if item.get(k) is not None), None)


@click.command("runs")
@click.argument("job")
@click.option(
    "-n",
    "--limit",
    type=click.IntRange(1, MAX_RUNS),
    default=20,
    show_default=True,
    help="How many runs.",
)
@click.option("--before", help="Only runs before this (a time or a task id, as the server takes).")
@json_option
@click.pass_obj
def runs_command(state: State, job: str, limit: int, before: str | None) -> None:
    """Show a job's recent runs: task, shard, the fire each ran for, state, start, duration,
    the backfill it belongs to (if any), reason."""
    query: dict[str, str | int] = {"limit": limit}
    if before:
        query["before"] = before
    data = state.client().call("GET", f"/api/job/{segment(job)}/runs", query=query)
    runs = parse_runs(data)
    state.show_table(data, RUN_HEADERS, [r.row() for r in runs], f"no runs of job {job}")


@dataclass(frozen=True)
class LogChunk:
    data: str
    offset: int
    next_offset: int | None = None

    @property
    def end(self) -> int:
        """The offset right after this chunk: the server's `nextOffset` (it differs from the
        UTF-8 length of `data` when the file held bytes that are not UTF-8), else computed."""
        if self.next_offset is not None:
            return self.next_offset
        return self.offset + len(self.data.encode("utf-8", "surrogatepass"))


def parse_log_chunk(data: Any) -> LogChunk:
    """`{"data": str, "offset": int}`; ApiError for anything else."""
    if isinstance(data, dict):
        text, offset, following = data.get("data"), data.get("offset"), data.get("nextOffset")
        if isinstance(text, str) and isinstance(offset, int) and not isinstance(offset, bool):
            if not isinstance(following, int) or isinstance(following, bool) or following < offset:
                following = None
            return LogChunk(text, offset, following)
    raise ApiError(200, "the answer is not {data, offset} as a log read", "UnexpectedAnswer")


class LogReader:
    """Reads one stream of one run from `offset` on, a chunk at a time."""

    def __init__(self, client: ApiClient, job: str, task_id: str, stream: str) -> None:
        self._client = client
        self._path = f"/api/job/{segment(job)}/runs/{segment(task_id)}/log"
        self._stream = stream
        self.task_id = task_id
        self.offset = 0

    def read(self) -> str:
        """The next chunk ("" at the end of what is written so far)."""
        chunk = parse_log_chunk(
            self._client.call(
                "GET",
                self._path,
                query={"stream": self._stream, "offset": self.offset, "length": LOG_CHUNK_BYTES},
            )
        )
        if not chunk.data:
            return ""
        if chunk.end <= self.offset:
            raise ApiError(200, f"the log read went back to offset {chunk.offset}", "BadOffset")
        self.offset = chunk.end
        return chunk.data

    def drain(self, write: Callable[[str], None]) -> None:
        """Write every chunk written so far."""
        while text := self.read():
            write(text)

    def task_running(self) -> bool:
        running = self._client.call("GET", "/api/job/tasks/running")
        return any(t.get("id") == self.task_id for t in objects(running))


def escape_controls(text: str) -> str:
    """`text` as a terminal may show it: every control character but newline and tab written as
    `\\xNN` (ESC becomes the four characters `\\x1b`), so job output cannot drive the terminal."""
    return _TERMINAL_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def job_of_task(task_id: str) -> str:
    """The job name a task id starts with (`{job}@-@{item}@-@...`); UsageProblem otherwise."""
    job, sep, _ = task_id.partition(TASK_ID_SEPARATOR)
    if not sep or not job:
        raise UsageProblem(
            f"{task_id!r} is not a task id (job@-@item@-@...); give the job with --job"
        )
    return job


@click.command("logs")
@click.argument("task_id")
@click.option("--stderr", "use_stderr", is_flag=True, help="The run's stderr instead of stdout.")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new output until the run ends.")
@click.option("--job", help="The job (default: the start of the task id).")
@click.option(
    "--interval",
    type=click.FloatRange(0.1, 60),
    default=1.0,
    show_default=True,
    help="Seconds between reads with --follow.",
)
@click.option(
    "--raw",
    is_flag=True,
    help="Write the output as it is, control sequences included (only for output you trust).",
)
@click.pass_obj
def logs_command(
    state: State,
    task_id: str,
    use_stderr: bool,
    follow: bool,
    job: str | None,
    interval: float,
    raw: bool,
) -> None:
    """Print a run's output (the task id is in `ejcloud runs JOB`).

    Control characters other than newline and tab are shown escaped (`\\x1b`) unless `--raw`:
    a job's output could otherwise set the terminal's title, write its clipboard (OSC 52) or
    hide lines."""
    reader = LogReader(
        state.client(), job or job_of_task(task_id), task_id, "stderr" if use_stderr else "stdout"
    )

    out = sys.stdout.buffer

    def write(text: str) -> None:
        # Not click.echo: it would strip colour codes off a pipe even with --raw.
        shown = text if raw else escape_controls(text)
        out.write(shown.encode("utf-8", "replace"))
        out.flush()

    reader.drain(write)
    while follow:
        # Whether the task still runs is asked before the last read, so nothing written
        # between that read and the task's end is missed.
        running = reader.task_running()
        reader.drain(write)
        if not running:
            return
        time.sleep(interval)

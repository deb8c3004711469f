"""`ejcloud job add -f FILE` with a file of many jobs (issue 29): a JSON or YAML list of jobs,
or `{"jobs": [...]}`, registered through `POST /api/job/register-many` in batches.

A batch holds at most 1,000 jobs and at most `MAX_BATCH_BODY_BYTES` of JSON (under the server's
default `http_max_body_bytes`, 1 MiB). The server registers a batch all or none; one it refuses
as too large (413: more than one ZooKeeper transaction holds) is split in halves and sent again.
Any other refusal stops: the error names the refused jobs by their index in the file, and says
how many the earlier batches registered (those stay registered).
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator, Sequence
from typing import IO, Any

import click
import yaml

from ejcloud_cli.client import error_of
from ejcloud_cli.context import State
from ejcloud_cli.errors import ApiError, UsageProblem
from ejcloud_cli.specs import load_spec, read_bounded

__all__ = ["MAX_BATCH_BODY_BYTES", "MAX_BATCH_JOBS", "add_many", "read_jobs", "register_jobs"]

MAX_FILE_BYTES = 256 * 1024 * 1024
MAX_BATCH_JOBS = 1000
MAX_BATCH_BODY_BYTES = 900_000
_ROUTE = "/api/job/register-many"
_LISTED = 10


def read_jobs(source: str, stdin: IO[bytes]) -> list[dict[str, Any]] | dict[str, Any] | None:
    """The jobs of the file `source` (`-`: `stdin`) when it holds many (a list of objects, or an
    object whose only field is `jobs`). Otherwise it is read as `specs.load_spec` reads one job
    (with its checks and messages): the job for stdin, None for a file (`load_spec` reads it).
    JSON when the name ends in `.json` or the text starts with `{` or `[`, else YAML.
    UsageProblem naming the file."""
    name = "stdin" if source == "-" else source
    raw = read_bounded(source, stdin, MAX_FILE_BYTES)
    data = _parsed(source, raw)
    if isinstance(data, dict) and set(data) == {"jobs"}:
        data = data["jobs"]
        if not isinstance(data, list) or not data:
            raise UsageProblem(f"{name}: jobs must be a list of at least one job")
    if not isinstance(data, list):
        # One job (or something load_spec explains): read as one job always was.
        return load_spec("-", io.BytesIO(raw)) if source == "-" else None
    if not data:
        raise UsageProblem(f"{name} holds an empty list: no job to register")
    for index, item in enumerate(data):
        if not isinstance(item, dict):
            raise UsageProblem(f"{name}: job #{index} is not an object (field: value)")
    return data


def _parsed(source: str, raw: bytes) -> Any:
    """The file's JSON or YAML; None when it does not parse (load_spec then says why)."""
    try:
        text = raw.decode("utf-8-sig")
        if source.lower().endswith(".json") or text.lstrip()[:1] in ("{", "["):
            return json.loads(text)
        return yaml.safe_load(text)
    except (UnicodeDecodeError, ValueError, yaml.YAMLError):
        return None


def add_many(
    state: State, jobs: Sequence[dict[str, Any]], source: str, name: str | None, flags: Any
) -> None:
    """`job add -f FILE` of a file of many jobs: no name or field flags (they are one job's)."""
    given = [key for key, value in flags.items() if value not in (None, ())]
    if name is not None or given:
        raise UsageProblem(
            f"{source} holds {len(jobs)} jobs: a name and field flags apply to one job; put the "
            "fields in the file"
        )
    count = register_jobs(state, jobs, "stdin" if source == "-" else source)
    state.done(f"{count} jobs registered", action="registered", count=count)


def register_jobs(state: State, jobs: Sequence[dict[str, Any]], name: str) -> int:
    """Register `jobs` in batches; the count registered. Raises ApiError for a batch the server
    refuses (the earlier batches stay registered: the message says how many), UsageProblem for
    a job that is no JSON or alone larger than a request may be."""
    client = state.client()
    encoded = [_encoded(job, index, name) for index, job in enumerate(jobs)]
    registered = 0
    pending = list(_batches(encoded, 0))
    while pending:
        first, batch = pending.pop(0)
        body = b'{"jobs":[' + b",".join(batch) + b"]}"
        answer = client.send("POST", _ROUTE, data=body)
        if answer.status == 413 and len(batch) > 1:
            half = len(batch) // 2  # nothing was written: send it again in halves
            pending[:0] = [(first, batch[:half]), (first + half, batch[half:])]
            continue
        if answer.status >= 400:
            raise _refused(answer, first, len(batch), registered, len(jobs))
        registered += len(batch)
        if len(jobs) > MAX_BATCH_JOBS:
            click.echo(f"{registered} of {len(jobs)} jobs registered", err=True)
    return registered


def _encoded(job: dict[str, Any], index: int, name: str) -> bytes:
    try:
        text = json.dumps(job, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise UsageProblem(
            f"{name}: job #{index} holds a value that is no JSON (a YAML date, say: quote it)"
        ) from exc
    data = text.encode("utf-8")
    if len(data) > MAX_BATCH_BODY_BYTES:
        raise UsageProblem(f"{name}: job #{index} takes {len(data)} bytes, too large to send")
    return data


def _batches(encoded: list[bytes], offset: int) -> Iterator[tuple[int, list[bytes]]]:
    """(index of the first job, its jobs) of at most MAX_BATCH_JOBS jobs and
    MAX_BATCH_BODY_BYTES of body each, in order."""
    batch: list[bytes] = []
    size = 0
    first = offset
    for index, data in enumerate(encoded, start=offset):
        if batch and (len(batch) >= MAX_BATCH_JOBS or size + len(data) + 1 > MAX_BATCH_BODY_BYTES):
            yield first, batch
            batch, size, first = [], 0, index
        batch.append(data)
        size += len(data) + 1
    if batch:
        yield first, batch


def _refused(answer: Any, first: int, count: int, registered: int, total: int) -> ApiError:
    """The error of a refused batch: its jobs by their index in the file."""
    error = error_of(answer)
    try:
        body = json.loads(answer.body)
    except ValueError:
        body = None
    listed = body.get("jobs") if isinstance(body, dict) else None
    before = (
        f"the {registered} jobs before it (#0 to #{first - 1}) were registered"
        if registered
        else "no job was registered"
    )
    head = f"jobs #{first} to #{first + count - 1} refused, none of them registered; {before}"
    lines: list[str] = []
    if isinstance(listed, list) and listed:
        for item in listed:
            if not isinstance(item, dict) or not isinstance(item.get("index"), int):
                continue
            at = first + int(item["index"])
            label = f"#{at}" + (f" '{item['jobName']}'" if item.get("jobName") else "")
            lines.append(f"{label}: {item.get('error')}")
        shown = "; ".join(lines[:_LISTED])
        more = f"; and {len(lines) - _LISTED} more" if len(lines) > _LISTED else ""
        message = f"{head}. {len(lines)} refused: {shown}{more}"
    else:
        message = f"{head}: {error.message}"
    message += f" ({total - registered} of the {total} jobs not registered)"
    return ApiError(error.status, message, error.kind)

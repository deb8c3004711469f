"""The worker: one run of one task's job, in its own process (`main`, with `--result-fd N`).

The executor (`executor/process.py`) starts it in a new session (so its process group holds
the job and anything the job starts) with the app directory as cwd. The contract:

- stdin: one line of JSON, `{"taskData": <TaskInfo.data, base64>, "appDir": <path>}`. stdin
  then stays open for the worker's life; end-of-file means the executor is gone, and the worker
  SIGKILLs its own process group, so a crashed executor never leaves job processes behind.
- fd N: at the end, one JSON document (at most `MAX_RESULT_BYTES`, so writing it never blocks
  on a full pipe): `{"success": bool, "summary": str, "failureCause": str, "detail": {...}}`.
  `summary` is one line for TaskStatus.message (the exception type and message and where it
  was raised, or the script's exit status); `failureCause` is the traceback.
- SIGTERM raises `JobStopped` in the job's thread, so its `finally` blocks and context
  managers run; the executor SIGKILLs the group after its grace period.
- Exit status: 0 the job succeeded, 1 it failed, 2 the request was bad, 143 stopped by SIGTERM.

Job output goes to the inherited stdout/stderr: the task's own `stdout` and `stderr` files in
the sandbox (or the executor's, outside Mesos). A failed run's traceback is written to stderr too.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from .context import JobContext
from .jobs import (
    JobLoadError,
    describe_exit,
    load_dataflow,
    load_simple,
    run_dataflow,
    run_script,
)
from .taskdata import TaskData, TaskDataError

log = logging.getLogger(__name__)

MAX_RESULT_BYTES = 32 * 1024
_MAX_SUMMARY_CHARS = 1000
_MAX_CAUSE_CHARS = 8000
EXIT_SUCCESS = 0
EXIT_FAILED = 1
EXIT_BAD_REQUEST = 2
EXIT_STOPPED = 128 + signal.SIGTERM
_STDIN_FD = 0


class JobStopped(BaseException):
    """Raised in the job by SIGTERM.

    A BaseException, so that job code's `except Exception` does not swallow the stop (RQ's
    `ShutDownImminentException` makes the same choice for the same reason).
    """


@dataclass(frozen=True)
class RunResult:
    success: bool
    summary: str = ""
    failure_cause: str = ""
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "success": self.success,
            "summary": self.summary,
            "failureCause": self.failure_cause,
            "detail": self.detail,
        }

    def encode(self) -> bytes:
        """The result document, trimmed to MAX_RESULT_BYTES."""
        summary = self.summary[:_MAX_SUMMARY_CHARS]
        cause = self.failure_cause[-_MAX_CAUSE_CHARS:]
        doc = {**self.to_json(), "summary": summary, "failureCause": cause}
        raw = json.dumps(doc, ensure_ascii=False).encode("utf-8")
        if len(raw) > MAX_RESULT_BYTES:
            doc = {**doc, "failureCause": cause[-1000:], "detail": {}}
            raw = json.dumps(doc, ensure_ascii=True).encode("utf-8")[:MAX_RESULT_BYTES]
        return raw


def run(data: TaskData, app_dir: str, stop: threading.Event) -> RunResult:
    """Run the job once for its shard, in this process. Only JobStopped escapes."""
    ctx = JobContext.from_task_data(data)
    job = data.job
    try:
        if job.job_type == "SIMPLE":
            load_simple(job.job_class)(ctx)
            return RunResult(True)
        if job.job_type == "DATAFLOW":
            outcome = run_dataflow(
                load_dataflow(job.job_class), ctx, streaming=job.streaming_process, stop=stop
            )
            return RunResult(True, detail={"batches": outcome.batches, "items": outcome.items})
        process = run_script(job.script_command_line, data.sharding, app_dir, os.environ)
        try:
            returncode = process.wait()
        except JobStopped:
            # The script's processes got the same SIGTERM (one process group); give them the
            # chance to exit before this worker does.
            process.wait()
            raise
        if returncode == 0:
            return RunResult(True, detail={"exitStatus": 0})
        summary = describe_exit(returncode, "script")
        return RunResult(False, summary, summary, {"exitStatus": returncode})
    except JobLoadError as exc:
        return RunResult(False, exc.message, _traceback_text(exc))
    except SystemExit as exc:
        # sys.exit() in job code ends the job, not the worker: 0 or None is a success.
        if exc.code in (0, None):
            return RunResult(True)
        summary = f"the job called sys.exit({exc.code!r})"
        return RunResult(False, summary, _traceback_text(exc))
    except Exception as exc:  # noqa: BLE001 - the job's failure is the result, not a crash
        return RunResult(False, summarize_exception(exc, app_dir), _traceback_text(exc))


def summarize_exception(exc: BaseException, app_dir: str = "") -> str:
    """`ValueError: bad row 7 (at jobs/simple.py:12 in run)`: the last traceback line + place."""
    text = traceback.format_exception_only(type(exc), exc)[-1].strip()
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return text
    last = frames[-1]
    filename = last.filename
    if app_dir:
        try:
            filename = str(Path(filename).resolve().relative_to(Path(app_dir).resolve()))
        except ValueError:
            pass
    return f"{text} (at {filename}:{last.lineno} in {last.name})"


def _traceback_text(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def _read_request_line(fd: int) -> bytes:
    """The first line of stdin, read unbuffered: the rest of stdin belongs to the watcher."""
    line = bytearray()
    while not line.endswith(b"\n"):
        chunk = os.read(fd, 1)
        if not chunk:
            break
        line += chunk
    return bytes(line)


def _watch_executor(fd: int) -> None:
    """Kill this process group when the executor goes away (stdin reaches end-of-file)."""

    def watch() -> None:
        # os.read, not sys.stdin: a thread blocked inside a buffered reader stalls (and then
        # aborts) the interpreter's shutdown.
        while os.read(fd, 4096):
            pass
        # The executor is gone: nothing it started may outlive it. SIGKILL reaches this process
        # too, so nothing runs after this line.
        os.killpg(0, signal.SIGKILL)

    # A daemon thread: it blocks in read() for the worker's whole life and cannot be joined;
    # the process ends when the run does.
    threading.Thread(target=watch, name="worker-executor-watch", daemon=True).start()


def _write_result(fd: int, result: RunResult) -> None:
    payload = result.encode()
    while payload:
        written = os.write(fd, payload)
        payload = payload[written:]
    os.close(fd)


def _parse_request(line: bytes) -> tuple[TaskData, str]:
    try:
        request = json.loads(line.decode("utf-8"))
    except ValueError as exc:
        raise TaskDataError(f"worker request is not JSON: {exc}") from exc
    if not isinstance(request, dict) or not isinstance(request.get("appDir"), str):
        raise TaskDataError("worker request: expected an object with taskData and appDir")
    return TaskData.decode(request.get("taskData")), request["appDir"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="executor.worker")
    parser.add_argument("--result-fd", type=int, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s [worker %(process)d %(threadName)s] %(name)s: "
        "%(message)s",
    )
    try:
        data, app_dir = _parse_request(_read_request_line(_STDIN_FD))
    except TaskDataError as exc:
        _write_result(args.result_fd, RunResult(False, str(exc), str(exc)))
        return EXIT_BAD_REQUEST
    _watch_executor(_STDIN_FD)

    stop = threading.Event()

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        stop.set()
        raise JobStopped()

    signal.signal(signal.SIGTERM, on_sigterm)
    sys.path.insert(0, app_dir)
    os.chdir(app_dir)
    # Job code of every type can tell the run it is for: its fire time, workflow run and
    # backfill (issues 27, 28); SCRIPT commands get the same variables from `run_script`.
    os.environ.update(data.sharding.run_environment())
    log.info("task %s: running %s job", data.sharding.task_id, data.job.job_type)
    try:
        result = run(data, app_dir, stop)
    except JobStopped:
        log.info("task %s: stopped by SIGTERM", data.sharding.task_id)
        _write_result(args.result_fd, RunResult(False, "stopped by SIGTERM"))
        return EXIT_STOPPED
    if result.success:
        log.info("task %s: succeeded", data.sharding.task_id)
    elif result.failure_cause and result.failure_cause != result.summary:
        # The traceback belongs in the run's own stderr, beside what the job printed.
        log.warning(
            "task %s: failed: %s\n%s",
            data.sharding.task_id,
            result.summary,
            result.failure_cause.rstrip(),
        )
    else:
        log.warning("task %s: failed: %s", data.sharding.task_id, result.summary)
    _write_result(args.result_fd, result)
    return EXIT_SUCCESS if result.success else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())

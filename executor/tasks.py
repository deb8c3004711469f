"""Task runners: one per Mesos task, each with its own thread; job code runs in worker processes.

- `TransientTask`: TASK_RUNNING (with the started record) once its worker process started, one
  worker run, then TASK_FINISHED, TASK_FAILED (message: the exception or exit status) or
  TASK_KILLED.
- `DaemonTask`: TASK_RUNNING once its scheduler started, then the job's cron runs in an APScheduler
  `BackgroundScheduler` owned by the task; each fire is one worker run, reported as
  TASK_RUNNING "BEGIN" and "COMPLETE" (every Nth run with sampling N > 0; a failed run is always
  reported, as "COMPLETE" with the failure in its record). Ends only with TASK_KILLED.

A kill stops the work first (SIGTERM to the worker's process group, SIGKILL after the grace
period) and reports TASK_KILLED only once the worker has been reaped. A run still going the
job's `timeoutSeconds` after it started is stopped the same way and fails with the message
`timed out after N s` (TASK_FAILED for a transient task; the "COMPLETE" record of a daemon run).

With a sandbox in the run environment, each task's workers write to files of the task's own,
`<sandbox>/tasks/<task id, path-safe>/stdout` and `stderr` (`records.task_output_dir`), and the
task's first TASK_RUNNING names them (`records.output_message`); without one (tests, a run
outside Mesos) they inherit the executor's stdout and stderr.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .process import WorkerExit, WorkerProcess
from .records import ExecutionRecord, output_message, task_output_dir
from .taskdata import TaskData

log = logging.getLogger(__name__)

__all__ = [
    "BEGIN",
    "COMPLETE",
    "DaemonTask",
    "RunEnvironment",
    "StatusReporter",
    "TaskRunner",
    "TransientTask",
    "new_runner",
]

BEGIN = "BEGIN"
COMPLETE = "COMPLETE"
KILLED_MESSAGE = "killed by the scheduler"


class StatusReporter(Protocol):
    """Sends a TaskStatus; must not raise (called from task threads)."""

    def report(
        self,
        task_id: str,
        state: str,
        message: str = "",
        record: ExecutionRecord | None = None,
    ) -> None: ...


@dataclass(frozen=True)
class RunEnvironment:
    """Where and how workers run on this agent."""

    app_dir: Path
    python: str
    worker_env: Mapping[str, str]
    hostname: str
    ip: str
    # The executor's sandbox, where each task gets its output files (None: no files of its own).
    sandbox: Path | None = None


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class TaskRunner(ABC):
    """One task. `start()` once; `request_kill()` from any thread; the owner joins it."""

    def __init__(
        self,
        task_id: str,
        raw_data: str,
        data: TaskData,
        env: RunEnvironment,
        reporter: StatusReporter,
        kill_grace_s: float,
    ) -> None:
        self.task_id = task_id
        self.data = data
        self._raw_data = raw_data
        self._env = env
        self._reporter = reporter
        self._kill_grace_s = kill_grace_s
        self._lock = threading.Lock()
        self._kill = threading.Event()
        self._terminal_sent = False
        self._kill_reason = KILLED_MESSAGE
        self.done = threading.Event()
        label = f"{data.sharding.job_name}-{data.sharding.sharding_item}"
        self._label = label
        self._output: tuple[Path, Path] | None = None
        self._running_message = ""
        self._thread = threading.Thread(target=self._main, name=f"exec-task-{label}")

    def start(self) -> None:
        self._thread.start()

    def request_kill(self, grace_s: float | None = None, reason: str = KILLED_MESSAGE) -> None:
        """Ask the task to stop; does not block. TASK_KILLED follows once the work stopped.

        `grace_s` shortens the SIGTERM-to-SIGKILL grace period (e.g. when the executor itself
        must be gone soon); `reason` is the TASK_KILLED message (the first one given wins).
        """
        if self.done.is_set():
            return
        with self._lock:
            if grace_s is not None:
                self._kill_grace_s = min(self._kill_grace_s, grace_s)
            if not self._kill.is_set():
                self._kill_reason = reason
                log.info("task %s: kill requested (%s)", self.task_id, reason)
                self._kill.set()
        self._on_kill()

    def join(self, timeout_s: float) -> bool:
        """Wait for the task's thread; False (and an ERROR log) if it is still alive."""
        if self._thread.ident is not None:
            self._thread.join(timeout_s)
        if self._thread.is_alive():
            log.error(
                "task %s: thread %s still alive after %.1fs",
                self.task_id,
                self._thread.name,
                timeout_s,
            )
            return False
        return True

    @property
    def kill_requested(self) -> bool:
        return self._kill.is_set()

    # -- for subclasses ------------------------------------------------------------------------

    @abstractmethod
    def _run(self) -> None:
        """The task's life on its own thread; ends by calling `_report_terminal`."""

    def _on_kill(self) -> None:  # noqa: B027 - optional hook, most runners need nothing
        """React to a kill request at once (on the caller's thread); must not block."""

    def _main(self) -> None:
        try:
            self._run()
        except Exception as exc:  # thread top: report, never die silently
            log.exception("task %s: executor error", self.task_id)
            self._report_terminal("TASK_FAILED", f"executor error: {type(exc).__name__}: {exc}")
        finally:
            if not self._terminal_sent:
                log.error("task %s: ended without a terminal update", self.task_id)
                self._report_terminal("TASK_FAILED", "executor error: the task ended unreported")
            self.done.set()

    def _report(self, state: str, message: str = "", record: ExecutionRecord | None = None) -> None:
        self._reporter.report(self.task_id, state, message, record)

    def _report_terminal(
        self, state: str, message: str = "", record: ExecutionRecord | None = None
    ) -> None:
        with self._lock:
            if self._terminal_sent:
                return
            self._terminal_sent = True
        log.info("task %s: %s %s", self.task_id, state, message)
        self._report(state, message, record)

    def _new_record(self) -> ExecutionRecord:
        ctx = self.data.sharding
        return ExecutionRecord.started(
            job_name=ctx.job_name,
            task_id=self.task_id,
            sharding_item=ctx.sharding_item,
            hostname=self._env.hostname,
            ip=self._env.ip,
            start_time_ms=now_ms(),
        )

    def _prepare_output(self) -> None:
        """Create the task's output folder in the sandbox (task thread, before any worker).

        On failure the workers write to the executor's own stdout and stderr, with a WARNING.
        """
        sandbox = self._env.sandbox
        if sandbox is None:
            return
        relative = task_output_dir(self.task_id)
        try:
            (sandbox / relative).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            log.warning("task %s: no output files of its own (%s)", self.task_id, exc)
            return
        self._output = (sandbox / relative / "stdout", sandbox / relative / "stderr")
        self._running_message = output_message(f"{relative}/stdout", f"{relative}/stderr")

    def _start_timeout(self, worker: WorkerProcess) -> RunTimeout | None:
        """Watch the run of `worker` for the job's `timeoutSeconds` (None: no limit)."""
        timeout_s = self.data.job.timeout_s
        if timeout_s <= 0:
            return None
        return RunTimeout(worker, timeout_s, self._kill_grace_s, self._label)

    def _spawn(self, run_name: str) -> WorkerProcess:
        return WorkerProcess.spawn(
            run_name,
            task_data=self._raw_data,
            app_dir=self._env.app_dir,
            python=self._env.python,
            env=self._env.worker_env,
            output=self._output,
        )


def _ended(record: ExecutionRecord, outcome: WorkerExit) -> ExecutionRecord:
    return record.finished(now_ms(), None if outcome.success else outcome.failure_cause)


class RunTimeout:
    """Stops a worker still running `timeout_s` after it started (the job's `timeoutSeconds`):
    SIGTERM to its process group, SIGKILL after `grace_s`, on a timer thread of its own."""

    def __init__(self, worker: WorkerProcess, timeout_s: int, grace_s: float, label: str) -> None:
        self.message = f"timed out after {timeout_s} s"
        self.fired = threading.Event()
        self._timer = threading.Timer(timeout_s, self._fire, args=(worker, grace_s))
        self._timer.name = f"exec-timeout-{label}"
        self._timer.daemon = True
        self._timer.start()

    def _fire(self, worker: WorkerProcess, grace_s: float) -> None:
        self.fired.set()
        log.warning("worker %s: %s; stopping it", worker.name, self.message)
        worker.terminate(grace_s)

    def stop(self) -> bool:
        """Cancel the timer (the run ended); True if it had fired. Waits for a firing timer."""
        self._timer.cancel()
        if self._timer.is_alive():
            self._timer.join()
        return self.fired.is_set()


class TransientTask(TaskRunner):
    """Runs the job once for the shard."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._worker: WorkerProcess | None = None
        self._killer: threading.Thread | None = None

    def _on_kill(self) -> None:
        with self._lock:
            if self._worker is not None and self._killer is None:
                self._start_killer(self._worker)

    def _start_killer(self, worker: WorkerProcess) -> None:
        """Called with the lock held."""
        self._killer = threading.Thread(
            target=worker.terminate, args=(self._kill_grace_s,), name=f"exec-kill-{self._label}"
        )
        self._killer.start()

    def _run(self) -> None:
        # No TASK_STARTING (as Elastic-Job-Cloud's executor): TASK_RUNNING follows within
        # milliseconds, and each update costs the leader a status write, a trace row and an
        # acknowledgement (issue 29).
        self._prepare_output()
        record = self._new_record()
        spawn_error = ""
        with self._lock:
            killed_before_start = self._kill.is_set()
            if not killed_before_start:
                try:
                    self._worker = self._spawn(self.task_id)
                except OSError as exc:
                    spawn_error = f"cannot start the job's worker process: {exc}"
        if killed_before_start:
            self._report_terminal("TASK_KILLED", self._kill_reason + " before it started")
            return
        if spawn_error:
            self._report_terminal(
                "TASK_FAILED", spawn_error, record.finished(now_ms(), spawn_error)
            )
            return
        worker = self._worker
        assert worker is not None
        self._report("TASK_RUNNING", self._running_message, record)
        timeout = self._start_timeout(worker)
        outcome = worker.wait()
        timed_out = timeout is not None and timeout.stop()
        with self._lock:
            killer = self._killer
        if killer is not None:
            killer.join()
        # A run that completed before the kill took effect did finish: say so.
        if outcome.success:
            self._report_terminal("TASK_FINISHED", "", _ended(record, outcome))
        elif timed_out and timeout is not None:
            cause = timeout.message
            self._report_terminal("TASK_FAILED", cause, record.finished(now_ms(), cause))
        elif self._kill.is_set():
            cause = self._kill_reason
            self._report_terminal("TASK_KILLED", cause, record.finished(now_ms(), cause))
        else:
            self._report_terminal("TASK_FAILED", outcome.summary, _ended(record, outcome))


class DaemonTask(TaskRunner):
    """Runs the job on its cron inside this executor until killed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stopping = False
        self._running = False  # a fire is running the job
        self._missed = False  # a fire came while running (kept only with misfire on)
        self._runs = 0
        self._worker: WorkerProcess | None = None
        self._cut_short: ExecutionRecord | None = None

    @property
    def runs(self) -> int:
        with self._lock:
            return self._runs

    def _run(self) -> None:
        self._prepare_output()
        try:
            scheduler = self._new_scheduler()
        except (ValueError, TypeError, LookupError) as exc:
            # The cron fields or zone are the task description's fault: TASK_ERROR, like
            # undecodable task data.
            self._report_terminal("TASK_ERROR", f"invalid cron for daemon job: {exc}")
            return
        scheduler.start()
        log.info(
            "task %s: daemon scheduled with %s (%s)",
            self.task_id,
            self.data.job.cron or self.data.job.cron_fields,
            self.data.job.time_zone or "local time",
        )
        try:
            self._report("TASK_RUNNING", self._running_message)
            self._kill.wait()
        finally:
            # Stop order: no new runs, cut the current run short, then stop the scheduler
            # (which joins its threads: the fire in progress returns once its worker is gone).
            with self._lock:
                self._stopping = True
                worker = self._worker
            if worker is not None:
                worker.terminate(self._kill_grace_s)
            scheduler.shutdown(wait=True)
        with self._lock:
            record = self._cut_short
        if record is not None:
            record = record.finished(now_ms(), self._kill_reason)
        self._report_terminal("TASK_KILLED", self._kill_reason, record)

    def _new_scheduler(self) -> Any:
        """A BackgroundScheduler with the job's trigger; raises ValueError for a bad cron/zone."""
        # apscheduler is imported here, so transient-only executors never load it.
        from zoneinfo import ZoneInfo

        from apscheduler.executors.pool import (  # type: ignore[import-untyped]
            ThreadPoolExecutor,
        )
        from apscheduler.schedulers.background import (  # type: ignore[import-untyped]
            BackgroundScheduler,
        )
        from apscheduler.triggers.cron import CronTrigger  # type: ignore[import-untyped]

        job = self.data.job
        zone = ZoneInfo(job.time_zone) if job.time_zone else None
        trigger_kwargs: dict[str, Any] = dict(job.cron_fields)
        if zone is not None:
            trigger_kwargs["timezone"] = zone
        trigger = CronTrigger(**trigger_kwargs)
        scheduler = BackgroundScheduler(
            executors={
                # Two threads: one runs the job, the other takes a fire that comes meanwhile
                # (skipped, or remembered with misfire on) instead of APScheduler dropping it.
                "default": ThreadPoolExecutor(
                    2, pool_kwargs={"thread_name_prefix": f"exec-daemon-{self._label}"}
                )
            },
            job_defaults={
                "coalesce": True,
                "max_instances": 2,
                # Late fires (a paused process, a busy machine) run when misfire is on.
                "misfire_grace_time": None if job.misfire else 1,
            },
            **({"timezone": zone} if zone is not None else {}),
        )
        scheduler.add_job(self._fire, trigger, id=self.task_id, name=self._label)
        return scheduler

    def _fire(self) -> None:
        """One cron fire, on an APScheduler pool thread."""
        with self._lock:
            if self._stopping:
                return
            if self._running:
                if self.data.job.misfire:
                    self._missed = True
                log.info(
                    "task %s: fire %s, the previous run is still going",
                    self.task_id,
                    "deferred" if self.data.job.misfire else "skipped",
                )
                return
            self._running = True
        try:
            while True:
                self._run_once()
                with self._lock:
                    again = self._missed and not self._stopping
                    self._missed = False
                if not again:
                    break
        except Exception:  # pool thread top: keep the daemon alive
            log.exception("task %s: executor error in a daemon run", self.task_id)
        finally:
            with self._lock:
                self._running = False

    def _run_once(self) -> None:
        sampling = self.data.job.event_trace_sampling_count
        with self._lock:
            if self._stopping:
                return
            self._runs += 1
            run = self._runs
            record = self._new_record()
            try:
                worker: WorkerProcess | None = self._spawn(f"{self.task_id}#{run}")
                spawn_error = ""
            except OSError as exc:
                worker = None
                spawn_error = f"cannot start the job's worker process: {exc}"
            self._worker = worker
            self._cut_short = record if worker is not None else None
        # The original reports every Nth run with sampling N > 0 (and resets its counter then).
        sampled = sampling <= 0 or run % sampling == 0
        if sampled:
            self._report("TASK_RUNNING", BEGIN, record)
        if worker is None:
            log.warning("task %s: run %d: %s", self.task_id, run, spawn_error)
            self._report("TASK_RUNNING", COMPLETE, record.finished(now_ms(), spawn_error))
            return
        timeout = self._start_timeout(worker)
        outcome = worker.wait()
        timed_out = timeout is not None and timeout.stop()
        with self._lock:
            self._worker = None
            if self._stopping:
                return  # cut short: TASK_KILLED carries the record
            self._cut_short = None
        if timed_out and timeout is not None and not outcome.success:
            log.warning("task %s: run %d %s", self.task_id, run, timeout.message)
            self._report("TASK_RUNNING", COMPLETE, record.finished(now_ms(), timeout.message))
            return
        if outcome.success:
            log.info("task %s: run %d succeeded", self.task_id, run)
        else:
            log.warning("task %s: run %d failed: %s", self.task_id, run, outcome.summary)
        if sampled or not outcome.success:
            self._report("TASK_RUNNING", COMPLETE, _ended(record, outcome))


def new_runner(
    task_id: str,
    raw_data: str,
    data: TaskData,
    env: RunEnvironment,
    reporter: StatusReporter,
    kill_grace_s: float,
) -> TaskRunner:
    """The runner for the task's execution type."""
    cls: type[TaskRunner] = DaemonTask if data.execution_type == "DAEMON" else TransientTask
    return cls(task_id, raw_data, data, env, reporter, kill_grace_s)

"""The leader's statistics component: the event trace, the task result counters and the
sampled statistics.

- Status updates reach `on_status` through `StatusHandler.listeners` (after they were processed,
  before they are acknowledged); it only queues them for the `sched-trace-writer` thread, so a
  slow or unreachable database never delays scheduling. Command tasks (TRANSIENT SCRIPT jobs)
  have no executor of ours to send execution records: theirs are made from the command
  executor's updates (`model.runs.CommandRuns`). A launch's TASK_STAGING row names the fire it
  runs for when `fire_of` knows it (`launched; fired at <UTC time>`).
- Task results are journaled in ZooKeeper by the status handler, in the transaction that records
  the state change (`storage.result_journal`); the `sched-statistics` thread moves them into the
  tables every few seconds (counters.py) and samples running tasks/jobs and registered jobs
  (sampler.py).
  Nothing is flushed at term end: whatever this term journaled and did not move yet is moved by
  the next leader, exactly once, even after a SIGKILL.
- The database may be down at term start or at any time later (a server stopped, SQLite's disk
  full): nothing of scheduling waits for it. The thread keeps retrying (the schema migration
  first) and probes the database every tick; results wait in ZooKeeper, trace entries in the
  writer's buffer and samples in the sampler's, each bounded by `trace_buffer_max_records` (the
  oldest dropped beyond it, counted and logged), and are written in order when it is back.
  `database` (a `DatabaseState`) knows since when it is down; `/health` and `/metrics` show it.
- The audit log (`audit`, an `AuditLog`, issue 26) shares the database: its records wait in
  its own bounded buffer until the schema is migrated and while the database is down, and the
  thread deletes those older than `audit_retention_days` once an hour.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import URL, Engine
from sqlalchemy.exc import DBAPIError

from executor.records import RecordError, decode_status_data
from scheduler.leader.lifecycle import ThreadedComponent
from scheduler.leader.statistics.audit_log import AuditLog
from scheduler.leader.statistics.counters import ResultCounters
from scheduler.leader.statistics.database import create_trace_engine, upgrade_to_head
from scheduler.leader.statistics.outage import DatabaseState
from scheduler.leader.statistics.sampler import Sampler
from scheduler.leader.statistics.writer import TraceWriter, first_line, unreachable
from scheduler.model.job_events import JobEvent
from scheduler.model.runs import CommandRuns, launch_message
from scheduler.model.settings import Settings
from scheduler.model.task_id import LaunchedTask, TaskId
from scheduler.model.task_states import TERMINAL_STATES
from scheduler.model.trace_url import resolve_url
from scheduler.storage.registry import Registry
from scheduler.storage.result_journal import ResultJournal
from scheduler.storage.transactions import Fence

log = logging.getLogger(__name__)

ROLL_INTERVAL_S = 5.0
# original task ids of launched, not yet terminal tasks (a new leader starts empty: its rows
# then name the task itself, as for any non-failover launch)
_ORIGINALS_KEPT = 100_000
_RETRY_MAX_S = 30.0
_SOURCE = "statistics"
_PRUNE_INTERVAL_S = 3600.0


def trace_url(settings: Settings) -> URL | None:
    """The event trace database URL; None when turned off (`event_trace_rdb_url=none`)."""
    text = settings.event_trace_rdb_url.strip()
    if text.lower() == "none":
        return None
    if not text:
        text = f"sqlite:///{Path(settings.data_dir).resolve() / 'ejcloud-trace.db'}"
    return resolve_url(text, settings.event_trace_rdb_username, settings.event_trace_rdb_password)


class Statistics(ThreadedComponent):
    name = "statistics"
    thread_name = "sched-statistics"

    def __init__(
        self,
        settings: Settings,
        registry: Registry,
        fence: Fence,
        fire_of: Callable[[str], float | None] | None = None,
        backfill_of: Callable[[str], str] | None = None,
    ) -> None:
        """`fire_of`: the fire a launched task runs for (epoch seconds; None: not known), which
        its TASK_STAGING row names; called on the launcher's thread, it must not block. None:
        no fire is known. `backfill_of`: the backfill a launched task runs a fire of ("":
        none; issue 28), named in the same row; the same rules."""
        super().__init__()
        self._settings = settings
        self._registry = registry
        self._fence = fence
        self._url = trace_url(settings)
        self._max_records = settings.trace_buffer_max_records
        self.database: DatabaseState | None = (
            None
            if self._url is None
            else DatabaseState(self._url.render_as_string(hide_password=True))
        )
        # The status handler journals results only while statistics are on.
        self.journal: ResultJournal | None = None if self._url is None else ResultJournal(registry)
        # Published once the schema is migrated; the REST API reads it.
        self.engine: Engine | None = None
        self._writer: TraceWriter | None = None
        self._counters: ResultCounters | None = None
        self._sampler: Sampler | None = None
        self._problem = ""
        self._lock = threading.Lock()
        self._originals: dict[str, str] = {}
        self._commands = CommandRuns()
        self._fire_of = fire_of
        self._backfill_of = backfill_of
        # The audit log of the term's API: the file at once, the database once migrated.
        self.audit = AuditLog(
            file_path=settings.audit_file, max_records=self._max_records, database=self.database
        )
        self._retention_days = settings.audit_retention_days
        self._pruned_at: float | None = None

    def start(self) -> None:
        if self._url is None:
            log.info("statistics: event trace and statistics off (event_trace_rdb_url=none)")
            return
        engine = create_trace_engine(self._url)
        # Created now so updates are buffered from the first one; its thread starts after the
        # schema is migrated.
        self._writer = TraceWriter(engine, max_records=self._max_records, database=self.database)
        self.audit.open(engine, self.database)
        self._start_thread()

    def on_launched(self, launched: Sequence[LaunchedTask]) -> None:
        """Launcher listener (sched-launcher, once a round): each task's TASK_STAGING row, as
        the original wrote at launch; later rows of a task carry the same `original_task_id`
        (for a failover launch, the failed task it replaces)."""
        writer = self._writer
        if writer is None:
            return
        with self._lock:
            originals = self._originals
            for task, _agent, original in launched:
                if len(originals) >= _ORIGINALS_KEPT:
                    originals.pop(next(iter(originals)))
                originals[str(task)] = original
        fire_of, backfill_of = self._fire_of, self._backfill_of
        # The tasks of a round mostly share a few fires: each message is made once.
        messages: dict[tuple[float | None, str], str] = {}
        for task, agent_id, original in launched:
            task_id = str(task)
            key = (
                fire_of(task_id) if fire_of is not None else None,
                backfill_of(task_id) if backfill_of is not None else "",
            )
            message = messages.get(key)
            if message is None:
                message = messages[key] = launch_message(*key)
            _trace(writer, task, task_id, "TASK_STAGING", agent_id, message, original)

    def on_status(self, status: dict[str, Any], parsed: TaskId) -> None:
        """StatusHandler listener (sched-mesos-events): queue only."""
        writer = self._writer
        if writer is None:
            return
        state = str(status.get("state", ""))
        task_id = str(status.get("task_id", {}).get("value", ""))
        with self._lock:
            if state in TERMINAL_STATES:
                original = self._originals.pop(task_id, task_id)
            else:
                original = self._originals.get(task_id, task_id)
        agent_id = str(status.get("agent_id", {}).get("value", parsed.agent_id))
        _trace(writer, parsed, task_id, state, agent_id, str(status.get("message", "")), original)
        try:
            record = decode_status_data(status.get("data"))
        except RecordError as exc:
            log.warning("statistics: unreadable execution record in %s: %s", state, exc)
            record = None
        if record is None:
            record = self._commands.record_of(status, parsed)
        if record is not None:
            writer.record_execution(record)

    def on_job_event(self, event: JobEvent) -> None:
        """Producer and status handler listener (any thread; queue only): one event-trace row
        per failed, timed-out, skipped or capped event (state `RUN_FAILED`, `RUN_TIMED_OUT`,
        `FIRE_SKIPPED`, `FIRE_CAPPED`), the reason as its message."""
        writer = self._writer
        if writer is None:
            return
        writer.record_status(
            job_name=event.job_name,
            task_id=event.task_id or "",
            state=event.kind.trace_state,
            execution_type=event.execution_type,
            sharding_item="" if event.sharding_item is None else f"[{event.sharding_item}]",
            message=event.reason,
        )

    def info(self) -> dict[str, Any]:
        """For /health: where the trace goes, whether the database is up (since when it is
        down, the last outage), and what the writers hold and dropped. Never blocks."""
        if self._url is None:
            return {"database": "off"}
        out: dict[str, Any] = {
            "database": self._url.render_as_string(hide_password=True),
            "ready": self.engine is not None,
        }
        if self.database is not None:
            out.update(self.database.describe())
        writer = self._writer
        problem = self._problem or (writer.problem if writer is not None else "")
        if problem:
            out["problem"] = problem
        if writer is not None:
            out["trace"] = {**writer.counters(), "max": writer.max_records}
        sampler = self._sampler
        if sampler is not None:
            out["samples"] = {"pending": sampler.pending, "dropped": sampler.dropped}
        if self.journal is not None:
            out["journal"] = {"pending": self.journal.pending, "dropped": self.journal.dropped}
        out["audit"] = self.audit.counters()
        if self._counters is not None:
            out["counted"] = self._counters.counted
        return out

    def down_since(self) -> float | None:
        """Epoch seconds since when the trace database is down; None while up (or off)."""
        return self.database.down_since if self.database is not None else None

    def samples_dropped(self) -> int:
        sampler = self._sampler
        return sampler.dropped if sampler is not None else 0

    def _run(self) -> None:
        writer = self._writer
        assert writer is not None  # set before the thread starts
        engine = writer.engine
        assert self.journal is not None
        # Samples are read from ZooKeeper at each minute whether or not the database is up.
        self._sampler = sampler = Sampler(engine, self._registry, self._max_records)
        delay = 1.0
        while True:
            try:
                with writer.database.call(_SOURCE):
                    upgrade_to_head(engine)
                break
            except Exception as exc:  # noqa: BLE001 - any database failure: retry
                self._failed("migrating the schema", exc)
            self._observe(sampler)
            if self._stopping.wait(delay):
                return
            delay = min(delay * 2, _RETRY_MAX_S)
        self._recovered("schema migrated")
        self.engine = engine
        writer.start()
        self.audit.start()
        self._counters = counters = ResultCounters(
            engine, self._registry, self._fence, self.journal, self.database
        )
        log.info("statistics: event trace in %s", engine.url.render_as_string(hide_password=True))
        while True:
            self._tick(counters, sampler, writer)
            if self._stopping.wait(_next_tick()):
                return

    def _tick(self, counters: ResultCounters, sampler: Sampler, writer: TraceWriter) -> None:
        """One round: samples read, journal moved, samples written, the database probed."""
        assert self.journal is not None
        self.journal.log_drops()
        self._observe(sampler)
        try:
            counters.roll()
            with writer.database.call(_SOURCE):
                sampler.write()
                _probe(writer.engine)
                self._prune_audit()
        except Exception as exc:  # noqa: BLE001 - ZooKeeper or database: retry next tick
            if not self._fence.is_acting():
                log.info("statistics: not acting; rolling paused (%s)", exc)
            else:
                self._failed("rolling the statistics", exc)
            return
        self._recovered("writing statistics again")
        if writer.problem:
            writer.retry_now()  # the database answers: the writer need not wait its back-off
        if self.audit.problem:
            self.audit.retry_now()

    def _prune_audit(self) -> None:
        """The audit records past `audit_retention_days`, deleted once an hour (first at the
        term's first tick)."""
        now = time.monotonic()
        if self._pruned_at is not None and now - self._pruned_at < _PRUNE_INTERVAL_S:
            return
        self.audit.prune(self._retention_days)
        self._pruned_at = now

    def _observe(self, sampler: Sampler) -> None:
        try:
            sampler.observe()
        except Exception as exc:  # noqa: BLE001 - ZooKeeper: read again next tick
            if self._fence.is_acting():
                log.warning("statistics: running tasks not sampled: %s", first_line(exc))

    def _failed(self, what: str, exc: Exception) -> None:
        problem = f"{what}: {first_line(exc)}"
        if problem != self._problem:
            log.warning("statistics: %s (retrying; results wait in ZooKeeper)", problem)
        self._problem = problem
        if self.database is not None and isinstance(exc, DBAPIError) and unreachable(exc):
            self.database.failed(_SOURCE, first_line(exc))

    def _recovered(self, what: str) -> None:
        if self._problem:
            log.info("statistics: %s after: %s", what, self._problem)
            self._problem = ""
        if self.database is not None:
            self.database.succeeded(_SOURCE)

    def stop(self) -> None:
        self._stop_thread()
        self.audit.stop(2.0)
        if self._writer is not None:
            self._writer.stop(3.0)
            self._writer.engine.dispose()
        self._writer = self._counters = self._sampler = self.engine = None


def _trace(
    writer: TraceWriter,
    parsed: TaskId,
    task_id: str,
    state: str,
    agent_id: str,
    message: str,
    original: str,
) -> None:
    """One JOB_STATUS_TRACE_LOG row as the scheduler records it."""
    writer.record_status(
        job_name=parsed.job_name,
        task_id=task_id,
        state=state,
        slave_id=agent_id,
        source="CLOUD_SCHEDULER",
        execution_type=parsed.type.value,
        sharding_item=f"[{parsed.item}]",
        message=message,
        original_task_id=original,
    )


def _probe(engine: Engine) -> None:
    """Ask the database for one row: a server that went away while nothing was written shows."""
    with engine.connect() as connection:
        connection.execute(text("SELECT 1"))


def _next_tick() -> float:
    """Seconds to the next roll: every ROLL_INTERVAL_S, and just after each minute starts
    (so the running sample lands at the start of its minute)."""
    now = datetime.now(UTC)
    next_minute = now.replace(second=0, microsecond=0) + timedelta(minutes=1, milliseconds=200)
    return max(0.05, min(ROLL_INTERVAL_S, (next_minute - now).total_seconds()))


__all__ = ["ROLL_INTERVAL_S", "Statistics", "trace_url"]

"""TraceWriter: status traces and execution records, written off the caller's thread.

Callers (the Mesos event thread, through `StatusHandler.listeners`; the launcher; the producer)
only append to a bounded in-memory buffer, which never blocks them; one thread,
`sched-trace-writer`, takes what is buffered in batches, in order, and writes each batch in one
transaction.

- Database unreachable (OperationalError, InterfaceError, a dropped connection; SQLite's disk
  full is an OperationalError too): the batch is kept and retried with back-off (0.5 s doubling
  to 10 s, at once when `retry_now` says the database answers again) while new entries keep
  arriving in the buffer, so an outage loses nothing the buffer holds, and everything is written
  in the order it was recorded. Retrying is safe: ids are made when an entry is recorded, and a
  batch that did commit before the connection dropped is found by its ids (duplicates are
  skipped). The outage is reported to the `DatabaseState` (for /health).
- Anything else (a value the database refuses): the batch is written entry by entry and only
  the refused entries are lost (`errors`).
- The buffer is full (`max_records`, the batch in hand included: a long outage): the oldest
  buffered entry is dropped for each new one, so what is written when the database is back is
  the newest history. Drops are counted (`dropped`) and logged at WARNING at most every 10 s
  with how many (`outage.DropLog`); entries left when the writer stops are dropped the same way.
  Never a crash, never a silent loss.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import cast

from sqlalchemy import Connection, Engine, Table, bindparam, select, update
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from executor.records import ExecutionRecord
from scheduler.leader.statistics.counters import utc_naive
from scheduler.leader.statistics.models import ExecutionLog, StatusTraceLog
from scheduler.leader.statistics.outage import DatabaseState, DropLog

__all__ = ["DEFAULT_MAX_RECORDS", "StatusTrace", "TraceWriter"]

log = logging.getLogger(__name__)

DEFAULT_MAX_RECORDS = 100_000
_MAX_MESSAGE_CHARS = 4000  # the original's message VARCHAR(4000)
_RETRY_FIRST_S = 0.5
_RETRY_MAX_S = 10.0
_SOURCE = "trace writer"


@dataclass(frozen=True)
class StatusTrace:
    """One row of `JOB_STATUS_TRACE_LOG`; `id` and `creation_time` are filled in when queued."""

    job_name: str
    task_id: str
    slave_id: str
    state: str
    source: str
    execution_type: str
    sharding_item: str
    message: str
    original_task_id: str
    id: str
    creation_time: datetime


_Entry = StatusTrace | ExecutionRecord


class TraceWriter:
    """Owns the `sched-trace-writer` thread; `record_*` may be called from any thread."""

    def __init__(
        self,
        engine: Engine,
        *,
        max_records: int = DEFAULT_MAX_RECORDS,
        batch_size: int = 1000,
        idle_wait_s: float = 0.5,
        linger_s: float = 0.5,
        database: DatabaseState | None = None,
    ) -> None:
        """`max_records`: entries held in memory at most (buffered and in the batch in hand).
        `database`: told when writes fail for want of the database and when they work again."""
        if max_records < 1 or batch_size < 1:
            raise ValueError("max_records and batch_size must be >= 1")
        self.engine = engine
        self.database = database or DatabaseState(engine.url.render_as_string(hide_password=True))
        self._max_records = max_records
        # A batch takes at most a quarter of the bound, so that a full buffer still has older
        # entries to drop than the ones just recorded.
        self._batch_size = min(batch_size, max(1, max_records // 4))
        self._idle_wait_s = idle_wait_s
        self._linger_s = linger_s
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._buffer: deque[_Entry] = deque()
        self._in_hand = 0
        self._stopping = threading.Event()
        self._retry = threading.Event()
        self._thread: threading.Thread | None = None
        self._drain_deadline = 0.0
        self._drops = DropLog("trace writer", "buffer full while the database was down")
        self.written = 0
        self.errors = 0
        # Why the batch in hand cannot be written ("" while writes succeed); for /health.
        self.problem = ""

    @property
    def dropped(self) -> int:
        return self._drops.total

    @property
    def max_records(self) -> int:
        return self._max_records

    @property
    def pending(self) -> int:
        """Entries held: buffered and in the batch in hand."""
        with self._lock:
            return len(self._buffer) + self._in_hand

    def counters(self) -> dict[str, int]:
        """A snapshot for /health and logs."""
        with self._lock:
            pending = len(self._buffer) + self._in_hand
            written, errors = self.written, self.errors
        return {
            "written": written,
            "dropped": self._drops.total,
            "errors": errors,
            "pending": pending,
        }

    def start(self) -> None:
        """Start the writer thread (once)."""
        with self._lock:
            if self._thread is not None:
                raise RuntimeError("TraceWriter already started")
            self._thread = threading.Thread(
                target=self._run, name="sched-trace-writer", daemon=True
            )
            self._thread.start()

    def record_status(
        self,
        *,
        job_name: str,
        task_id: str,
        state: str,
        slave_id: str = "",
        source: str = "CLOUD_SCHEDULER",
        execution_type: str = "",
        sharding_item: str = "",
        message: str = "",
        original_task_id: str = "",
        creation_time: datetime | None = None,
    ) -> bool:
        """Buffer one status trace. Never blocks, never raises; False when the buffer was full
        (the oldest entry was dropped for it).

        `original_task_id` defaults to `task_id` (every launch here has a task id of its own;
        the original copied it from the task's STAGING row). Times are UTC.
        """
        trace = StatusTrace(
            job_name=job_name,
            task_id=task_id,
            slave_id=slave_id,
            state=state,
            source=source,
            execution_type=execution_type,
            sharding_item=sharding_item,
            message=message[:_MAX_MESSAGE_CHARS],
            original_task_id=original_task_id or task_id,
            id=trace_id(),
            creation_time=utc_naive(creation_time or datetime.now(UTC)),
        )
        return self._offer(trace)

    def record_execution(self, record: ExecutionRecord) -> bool:
        """Buffer an execution record (start or complete). As `record_status`."""
        return self._offer(record)

    def retry_now(self) -> None:
        """The database answers again (any thread): retry a held batch without waiting out
        its back-off."""
        self._retry.set()

    def stop(self, timeout_s: float) -> None:
        """Write what is buffered until `timeout_s` runs out, then join the thread.

        Entries still held at the deadline are counted as dropped. Logs an ERROR if the thread
        is still alive (a database call that does not return).
        """
        deadline = time.monotonic() + timeout_s
        self._drain_deadline = deadline
        self._stopping.set()
        self._retry.set()
        with self._changed:
            self._changed.notify_all()
        thread = self._thread
        if thread is not None:
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                log.error("trace writer: thread %s still alive after %ss", thread.name, timeout_s)
                return
        with self._lock:
            left = len(self._buffer)
            self._buffer.clear()
        if left:
            log.warning("trace writer: %d entries not written before the stop deadline", left)
            self._drops.dropped(left)
        self._drops.flush()

    def _offer(self, entry: _Entry) -> bool:
        with self._changed:
            full = len(self._buffer) + self._in_hand >= self._max_records
            # Full with nothing buffered: all is in the batch in hand (a bound below 4), and
            # the new entry is the one dropped.
            if self._buffer or not full:
                if full:
                    self._buffer.popleft()  # the oldest waiting entry makes room
                self._buffer.append(entry)
                # Wake the writer only when it has something to do: the first entry after an
                # idle wait, or a whole batch that ends its linger. Waking it for every entry
                # (a thread switch each, taking the GIL from the caller) cost the Mesos event
                # thread about 5% of its time (issue 29).
                size = len(self._buffer)
                if size == 1 or size == self._batch_size:
                    self._changed.notify()
        if full:
            self._drops.dropped()
        return not full

    def _run(self) -> None:
        try:
            while True:
                if self._stopping.is_set() and (
                    self.pending == 0 or time.monotonic() >= self._drain_deadline
                ):
                    return
                batch = self._take_batch()
                if batch:
                    try:
                        self._write_retrying(batch)
                    finally:
                        with self._lock:
                            self._in_hand = 0
                self._drops.flush(due_only=True)
        except Exception:
            log.exception("trace writer: thread failed")

    def _take_batch(self) -> list[_Entry]:
        """Up to a batch of the oldest entries (now the batch in hand); [] after an idle wait."""
        with self._changed:
            if not self._buffer:
                self._changed.wait(0.05 if self._stopping.is_set() else self._idle_wait_s)
                if not self._buffer:
                    return []
            # Linger: status updates come in bursts right after launches; writing after the
            # burst keeps the writer's Python work (it holds the GIL) off the launcher's
            # critical path, and makes bigger batches: a short run's start and end fold into one
            # row, and SQLite writes each page of an index once for the whole batch (a batch of
            # 100 tasks cost 0.30 ms of CPU a task against 0.35 for one of 25, issue 29).
            until = time.monotonic() + self._linger_s
            while len(self._buffer) < self._batch_size and not self._stopping.is_set():
                left = until - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(left)
            count = min(self._batch_size, len(self._buffer))
            batch = [self._buffer.popleft() for _ in range(count)]
            self._in_hand = count
            return batch

    def _write_retrying(self, batch: list[_Entry]) -> None:
        delay = _RETRY_FIRST_S
        failures = 0
        while True:
            try:
                # After a failure the batch may have committed before the connection dropped.
                with self.database.call(_SOURCE):
                    self._commit(batch, skip_present=failures > 0)
            except DBAPIError as exc:
                if not unreachable(exc):
                    self._one_by_one(batch, exc)
                    return
                failures += 1
                self.problem = f"database unreachable: {first_line(exc)}"
                self.database.failed(_SOURCE, first_line(exc))
                if failures == 1:
                    log.warning(
                        "trace writer: database unreachable, holding %d entries and retrying: %s",
                        len(batch),
                        first_line(exc),
                    )
                if self._stopping.is_set() and time.monotonic() + delay >= self._drain_deadline:
                    log.warning(
                        "trace writer: %d entries not written: the writer stopped while the "
                        "database was unreachable",
                        len(batch),
                    )
                    self._drops.dropped(len(batch))
                    return
                self._retry.wait(delay)
                if not self._stopping.is_set():
                    self._retry.clear()
                delay = min(delay * 2, _RETRY_MAX_S)
                continue
            except Exception as exc:  # noqa: BLE001 - an ORM-side failure: same fallback
                self._one_by_one(batch, exc)
                return
            self.database.succeeded(_SOURCE)
            if failures:
                self.problem = ""
                log.info(
                    "trace writer: database reachable again after %d failed tries; %d entries held",
                    failures,
                    self.pending,
                )
            with self._lock:
                self.written += len(batch)
            return

    def _one_by_one(self, batch: list[_Entry], cause: Exception) -> None:
        log.warning(
            "trace writer: batch of %d refused (%s); writing entries one by one",
            len(batch),
            first_line(cause),
        )
        for entry in batch:
            try:
                self._commit([entry])
            except Exception as exc:  # noqa: BLE001 - this entry only
                self._lost([entry], first_line(exc))
                continue
            with self._lock:
                self.written += 1

    def _lost(self, entries: list[_Entry], why: str) -> None:
        with self._lock:
            self.errors += len(entries)
        log.warning("trace writer: %d entries lost: %s", len(entries), why)

    def _commit(self, batch: list[_Entry], skip_present: bool = False) -> None:
        """Write `batch` in one transaction with SQLAlchemy Core statements (the ORM's unit of
        work cost the leader about twice the CPU for the same rows, issue 29)."""
        traces = [entry for entry in batch if isinstance(entry, StatusTrace)]
        records = [entry for entry in batch if isinstance(entry, ExecutionRecord)]
        with self.engine.begin() as connection:
            if traces:
                known: set[str] = set()
                if skip_present:
                    ids = [trace.id for trace in traces]
                    known.update(
                        connection.scalars(select(_TRACES.c.id).where(_TRACES.c.id.in_(ids)))
                    )
                rows = [_trace_row(trace) for trace in traces if trace.id not in known]
                if rows:
                    connection.execute(_TRACES.insert(), rows)
            if records:
                _merge_executions(connection, records)


_TRACES = cast(Table, StatusTraceLog.__table__)
_EXECUTIONS = cast(Table, ExecutionLog.__table__)
# An execution row's columns that a start record leaves empty.
_COMPLETION = {"complete_time": None, "is_success": None, "failure_cause": None}


def _merge_executions(connection: Connection, records: list[ExecutionRecord]) -> None:
    """Insert on start, update the same id on complete; a complete without a start inserts.
    Records of one id in one batch (a short run's start and end) fold into one row first."""
    ids = list(dict.fromkeys(record.id for record in records))
    stored: dict[str, datetime | None] = {
        row.id: row.start_time
        for row in connection.execute(
            select(_EXECUTIONS.c.id, _EXECUTIONS.c.start_time).where(_EXECUTIONS.c.id.in_(ids))
        )
    }
    # id -> the columns to write, and the row's start time as it will then be.
    merged: dict[str, tuple[dict[str, object], list[datetime | None]]] = {}
    for record in records:
        entry = merged.get(record.id)
        new = entry is None and record.id not in stored
        if entry is None:
            entry = merged[record.id] = ({}, [stored.get(record.id)])
        values, start = entry
        values.update(
            job_name=record.job_name,
            task_id=record.task_id,
            hostname=record.hostname,
            ip=record.ip,
            sharding_item=record.sharding_item,
            execution_source=record.execution_source,
        )
        # A completion keeps the start already written (a command task's end record made by a
        # later leader does not know when it started).
        if new or not record.complete or start[0] is None:
            start[0] = values["start_time"] = _from_ms(record.start_time_ms)
        if record.complete_time_ms is not None:
            cause = record.failure_cause
            values.update(
                complete_time=_from_ms(record.complete_time_ms),
                is_success=record.is_success,
                failure_cause=cause[:_MAX_MESSAGE_CHARS] if cause else cause,
            )
        # A late start record never clears a completion already written.
    inserts = [
        {"id": key, "start_time": None, **_COMPLETION, **values}
        for key, (values, _start) in merged.items()
        if key not in stored
    ]
    if inserts:
        connection.execute(_EXECUTIONS.insert(), inserts)
    # Updates of the same columns go in one executemany each.
    updates: dict[tuple[str, ...], list[dict[str, object]]] = {}
    for key, (values, _start) in merged.items():
        if key in stored:
            updates.setdefault(tuple(sorted(values)), []).append({"row_id": key, **values})
    for columns, params in updates.items():
        statement = (
            update(_EXECUTIONS)
            .where(_EXECUTIONS.c.id == bindparam("row_id"))
            .values({column: bindparam(column) for column in columns})
        )
        connection.execute(statement, params)


def trace_id() -> str:
    """A new status trace row's id: 32 hex digits, the epoch milliseconds (12) then 80 random
    bits (20), so that rows written together sort together. With random ids (uuid4) every row
    went to its own page of the primary key's index, which each commit wrote: with 40,000 runs
    stored, batches of 25 runs cost 0.35 ms of CPU a run instead of 0.47 (issue 29)."""
    return f"{time.time_ns() // 1_000_000:012x}{os.urandom(10).hex()}"


def _trace_row(trace: StatusTrace) -> dict[str, object]:
    return {
        "id": trace.id,
        "job_name": trace.job_name,
        "original_task_id": trace.original_task_id,
        "task_id": trace.task_id,
        "slave_id": trace.slave_id,
        "source": trace.source,
        "execution_type": trace.execution_type,
        "sharding_item": trace.sharding_item,
        "state": trace.state,
        "message": trace.message,
        "creation_time": trace.creation_time,
    }


def _from_ms(epoch_ms: int) -> datetime:
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).replace(tzinfo=None)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def unreachable(exc: DBAPIError) -> bool:
    """The database could not be reached (worth retrying), as opposed to refusing the data."""
    return exc.connection_invalidated or isinstance(exc, (OperationalError, InterfaceError))

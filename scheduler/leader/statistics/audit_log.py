"""Where the audit log's records go (issue 26), for one term: `AuditLog`.

The trace database's `AUDIT_LOG` table (append-only from the product's side: rows are inserted,
and deleted only by `prune`, the retention the statistics thread runs), and optionally the JSON
lines file `audit_file` for a log shipper (reopened in append mode for each line, so a rotated
file is followed; one line per record, flushed).

- `record` never blocks (`audit_mode=best_effort`): the record waits in a bounded buffer
  (`trace_buffer_max_records`; the oldest dropped beyond it, counted and logged) that the
  `sched-audit-writer` thread writes in batches, in order, holding them while the database is
  down (see `outage.py`).
- `write_now` writes on the caller's thread and raises AuditUnavailable when it cannot
  (`audit_mode=enforced`); `writable` is the probe made before an enforced change runs.
- Every failed write is logged (once per outage) and counted (`failures`: records whose write
  failed at least once; `/metrics` shows it as `ejc_audit_write_failures`).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, delete, insert, select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from scheduler.leader.statistics.audit import AuditEntry, AuditQuery, AuditUnavailable, select_page
from scheduler.leader.statistics.models import AuditRecord
from scheduler.leader.statistics.outage import DatabaseState, DropLog
from scheduler.leader.statistics.writer import first_line, unreachable

__all__ = ["AuditLog"]

log = logging.getLogger(__name__)

_SOURCE = "audit log"
_RETRY_FIRST_S = 0.5
_RETRY_MAX_S = 10.0
_BATCH = 200


class AuditLog:
    """The term's audit log; `record`, `write_now`, `writable` and `query` from any thread."""

    def __init__(
        self,
        *,
        file_path: str = "",
        max_records: int = 100_000,
        database: DatabaseState | None = None,
        idle_wait_s: float = 0.5,
    ) -> None:
        """`file_path`: the JSON lines file ("" none). The database comes with `open`."""
        self._file = Path(file_path) if file_path.strip() else None
        self._max_records = max(1, max_records)
        self._database = database
        self._idle_wait_s = idle_wait_s
        self.engine: Engine | None = None
        self._lock = threading.Lock()
        self._file_lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._buffer: deque[AuditEntry] = deque()
        self._in_hand = 0
        self._ready = False
        self._stopping = threading.Event()
        self._retry = threading.Event()
        self._thread: threading.Thread | None = None
        self._drain_deadline = 0.0
        self._drops = DropLog("audit log", "buffer full while the database was down")
        self._failed_ids: set[str] = set()
        self._refusing = False  # enforced mode: the last probe failed
        self.written = 0
        self.failures = 0
        self.file_failures = 0
        self.problem = ""

    # -- the term's lifecycle (the statistics component) --------------------------------------

    def open(self, engine: Engine, database: DatabaseState | None = None) -> None:
        """The trace database: records are buffered for it from now on, written once `start`
        says its schema is migrated."""
        self.engine = engine
        if database is not None:
            self._database = database

    def start(self) -> None:
        """The schema is migrated: start the `sched-audit-writer` thread (once)."""
        with self._lock:
            if self._thread is not None or self.engine is None:
                return
            self._ready = True
            self._thread = threading.Thread(
                target=self._run, name="sched-audit-writer", daemon=True
            )
            self._thread.start()

    def stop(self, timeout_s: float) -> None:
        """Write what is buffered until `timeout_s` runs out, then join the thread; what is
        left is counted as dropped (logged)."""
        deadline = time.monotonic() + timeout_s
        self._drain_deadline = deadline
        self._stopping.set()
        self._retry.set()
        with self._changed:
            self._ready = False
            self._changed.notify_all()
        thread = self._thread
        if thread is not None:
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                log.error("audit log: thread %s still alive after %ss", thread.name, timeout_s)
                return
        with self._lock:
            left = len(self._buffer)
            self._buffer.clear()
        if left:
            log.warning("audit log: %d records not written before the stop deadline", left)
            self._drops.dropped(left)
        self._drops.flush()

    # -- writing --------------------------------------------------------------------------------

    @property
    def has_database(self) -> bool:
        return self.engine is not None

    @property
    def dropped(self) -> int:
        return self._drops.total

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._buffer) + self._in_hand

    def counters(self) -> dict[str, int]:
        """For /health and /metrics."""
        with self._lock:
            pending = len(self._buffer) + self._in_hand
            written, failures, file_failures = self.written, self.failures, self.file_failures
        return {
            "written": written,
            "failures": failures,
            "fileFailures": file_failures,
            "dropped": self._drops.total,
            "pending": pending,
        }

    def record(self, entry: AuditEntry) -> None:
        """Keep `entry` (best effort): its file line now, its row through the writer thread.
        Never raises; blocks only for the file's append."""
        self._append_line(entry)
        self.record_row_only(entry)

    def record_row_only(self, entry: AuditEntry) -> None:
        """Buffer `entry`'s row for the writer thread (its file line is written already)."""
        if self.engine is None:
            return
        if self._stopping.is_set():  # a request that ended after its term's API went down
            self._drops.dropped()
            return
        with self._changed:
            full = len(self._buffer) + self._in_hand >= self._max_records
            if full and self._buffer:
                self._buffer.popleft()
            if self._buffer or not full:
                self._buffer.append(entry)
                self._changed.notify()
        if full:
            self._drops.dropped()

    def write_now(self, entry: AuditEntry) -> None:
        """Write `entry` before returning (enforced mode; the caller's thread). AuditUnavailable
        when the database did not take it: the entry is then kept for the writer thread, as
        `record` keeps one, and the failure counted."""
        self._append_line(entry)
        engine = self.engine
        if engine is None or not self._ready:
            self._count_failure([entry], "the audit database is not ready")
            if engine is not None:
                self.record_row_only(entry)
            raise AuditUnavailable("the audit log's database is not ready; retry later")
        try:
            self._call(lambda: self._commit(engine, [entry], skip_present=False))
        except Exception as exc:
            self._count_failure([entry], first_line(exc))
            self.record_row_only(entry)
            raise AuditUnavailable(
                f"the audit record could not be written ({first_line(exc)})"
            ) from exc
        with self._lock:
            self.written += 1

    def writable(self) -> bool:
        """Whether a record can be written now (enforced mode's check before a change): the
        schema is migrated and the database answers a `SELECT 1` now, on the caller's thread
        (a round trip per change: a write that worked a moment ago says nothing of a server
        stopped since, and changes are few)."""
        engine = self.engine
        if engine is None or not self._ready:
            return False
        return self._probe(engine)

    def _probe(self, engine: Engine) -> bool:
        def ask() -> None:
            with engine.connect() as connection:
                connection.execute(text("SELECT 1"))

        try:
            self._call(ask)
        except Exception as exc:  # noqa: BLE001 - any failure means not writable
            if not self._refusing:  # one line per outage, not one per refused change
                log.warning(
                    "audit log: database not writable, changes refused: %s", first_line(exc)
                )
            self._refusing = True
            return False
        if self._refusing:
            log.warning("audit log: database writable again, changes taken")
        self._refusing = False
        return True

    def _call(self, work: Any) -> None:
        """`work()` as one call of the audit log's on the database's state."""
        database = self._database
        if database is None:
            work()
            return
        try:
            with database.call(_SOURCE):
                work()
        except DBAPIError as exc:
            if unreachable(exc):
                database.failed(_SOURCE, first_line(exc))
            raise
        database.succeeded(_SOURCE)

    def _count_failure(self, entries: Iterable[AuditEntry], why: str) -> None:
        new = 0
        with self._lock:
            for entry in entries:
                if entry.id not in self._failed_ids:
                    self._failed_ids.add(entry.id)
                    new += 1
            if len(self._failed_ids) > 4 * self._max_records:
                self._failed_ids.clear()
            self.failures += new
            first = not self.problem
            self.problem = why
        if first:
            log.warning("audit log: records not written (%s); holding them and retrying", why)

    def _append_line(self, entry: AuditEntry) -> None:
        path = self._file
        if path is None:
            return
        line = json.dumps(entry.to_json(), separators=(",", ":"), default=str) + "\n"
        try:
            with self._file_lock, path.open("a", encoding="utf-8") as handle:
                handle.write(line)
                handle.flush()
        except OSError as exc:
            with self._lock:
                self.file_failures += 1
                count = self.file_failures
            if count == 1 or count % 1000 == 0:
                log.warning("audit log: %s not appended (%d failures): %s", path, count, exc)

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
            log.exception("audit log: thread failed")

    def _take_batch(self) -> list[AuditEntry]:
        with self._changed:
            if not self._buffer:
                self._changed.wait(0.05 if self._stopping.is_set() else self._idle_wait_s)
                if not self._buffer:
                    return []
            count = min(_BATCH, len(self._buffer))
            batch = [self._buffer.popleft() for _ in range(count)]
            self._in_hand = count
            return batch

    def _write_retrying(self, batch: list[AuditEntry]) -> None:
        engine = self.engine
        assert engine is not None  # the thread starts with one
        delay = _RETRY_FIRST_S
        tries = 0
        while True:
            # A batch that failed may have committed before its answer was lost.
            try:
                self._call(partial(self._commit, engine, batch, skip_present=tries > 0))
            except DBAPIError as exc:
                tries += 1
                if not unreachable(exc):
                    self._one_by_one(engine, batch, exc)
                    return
                self._count_failure(batch, f"database unreachable: {first_line(exc)}")
                if self._stopping.is_set() and time.monotonic() + delay >= self._drain_deadline:
                    log.warning("audit log: %d records not written before the stop", len(batch))
                    self._drops.dropped(len(batch))
                    return
                self._retry.wait(delay)
                if not self._stopping.is_set():
                    self._retry.clear()
                delay = min(delay * 2, _RETRY_MAX_S)
                continue
            except Exception as exc:  # noqa: BLE001 - an ORM-side failure: one by one
                self._one_by_one(engine, batch, exc)
                return
            with self._lock:
                self.written += len(batch)
                recovered, self.problem = self.problem, ""
            if recovered:
                log.info("audit log: writing again after: %s", recovered)
            return

    def _one_by_one(self, engine: Engine, batch: list[AuditEntry], cause: Exception) -> None:
        log.warning("audit log: batch of %d refused (%s)", len(batch), first_line(cause))
        for entry in batch:
            try:
                self._commit(engine, [entry], skip_present=True)
            except Exception as exc:  # noqa: BLE001 - this record only
                self._count_failure([entry], first_line(exc))
                self._drops.dropped()
                continue
            with self._lock:
                self.written += 1

    def retry_now(self) -> None:
        """The database answers again (any thread): retry a held batch at once."""
        self._retry.set()

    @staticmethod
    def _commit(engine: Engine, batch: list[AuditEntry], skip_present: bool) -> None:
        with Session(engine) as session, session.begin():
            known: set[str] = set()
            if skip_present:
                ids = [entry.id for entry in batch]
                known.update(session.scalars(select(AuditRecord.id).where(AuditRecord.id.in_(ids))))
            rows = [entry.row() for entry in batch if entry.id not in known]
            if rows:
                session.execute(insert(AuditRecord), rows)

    # -- reading and retention ------------------------------------------------------------------

    def query(self, query: AuditQuery) -> tuple[list[AuditEntry], AuditEntry | None]:
        """One page, newest first, and its last record when there is a next page. Raises
        AuditUnavailable without a database; what the database raises otherwise (DBAPIError:
        the API answers 503 when it is unreachable)."""
        engine = self.engine
        if engine is None or not self._ready:
            raise AuditUnavailable(
                "the audit log has no database: the event trace database is off "
                "(event_trace_rdb_url=none) or not ready yet"
            )
        with Session(engine) as session:
            rows = list(session.scalars(select_page(query)))
        entries = [AuditEntry.from_row(row) for row in rows[: query.limit]]
        more = len(rows) > query.limit
        return entries, (entries[-1] if more and entries else None)

    def prune(self, retention_days: float, now: datetime | None = None) -> int:
        """Delete the records older than `retention_days` (the statistics thread, each hour);
        the number deleted. Raises what the database raises."""
        engine = self.engine
        if engine is None or not self._ready:
            return 0
        moment = now or datetime.now(UTC).replace(tzinfo=None)
        cutoff = moment - timedelta(days=retention_days)
        with engine.begin() as connection:
            result = connection.execute(delete(AuditRecord).where(AuditRecord.time < cutoff))
        count = int(result.rowcount or 0)
        if count:
            log.info("audit log: %d records older than %s days deleted", count, retention_days)
        return count

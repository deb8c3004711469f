"""The leader's statistics component: the event trace and the task result counters.

Status updates reach it through `StatusHandler.listeners` (after they were processed and before
they are acknowledged); it only queues them for the `sched-trace-writer` thread, so a slow or
unreachable database never delays scheduling. Counters are written every minute, and at term
end `flush()` writes the current periods too: writes add to a period's row, so what one term
counted and the next one counts end up in the same rows with nothing lost (the original kept
them in leader memory and lost them on failover).
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Engine

from executor.records import RecordError, decode_status_data
from scheduler.service import LeaderComponent
from scheduler.settings import Settings
from scheduler.state.task_id import TaskId

log = logging.getLogger(__name__)

_FAILED = frozenset(
    {"TASK_FAILED", "TASK_LOST", "TASK_ERROR", "TASK_DROPPED", "TASK_GONE", "TASK_GONE_BY_OPERATOR"}
)
_ROLL_INTERVAL_S = 10.0


def trace_url(settings: Settings) -> str | None:
    """The event trace database URL; None when turned off (`event_trace_rdb_url=none`)."""
    url = settings.event_trace_rdb_url.strip()
    if url.lower() == "none":
        return None
    if url:
        return url
    return f"sqlite:///{Path(settings.data_dir).resolve() / 'ejcloud-trace.db'}"


class Statistics(LeaderComponent):
    name = "statistics"

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self.engine: Engine | None = None
        self._writer: Any = None
        self._counters: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        url = trace_url(self._settings)
        if url is None:
            log.info("statistics: event trace off (event_trace_rdb_url=none)")
            return
        from scheduler.statistics import (
            ResultCounters,
            TraceWriter,
            create_trace_engine,
            upgrade_to_head,
        )

        try:
            engine = create_trace_engine(url)
            upgrade_to_head(engine)
        except Exception as exc:
            # A database outage must not cost the term: schedule without a trace, say so loudly.
            log.error(
                "statistics: event trace database unavailable, running without it: %s",
                exc,
                exc_info=exc,
            )
            return
        self.engine = engine
        self._writer = TraceWriter(engine)
        self._writer.start()
        self._counters = ResultCounters(engine)
        self._stop.clear()
        self._thread = threading.Thread(target=self._roll, name="sched-statistics", daemon=True)
        self._thread.start()
        log.info("statistics: event trace in %s", engine.url.render_as_string(hide_password=True))

    def on_status(self, status: dict[str, Any], tid: TaskId) -> None:
        """StatusHandler listener (sched-mesos-events): queue only."""
        writer = self._writer
        if writer is None:
            return
        state = str(status.get("state", ""))
        writer.record_status(
            job_name=tid.job_name,
            task_id=str(status.get("task_id", {}).get("value", "")),
            state=state,
            slave_id=str(status.get("agent_id", {}).get("value", tid.agent_id)),
            source="CLOUD_SCHEDULER",
            execution_type=tid.type.value,
            sharding_item=f"[{tid.item}]",
            message=str(status.get("message", ""))[:4000],
        )
        try:
            record = decode_status_data(status.get("data"))
        except RecordError as exc:
            log.warning("statistics: unreadable execution record in %s: %s", state, exc)
            record = None
        if record is not None:
            writer.record_execution(record)
        if self._counters is not None:
            if state == "TASK_FINISHED" or (
                state == "TASK_RUNNING" and status.get("message") == "COMPLETE"
            ):
                self._counters.record(True)
            elif state in _FAILED:
                self._counters.record(False)

    def _roll(self) -> None:
        while not self._stop.wait(_ROLL_INTERVAL_S):
            try:
                self._counters.roll(datetime.now(UTC))
            except Exception:
                log.exception("statistics: rolling the counters failed")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None
        if self._counters is not None:
            try:
                self._counters.flush(datetime.now(UTC))
            except Exception:
                log.exception("statistics: flushing the counters at term end failed")
        if self._writer is not None:
            self._writer.stop(5.0)
        if self.engine is not None:
            self.engine.dispose()
        self._writer = self._counters = self.engine = None

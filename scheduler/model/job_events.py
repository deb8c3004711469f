"""What the leader reports about a job beyond task states: failed runs, timed-out runs, skipped,
capped and delayed fires. Each leaves a log line where it happens, and through the term's
listeners an event-trace row, a metric and (but a delayed fire) a webhook POST (no I/O here)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

__all__ = ["JobEvent", "JobEventCounts", "JobEventKind"]


class JobEventKind(StrEnum):
    RUN_FAILED = "run_failed"
    """A shard failed and will not be relaunched (failover off, or maxRetries used up); a
    run stopped for its timeout is a `run_timed_out` instead (one event a run)."""
    RUN_TIMED_OUT = "run_timed_out"
    """A run was stopped after `timeoutSeconds` (it then fails over like any failure; the
    reason says when it is not relaunched)."""
    FIRE_SKIPPED = "fire_skipped"
    """A cron fire that adds no run (misfire off: missed, or the job running or pending)."""
    FIRE_CAPPED = "fire_capped"
    """A cron fire dropped because the job has `job_state_queue_size` runs pending."""
    FIRE_DELAYED = "fire_delayed"
    """A cron fire over the cluster's `max_fires_per_second`: accounted (and run) later."""
    FIRE_EXCLUDED = "fire_excluded"
    """A cron fire in a period one of the job's `excludeCalendars` excludes: no run (issue 28)."""
    WORKFLOW_SUCCEEDED = "workflow_succeeded"
    """A workflow run ended succeeded (`job_name` is the workflow; an event-trace row only)."""
    WORKFLOW_FAILED = "workflow_failed"
    """A workflow run ended failed: a node failed (or failFast cancelled the rest)."""
    WORKFLOW_TIMED_OUT = "workflow_timed_out"
    """A workflow run was stopped after the workflow's `timeoutSeconds`."""
    WORKFLOW_CANCELLED = "workflow_cancelled"
    """A workflow run was cancelled (by a user, or its workflow deleted): a trace row only."""

    @property
    def is_failure(self) -> bool:
        """Whether the event is a failure, POSTed to the failure webhook."""
        return self not in _NOT_FAILURES

    @property
    def trace_state(self) -> str:
        """The `state` of its event-trace row, e.g. `FIRE_SKIPPED`."""
        return self.value.upper()


_NOT_FAILURES = frozenset(
    {
        JobEventKind.FIRE_DELAYED,
        JobEventKind.FIRE_EXCLUDED,
        JobEventKind.WORKFLOW_SUCCEEDED,
        JobEventKind.WORKFLOW_CANCELLED,
    }
)


@dataclass(frozen=True)
class JobEvent:
    """One event; fire events may stand for several fires of one accounting (`fires`)."""

    kind: JobEventKind
    job_name: str
    time: float
    """Epoch seconds: the (first) fire time, or when the run ended."""
    reason: str
    sharding_item: int | None = None
    task_id: str | None = None
    fires: int = 1
    execution_type: str = "READY"
    webhook_url: str | None = None
    """The job's own `notifyWebhookUrl` (None: the `notify_webhook_url` setting)."""
    run_id: str | None = None
    """A workflow run's id (workflow events: `job_name` is then the workflow's name)."""
    given_up: bool = False
    """A `run_timed_out` whose shard is not relaunched: the run's one event, counted as a
    failed run too (`ejc_runs_failed`), as a `run_failed` would be (issue 30)."""

    def webhook_body(self) -> dict[str, object]:
        """The JSON the leader POSTs: event, jobName, shardingItem, taskId, time, reason; a
        workflow run's event also workflowName and workflowRunId."""
        body: dict[str, object] = {
            "event": self.kind.value,
            "jobName": self.job_name,
            "shardingItem": self.sharding_item,
            "taskId": self.task_id,
            "time": iso_time(self.time),
            "reason": self.reason,
        }
        if self.run_id is not None:
            body["workflowName"] = self.job_name
            body["workflowRunId"] = self.run_id
        return body


def iso_time(epoch_s: float) -> str:
    """`2026-01-01T00:00:02.000+00:00`: ISO 8601 in UTC with milliseconds."""
    return datetime.fromtimestamp(epoch_s, UTC).isoformat(timespec="milliseconds")


class JobEventCounts:
    """Events counted by kind (fires counted one by one), for `/metrics`. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(JobEventKind, 0)

    def add(self, event: JobEvent) -> None:
        with self._lock:
            self._counts[event.kind] += event.fires
            if event.kind is JobEventKind.RUN_TIMED_OUT and event.given_up:
                self._counts[JobEventKind.RUN_FAILED] += event.fires

    def get(self, kind: JobEventKind) -> int:
        with self._lock:
            return self._counts[kind]

    def counts(self) -> dict[JobEventKind, int]:
        with self._lock:
            return dict(self._counts)

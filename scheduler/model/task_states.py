"""Mesos task states as the scheduler reads them: which keep a task alive, which end it, and which
of the ends count as failures (TASK_UNKNOWN too: with PARTITION_AWARE, that is what
reconciliation answers for a task that is gone; TASK_UNREACHABLE is none of these: the task is
kept until Mesos says more)."""

from __future__ import annotations

ACTIVE_STATES = frozenset({"TASK_STAGING", "TASK_STARTING", "TASK_RUNNING", "TASK_KILLING"})
FAILED_STATES = frozenset(
    {
        "TASK_FAILED",
        "TASK_LOST",
        "TASK_ERROR",
        "TASK_DROPPED",
        "TASK_GONE",
        "TASK_GONE_BY_OPERATOR",
        "TASK_UNKNOWN",
    }
)
TERMINAL_STATES = FAILED_STATES | {"TASK_FINISHED", "TASK_KILLED"}
# Counted as failed in the task result statistics (a kill is neither success nor failure).
COUNTED_FAILED_STATES = FAILED_STATES

"""Workflows (issue 27), the pure part: the definition and its validation
(`definition.py`), a run's state and the step that moves it (`run.py`). No I/O."""

from __future__ import annotations

from scheduler.model.workflow.definition import Condition, WorkflowConfig, WorkflowNode, find_cycle
from scheduler.model.workflow.run import (
    Cancel,
    Event,
    MarkSuccess,
    NodeEnded,
    NodeRun,
    NodeState,
    Retry,
    RunState,
    Start,
    Step,
    Timeout,
    WorkflowRun,
    ended_event,
    new_run,
    parse_run_id,
    run_id_of,
    step,
)

__all__ = [
    "Cancel",
    "Condition",
    "Event",
    "MarkSuccess",
    "NodeEnded",
    "NodeRun",
    "NodeState",
    "Retry",
    "RunState",
    "Start",
    "Step",
    "Timeout",
    "WorkflowConfig",
    "WorkflowNode",
    "WorkflowRun",
    "ended_event",
    "find_cycle",
    "new_run",
    "parse_run_id",
    "run_id_of",
    "step",
]

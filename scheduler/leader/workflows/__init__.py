"""The workflows room (issue 27): the engine that fires workflows and moves their runs."""

from __future__ import annotations

from scheduler.leader.workflows.engine import WorkflowEngine

__all__ = ["WorkflowEngine"]

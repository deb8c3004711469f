"""The backfill room (issue 28): the engine that launches a backfill's past fires as node fires,
in order, paced, once each across leader changes (`engine.py`)."""

from __future__ import annotations

from scheduler.leader.backfill.engine import BackfillEngine

__all__ = ["BackfillEngine"]

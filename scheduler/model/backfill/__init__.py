"""Backfill (issue 28), the pure part: the request of `POST /api/job/{job}/backfill` checked
(`request.py`), the fires of a job's cron in a past range with calendar exclusions and the cap
`max_backfill_fires`, and the pacing of their launches (`fire_list.py`), and a backfill's state
with its transitions and stored JSON (`state.py`). No I/O: storage, the launcher and the API
wire these in; each module's docstring is the contract they rely on.
"""

from __future__ import annotations

from scheduler.model.backfill.fire_list import (
    DEFAULT_MAX_BACKFILL_FIRES,
    MAX_BACKFILL_FIRES_LIMIT,
    SCAN_FACTOR,
    FireList,
    TooManyFires,
    backfill_fires,
    launch_interval,
    next_launch_at,
)
from scheduler.model.backfill.request import (
    MAX_FIRES_PER_MINUTE,
    MIN_FIRES_PER_MINUTE,
    BackfillRequest,
    parse_time,
)
from scheduler.model.backfill.state import (
    FIRE_TIMES_SHOWN,
    Backfill,
    BackfillStatus,
    backfill_id_problem,
    fire_time_text,
    new_backfill_id,
    preview_json,
)

__all__ = [
    "DEFAULT_MAX_BACKFILL_FIRES",
    "FIRE_TIMES_SHOWN",
    "MAX_BACKFILL_FIRES_LIMIT",
    "MAX_FIRES_PER_MINUTE",
    "MIN_FIRES_PER_MINUTE",
    "SCAN_FACTOR",
    "Backfill",
    "BackfillRequest",
    "BackfillStatus",
    "FireList",
    "TooManyFires",
    "backfill_fires",
    "backfill_id_problem",
    "fire_time_text",
    "launch_interval",
    "new_backfill_id",
    "next_launch_at",
    "parse_time",
    "preview_json",
]

"""Calendars (issue 28), the pure part: a named calendar, its validation and JSON
(`definition.py`) and its parts (`parts.py`), and the questions the producer and the preview
ask of a job's calendars (`exclusion.py`). No I/O: storage, the API and the producer wire them."""

from __future__ import annotations

from scheduler.model.calendar.definition import FIELDS, Calendar
from scheduler.model.calendar.exclusion import (
    MAX_SKIPPED,
    AllowedFires,
    Exclusion,
    cron_candidates,
    excluded_by,
    next_allowed,
)
from scheduler.model.calendar.parts import (
    MAX_DATES,
    MAX_RANGES,
    MAX_WEEKLY,
    MAX_YEARLY,
    ExcludedRange,
    Weekday,
    WeeklyWindow,
    YearlyDate,
)

__all__ = [
    "FIELDS",
    "MAX_DATES",
    "MAX_RANGES",
    "MAX_SKIPPED",
    "MAX_WEEKLY",
    "MAX_YEARLY",
    "AllowedFires",
    "Calendar",
    "ExcludedRange",
    "Exclusion",
    "Weekday",
    "WeeklyWindow",
    "YearlyDate",
    "cron_candidates",
    "excluded_by",
    "next_allowed",
]

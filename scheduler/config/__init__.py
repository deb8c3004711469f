"""App and job configuration models, their validation, and cron translation (no I/O)."""

from __future__ import annotations

from scheduler.config.cron import (
    CronSpec,
    CronSyntax,
    next_fire_times,
    parse_cron,
    system_time_zone,
)

__all__ = [
    "CronSpec",
    "CronSyntax",
    "next_fire_times",
    "parse_cron",
    "system_time_zone",
]

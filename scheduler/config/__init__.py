"""App and job configuration models, their validation, and cron translation (no I/O).

`AppConfig` and `JobConfig` are the `/config/app/*` and `/config/job/*` znodes, with the original
Elastic-Job-Cloud 2.1.5 JSON field names and order. Read new API input with `from_json(data)`
(strict) and stored data with `from_json(data, strict=False)`; see `app.py` and `job.py`.
"""

from __future__ import annotations

from scheduler.config.app import AppConfig
from scheduler.config.cron import (
    CronSpec,
    CronSyntax,
    next_fire_times,
    parse_cron,
    system_time_zone,
    time_zone_problem,
)
from scheduler.config.job import (
    MAX_SHARDING_TOTAL_COUNT,
    SCRIPT_JOB_CLASS,
    JobConfig,
    JobExecutionType,
    JobProperties,
    JobType,
    parse_sharding_item_parameters,
)

__all__ = [
    "MAX_SHARDING_TOTAL_COUNT",
    "SCRIPT_JOB_CLASS",
    "AppConfig",
    "CronSpec",
    "CronSyntax",
    "JobConfig",
    "JobExecutionType",
    "JobProperties",
    "JobType",
    "next_fire_times",
    "parse_cron",
    "parse_sharding_item_parameters",
    "system_time_zone",
    "time_zone_problem",
]

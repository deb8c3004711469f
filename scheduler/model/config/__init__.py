"""App and job configuration models, their validation, and cron translation (no I/O).

`AppConfig` and `JobConfig` are the `/config/app/*` and `/config/job/*` znodes, with the original
Elastic-Job-Cloud 2.1.5 JSON field names and order. Read new API input with `from_json(data)`
(strict) and stored data with `from_json(data, strict=False)`; see `app.py` and `job.py`. The
`*_MAX_*` constants are the bounds of new input (string fields in UTF-8 bytes).
"""

from __future__ import annotations

from scheduler.model.config._wire import (
    CRON_MAX_BYTES,
    DESCRIPTION_MAX_BYTES,
    MAX_CPU_COUNT,
    MAX_JSON_DEPTH,
    MAX_MEMORY_MB,
    NAME_MAX_LENGTH,
    PARAMETER_MAX_BYTES,
    SCRIPT_MAX_BYTES,
    STORED_MAX_BYTES,
    TEXT_MAX_BYTES,
    URL_MAX_BYTES,
    parse_json,
    shown,
)
from scheduler.model.config.app import AppConfig
from scheduler.model.config.cron import (
    CronSpec,
    CronSyntax,
    next_fire_times,
    parse_cron,
    system_time_zone,
    time_zone_problem,
)
from scheduler.model.config.job import (
    MAX_SHARDING_TOTAL_COUNT,
    SCRIPT_JOB_CLASS,
    JobConfig,
    JobExecutionType,
    JobProperties,
    JobType,
    parse_sharding_item_parameters,
)
from scheduler.model.config.policies import (
    MAX_RETRIES,
    MAX_TIMEOUT_SECONDS,
    WEBHOOK_URL_MAX_BYTES,
    OverlapPolicy,
    webhook_url_problem,
)

__all__ = [
    "CRON_MAX_BYTES",
    "DESCRIPTION_MAX_BYTES",
    "MAX_CPU_COUNT",
    "MAX_JSON_DEPTH",
    "MAX_MEMORY_MB",
    "MAX_RETRIES",
    "MAX_SHARDING_TOTAL_COUNT",
    "MAX_TIMEOUT_SECONDS",
    "NAME_MAX_LENGTH",
    "PARAMETER_MAX_BYTES",
    "SCRIPT_JOB_CLASS",
    "SCRIPT_MAX_BYTES",
    "STORED_MAX_BYTES",
    "TEXT_MAX_BYTES",
    "URL_MAX_BYTES",
    "WEBHOOK_URL_MAX_BYTES",
    "AppConfig",
    "CronSpec",
    "CronSyntax",
    "JobConfig",
    "JobExecutionType",
    "JobProperties",
    "JobType",
    "OverlapPolicy",
    "next_fire_times",
    "parse_cron",
    "parse_json",
    "parse_sharding_item_parameters",
    "shown",
    "system_time_zone",
    "time_zone_problem",
    "webhook_url_problem",
]

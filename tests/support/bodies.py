"""Bodies of apps and jobs as a client sends them (the original's camelCase JSON), for tests.

Each factory returns a valid body; a keyword replaces or adds one wire field, so a test names only
what it is about:

    job_body("tick", cron="* * * * * ?", misfire=True)
    job_body("big", job_type="SIMPLE", shardingTotalCount=3)
    app_body("demo_app", cpuCount=1.0)

`job_config` is a body read the way the scheduler reads one (`JobConfig.from_json`).
"""

from __future__ import annotations

from typing import Any

from scheduler.model.config.job import JobConfig

__all__ = ["app_body", "job_body", "job_config"]

# What each job type needs beside the common fields: a script to run, or a class to call.
_BY_TYPE: dict[str, dict[str, Any]] = {
    "SCRIPT": {"scriptCommandLine": "true"},
    "SIMPLE": {"jobClass": "demo.jobs:hello"},
}


def app_body(name: str = "app", **fields: Any) -> dict[str, Any]:
    """An app: a tar.gz nobody fetches (example.invalid) with a start script, 0.5 cpu, 64 MB."""
    return {
        "appName": name,
        "appURL": "http://example.invalid/app.tar.gz",
        "bootstrapScript": "bin/start.sh",
        "cpuCount": 0.5,
        "memoryMB": 64,
        **fields,
    }


def job_body(name: str = "job", *, job_type: str = "SCRIPT", **fields: Any) -> dict[str, Any]:
    """A transient job of app `app` at 03:00 every day: one shard, 0.1 cpu, 16 MB.

    A SCRIPT job runs `true`; a SIMPLE job calls `demo.jobs:hello`.
    """
    return {
        "jobName": name,
        "appName": "app",
        "jobType": job_type,
        "jobExecutionType": "TRANSIENT",
        **_BY_TYPE[job_type],
        "cron": "0 0 3 * * ?",
        "shardingTotalCount": 1,
        "cpuCount": 0.1,
        "memoryMB": 16,
        **fields,
    }


def job_config(
    name: str = "job", *, job_type: str = "SCRIPT", strict: bool = True, **fields: Any
) -> JobConfig:
    """`job_body(name, job_type=..., **fields)` read as the scheduler reads it (time zone UTC)."""
    body = job_body(name, job_type=job_type, **fields)
    return JobConfig.from_json(body, default_time_zone="UTC", strict=strict)

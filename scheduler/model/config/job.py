"""The job configuration stored at `/config/job/{jobName}`, as Elastic-Job-Cloud 2.1.5 wrote it.

Strictness:
- `from_json(data, default_time_zone=...)` (strict, the default) validates new API input: names,
  a cron that parses and fires, sharding item parameters within the count, a Python `jobClass`
  for SIMPLE/DATAFLOW, a `scriptCommandLine` for SCRIPT, a known `timeZone`, and (through the
  optional `app_exists` callback) that the app is registered; no unknown fields (the legacy
  `appURL` and `bootstrapScript`, which the original's console still sends, are checked and
  ignored), every string valid Unicode within its bound (`jobParameter` and
  `shardingItemParameters` 64 KiB, `description` and `scriptCommandLine` 16 KiB, `cron` 256 bytes,
  any other 4 KiB), `cpuCount` 0.001-1024, `memoryMB` 1-16 TiB in MB, the run policies
  (`timeoutSeconds`, `maxRetries`, `overlapPolicy`, `notifyWebhookUrl`: see `policies.py`), and
  the whole job at most 256 KiB as stored. One InvalidRequest names every bad field.
- `from_json(data, default_time_zone=..., strict=False)` reads stored data with the checks the
  original's own reader made (types, required fields, enums, count > 0, cpu >= 0.001,
  memory >= 1), so every job the original wrote is readable, including Java `jobClass` names and
  crons we cannot schedule. Those surface later and per job: `cron_spec` and
  `sharding_parameters` raise InvalidRequest when read.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from enum import StrEnum
from functools import cache, cached_property
from types import MappingProxyType
from typing import TypeVar

from scheduler.model.config import _wire
from scheduler.model.config.cron import CronSpec, parse_cron, time_zone_problem
from scheduler.model.config.policies import LIMITS as POLICY_LIMITS
from scheduler.model.config.policies import (
    POLICY_FIELDS,
    JobPolicies,
    OverlapPolicy,
    read_policies,
)
from scheduler.model.config.pool_fields import POOL_FIELDS, POOL_LIMITS, JobPool, read_job_pool
from scheduler.model.errors import InvalidRequest

__all__ = [
    "DEFAULT_EXECUTOR_SERVICE_HANDLER",
    "DEFAULT_JOB_EXCEPTION_HANDLER",
    "MAX_EXCLUDE_CALENDARS",
    "MAX_SHARDING_TOTAL_COUNT",
    "SCRIPT_JOB_CLASS",
    "JobConfig",
    "JobExecutionType",
    "JobProperties",
    "JobType",
    "parse_sharding_item_parameters",
    "read_calendar_names",
]

# The original stores this for every SCRIPT job, whatever the request said; we do the same so
# stored jobs stay byte-for-byte compatible. It names no Python code and is never imported.
SCRIPT_JOB_CLASS = "com.dangdang.ddframe.job.api.script.ScriptJob"
DEFAULT_JOB_EXCEPTION_HANDLER = (
    "com.dangdang.ddframe.job.executor.handler.impl.DefaultJobExceptionHandler"
)
DEFAULT_EXECUTOR_SERVICE_HANDLER = (
    "com.dangdang.ddframe.job.executor.handler.impl.DefaultExecutorServiceHandler"
)
# One Mesos task per item and run: a typo such as 1000000 would swamp the launcher. The original
# had no limit; stored jobs above it are still read (strict=False).
MAX_SHARDING_TOTAL_COUNT = 10_000
JOB_CLASS_MAX_LENGTH = 255

_WHAT = "job configuration"
_KIND = "a job"
FIELDS = frozenset(
    {
        "jobName",
        "jobClass",
        "jobType",
        "cron",
        "shardingTotalCount",
        "shardingItemParameters",
        "jobParameter",
        "failover",
        "misfire",
        "description",
        "jobProperties",
        "streamingProcess",
        "scriptCommandLine",
        "appName",
        "cpuCount",
        "memoryMB",
        "jobExecutionType",
        "beanName",
        "applicationContext",
        "timeZone",
        *POLICY_FIELDS,
        *POOL_FIELDS,
        "excludeCalendars",
    }
)
# Job fields of Elastic-Job-Cloud before 2.0.5, still in its documentation's examples and sent by
# its console's job form: accepted (checked as strings) and ignored, so those clients keep working.
_LEGACY_FIELDS = ("appURL", "bootstrapScript")
_LIMITS = {
    "cron": _wire.CRON_MAX_BYTES,
    "timeZone": _wire.SHORT_TEXT_MAX_BYTES,
    "jobType": _wire.SHORT_TEXT_MAX_BYTES,
    "jobExecutionType": _wire.SHORT_TEXT_MAX_BYTES,
    "shardingItemParameters": _wire.PARAMETER_MAX_BYTES,
    "jobParameter": _wire.PARAMETER_MAX_BYTES,
    "description": _wire.DESCRIPTION_MAX_BYTES,
    "scriptCommandLine": _wire.SCRIPT_MAX_BYTES,
    "appURL": _wire.URL_MAX_BYTES,
    "bootstrapScript": _wire.SCRIPT_MAX_BYTES,
    **POLICY_LIMITS,
    **POOL_LIMITS,
}
MAX_EXCLUDE_CALENDARS = 20
"""Calendars one job (or workflow) may list in `excludeCalendars`."""
_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
_DOTTED = rf"{_IDENTIFIER}(?:\.{_IDENTIFIER})*"
# `package.module:callable` (attribute path after the colon) or `package.module.Class`.
_JOB_CLASS = re.compile(rf"{_DOTTED}:{_DOTTED}|{_IDENTIFIER}(?:\.{_IDENTIFIER})+")
_ITEM_KEY = re.compile(r"[+-]?[0-9]{1,10}")


class JobType(StrEnum):
    SIMPLE = "SIMPLE"
    DATAFLOW = "DATAFLOW"
    SCRIPT = "SCRIPT"


class JobExecutionType(StrEnum):
    TRANSIENT = "TRANSIENT"
    """Each cron fire (or trigger) queues one run; its tasks end."""
    DAEMON = "DAEMON"
    """Queued once; its tasks stay up and run the cron inside the executor."""


_E = TypeVar("_E", JobType, JobExecutionType)


@dataclass(frozen=True)
class JobProperties:
    """The original's `jobProperties` object: always written with both keys."""

    job_exception_handler: str = DEFAULT_JOB_EXCEPTION_HANDLER
    executor_service_handler: str = DEFAULT_EXECUTOR_SERVICE_HANDLER

    def to_json(self) -> dict[str, object]:
        return {
            "job_exception_handler": self.job_exception_handler,
            "executor_service_handler": self.executor_service_handler,
        }


@dataclass(frozen=True, kw_only=True)
class JobConfig:
    """A job: what runs (type, class or script), when (cron), how wide, where, and how big."""

    job_name: str
    job_type: JobType
    job_class: str = ""
    """`package.module:callable` or `package.module.Class`; SCRIPT_JOB_CLASS for SCRIPT jobs."""
    cron: str
    sharding_total_count: int
    sharding_item_parameters: str = ""
    job_parameter: str = ""
    failover: bool = False
    misfire: bool = False
    description: str = ""
    job_properties: JobProperties = JobProperties()
    streaming_process: bool = False
    """DATAFLOW only."""
    script_command_line: str = ""
    """SCRIPT only."""
    app_name: str
    cpu_count: float
    """Per shard task."""
    memory_mb: float
    """Per shard task."""
    execution_type: JobExecutionType
    bean_name: str | None = None
    application_context: str | None = None
    time_zone: str | None = None
    """The job's own IANA zone (`timeZone`), or None for the scheduler's `time_zone` setting."""
    default_time_zone: str
    """The scheduler's zone when this was read; not part of the stored JSON."""
    timeout_seconds: int | None = None
    """`timeoutSeconds`: a run (a transient task; one run of a daemon job) still going this
    long after it started is stopped and fails; None: no limit."""
    max_retries: int | None = None
    """`maxRetries`: relaunches of a failed shard per fire; None: unlimited (with back-off)."""
    overlap_policy: OverlapPolicy | None = None
    """`overlapPolicy` as stored; `overlap` is the one in force."""
    notify_webhook_url: str | None = None
    """`notifyWebhookUrl`: where failure events of this job are POSTed (over the setting)."""
    exclude_calendars: tuple[str, ...] = ()
    """`excludeCalendars` (issue 28): names of calendars whose excluded periods this job's cron
    fires skip (each skip recorded as `fire_excluded`); whether they exist is the API's check."""
    pool: str | None = None
    """`pool` (issue 28): the concurrency pool whose slots this job's tasks take; None: none."""
    pool_slots: int = 1
    """`poolSlots`: slots of the pool one shard (task) of this job takes while it runs."""

    @classmethod
    def from_json(
        cls,
        data: object,
        *,
        default_time_zone: str,
        strict: bool = True,
        app_exists: Callable[[str], bool] | None = None,
    ) -> JobConfig:
        """Read a job from decoded JSON; raises InvalidRequest naming every bad field.

        `default_time_zone` (the `time_zone` setting, resolved) applies when the job has no
        `timeZone`; ValueError if it is not a known zone. `app_exists` is called (strict only)
        with a well-formed `appName` and may raise, e.g. when ZooKeeper is unreachable.
        """
        if (problem := time_zone_problem(default_time_zone)) is not None:
            raise ValueError(f"default_time_zone: {problem}")
        reader = _wire.FieldReader(_wire.require_object(data, _WHAT), strict=strict, limits=_LIMITS)
        job = _read_job(
            reader, default_time_zone=default_time_zone, strict=strict, app_exists=app_exists
        )
        if strict:
            _wire.check_stored_size(job.to_bytes(), _WHAT)
        return job

    @classmethod
    def check_patch(cls, patch: object) -> str:
        """The name of the job a `PUT /api/job/update` body updates, after checking what can be
        checked before reading the stored job (see `_wire.check_patch`); InvalidRequest."""
        changes = _wire.check_patch(
            patch,
            name_key="jobName",
            known=FIELDS.union(_LEGACY_FIELDS),
            limits=_LIMITS,
            what=_WHAT,
            kind=_KIND,
        )
        return str(changes["jobName"])

    @classmethod
    def from_bytes(
        cls,
        data: bytes,
        *,
        default_time_zone: str,
        strict: bool = True,
        app_exists: Callable[[str], bool] | None = None,
    ) -> JobConfig:
        """Read a job from UTF-8 JSON (a znode or a request body)."""
        return cls.from_json(
            _wire.loads_object(data, _WHAT),
            default_time_zone=default_time_zone,
            strict=strict,
            app_exists=app_exists,
        )

    def to_json(self) -> dict[str, object]:
        """The original's fields in the original's order, then `timeZone` and the run policies
        (`timeoutSeconds`, `maxRetries`, `overlapPolicy`, `notifyWebhookUrl`) the job sets."""
        result: dict[str, object] = {
            "jobName": self.job_name,
            "jobClass": SCRIPT_JOB_CLASS if self.job_type is JobType.SCRIPT else self.job_class,
            "jobType": self.job_type.value,
            "cron": self.cron,
            "shardingTotalCount": self.sharding_total_count,
            "shardingItemParameters": self.sharding_item_parameters,
            "jobParameter": self.job_parameter,
            "failover": self.failover,
            "misfire": self.misfire,
            "description": self.description,
            "jobProperties": self.job_properties.to_json(),
        }
        if self.job_type is JobType.DATAFLOW:
            result["streamingProcess"] = self.streaming_process
        elif self.job_type is JobType.SCRIPT:
            result["scriptCommandLine"] = self.script_command_line
        result["appName"] = self.app_name
        result["cpuCount"] = float(self.cpu_count)
        result["memoryMB"] = float(self.memory_mb)
        result["jobExecutionType"] = self.execution_type.value
        if self.bean_name is not None and self.application_context is not None:
            result["beanName"] = self.bean_name
            result["applicationContext"] = self.application_context
        if self.time_zone is not None:
            result["timeZone"] = self.time_zone
        result.update(self.policies.to_json())
        result.update(JobPool(self.pool, self.pool_slots).to_json())
        if self.exclude_calendars:
            result["excludeCalendars"] = list(self.exclude_calendars)
        return result

    def to_bytes(self) -> bytes:
        """UTF-8 JSON exactly as Elastic-Job-Cloud 2.1.5 (Gson) writes it."""
        return _wire.gson_dumps(self.to_json()).encode("utf-8")

    def merged(
        self, patch: object, *, app_exists: Callable[[str], bool] | None = None
    ) -> JobConfig:
        """This job updated by `patch` (`PUT /api/job/update`), validated as a whole (strict).

        Fields the patch leaves out keep their values; a null resets a field to its default.
        Raises InvalidRequest naming every bad field, or if the patch names another job.
        """
        return JobConfig.from_json(
            _wire.merge_patch(self.to_json(), patch, "jobName", _WHAT),
            default_time_zone=self.default_time_zone,
            strict=True,
            app_exists=app_exists,
        )

    @property
    def policies(self) -> JobPolicies:
        return JobPolicies(
            self.timeout_seconds, self.max_retries, self.overlap_policy, self.notify_webhook_url
        )

    @property
    def overlap(self) -> OverlapPolicy:
        """The overlap policy in force (FORBID unless the job says otherwise)."""
        return self.overlap_policy or OverlapPolicy.FORBID

    @property
    def effective_time_zone(self) -> str:
        return self.time_zone or self.default_time_zone

    @property
    def has_cron(self) -> bool:
        """Whether the job has a cron: one without fires only when triggered or in a
        workflow (issue 27)."""
        return bool(self.cron.strip())

    @cached_property
    def cron_spec(self) -> CronSpec:
        """The parsed cron in the effective zone; InvalidRequest (field `cron`) if unusable
        (also for a job without a cron: ask `has_cron` first)."""
        return parse_cron(self.cron, self.effective_time_zone)

    @cached_property
    def sharding_parameters(self) -> Mapping[int, str]:
        """Item -> parameter for items 0..count-1 that have one (others are dropped, as the
        original did at launch); InvalidRequest if the text is malformed."""
        return MappingProxyType(
            parse_sharding_item_parameters(
                self.sharding_item_parameters, self.sharding_total_count, strict=False
            )
        )

    def sharding_parameter(self, item: int) -> str:
        """The parameter of one item, "" if it has none."""
        if not self.sharding_item_parameters:
            # Most jobs: no parsing, and none of cached_property's lock (one for every job in
            # Python 3.11), which a 10,000-task launch round took once a task.
            return ""
        return self.sharding_parameters.get(item, "")


def parse_sharding_item_parameters(text: str, total: int, *, strict: bool = True) -> dict[int, str]:
    """`"0=a,1=b"` -> `{0: "a", 1: "b"}`; keys and values are stripped, a value may contain `=`.

    Strict: every item must be within 0..total-1 and given once. Not strict (what the original
    did at launch): items outside the range are dropped and a repeated item keeps its last value.
    Raises InvalidRequest (field `shardingItemParameters`).
    """
    try:
        return _sharding_items(text, total, strict=strict)
    except ValueError as exc:
        raise _wire.invalid(_WHAT, {"shardingItemParameters": str(exc)}) from None


def _sharding_items(text: str, total: int, *, strict: bool) -> dict[int, str]:
    result: dict[int, str] = {}
    entries = text.split(",")
    while entries and not entries[-1].strip():
        entries.pop()  # "0=a,1=b," is accepted, as Java's split() drops trailing empties
    for position, entry in enumerate(entries, 1):
        key, equals, value = entry.partition("=")
        if not equals:
            raise ValueError(
                f"entry {position} ({_wire.shown(entry.strip())}) is not item=parameter, "
                "as in '0=a,1=b'"
            )
        if not _ITEM_KEY.fullmatch(key.strip()):
            raise ValueError(f"item {_wire.shown(key.strip())} is not an integer")
        item = int(key)
        if not 0 <= item < total:
            if strict:
                raise ValueError(
                    f"item {item} is outside 0-{total - 1} (shardingTotalCount is {total})"
                )
            continue
        if strict and item in result:
            raise ValueError(f"item {item} is given more than once")
        result[item] = value.strip()
    return result


def _read_enum(reader: _wire.FieldReader, key: str, kind: type[_E]) -> _E | None:
    raw = reader.required_text(key)
    if raw is None:
        return None
    member = _members(kind).get(raw.strip().upper())
    if member is None:
        choices = ", ".join(member.value for member in kind)
        reader.problem(key, f"must be one of {choices}, not {_wire.shown(raw)}")
    return member


@cache
def _members(kind: type[_E]) -> dict[str, _E]:
    """`kind`'s members by value: a dict lookup, where calling the enum costs microseconds
    (twice a job, 100,000 jobs at a leader's start)."""
    return {member.value: member for member in kind}


_PROPERTY_KEYS = ("job_exception_handler", "executor_service_handler")
_DEFAULT_PROPERTY_VALUES = {
    "job_exception_handler": DEFAULT_JOB_EXCEPTION_HANDLER,
    "executor_service_handler": DEFAULT_EXECUTOR_SERVICE_HANDLER,
}


_DEFAULT_PROPERTIES = JobProperties()


def _read_job_properties(reader: _wire.FieldReader, strict: bool) -> JobProperties:
    raw = reader.raw("jobProperties")
    if raw is None:
        return _DEFAULT_PROPERTIES
    if not isinstance(raw, dict):
        reader.problem("jobProperties", "must be an object")
        return JobProperties()
    if strict:
        reader.refuse_unknown(
            _PROPERTY_KEYS,
            f"is not a job property (known: {', '.join(_PROPERTY_KEYS)})",
            data=raw,
            prefix="jobProperties.",
        )
    values: dict[str, str] = {}
    for key in _PROPERTY_KEYS:
        value = raw.get(key)
        if value is None:
            continue  # the original fills in the default
        if isinstance(value, str):
            if reader.check_text(f"jobProperties.{key}", value) is not None:
                values[key] = value
        else:
            reader.problem(f"jobProperties.{key}", "must be a string")
    if values == _DEFAULT_PROPERTY_VALUES:
        return _DEFAULT_PROPERTIES  # what nearly every stored job holds: one frozen instance
    return JobProperties(**values)


def _read_job_class(reader: _wire.FieldReader, job_type: JobType | None, strict: bool) -> str:
    if job_type is JobType.SCRIPT:
        return SCRIPT_JOB_CLASS
    if job_type is None:
        return reader.text("jobClass", "")
    job_class = reader.required_text("jobClass")
    if job_class is None:
        if reader.problems.get("jobClass") in ("is required", "must not be empty"):
            reader.problems["jobClass"] = f"is required for {job_type.value} jobs"
        return ""
    if strict:
        if job_class == SCRIPT_JOB_CLASS:
            reader.problem("jobClass", "is the SCRIPT placeholder; name the Python code to run")
        elif len(job_class) > JOB_CLASS_MAX_LENGTH:
            reader.problem("jobClass", f"must be at most {JOB_CLASS_MAX_LENGTH} characters")
        elif not _JOB_CLASS.fullmatch(job_class):
            reader.problem(
                "jobClass", "must name Python code as 'package.module:callable' or 'package.Class'"
            )
    return job_class


def read_calendar_names(reader: _wire.FieldReader, key: str) -> tuple[str, ...]:
    """`excludeCalendars` (a job's or a workflow's): a list of at most MAX_EXCLUDE_CALENDARS
    distinct calendar names (absent or null: none). A problem is recorded under `key`."""
    raw = reader.raw(key)
    if raw is None:
        return ()
    if not isinstance(raw, list):
        reader.problem(key, "must be a list of calendar names")
        return ()
    if len(raw) > MAX_EXCLUDE_CALENDARS:
        reader.problem(key, f"must list at most {MAX_EXCLUDE_CALENDARS} calendars")
        return ()
    names: list[str] = []
    for index, item in enumerate(raw):
        if not isinstance(item, str):
            reader.problem(key, f"item {index} must be a calendar name (a string)")
            return ()
        if problem := _wire.name_problem(item):
            reader.problem(key, f"item {index} ({_wire.shown(item)}): {problem}")
            return ()
        if item in names:
            reader.problem(key, f"names calendar {item!r} twice")
            return ()
        names.append(item)
    return tuple(names)


def _read_job(
    reader: _wire.FieldReader,
    *,
    default_time_zone: str,
    strict: bool,
    app_exists: Callable[[str], bool] | None,
) -> JobConfig:
    if strict:
        reader.refuse_unknown(FIELDS.union(_LEGACY_FIELDS), f"is not a field of {_KIND}")
        for legacy in _LEGACY_FIELDS:
            reader.optional_text(legacy)  # checked, never stored
    job_name = reader.required_text("jobName")
    if strict and job_name is not None and (problem := _wire.name_problem(job_name)):
        reader.problem("jobName", problem)
    job_type = _read_enum(reader, "jobType", JobType)
    job_class = _read_job_class(reader, job_type, strict)
    # No cron ("" or absent): a TRANSIENT job fires only when triggered or in a workflow
    # (issue 27); a DAEMON job runs its cron inside the executor, so it needs one.
    cron = reader.text("cron", "").strip()
    total = reader.integer("shardingTotalCount")
    if total is not None:
        if total < 1:
            reader.problem("shardingTotalCount", "must be greater than 0")
        elif strict and total > MAX_SHARDING_TOTAL_COUNT:
            reader.problem("shardingTotalCount", f"must be at most {MAX_SHARDING_TOTAL_COUNT}")
    item_parameters = reader.text("shardingItemParameters", "")
    if strict and reader.ok("shardingItemParameters") and reader.ok("shardingTotalCount") and total:
        try:
            _sharding_items(item_parameters, total, strict=True)
        except ValueError as exc:
            reader.problem("shardingItemParameters", str(exc))
    job_parameter = reader.text("jobParameter", "")
    failover = reader.flag("failover", False)
    misfire = reader.flag("misfire", False)
    description = reader.text("description", "")
    job_properties = _read_job_properties(reader, strict)
    streaming_process = reader.flag("streamingProcess", False)
    script_command_line = reader.text("scriptCommandLine", "")
    if strict and job_type is JobType.SCRIPT and not script_command_line.strip():
        reader.problem("scriptCommandLine", "is required for SCRIPT jobs")
    app_name = reader.required_text("appName", allow_blank=not strict)
    if strict and app_name is not None:
        if problem := _wire.name_problem(app_name):
            reader.problem("appName", problem)
        elif app_exists is not None and not app_exists(app_name):
            reader.problem("appName", f"app {app_name!r} is not registered; register it first")
    cpu_count = reader.number("cpuCount")
    if cpu_count is not None and (problem := _wire.cpu_problem(cpu_count)):
        # Stored jobs keep the original's only rule (>= 0.001); bounds above are for new input.
        if strict or cpu_count < 0.001:
            reader.problem("cpuCount", problem)
    memory_mb = reader.number("memoryMB")
    if memory_mb is not None and (problem := _wire.memory_problem(memory_mb)):
        if strict or memory_mb < 1:
            reader.problem("memoryMB", problem)
    execution_type = _read_enum(reader, "jobExecutionType", JobExecutionType)
    bean_name = reader.optional_text("beanName")
    application_context = reader.optional_text("applicationContext")
    if (bean_name is None) != (application_context is None):
        if strict and reader.ok("beanName") and reader.ok("applicationContext"):
            missing = "beanName" if bean_name is None else "applicationContext"
            other = "applicationContext" if bean_name is None else "beanName"
            reader.problem(missing, f"must be given together with {other}")
        bean_name = application_context = None  # the original keeps them only as a pair
    time_zone = reader.optional_text("timeZone")
    if strict and time_zone is not None and (problem := time_zone_problem(time_zone)):
        reader.problem("timeZone", problem)
    daemon = None if execution_type is None else execution_type is JobExecutionType.DAEMON
    policies = read_policies(reader, daemon=daemon, strict=strict)
    job_pool = read_job_pool(reader)
    exclude_calendars = read_calendar_names(reader, "excludeCalendars")
    if not cron and execution_type is JobExecutionType.DAEMON and reader.ok("cron"):
        reader.problem("cron", "is required for a DAEMON job (it runs its cron in the executor)")
    spec: CronSpec | None = None
    if strict and cron and reader.ok("timeZone"):
        try:
            spec = parse_cron(cron, time_zone or default_time_zone)
        except InvalidRequest as exc:
            for key, why in exc.fields.items():
                reader.problem(key, why)
    reader.raise_if_any(_WHAT)
    assert job_name is not None and job_type is not None and cron is not None
    assert total is not None and app_name is not None and execution_type is not None
    assert cpu_count is not None and memory_mb is not None
    job = _built(
        job_name=job_name,
        job_type=job_type,
        job_class=job_class,
        cron=cron,
        sharding_total_count=total,
        sharding_item_parameters=item_parameters,
        job_parameter=job_parameter,
        failover=failover,
        misfire=misfire,
        description=description,
        job_properties=job_properties,
        streaming_process=streaming_process,
        script_command_line=script_command_line,
        app_name=app_name,
        cpu_count=cpu_count,
        memory_mb=memory_mb,
        execution_type=execution_type,
        bean_name=bean_name,
        application_context=application_context,
        time_zone=time_zone,
        default_time_zone=default_time_zone,
        timeout_seconds=policies.timeout_seconds,
        max_retries=policies.max_retries,
        overlap_policy=policies.overlap_policy,
        notify_webhook_url=policies.notify_webhook_url,
        exclude_calendars=exclude_calendars,
        pool=job_pool.pool,
        pool_slots=job_pool.pool_slots,
    )
    if spec is not None:
        job.__dict__["cron_spec"] = spec  # already parsed: fill the cached_property
    return job


_INIT_FIELDS = frozenset(f.name for f in fields(JobConfig) if f.init)


def _built(**values: object) -> JobConfig:
    """`JobConfig(**values)` given every field: the frozen dataclass's own `__init__` sets each
    of its 28 fields through `object.__setattr__`, 6 µs a job, a third of reading a stored job
    (100,000 of them at a leader's start, issue 29); this fills the instance's dict at once.
    Anything else (a field left out, or one it does not have) goes through `__init__`."""
    if values.keys() != _INIT_FIELDS:
        return JobConfig(**values)  # type: ignore[arg-type]
    job = object.__new__(JobConfig)
    job.__dict__.update(values)
    return job

"""The app configuration stored at `/config/app/{appName}`, as Elastic-Job-Cloud 2.1.5 wrote it.

Strictness: `from_json(data)` (strict, the default) validates new API input and refuses bad
values with one InvalidRequest naming every bad field: unknown fields, strings that are not valid
Unicode or exceed their bound (`appURL` 4 KiB, `bootstrapScript` 16 KiB), numbers out of range
(`cpuCount` 0.001-1024, `memoryMB` 1-16 TiB in MB). `from_json(data, strict=False)` reads
stored data as the original's Gson adapter did: only types are checked, absent fields take the
original defaults, so every app the original wrote is readable.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from scheduler.model.config import _wire

__all__ = ["AppConfig"]

_WHAT = "app configuration"
_KIND = "an app"
_NO_SPACE = re.compile(r"[^\s\x00-\x1f\x7f]+")
FIELDS = frozenset(
    {
        "appName",
        "appURL",
        "bootstrapScript",
        "cpuCount",
        "memoryMB",
        "appCacheEnable",
        "eventTraceSamplingCount",
    }
)
_LIMITS = {"appURL": _wire.URL_MAX_BYTES, "bootstrapScript": _wire.SCRIPT_MAX_BYTES}


@dataclass(frozen=True, kw_only=True)
class AppConfig:
    """An app: where its executor comes from, how to start it, and what it holds per agent."""

    app_name: str
    app_url: str = ""
    bootstrap_script: str = ""
    cpu_count: float = 1.0
    """Executor resources, charged once per app per agent."""
    memory_mb: float = 128.0
    app_cache_enable: bool = True
    """Mesos fetcher `cache` for `app_url`."""
    event_trace_sampling_count: int = 0
    """Daemon jobs trace only every Nth run; 0 traces all."""

    @classmethod
    def from_json(cls, data: object, *, strict: bool = True) -> AppConfig:
        """Read an app from decoded JSON; raises InvalidRequest naming every bad field."""
        reader = _wire.FieldReader(_wire.require_object(data, _WHAT), strict=strict, limits=_LIMITS)
        if strict:
            reader.refuse_unknown(FIELDS, f"is not a field of {_KIND}")
            app_name = reader.required_text("appName")
            if app_name is not None and (problem := _wire.name_problem(app_name)):
                reader.problem("appName", problem)
            app_url = reader.required_text("appURL")
            if app_url is not None and not _NO_SPACE.fullmatch(app_url):
                reader.problem("appURL", "must not contain spaces or control characters")
            bootstrap_script = reader.required_text("bootstrapScript")
        else:
            app_name = reader.text("appName", "")
            app_url = reader.text("appURL", "")
            bootstrap_script = reader.text("bootstrapScript", "")
        cpu_count = reader.number("cpuCount", 1.0)
        memory_mb = reader.number("memoryMB", 128.0)
        sampling = reader.integer("eventTraceSamplingCount", 0)
        if strict:
            if cpu_count is not None and (problem := _wire.cpu_problem(cpu_count)):
                reader.problem("cpuCount", problem)
            if memory_mb is not None and (problem := _wire.memory_problem(memory_mb)):
                reader.problem("memoryMB", problem)
            if sampling is not None and sampling < 0:
                reader.problem("eventTraceSamplingCount", "must not be negative")
        app_cache_enable = reader.flag("appCacheEnable", True)
        reader.raise_if_any(_WHAT)
        assert app_name is not None and app_url is not None and bootstrap_script is not None
        assert cpu_count is not None and memory_mb is not None and sampling is not None
        app = cls(
            app_name=app_name,
            app_url=app_url,
            bootstrap_script=bootstrap_script,
            cpu_count=cpu_count,
            memory_mb=memory_mb,
            app_cache_enable=app_cache_enable,
            event_trace_sampling_count=sampling,
        )
        if strict:
            _wire.check_stored_size(app.to_bytes(), _WHAT)
        return app

    @classmethod
    def check_patch(cls, patch: object) -> str:
        """The name of the app a `PUT /api/app` body updates, after checking what can be
        checked before reading the stored app (see `_wire.check_patch`); InvalidRequest."""
        changes = _wire.check_patch(
            patch, name_key="appName", known=FIELDS, limits=_LIMITS, what=_WHAT, kind=_KIND
        )
        return str(changes["appName"])

    @classmethod
    def from_bytes(cls, data: bytes, *, strict: bool = True) -> AppConfig:
        """Read an app from UTF-8 JSON (a znode or a request body)."""
        return cls.from_json(_wire.loads_object(data, _WHAT), strict=strict)

    def to_json(self) -> dict[str, object]:
        """The original's fields, in the original's order."""
        return {
            "appName": self.app_name,
            "appURL": self.app_url,
            "bootstrapScript": self.bootstrap_script,
            "cpuCount": self.cpu_count,
            "memoryMB": self.memory_mb,
            "appCacheEnable": self.app_cache_enable,
            "eventTraceSamplingCount": self.event_trace_sampling_count,
        }

    def to_bytes(self) -> bytes:
        """UTF-8 JSON exactly as Elastic-Job-Cloud 2.1.5 (Gson) writes it."""
        return _wire.gson_dumps(self.to_json()).encode("utf-8")

    def merged(self, patch: object) -> AppConfig:
        """This app updated by `patch` (`PUT /api/app`), validated as a whole (strict).

        Fields the patch leaves out keep their values; a null resets a field to its default.
        Raises InvalidRequest if the patch names another app.
        """
        merged = _wire.merge_patch(self.to_json(), patch, "appName", _WHAT)
        return AppConfig.from_json(merged, strict=True)

"""The scheduler's exceptions: one root, each with the HTTP status an API answer would carry.

`message` is always safe to show to a user (no secrets, no stack traces).
"""

from __future__ import annotations


class SchedulerError(Exception):
    """Root of every error the scheduler raises on purpose."""

    http_status = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class SettingsError(SchedulerError):
    """Invalid settings: unknown key, bad value, missing required value."""

    http_status = 400

    def __init__(self, problems: dict[str, str]) -> None:
        self.problems = dict(problems)
        text = "; ".join(f"{key}: {why}" for key, why in sorted(self.problems.items()))
        super().__init__(f"invalid settings: {text}")


class InvalidRequest(SchedulerError):
    """Invalid input; `fields` maps each bad field to what is wrong with it."""

    http_status = 400

    def __init__(self, message: str, fields: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.fields = dict(fields or {})


class CrossOriginRefused(SchedulerError):
    """A write sent by a web page of another origin (its `Origin` header is not this server's)."""

    http_status = 403


class Forbidden(SchedulerError):
    """The caller sees the resource's app but lacks the role the request needs (issue 26). A
    resource of an app the caller cannot see is a NotFound instead, never a Forbidden."""

    http_status = 403


class NotFound(SchedulerError):
    http_status = 404


class Conflict(SchedulerError):
    """Already exists, stale znode version, or a state that forbids the request."""

    http_status = 409


class QuotaExceeded(SchedulerError):
    """A registration beyond a quota (`max_apps`, `max_jobs`); the message names the quota and
    its value. 409, not 429: waiting does not help, deleting something (or raising the quota)
    does, and clients that retry 429 on their own would only repeat the refusal."""

    http_status = 409

    def __init__(self, quota: str, message: str) -> None:
        super().__init__(message)
        self.quota = quota


class TooLarge(QuotaExceeded):
    """An app or job whose stored JSON exceeds `max_job_bytes`."""

    http_status = 413


class UnsupportedMediaType(SchedulerError):
    """A request body that is not JSON where the API takes JSON (form and text bodies included)."""

    http_status = 415


class NotLeader(SchedulerError):
    """This replica is not (or no longer) the acting leader: retry on the leader."""

    http_status = 503


class RegistryError(SchedulerError):
    """ZooKeeper could not be reached or refused an operation."""

    http_status = 503


class TraceDatabaseUnavailable(SchedulerError):
    """The event trace / statistics database cannot be reached (scheduling goes on without it)."""

    http_status = 503

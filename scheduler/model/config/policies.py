"""A job's run policies: optional fields beyond Elastic-Job-Cloud 2.1.5, absent = its behaviour.

- `timeoutSeconds` (1-604800): a run still going this long after it started is stopped
  (SIGTERM, then SIGKILL after the kill grace) and counts as failed, `timed out after N s`.
- `maxRetries` (0-1000): relaunches of a failed shard of one fire (with `failover`, or a daemon
  job); absent: unlimited, with the failover back-off.
- `overlapPolicy`: what a fire does while the job still runs: FORBID (the default: it waits
  with `misfire` on, is skipped otherwise), ALLOW (its tasks run beside the running ones) or
  REPLACE (the running tasks are killed, the new run launches once they are gone). TRANSIENT
  jobs only: a daemon job's runs happen inside its executor.
- `notifyWebhookUrl`: where the leader POSTs this job's failure events (overrides the
  `notify_webhook_url` setting); `http` or `https`, at most WEBHOOK_URL_MAX_BYTES, no
  credentials in it, no fragment.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import urlsplit

from scheduler.model.config import _wire

__all__ = [
    "MAX_RETRIES",
    "MAX_TIMEOUT_SECONDS",
    "POLICY_FIELDS",
    "WEBHOOK_URL_MAX_BYTES",
    "JobPolicies",
    "OverlapPolicy",
    "read_policies",
    "webhook_url_problem",
]

MAX_TIMEOUT_SECONDS = 7 * 24 * 3600
MAX_RETRIES = 1000
WEBHOOK_URL_MAX_BYTES = 2048
POLICY_FIELDS = ("timeoutSeconds", "maxRetries", "overlapPolicy", "notifyWebhookUrl")
LIMITS = {"overlapPolicy": _wire.SHORT_TEXT_MAX_BYTES, "notifyWebhookUrl": WEBHOOK_URL_MAX_BYTES}


class OverlapPolicy(StrEnum):
    FORBID = "FORBID"
    """A fire while the job runs waits (`misfire` on) or is skipped (`misfire` off)."""
    ALLOW = "ALLOW"
    """A fire while the job runs launches its tasks beside the running ones."""
    REPLACE = "REPLACE"
    """A fire while the job runs kills the running tasks and launches once they are gone."""


@dataclass(frozen=True)
class JobPolicies:
    """The policy fields as read; None where the job does not set one."""

    timeout_seconds: int | None = None
    max_retries: int | None = None
    overlap_policy: OverlapPolicy | None = None
    notify_webhook_url: str | None = None

    def to_json(self) -> dict[str, object]:
        """The fields the job sets, under their JSON names (in POLICY_FIELDS order)."""
        values: dict[str, object] = {
            "timeoutSeconds": self.timeout_seconds,
            "maxRetries": self.max_retries,
            "overlapPolicy": None if self.overlap_policy is None else self.overlap_policy.value,
            "notifyWebhookUrl": self.notify_webhook_url,
        }
        return {key: value for key, value in values.items() if value is not None}


def webhook_url_problem(url: str) -> str | None:
    """Why `url` cannot be a failure webhook the leader POSTs to, or None."""
    if len(url.encode("utf-8", "surrogatepass")) > WEBHOOK_URL_MAX_BYTES:
        return f"must be at most {WEBHOOK_URL_MAX_BYTES} bytes"
    if url != url.strip() or any(c.isspace() or not c.isprintable() for c in url):
        return "must not contain spaces or control characters"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError as exc:
        return f"is not a URL ({exc})"
    if parts.scheme.lower() not in ("http", "https"):
        return "must be an http:// or https:// URL"
    if not parts.hostname:
        return "must name a host, as in https://alerts.example.com/ejcloud"
    if parts.username is not None or parts.password is not None:
        return "must not hold credentials (user:password@); put a token in the path or query"
    if parts.fragment or url.endswith("#"):
        return "must not have a #fragment"
    return None


_NO_POLICIES = JobPolicies()


def read_policies(reader: _wire.FieldReader, *, daemon: bool | None, strict: bool) -> JobPolicies:
    """Read the policy fields, recording a problem per bad field in `reader`.

    `daemon` is whether the job is a DAEMON job (None: unknown, its type was bad). Stored jobs
    (`strict=False`) get the same checks: only this scheduler writes these fields.
    """
    if not any(reader.present(key) for key in POLICY_FIELDS):
        return _NO_POLICIES  # most jobs set none: one frozen instance
    timeout_s = reader.integer("timeoutSeconds", 0) if reader.present("timeoutSeconds") else None
    if timeout_s is not None and not 1 <= timeout_s <= MAX_TIMEOUT_SECONDS:
        reader.problem("timeoutSeconds", f"must be between 1 and {MAX_TIMEOUT_SECONDS} (7 days)")
        timeout_s = None
    retries = reader.integer("maxRetries", 0) if reader.present("maxRetries") else None
    if retries is not None and not 0 <= retries <= MAX_RETRIES:
        reader.problem("maxRetries", f"must be between 0 and {MAX_RETRIES}")
        retries = None
    policy: OverlapPolicy | None = None
    raw_policy = reader.optional_text("overlapPolicy")
    if raw_policy is not None:
        try:
            policy = OverlapPolicy(raw_policy.strip().upper())
        except ValueError:
            choices = ", ".join(p.value for p in OverlapPolicy)
            shown = _wire.shown(raw_policy)
            reader.problem("overlapPolicy", f"must be one of {choices}, not {shown}")
        if strict and daemon and policy not in (None, OverlapPolicy.FORBID):
            reader.problem(
                "overlapPolicy",
                f"{policy} applies to TRANSIENT jobs; a DAEMON job's runs never overlap",
            )
    url = reader.optional_text("notifyWebhookUrl")
    if url is not None and (problem := webhook_url_problem(url)):
        reader.problem("notifyWebhookUrl", problem)
        url = None
    return JobPolicies(timeout_s, retries, policy, url)

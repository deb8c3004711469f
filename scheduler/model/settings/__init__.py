"""Scheduler settings: defaults < properties file (`--config`) < environment < command-line flags.

Keys keep the original Elastic-Job-Cloud names (`zk_servers`, `http_port`, ...). An environment
variable overrides a key under the key's own lower-case name (as the original) or as `EJC_` plus
the upper-case name (`EJC_HTTP_PORT`), which survives shells that upper-case everything.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.model.config.policies import webhook_url_problem
from scheduler.model.errors import SettingsError
from scheduler.model.http_trust import allowed_hosts_problem, trusted_proxies_problem
from scheduler.model.net_targets import (
    AllowList,
    TargetRefused,
    allowlist_problem,
    parse_target,
    target_problem,
)
from scheduler.model.trace_url import url_problem

ENV_PREFIX = "EJC_"


def _parse_int(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not a whole number") from None


def _parse_float(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not a finite number")
    return value


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "yes", "on", "1"):
        return True
    if lowered in ("false", "no", "off", "0"):
        return False
    raise ValueError(f"{text!r} is not a boolean (true/false)")


def _parse_str(text: str) -> str:
    return text.strip()


@dataclass(frozen=True)
class _Key:
    name: str
    parse: Callable[[str], Any]
    help: str
    check: Callable[[Any], str | None] | None = None
    secret: bool = False

    @property
    def default(self) -> Any:
        """The key's default, declared once: on the `Settings` field of the same name."""
        return _DEFAULTS[self.name]


def _at_least(minimum: float) -> Callable[[Any], str | None]:
    return lambda v: None if v >= minimum else f"must be >= {minimum:g}"


def _port(value: Any) -> str | None:
    return None if 1 <= value <= 65535 else "must be a TCP port (1-65535)"


def _trace_url(value: Any) -> str | None:
    return url_problem(value)


def _required(value: Any) -> str | None:
    return None if value else "is required"


def _digest(value: Any) -> str | None:
    return None if not value or ":" in value else "must be user:password"


def _password_hash(value: Any) -> str | None:
    # The forms werkzeug's generate_password_hash writes: scrypt:N:r:p$salt$hex and
    # pbkdf2:digest:iterations$salt$hex (parameters optional). Bounded so that one check can
    # neither take a great deal of memory (scrypt) nor of time (pbkdf2).
    if not value:
        return None
    parts = value.split("$")
    method, *params = parts[0].split(":")
    if len(parts) != 3 or not parts[1] or not parts[2] or method not in ("scrypt", "pbkdf2"):
        return "must be a hash from python -m scheduler hash-password (scrypt:...$salt$hash)"
    if method == "scrypt" and params:
        if not re.fullmatch(r"[0-9]{1,9}:[0-9]{1,3}:[0-9]{1,3}", ":".join(params)):
            return "scrypt parameters must be N:r:p"
        n, r, p = (int(x) for x in params)
        if n < 2 or n & (n - 1) or r < 1 or p < 1 or 128 * n * r * p > 256 * 2**20:
            return "scrypt parameters out of range (N a power of 2, at most 256 MiB per hash)"
    if method == "pbkdf2" and params:
        if len(params) > 2 or params[0] not in hashlib.algorithms_guaranteed:
            return "pbkdf2 parameters must be digest[:iterations]"
        if len(params) == 2 and not re.fullmatch(r"[0-9]{1,8}", params[1]):
            return "pbkdf2 iterations must be a number below 100,000,000"
    return None


def _webhook_url(value: Any) -> str | None:
    return webhook_url_problem(value) if value else None


def _webhook_target_problem(url: str, allowed: str) -> str | None:
    """Why the leader may not POST to `url` (an internal target that `allowed` does not
    allow); a name is resolved and judged again at every send."""
    if not url:
        return None
    try:
        return target_problem(parse_target(url), AllowList.parse(allowed))
    except TargetRefused as exc:
        return exc.message


def _audit_mode(value: Any) -> str | None:
    ok = ("best_effort", "enforced")
    return None if value in ok else f"must be one of {', '.join(ok)}"


def _log_level(value: Any) -> str | None:
    ok = ("DEBUG", "INFO", "WARNING", "ERROR")
    return None if value.upper() in ok else f"must be one of {', '.join(ok)}"


_KEYS: tuple[_Key, ...] = (
    _Key(
        "hostname",
        _parse_str,
        "host name other replicas and users reach this one at",
        _required,
    ),
    _Key("http_bind_address", _parse_str, "address the HTTP server binds to", _required),
    _Key("http_port", _parse_int, "HTTP port (health, metrics, REST API)", _port),
    _Key(
        "http_threads",
        _parse_int,
        "worker threads for /api requests (/health and /metrics have two of their own)",
        _at_least(1),
    ),
    _Key(
        "http_connection_limit",
        _parse_int,
        "open HTTP connections at most; 0 = derived from the file-descriptor limit "
        "((limit - 512) / 2, at most 4096); idle ones are closed to make room",
        _at_least(0),
    ),
    _Key(
        "http_channel_timeout_seconds",
        _parse_float,
        "an HTTP connection idle this long is closed",
        _at_least(0.5),
    ),
    _Key(
        "http_header_timeout_seconds",
        _parse_float,
        "a request's line and headers must arrive within this after its first byte (else 408)",
        _at_least(0.5),
    ),
    _Key(
        "http_body_timeout_seconds",
        _parse_float,
        "a request's body must arrive within this after its headers (else 408)",
        _at_least(0.5),
    ),
    _Key(
        "http_max_header_bytes",
        _parse_int,
        "largest request line plus headers (else 431)",
        _at_least(1024),
    ),
    _Key(
        "http_max_body_bytes",
        _parse_int,
        "largest request body (else 413)",
        _at_least(1024),
    ),
    _Key("user", _parse_str, "user Mesos runs the tasks as (FrameworkInfo.user)"),
    _Key(
        "mesos_url",
        _parse_str,
        "Mesos master: host:port or zk://hosts/path",
        _required,
    ),
    _Key("mesos_role", _parse_str, "Mesos role; the framework name gets -{role}"),
    _Key(
        "zk_servers",
        _parse_str,
        "ZooKeeper connection string host:port[,host:port]",
        _required,
    ),
    _Key(
        "zk_namespace",
        _parse_str,
        "ZooKeeper namespace (root node)",
        _required,
    ),
    _Key(
        "zk_digest",
        _parse_str,
        "digest auth user:password; nodes get a CREATOR_ALL ACL",
        _digest,
        secret=True,
    ),
    _Key("zk_session_timeout_seconds", _parse_float, "ZooKeeper session timeout", _at_least(1)),
    _Key(
        "zk_connection_timeout_seconds",
        _parse_float,
        "how long start-up waits for ZooKeeper",
        _at_least(1),
    ),
    _Key(
        "leader_retry_backoff_seconds",
        _parse_float,
        "pause before re-entering the election after a failed term",
        _at_least(0.1),
    ),
    _Key(
        "standby_parse_ahead_minutes",
        _parse_float,
        "a standby reads and parses every job this often, for a faster takeover (0 = never)",
        _at_least(0),
    ),
    _Key(
        "job_state_queue_size",
        _parse_int,
        "cap on pending entries per state queue",
        _at_least(1),
    ),
    _Key(
        "event_trace_rdb_driver",
        _parse_str,
        "kept for compatibility; the URL decides the driver",
    ),
    _Key(
        "event_trace_rdb_url",
        _parse_str,
        "database URL of the event trace and statistics (SQLAlchemy or jdbc:; '' = SQLite "
        "in data_dir, none = off)",
        _trace_url,
        secret=True,
    ),
    _Key("event_trace_rdb_username", _parse_str, "database user"),
    _Key("event_trace_rdb_password", _parse_str, "database password", secret=True),
    _Key(
        "reconcile_interval_minutes",
        _parse_float,
        "periodic reconciliation; <= 0 turns it off",
    ),
    _Key("framework_name", _parse_str, "Mesos framework name", _required),
    _Key(
        "framework_failover_timeout_seconds",
        _parse_float,
        "how long Mesos keeps tasks while no leader is subscribed",
        _at_least(0),
    ),
    _Key("framework_principal", _parse_str, "Mesos principal"),
    _Key("framework_secret", _parse_str, "Mesos secret", secret=True),
    _Key("time_zone", _parse_str, "default IANA time zone of job crons (empty: the system's)"),
    _Key(
        "notify_webhook_url",
        _parse_str,
        "http(s) URL the leader POSTs failure events of every job to (run_failed, "
        "run_timed_out, fire_skipped, fire_capped) unless the job has its own notifyWebhookUrl; "
        "empty = none",
        _webhook_url,
        secret=True,
    ),
    _Key("log_level", _parse_str, "DEBUG, INFO, WARNING or ERROR", _log_level),
    _Key(
        "data_dir",
        _parse_str,
        "directory for local data (the default SQLite event trace)",
        _required,
    ),
    _Key("auth_enabled", _parse_bool, "require HTTP Basic auth on /api/*"),
    _Key("auth_admin_username", _parse_str, "user that may read and write", _required),
    _Key("auth_admin_password", _parse_str, "its password", secret=True),
    _Key(
        "auth_admin_password_hash",
        _parse_str,
        "its password as a hash (python -m scheduler hash-password); wins over the password",
        _password_hash,
        secret=True,
    ),
    _Key("auth_guest_username", _parse_str, "user that may only read", _required),
    _Key("auth_guest_password", _parse_str, "its password", secret=True),
    _Key(
        "auth_guest_password_hash",
        _parse_str,
        "its password as a hash; wins over the password",
        _password_hash,
        secret=True,
    ),
    _Key(
        "auth_max_failures",
        _parse_int,
        "failed logins a client address may make within the window before it gets 429",
        _at_least(1),
    ),
    _Key(
        "auth_failure_window_seconds",
        _parse_float,
        "sliding window of auth_max_failures",
        _at_least(1),
    ),
    _Key(
        "auth_max_concurrent_hashes",
        _parse_int,
        "password hashes computed at once (others wait briefly, then get 503)",
        _at_least(1),
    ),
    _Key(
        "auth_trust_x_forwarded_for",
        _parse_bool,
        "count failed logins against X-Forwarded-For's last address from any peer (only behind "
        "a proxy; prefer http_trusted_proxies, which believes only the proxies it names)",
    ),
    _Key(
        "auth_session_timeout_seconds",
        _parse_float,
        "a console session (the cookie a login issues) expires this long after the login",
        _at_least(60),
    ),
    _Key(
        "require_zk_digest",
        _parse_bool,
        "refuse to start without zk_digest (election data then cannot be forged)",
    ),
    _Key(
        "http_allowed_hosts",
        _parse_str,
        "Host header values served besides this replica's hostname, the replicas' "
        "identities, localhost, 127.0.0.1 and [::1], comma-separated (host or host:port); "
        "* = any (others get 421)",
        allowed_hosts_problem,
    ),
    _Key(
        "http_tls_cert_file",
        _parse_str,
        "PEM certificate (chain) to serve https on http_port; empty = plain http",
    ),
    _Key("http_tls_key_file", _parse_str, "PEM private key of http_tls_cert_file"),
    _Key(
        "http_trusted_proxies",
        _parse_str,
        "CIDRs of reverse proxies whose X-Forwarded-Proto/Forwarded and client address are "
        "believed, comma-separated; empty = none",
        trusted_proxies_problem,
    ),
    _Key(
        "notify_webhook_allowed_targets",
        _parse_str,
        "webhook targets allowed although internal (loopback, private, link-local, metadata): "
        "CIDRs, host names and *.domain names, comma-separated; empty = none",
        allowlist_problem,
    ),
    _Key(
        "notify_webhook_timeout_seconds",
        _parse_float,
        "deadline of one whole webhook request (connect, send, answer)",
        _at_least(0.5),
    ),
    _Key(
        "notify_webhook_senders",
        _parse_int,
        "threads that POST webhooks (1-64); one destination is served by one at a time",
        lambda v: None if 1 <= v <= 64 else "must be between 1 and 64",
    ),
    _Key("max_apps", _parse_int, "apps that may be registered at most", _at_least(1)),
    _Key("max_jobs", _parse_int, "jobs that may be registered at most", _at_least(1)),
    _Key(
        "max_job_bytes",
        _parse_int,
        "largest job or app configuration (its stored JSON) in bytes; refused with 413 "
        "beyond it (at most 262144, the stored bound)",
        lambda v: None if 1024 <= v <= 262144 else "must be from 1024 to 262144",
    ),
    _Key(
        "min_fire_interval_seconds",
        _parse_float,
        "shortest interval between two fires of a job's cron a registration may ask for",
        _at_least(0),
    ),
    _Key(
        "max_fires_per_second",
        _parse_float,
        "cron fires the leader accounts per second for the whole cluster; fires over the "
        "budget are delayed (recorded and counted); 0 = no limit",
        _at_least(0),
    ),
    _Key(
        "max_list_items",
        _parse_int,
        "most items an unpaged Elastic-Job-Cloud list answers (X-Total-Count has the total)",
        _at_least(1),
    ),
    _Key(
        "metrics_max_jobs",
        _parse_int,
        'jobs with /metrics series of their own (the rest share job_name="_other"); each costs '
        "the leader about 0.01 ms of CPU per scrape",
        lambda v: None if 0 <= v <= 100000 else "must be from 0 to 100000",
    ),
    _Key(
        "metrics_require_auth",
        _parse_bool,
        "require credentials on /metrics (its per-job series then show only the caller's apps)",
    ),
    _Key(
        "audit_mode",
        _parse_str,
        "best_effort (a failed audit write is logged and counted) or enforced (a change whose "
        "audit record cannot be written is refused with 503)",
        _audit_mode,
    ),
    _Key(
        "audit_retention_days",
        _parse_float,
        "days the audit log keeps its records in the event trace database",
        _at_least(1),
    ),
    _Key(
        "audit_file",
        _parse_str,
        "also append each audit record as a JSON line to this file (empty: none)",
    ),
    _Key("max_access_users", _parse_int, "most users the access records hold", _at_least(1)),
    _Key("max_access_grants", _parse_int, "most grants the access records hold", _at_least(1)),
    _Key("max_access_tokens", _parse_int, "most API tokens the access records hold", _at_least(1)),
    _Key("max_workflow_nodes", _parse_int, "most nodes a workflow may have", _at_least(1)),
    _Key(
        "max_backfill_fires",
        _parse_int,
        "most fires one backfill may run (POST /api/job/{job}/backfill)",
        _at_least(1),
    ),
    _Key("max_calendars", _parse_int, "most calendars the cluster holds", _at_least(1)),
    _Key("max_pools", _parse_int, "most concurrency pools the cluster holds", _at_least(1)),
    _Key(
        "max_active_backfills",
        _parse_int,
        "most backfills running or paused at once, cluster-wide",
        _at_least(1),
    ),
    _Key(
        "trace_buffer_max_records",
        _parse_int,
        "trace and statistics records kept in memory while the trace database is down; "
        "beyond it the oldest are dropped, counted and logged",
        _at_least(100),
    ),
)

KEYS_BY_NAME: dict[str, _Key] = {k.name: k for k in _KEYS}


@dataclass(frozen=True)
class Settings:
    hostname: str = "localhost"
    http_bind_address: str = "0.0.0.0"
    http_port: int = 8899
    http_threads: int = 8
    http_connection_limit: int = 0
    http_channel_timeout_seconds: float = 15.0
    http_header_timeout_seconds: float = 5.0
    http_body_timeout_seconds: float = 20.0
    http_max_header_bytes: int = 32768
    http_max_body_bytes: int = 1048576
    user: str = ""
    mesos_url: str = "zk://localhost:2181/mesos"
    mesos_role: str = ""
    zk_servers: str = "localhost:2181"
    zk_namespace: str = "elastic-job-cloud"
    zk_digest: str = ""
    zk_session_timeout_seconds: float = 10.0
    zk_connection_timeout_seconds: float = 15.0
    leader_retry_backoff_seconds: float = 2.0
    standby_parse_ahead_minutes: float = 10.0
    job_state_queue_size: int = 10000
    event_trace_rdb_driver: str = ""
    event_trace_rdb_url: str = ""
    event_trace_rdb_username: str = ""
    event_trace_rdb_password: str = ""
    reconcile_interval_minutes: float = 10.0
    framework_name: str = "Elastic-Job-Cloud"
    framework_failover_timeout_seconds: float = 604800.0
    framework_principal: str = ""
    framework_secret: str = ""
    time_zone: str = ""
    notify_webhook_url: str = ""
    log_level: str = "INFO"
    data_dir: str = "data"
    auth_enabled: bool = True
    auth_admin_username: str = "root"
    auth_admin_password: str = "root"
    auth_admin_password_hash: str = ""
    auth_guest_username: str = "guest"
    auth_guest_password: str = "guest"
    auth_guest_password_hash: str = ""
    auth_max_failures: int = 10
    auth_failure_window_seconds: float = 60.0
    auth_max_concurrent_hashes: int = 2
    auth_trust_x_forwarded_for: bool = False
    auth_session_timeout_seconds: float = 28800.0
    require_zk_digest: bool = False
    http_allowed_hosts: str = ""
    http_tls_cert_file: str = ""
    http_tls_key_file: str = ""
    http_trusted_proxies: str = ""
    notify_webhook_allowed_targets: str = ""
    notify_webhook_timeout_seconds: float = 10.0
    notify_webhook_senders: int = 4
    max_apps: int = 10000
    max_jobs: int = 100000
    max_job_bytes: int = 65536
    min_fire_interval_seconds: float = 1.0
    max_fires_per_second: float = 0.0
    max_list_items: int = 10000
    metrics_max_jobs: int = 5000
    metrics_require_auth: bool = False
    audit_mode: str = "best_effort"
    audit_retention_days: float = 90.0
    audit_file: str = ""
    max_access_users: int = 10000
    max_access_grants: int = 100000
    max_access_tokens: int = 100000
    max_workflow_nodes: int = 200
    max_backfill_fires: int = 1000
    max_calendars: int = 1000
    max_pools: int = 1000
    max_active_backfills: int = 100
    trace_buffer_max_records: int = 100000

    @property
    def identity(self) -> str:
        """This replica's election identifier and public address, `host:port`."""
        return f"{self.hostname}:{self.http_port}"

    def redacted(self) -> dict[str, Any]:
        """The settings as a dict with secrets masked, for logs."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = "***" if KEYS_BY_NAME[f.name].secret and value else value
        return out


# Every key's default, from the `Settings` field of the same name (the one place they are set).
_DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(Settings)}


def read_properties(text: str) -> dict[str, str]:
    """Parse Java-style properties (`key=value` or `key: value`, `#`/`!` comments)."""
    result: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        positions = [p for p in (line.find("="), line.find(":")) if p >= 0]
        if not positions:
            result[line] = ""
            continue
        cut = min(positions)
        result[line[:cut].strip()] = line[cut + 1 :].strip()
    return result


def load_settings(
    file_values: Mapping[str, str],
    environ: Mapping[str, str],
    flag_values: Mapping[str, str],
) -> Settings:
    """Merge the three sources and validate every key at once.

    Raises SettingsError naming each bad key. Unknown keys in the file or the flags are errors;
    the environment is only read for known keys.
    """
    problems: dict[str, str] = {}
    raw: dict[str, tuple[str, str]] = {}
    for source, given in (("config file", file_values), ("command line", flag_values)):
        for key in given:
            if key not in KEYS_BY_NAME:
                problems[key] = f"unknown key (from the {source})"
    for key in KEYS_BY_NAME:
        if key in file_values:
            raw[key] = (file_values[key], "config file")
        for env_name in (key, ENV_PREFIX + key.upper()):
            if env_name in environ:
                raw[key] = (environ[env_name], f"environment {env_name}")
        if key in flag_values:
            raw[key] = (flag_values[key], "command line")
    parsed: dict[str, Any] = {}
    for key, (text, source) in raw.items():
        spec = KEYS_BY_NAME[key]
        try:
            parsed[key] = spec.parse(text)
        except ValueError as exc:
            problems[key] = f"{exc} (from the {source})"
    for spec in _KEYS:
        value = parsed.get(spec.name, spec.default)
        if spec.name in problems or spec.check is None:
            continue
        why = spec.check(value)
        if why:
            problems[spec.name] = why
    if parsed.get("require_zk_digest") and not parsed.get("zk_digest"):
        problems["require_zk_digest"] = "is true but zk_digest is not set (give zk_digest)"
    if "notify_webhook_url" not in problems and "notify_webhook_allowed_targets" not in problems:
        why = _webhook_target_problem(
            parsed.get("notify_webhook_url", ""), parsed.get("notify_webhook_allowed_targets", "")
        )
        if why:
            problems["notify_webhook_url"] = why
    if problems:
        raise SettingsError(problems)
    if "log_level" in parsed:
        parsed["log_level"] = parsed["log_level"].upper()
    return Settings(**parsed)

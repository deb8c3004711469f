"""Where the CLI connects and as whom: flags, then environment, then config file, then defaults.

Each setting is taken from the first place that gives it: a command-line flag (`--server`,
`--user`, `--password`, `--token`, `--timeout`, `--cacert`), the environment (`EJCLOUD_SERVER`,
`EJCLOUD_USER`, `EJCLOUD_PASSWORD`, `EJCLOUD_TOKEN`, `EJCLOUD_TIMEOUT`, `EJCLOUD_CACERT`; empty
counts as unset), the TOML config file (keys `server`, `user`, `password`, `token`, `timeout`,
`cacert`), else the default (`http://127.0.0.1:8899`, no credentials, 10 s, the system's trusted
certificates). `cacert` is a PEM file of the certificates that https servers are verified
against instead.

A token (`ejc_<id>_<secret>`, made with `ejcloud token create`) is sent as `Authorization:
Bearer` instead of the user's Basic credentials. When both a token and a user are given, the
one from the more specific place wins (flag, then environment, then file: `--user` overrides a
token in the config file); both from the same place is a usage error, since either could be
meant. The token itself is never printed, in output or in errors. The config file
is `--config PATH`, else `$EJCLOUD_CONFIG`, else
`$XDG_CONFIG_HOME/ejcloud/config.toml`, else `~/.config/ejcloud/config.toml`; only a file that
was named explicitly must exist.
"""

from __future__ import annotations

import math
import os
import re
import stat
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ejcloud_cli.errors import UsageProblem

DEFAULT_SERVER = "http://127.0.0.1:8899"
DEFAULT_TIMEOUT_S = 10.0
MAX_TIMEOUT_S = 3600.0
ENV_SERVER = "EJCLOUD_SERVER"
ENV_USER = "EJCLOUD_USER"
ENV_PASSWORD = "EJCLOUD_PASSWORD"
ENV_TIMEOUT = "EJCLOUD_TIMEOUT"
ENV_CONFIG = "EJCLOUD_CONFIG"
ENV_CACERT = "EJCLOUD_CACERT"
ENV_TOKEN = "EJCLOUD_TOKEN"
_FILE_KEYS = ("server", "user", "password", "token", "timeout", "cacert")
# An API token as the server makes it; checked here so that a mistyped one (or one with a line
# break) is named without being shown, and never reaches an HTTP header.
_TOKEN = re.compile(r"^ejc_[0-9a-f]{12}_[0-9a-f]{48}$")
_SOURCE_RANK = {"flag": 0, "env": 1, "file": 2, "default": 3}
_MAX_CONFIG_BYTES = 64 * 1024


@dataclass(frozen=True)
class Flags:
    """What the command line gave (empty or None: not given)."""

    servers: tuple[str, ...] = ()
    user: str | None = None
    password: str | None = None
    timeout_s: float | None = None
    config_path: str | None = None
    cacert: str | None = None
    token: str | None = None


@dataclass(frozen=True)
class ConnectionSettings:
    """The resolved settings; `sources` says where each came from (flag, env, file, default)."""

    servers: tuple[str, ...]
    user: str | None
    password: str | None
    timeout_s: float
    sources: Mapping[str, str]
    cacert: str | None = None  # PEM file https servers are verified against (None: the system's)
    token: str | None = None  # an API token, sent as Bearer instead of the user's Basic

    def describe(self) -> dict[str, Any]:
        """The settings as `--json` may show them (never the password or the token)."""
        shown: dict[str, Any] = {
            "servers": list(self.servers),
            "user": self.user,
            "password": "set" if self.password is not None else None,
            "timeout": self.timeout_s,
            "sources": dict(self.sources),
        }
        if self.cacert is not None:
            shown["cacert"] = self.cacert
        if self.token is not None:
            shown["token"] = "set"
        return shown


@dataclass(frozen=True)
class ConfigFile:
    """The values of a config file (empty when it does not exist) and warnings about it."""

    path: Path | None
    values: Mapping[str, Any]
    warnings: tuple[str, ...] = ()


def config_file_path(flags: Flags, env: Mapping[str, str]) -> tuple[Path, bool]:
    """The config file to read and whether it was named explicitly (and so must exist)."""
    if flags.config_path:
        return Path(flags.config_path).expanduser(), True
    if env.get(ENV_CONFIG):
        return Path(env[ENV_CONFIG]).expanduser(), True
    xdg = env.get("XDG_CONFIG_HOME", "")
    # The XDG spec says a relative $XDG_CONFIG_HOME is invalid and must be ignored.
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path(env.get("HOME", "~")) / ".config"
    return (base / "ejcloud" / "config.toml").expanduser(), False


def read_config_file(path: Path, required: bool) -> ConfigFile:
    """The checked values of the TOML file at `path`.

    Raises UsageProblem naming the file (and the key) when it cannot be read, is not TOML, has
    an unknown key or a value of the wrong type, or is missing although `required`.
    """
    try:
        with path.open("rb") as handle:
            raw = handle.read(_MAX_CONFIG_BYTES + 1)
            mode = os.fstat(handle.fileno()).st_mode
    except FileNotFoundError as exc:
        if required:
            raise UsageProblem(f"config file {path} does not exist") from exc
        return ConfigFile(None, {})
    except OSError as exc:
        raise UsageProblem(f"config file {path} cannot be read: {exc.strerror}") from exc
    if len(raw) > _MAX_CONFIG_BYTES:
        raise UsageProblem(f"config file {path} is larger than {_MAX_CONFIG_BYTES} bytes")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageProblem(f"config file {path} is not valid TOML: {exc}") from exc
    values = _checked_file_values(path, data)
    warnings: list[str] = []
    for secret in ("password", "token"):
        if secret in values and stat.S_IMODE(mode) & 0o077:
            warnings.append(
                f"config file {path} holds a {secret} and others may read it (chmod 600 {path})"
            )
    return ConfigFile(path, values, tuple(warnings))


def _checked_file_values(path: Path, data: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(data) - set(_FILE_KEYS))
    if unknown:
        raise UsageProblem(
            f"config file {path}: unknown key {unknown[0]!r} (known: {', '.join(_FILE_KEYS)})"
        )
    values: dict[str, Any] = {}
    server = data.get("server")
    if server is not None:
        if isinstance(server, str):
            values["server"] = (server,)
        elif isinstance(server, list) and all(isinstance(s, str) for s in server):
            values["server"] = tuple(server)
        else:
            raise UsageProblem(f"config file {path}: server must be a string or a list of strings")
    for key in ("user", "password", "token", "cacert"):
        if key in data:
            if not isinstance(data[key], str):
                raise UsageProblem(f"config file {path}: {key} must be a string")
            values[key] = data[key]
    if "timeout" in data:
        timeout = data["timeout"]
        if isinstance(timeout, bool) or not isinstance(timeout, int | float):
            raise UsageProblem(f"config file {path}: timeout must be a number of seconds")
        values["timeout"] = check_timeout(float(timeout), f"config file {path}: timeout")
    return values


def check_timeout(value: float, where: str) -> float:
    """`value` if it is a usable timeout in seconds; UsageProblem naming `where` otherwise."""
    if not math.isfinite(value) or value <= 0 or value > MAX_TIMEOUT_S:
        raise UsageProblem(f"{where} must be more than 0 and at most {MAX_TIMEOUT_S:g} seconds")
    return value


def parse_servers(values: Iterable[str], where: str) -> tuple[str, ...]:
    """Base URLs from server values, each one URL or several separated by commas.

    `host:port` means `http://host:port`; a path (a proxy's prefix) is kept without its
    trailing slash. Raises UsageProblem naming `where` for anything that is not an http(s) URL
    of a host, or when no server is left.
    """
    found: list[str] = []
    for value in values:
        for item in value.split(","):
            item = item.strip()
            if item:
                url = _base_url(item, where)
                if url not in found:
                    found.append(url)
    if not found:
        raise UsageProblem(f"{where}: no server given")
    return tuple(found)


def _base_url(item: str, where: str) -> str:
    text = item if "://" in item else f"http://{item}"
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise UsageProblem(f"{where}: {item!r} is not a server URL ({exc})") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageProblem(f"{where}: {item!r} is not an http:// or https:// URL of a host")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise UsageProblem(
            f"{where}: {item!r} must be scheme://host[:port][/prefix] (credentials go in --user)"
        )
    netloc = parts.netloc if port is None or port > 0 else ""
    if not netloc:
        raise UsageProblem(f"{where}: {item!r} has no usable host and port")
    return f"{parts.scheme}://{netloc}{parts.path.rstrip('/')}"


def resolve(flags: Flags, env: Mapping[str, str], config: ConfigFile) -> ConnectionSettings:
    """The settings from `flags`, else `env`, else `config`, else the defaults.

    Raises UsageProblem naming the flag, variable or file key that holds a bad value.
    """
    sources: dict[str, str] = {}
    file_values = config.values
    file_name = f"config file {config.path}"

    if flags.servers:
        servers = parse_servers(flags.servers, "--server")
        sources["server"] = "flag"
    elif env.get(ENV_SERVER, "").strip():
        servers = parse_servers([env[ENV_SERVER]], ENV_SERVER)
        sources["server"] = "env"
    elif "server" in file_values:
        servers = parse_servers(file_values["server"], f"{file_name}: server")
        sources["server"] = "file"
    else:
        servers = (DEFAULT_SERVER,)
        sources["server"] = "default"

    user, sources["user"] = _pick(flags.user, env.get(ENV_USER), file_values.get("user"))
    password, sources["password"] = _pick(
        flags.password, env.get(ENV_PASSWORD), file_values.get("password")
    )
    token, token_source = _pick(flags.token, env.get(ENV_TOKEN), file_values.get("token"))
    if token is not None:
        where = {"flag": "--token", "env": ENV_TOKEN}.get(token_source, f"{file_name}: token")
        token = _checked_token(token, where)
        if _token_wins(token_source, user, sources["user"], where):
            user, password = None, None
            sources["token"] = token_source
            sources["user"] = sources["password"] = "default"
        else:
            token = None

    if flags.timeout_s is not None:
        timeout_s = check_timeout(flags.timeout_s, "--timeout")
        sources["timeout"] = "flag"
    elif env.get(ENV_TIMEOUT, "").strip():
        timeout_s = check_timeout(_env_float(env[ENV_TIMEOUT], ENV_TIMEOUT), ENV_TIMEOUT)
        sources["timeout"] = "env"
    elif "timeout" in file_values:
        timeout_s = float(file_values["timeout"])
        sources["timeout"] = "file"
    else:
        timeout_s = DEFAULT_TIMEOUT_S
        sources["timeout"] = "default"
    cacert, source = _pick(flags.cacert, env.get(ENV_CACERT), file_values.get("cacert"))
    if cacert is not None:
        sources["cacert"] = source
        where = {"flag": "--cacert", "env": ENV_CACERT}.get(source, f"{file_name}: cacert")
        cacert = _readable_file(cacert, where)
    return ConnectionSettings(servers, user, password, timeout_s, sources, cacert, token)


def _checked_token(token: str, where: str) -> str:
    """`token` stripped, if it has the form of an API token; UsageProblem naming `where` (never
    the token) otherwise."""
    text = token.strip()
    if not _TOKEN.match(text):
        raise UsageProblem(
            f"{where} is not an ejcloud API token (ejc_<12 hex>_<48 hex>, as `ejcloud token "
            "create` prints it)"
        )
    return text


def _token_wins(token_source: str, user: str | None, user_source: str, where: str) -> bool:
    """Whether the token is used rather than the user (the more specific place wins: module
    docstring); UsageProblem when a token and a user come from the same place."""
    if user is None:
        return True
    token_rank, user_rank = _SOURCE_RANK[token_source], _SOURCE_RANK[user_source]
    if token_rank == user_rank:
        user_where = {"flag": "--user", "env": ENV_USER}.get(user_source, "user in the file")
        raise UsageProblem(f"give {where} or {user_where}, not both")
    return token_rank < user_rank


def _readable_file(path: str, where: str) -> str:
    """`path` expanded, if it names a readable file; UsageProblem naming `where` otherwise."""
    expanded = os.path.expanduser(path)
    try:
        with open(expanded, "rb"):
            pass
    except OSError as exc:
        raise UsageProblem(f"{where}: cannot read {path}: {exc.strerror}") from exc
    return expanded


def _pick(flag: str | None, env: str | None, file: str | None) -> tuple[str | None, str]:
    if flag is not None:
        return flag, "flag"
    if env:
        return env, "env"
    if file is not None:
        return file, "file"
    return None, "default"


def _env_float(text: str, name: str) -> float:
    try:
        return float(text)
    except ValueError as exc:
        raise UsageProblem(f"{name} must be a number of seconds, not {text!r}") from exc

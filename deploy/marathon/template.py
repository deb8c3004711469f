"""Render the scheduler's Marathon app definition from `marathon/ejcloud-scheduler.json`."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy.marathon.errors import InvalidOptions

TEMPLATE_PATH = Path(__file__).resolve().parents[2] / "marathon" / "ejcloud-scheduler.json"
_PLACEHOLDER = re.compile(r"\{\{([a-z_]+)\}\}")
_APP_ID = re.compile(r"^(/[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$")
# Exported by `cmd` from Marathon's $HOST and $PORT0; an env value would be overridden anyway.
_SET_BY_CMD = frozenset({"hostname", "http_port"})
_LOCAL_HOSTS = re.compile(r"(^|[/@,:])(localhost|127\.\d+\.\d+\.\d+)([:/,]|$)")


@dataclass(frozen=True)
class AppSpec:
    """What the user chose; `render` turns it into a Marathon app definition."""

    zk_servers: str
    mesos_url: str
    artifact_url: str
    app_id: str = "/ejcloud-scheduler"
    instances: int = 2
    cpus: float = 0.5
    mem_mb: float = 512.0
    env: Mapping[str, str] = field(default_factory=dict)
    image: str | None = None

    def problems(self) -> list[str]:
        """Every problem with the spec, empty when it is fine."""
        found: list[str] = []
        if not _APP_ID.match(self.app_id):
            found.append(f"app id {self.app_id!r} is not /lower-case-name(/...)")
        if self.instances < 2:
            found.append(f"--instances {self.instances}: at least 2 (one leader, one standby)")
        if self.cpus <= 0:
            found.append(f"--cpus {self.cpus}: must be > 0")
        if self.mem_mb < 32:
            found.append(f"--mem {self.mem_mb}: at least 32 MB")
        for name, value in (("--zk", self.zk_servers), ("--mesos", self.mesos_url)):
            if not value.strip():
                found.append(f"{name} is empty")
            elif _LOCAL_HOSTS.search(value):
                found.append(
                    f"{name} {value!r} names localhost, which on a Mesos agent is the agent "
                    "itself: give addresses every agent reaches"
                )
        for key in sorted(self.env):
            if key in _SET_BY_CMD:
                found.append(f"--env {key}: set by Marathon ($HOST/$PORT0), not by --env")
            elif not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                found.append(f"--env {key!r}: not an environment variable name")
        return found


def _substitute(node: Any, values: Mapping[str, Any]) -> Any:
    if isinstance(node, dict):
        return {k: _substitute(v, values) for k, v in node.items()}
    if isinstance(node, list):
        return [_substitute(v, values) for v in node]
    if isinstance(node, str):
        whole = _PLACEHOLDER.fullmatch(node)
        if whole:
            return values[whole.group(1)]
        return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), node)
    return node


def render(spec: AppSpec, template_path: Path = TEMPLATE_PATH) -> dict[str, Any]:
    """Return the app definition for `spec`.

    Raises InvalidOptions naming every problem of the spec, or when the template cannot be read
    or uses a placeholder this function does not know.
    """
    problems = spec.problems()
    if problems:
        raise InvalidOptions("; ".join(problems))
    try:
        template = json.loads(template_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidOptions(f"cannot read the app template {template_path}: {exc}") from exc
    env = {
        "zk_servers": spec.zk_servers,
        "mesos_url": spec.mesos_url,
        "http_bind_address": "0.0.0.0",
        **spec.env,
    }
    values: dict[str, Any] = {
        "app_id": spec.app_id,
        "instances": spec.instances,
        "cpus": spec.cpus,
        "mem": spec.mem_mb,
        "env": env,
        "artifact_url": spec.artifact_url,
    }
    try:
        app: dict[str, Any] = _substitute(template, values)
    except KeyError as exc:
        raise InvalidOptions(f"app template {template_path} uses unknown {exc}") from exc
    if spec.image:
        # The Mesos containerizer runs `cmd` in the image with the sandbox (fetched artifact)
        # as working directory and the agent's network, so $HOST:$PORT0 stays reachable.
        app["container"] = {"type": "MESOS", "docker": {"image": spec.image}}
    return app

"""Render the scheduler's Marathon app definition from `marathon/ejcloud-scheduler.json`."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from marathon.credentials import (
    ACCOUNTS,
    PLAIN_PASSWORDS,
    SECRET_SETTINGS,
    holds_secret,
    setting_of,
    source_problem,
)
from marathon.errors import InvalidOptions

TEMPLATE_PATH = Path(__file__).resolve().parent / "ejcloud-scheduler.json"
_PLACEHOLDER = re.compile(r"\{\{([a-z_]+)\}\}")
_APP_ID = re.compile(r"^(/[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$")
# Exported by `cmd` from Marathon's $HOST and $PORT0; an env value would be overridden anyway.
_SET_BY_CMD = frozenset({"hostname", "http_port"})
# Given by the template on the command line (true; --insecure-zk without a digest: false).
_SET_BY_TEMPLATE = frozenset({"require_zk_digest"})
_LOCAL_HOSTS = re.compile(r"(^|[/@,:])(localhost|127\.\d+\.\d+\.\d+)([:/,]|$)")
# What `cmd` starts: the artifact's script (fetched into the sandbox), or the scheduler's
# entry point on the PATH of the container image (the Containerfile's `scheduler` target).
ARTIFACT_START = "./ejcloud/bin/run-scheduler"
IMAGE_START = "ejcloud-scheduler"
# A Docker image reference: [registry[:port]/]name[:tag][@digest], no spaces or shell syntax.
_IMAGE_REF = re.compile(
    r"^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[0-9a-f]{64})?$"
)
# Nothing to install when a replica in the image starts (the artifact's first start installs
# the lock into the sandbox: 300 s).
_IMAGE_GRACE_SECONDS = 60


def _plain_password(where: str, setting: str) -> str:
    account = next(a for a in ACCOUNTS if a.setting == f"{setting}_hash")
    return (
        f"{where}: plain passwords are refused; store a hash made with python -m "
        f"scheduler.api.auth hash and give {account.secret_option} SOURCE"
    )


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
    # the artifact path in this image, with the Mesos containerizer (`cmd` runs the artifact)
    image: str | None = None
    # the container form: the scheduler's own image (Containerfile), Docker containerizer,
    # host networking, no artifact (`artifact_url` empty)
    container_image: str | None = None
    # scheduler setting -> its source in the cluster's secret store (Marathon `secrets`)
    secrets: Mapping[str, str] = field(default_factory=dict)
    # allow default passwords, secrets in the plain env, auth turned off and an http:// artifact
    # URL (see `warnings`)
    insecure: bool = False
    # allow an app without zk_digest (its replicas then run with require_zk_digest=false)
    insecure_zk: bool = False

    def has_zk_digest(self) -> bool:
        """Whether the replicas get a zk_digest (from the secret store, or the plain env)."""
        return "zk_digest" in self.secrets or any(
            setting_of(key) == "zk_digest" and value.strip() for key, value in self.env.items()
        )

    def serves_tls(self) -> bool:
        """Whether the replicas serve https (`http_tls_cert_file` given, from the secret store
        or the plain env): the health checks and the deployer's polling must use it then."""
        return "http_tls_cert_file" in self.secrets or any(
            setting_of(key) == "http_tls_cert_file" and value.strip()
            for key, value in self.env.items()
        )

    def _plain_artifact(self) -> bool:
        return self.artifact_url.strip().lower().startswith("http://")

    def _auth_disabled(self) -> bool:
        return any(
            setting_of(key) == "auth_enabled"
            and value.strip().lower() not in ("true", "yes", "on", "1")
            for key, value in self.env.items()
        )

    def _missing_hashes(self) -> list[str]:
        """The settings of the accounts that would keep their default password."""
        given = set(self.secrets) | {setting_of(key) for key in self.env}
        return [a.setting for a in ACCOUNTS if a.setting not in given]

    def _secret_problems(self) -> list[str]:
        found: list[str] = []
        plain = {setting_of(key): key for key in self.env}
        for setting in sorted(self.secrets):
            source = self.secrets[setting]
            if setting in PLAIN_PASSWORDS:
                found.append(_plain_password(f"--secret {setting}", setting))
            elif setting not in SECRET_SETTINGS:
                found.append(
                    f"--secret {setting}: not one of the scheduler's secret settings "
                    f"({', '.join(sorted(SECRET_SETTINGS))})"
                )
            elif setting in plain:
                found.append(f"{setting} given twice: as a secret and as --env {plain[setting]}")
            why = source_problem(source)
            if why:
                found.append(f"secret source of {setting}: {why}")
        sources = list(self.secrets.values())
        if len(set(sources)) != len(sources):
            found.append("two secrets read the same secret store source")
        for key in sorted(self.env):
            named = setting_of(key)
            if named in PLAIN_PASSWORDS:
                found.append(_plain_password(f"--env {key}", named))
            elif holds_secret(named, self.env[key]) and not self.insecure:
                found.append(
                    f"--env {key}: a secret in the app's plain env, readable by anyone who "
                    f"can read the app; store it and give --secret {named}=SOURCE "
                    "(or --insecure)"
                )
        if self.insecure:
            return found
        if self._auth_disabled():
            found.append("--env auth_enabled: turning authentication off needs --insecure")
        elif missing := self._missing_hashes():
            accounts = [a for a in ACCOUNTS if a.setting in missing]
            logins = " and ".join(f"{a.username(self.env)}/{a.default_password}" for a in accounts)
            options = " and ".join(f"{a.secret_option} SOURCE" for a in accounts)
            found.append(
                f"no password hash: the replicas would accept the default login {logins}; "
                "store hashes made with python -m scheduler.api.auth hash in your secret "
                f"store and give {options} (or --insecure to deploy with defaults)"
            )
        return found

    def warnings(self) -> list[str]:
        """What is insecure about a spec that `insecure` or `insecure_zk` let through, empty
        when nothing."""
        found: list[str] = []
        if self.insecure_zk and not self.has_zk_digest():
            found.append(
                "no zk_digest: every node in ZooKeeper is world-writable, so anyone who reaches "
                "ZooKeeper can rewrite jobs (and so run code on the agents); the replicas run "
                "with require_zk_digest=false and warn about it"
            )
        if not self.insecure:
            return found
        if self._plain_artifact():
            found.append(
                f"the artifact {self.artifact_url} is fetched over plain http: anyone on the "
                "path can replace the code every replica runs"
            )
        if self._auth_disabled():
            found.append("authentication is off: anyone who reaches /api may change and run jobs")
        else:
            for account in ACCOUNTS:
                if account.setting in self._missing_hashes():
                    found.append(
                        f"no {account.role} password hash: the replicas accept the default "
                        f"login {account.username(self.env)}/{account.default_password}"
                    )
        for key in sorted(self.env):
            if holds_secret(setting_of(key), self.env[key]):
                found.append(
                    f"{key} is in the app's plain env: anyone who can read the app in Marathon "
                    "sees it"
                )
        return found

    def _source_problems(self) -> list[str]:
        """Where the code comes from: an artifact, or the container image (not both)."""
        if self.container_image is None:
            return [] if self.artifact_url.strip() else ["no artifact URL and no container image"]
        found: list[str] = []
        if not _IMAGE_REF.match(self.container_image) or len(self.container_image) > 255:
            found.append(
                f"--container-image {self.container_image!r} is not an image reference "
                "([registry/]name[:tag][@sha256:digest])"
            )
        if self.artifact_url.strip():
            found.append("--container-image runs the code of the image: give no artifact too")
        if self.image is not None:
            found.append("--image and --container-image: the app runs in one image, give one")
        return found

    def problems(self) -> list[str]:
        """Every problem with the spec, empty when it is fine."""
        found: list[str] = []
        found += self._source_problems()
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
        if not self.has_zk_digest() and not self.insecure_zk:
            found.append(
                "no zk_digest: without it anyone who reaches ZooKeeper can rewrite jobs (and so "
                "run code on the agents) and add members to the election; store user:password "
                "in your secret store and give --secret zk_digest=SOURCE (or --insecure-zk)"
            )
        if self._plain_artifact() and not self.insecure:
            found.append(
                f"--artifact-url {self.artifact_url!r} is plain http: anyone on the path could "
                "replace the code every replica runs; serve it over https:// (or file:// on "
                "every agent, or --insecure)"
            )
        for key in sorted(self.env):
            if key in _SET_BY_CMD:
                found.append(f"--env {key}: set by Marathon ($HOST/$PORT0), not by --env")
            elif setting_of(key) in _SET_BY_TEMPLATE:
                found.append(
                    f"--env {key}: set by the template (true; false only with --insecure-zk "
                    "and no zk_digest)"
                )
            elif not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                found.append(f"--env {key!r}: not an environment variable name")
        return found + self._secret_problems()


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
    env: dict[str, Any] = {
        "zk_servers": spec.zk_servers,
        "mesos_url": spec.mesos_url,
        "http_bind_address": "0.0.0.0",
        **spec.env,
    }
    # Each secret is a variable named after its setting whose value Marathon's secrets plugin
    # reads from the store at launch; the definition holds only the source's name.
    secrets: dict[str, Any] = {}
    for setting in sorted(spec.secrets):
        secrets[setting] = {"source": spec.secrets[setting]}
        env[setting] = {"secret": setting}
    values: dict[str, Any] = {
        "app_id": spec.app_id,
        "instances": spec.instances,
        "cpus": spec.cpus,
        "mem": spec.mem_mb,
        "env": env,
        "secrets": secrets,
        "artifact_url": spec.artifact_url,
        "start_command": IMAGE_START if spec.container_image else ARTIFACT_START,
        # The replicas refuse to start without a digest, unless the user asked for none.
        "require_zk_digest": "false" if spec.insecure_zk and not spec.has_zk_digest() else "true",
    }
    try:
        app: dict[str, Any] = _substitute(template, values)
    except KeyError as exc:
        raise InvalidOptions(f"app template {template_path} uses unknown {exc}") from exc
    if spec.serves_tls():
        # A replica with a certificate serves only https on its port (Mesos does not verify
        # the certificate of a MESOS_HTTPS check).
        tls = {"MESOS_HTTP": "MESOS_HTTPS", "HTTP": "HTTPS"}
        for check in app.get("healthChecks") or []:
            check["protocol"] = tls.get(check.get("protocol"), check.get("protocol"))
    if spec.container_image:
        _container_form(app, spec.container_image)
    elif spec.image:
        # The Mesos containerizer runs `cmd` in the image with the sandbox (fetched artifact)
        # as working directory and the agent's network, so $HOST:$PORT0 stays reachable.
        app["container"] = {"type": "MESOS", "docker": {"image": spec.image}}
    return app


def _container_form(app: dict[str, Any], image: str) -> None:
    """Turn the artifact app into the container form (Marathon 1.5+): the scheduler's image
    run by the Docker containerizer on the agent's network (`networks` host mode, so `$HOST`
    and `$PORT0` are the replica's address as in the artifact form, and the port definitions
    stay), `cmd` run by `/bin/sh -c` in the image, nothing fetched."""
    app.pop("fetch", None)
    app["container"] = {
        "type": "DOCKER",
        "docker": {"image": image, "forcePullImage": False},
        "volumes": [],
    }
    app["networks"] = [{"mode": "host"}]
    for check in app.get("healthChecks") or []:
        check["gracePeriodSeconds"] = min(check.get("gracePeriodSeconds", 0), _IMAGE_GRACE_SECONDS)

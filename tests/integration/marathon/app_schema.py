"""Marathon 1.x's rules for an app definition (`POST /v2/apps`), as its REST API declares them.

Written from Marathon's RAML types (docs/docs/rest-api/public/api/v2/types: `app.raml`'s `App`,
`appContainer.raml`'s `Container`/`DockerContainer`, `network.raml`'s `Network` and
`PortDefinition`, `healthCheck.raml`'s `AppHealthCheck`, `secrets.raml`,
`environmentVariable.raml`, `constraint.raml`, `artifact.raml`) and, for what the RAML leaves
to code, the app validation of Marathon 1.5+: `networks` (1.5) replaces
`container.docker.network`, and the two may not be combined; host networking takes
`portDefinitions`, never `container.portMappings`; a DOCKER container needs `docker.image`;
`cmd` and `args` never both. Only the properties an App may have are accepted (unknown
fields are an error here, as they are for Marathon's strict JSON reads), each with its type,
bounds and enums. `problems` answers in Marathon's 422 `details` shape.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

Check = Callable[[Any, str], list[str]]

_PATH_ID = re.compile(r"^(\/?((\.{2})|([a-z0-9][a-z0-9\-.]*[a-z0-9]+)|([a-z0-9]*))($|\/))+$")
_LEGACY_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9]+)*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _is(kind: type | tuple[type, ...], what: str) -> Check:
    def check(value: Any, path: str) -> list[str]:
        return [] if isinstance(value, kind) else [f"{path}: error.expected.{what}"]

    return check


def _integer(minimum: int | None = None, maximum: int | None = None) -> Check:
    def check(value: Any, path: str) -> list[str]:
        if isinstance(value, bool) or not isinstance(value, int):
            return [f"{path}: error.expected.jsnumber (integer)"]
        if minimum is not None and value < minimum:
            return [f"{path}: error.min {minimum}"]
        if maximum is not None and value > maximum:
            return [f"{path}: error.max {maximum}"]
        return []

    return check


def _number(minimum: float | None = None, maximum: float | None = None) -> Check:
    def check(value: Any, path: str) -> list[str]:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return [f"{path}: error.expected.jsnumber"]
        if minimum is not None and value < minimum:
            return [f"{path}: error.min {minimum}"]
        if maximum is not None and value > maximum:
            return [f"{path}: error.max {maximum}"]
        return []

    return check


def _string(min_length: int = 0, pattern: re.Pattern[str] | None = None) -> Check:
    def check(value: Any, path: str) -> list[str]:
        if not isinstance(value, str):
            return [f"{path}: error.expected.jsstring"]
        if len(value) < min_length:
            return [f"{path}: error.minLength {min_length}"]
        if pattern is not None and not pattern.match(value):
            return [f"{path}: error.pattern"]
        return []

    return check


def _enum(*values: str) -> Check:
    def check(value: Any, path: str) -> list[str]:
        return [] if value in values else [f"{path}: error.enum {list(values)}"]

    return check


def _array(item: Check) -> Check:
    def check(value: Any, path: str) -> list[str]:
        if not isinstance(value, list):
            return [f"{path}: error.expected.jsarray"]
        return [p for n, v in enumerate(value) for p in item(v, f"{path}({n})")]

    return check


def _map(item: Check, key: re.Pattern[str] | None = None) -> Check:
    def check(value: Any, path: str) -> list[str]:
        if not isinstance(value, dict):
            return [f"{path}: error.expected.jsobject"]
        found = []
        for k, v in value.items():
            if key is not None and not key.match(k):
                found.append(f"{path}/{k}: error.pattern (key)")
            found += item(v, f"{path}/{k}")
        return found

    return check


def _object(required: dict[str, Check], optional: dict[str, Check]) -> Check:
    def check(value: Any, path: str) -> list[str]:
        if not isinstance(value, dict):
            return [f"{path}: error.expected.jsobject"]
        found = [f"{path}/{k}: error.path.missing" for k in required if k not in value]
        fields = {**required, **optional}
        for k, v in value.items():
            if k not in fields:
                found.append(f"{path}/{k}: error.unknown.field")
            else:
                found += fields[k](v, f"{path}/{k}")
        return found

    return check


_KV_LABELS = _map(_string())
_PORT = _integer(0, 65535)
_PROTOCOL = _enum("tcp", "udp", "udp,tcp")
_PORT_DEFINITION = _object(
    {},
    {
        "port": _PORT,
        "labels": _KV_LABELS,
        "name": _string(1, _LEGACY_NAME),
        "protocol": _PROTOCOL,
    },
)
_PORT_MAPPING = _object(
    {},
    {
        "containerPort": _PORT,
        "hostPort": _PORT,
        "labels": _KV_LABELS,
        "name": _string(1, _LEGACY_NAME),
        "protocol": _PROTOCOL,
        "servicePort": _PORT,
        "networkNames": _array(_string(1)),
    },
)
_DOCKER = _object(
    {"image": _string(1)},
    {
        "credential": _object({"principal": _string()}, {"secret": _string()}),
        "pullConfig": _object({"secret": _string(1)}, {}),
        "forcePullImage": _is(bool, "jsboolean"),
        "network": _enum("BRIDGE", "HOST", "NONE", "USER"),
        "parameters": _array(_object({"key": _string(1), "value": _string()}, {})),
        "portMappings": _array(_PORT_MAPPING),
        "privileged": _is(bool, "jsboolean"),
    },
)
_VOLUME = _object(
    {"containerPath": _string(1)},
    {
        "hostPath": _string(1),
        "mode": _enum("RO", "RW"),
        "persistent": _object({}, {"size": _integer(0), "type": _string()}),
        "external": _is(dict, "jsobject"),
        "secret": _string(1),
    },
)
_CONTAINER = _object(
    {},
    {
        "type": _enum("MESOS", "DOCKER"),
        "docker": _DOCKER,
        "appc": _object({"image": _string(1)}, {"id": _string(7), "labels": _KV_LABELS}),
        "volumes": _array(_VOLUME),
        "portMappings": _array(_PORT_MAPPING),
    },
)
_NETWORK = _object(
    {},
    {
        "name": _string(1),
        "mode": _enum("container", "container/bridge", "host"),
        "labels": _KV_LABELS,
    },
)
_HEALTH_CHECK = _object(
    {},
    {
        "command": _object({}, {"value": _string()}),
        "gracePeriodSeconds": _integer(0),
        "ignoreHttp1xx": _is(bool, "jsboolean"),
        "intervalSeconds": _integer(0),
        "maxConsecutiveFailures": _integer(0),
        "path": _string(),
        "port": _PORT,
        "portIndex": _PORT,
        "protocol": _enum(
            "HTTP", "HTTPS", "TCP", "COMMAND", "MESOS_TCP", "MESOS_HTTP", "MESOS_HTTPS"
        ),
        "ipProtocol": _enum("IPv4", "IPv6"),
        "timeoutSeconds": _integer(0),
        "delaySeconds": _integer(0),
    },
)


def _env_value(value: Any, path: str) -> list[str]:
    if isinstance(value, str):
        return []
    return _object({"secret": _string(1)}, {})(value, path)


def _constraint(value: Any, path: str) -> list[str]:
    if not isinstance(value, list) or not 2 <= len(value) <= 3:
        return [f"{path}: a constraint is [field, operator(, value)]"]
    found = _string(1)(value[0], f"{path}(0)")
    found += _enum("UNIQUE", "CLUSTER", "GROUP_BY", "LIKE", "UNLIKE", "MAX_PER", "IS")(
        value[1], f"{path}(1)"
    )
    if len(value) == 3:
        found += _string()(value[2], f"{path}(2)")
    return found


_UPGRADE = _object(
    {}, {"minimumHealthCapacity": _number(0.0, 1.0), "maximumOverCapacity": _number(0.0, 1.0)}
)
_APP = _object(
    {"id": _string(1, _PATH_ID)},
    {
        "acceptedResourceRoles": _array(_string()),
        "args": _array(_string()),
        "backoffFactor": _number(1.0),
        "backoffSeconds": _integer(0),
        "cmd": _string(1),
        "constraints": _array(_constraint),
        "container": _CONTAINER,
        "cpus": _number(0.001),
        "dependencies": _array(_string(1, _PATH_ID)),
        "disk": _number(0),
        "env": _map(_env_value, _ENV_NAME),
        "executor": _string(),
        "fetch": _array(
            _object(
                {"uri": _string(1)},
                {
                    "executable": _is(bool, "jsboolean"),
                    "extract": _is(bool, "jsboolean"),
                    "cache": _is(bool, "jsboolean"),
                    "destPath": _string(),
                },
            )
        ),
        "healthChecks": _array(_HEALTH_CHECK),
        "instances": _integer(0),
        "labels": _KV_LABELS,
        "maxLaunchDelaySeconds": _integer(0),
        "mem": _number(0),
        "gpus": _integer(0),
        "networks": _array(_NETWORK),
        "portDefinitions": _array(_PORT_DEFINITION),
        "requirePorts": _is(bool, "jsboolean"),
        "secrets": _map(_object({"source": _string(1)}, {})),
        "taskKillGracePeriodSeconds": _integer(0),
        "upgradeStrategy": _UPGRADE,
        "user": _string(),
        "killSelection": _enum("YOUNGEST_FIRST", "OLDEST_FIRST"),
        "unreachableStrategy": _is((dict, str), "jsobject"),
    },
)


def _cross_field(app: dict[str, Any]) -> list[str]:
    found: list[str] = []
    if "cmd" in app and "args" in app:
        found.append("/: AppDefinition must either contain one of 'cmd' or 'args', not both")
    container = app.get("container") or {}
    if not isinstance(container, dict):
        return found
    kind = container.get("type", "DOCKER")
    docker = container.get("docker")
    if "container" in app and kind == "DOCKER" and not isinstance(docker, dict):
        found.append("/container/docker: must be defined for a DOCKER container")
    networks = app.get("networks") or []
    modes = [n.get("mode", "container") for n in networks if isinstance(n, dict)]
    if isinstance(docker, dict) and "network" in docker and networks:
        found.append("/container/docker/network: deprecated; may not be combined with /networks")
    if "host" in modes and len(modes) > 1:
        found.append("/networks: host networking may not be combined with other networks")
    if "host" in modes and container.get("portMappings"):
        found.append("/container/portMappings: not allowed with host networking")
    if (container.get("portMappings") or []) and app.get("portDefinitions"):
        found.append("/portDefinitions: not allowed with container portMappings")
    for n, check in enumerate(app.get("healthChecks") or []):
        if not isinstance(check, dict) or "portIndex" not in check:
            continue
        ports = app.get("portDefinitions") or container.get("portMappings") or []
        if check["portIndex"] >= len(ports):
            found.append(f"/healthChecks({n})/portIndex: no port at that index")
    return found


def problems(app: Any) -> list[dict[str, Any]]:
    """Every violation of the rules above, as Marathon's 422 `details` (`path`, `errors`)."""
    lines = _APP(app, "")
    if isinstance(app, dict):
        lines += _cross_field(app)
    details: dict[str, list[str]] = {}
    for line in lines:
        path, _, error = line.partition(": ")
        details.setdefault(path or "/", []).append(error)
    return [{"path": path, "errors": errors} for path, errors in details.items()]

"""Checks every `/api` request passes before its handler runs: names, and who may write.

- **Names** of apps and jobs taken from a path (`/api/app/{appName}`, `/api/job/{jobName}/...`),
  a query (`?appName=`) or a raw body (`POST /api/job/trigger`) must be able to name a stored
  node before they are used to read one: 1-100 characters, no `/`, not `.` or `..`, and none of
  the characters ZooKeeper refuses in node names (controls, lone surrogates, private-use and
  characters beyond U+FFFF). Anything else is a 400 naming the field, and never reaches kazoo.
  This is looser than the rule for new names (`[A-Za-z0-9_][A-Za-z0-9_.-]*`), so apps and jobs
  that Elastic-Job-Cloud itself registered under other names can still be read and deleted.
- **Writes** (any method but GET, HEAD and OPTIONS) are refused with 403 when the request has an
  `Origin` header that is not this server's own origin (scheme, host and port of the `Host` the
  request was sent to) nor the origin of another replica in the election (the web console
  loaded from a standby calls the leader; the HTTP front marks such requests), and with 415
  when it has a body or a `Content-Type` that is not JSON.
  A web page of another origin can send a form (`application/x-www-form-urlencoded`,
  `multipart/form-data`) or `text/plain` without the browser asking the server first, and the
  browser adds the user's saved credentials; a JSON content type cannot be sent cross-origin
  without a preflight, which this server never grants. Scripts (curl, the original's console and
  its documented calls, which send `Content-Type: application/json` even for a raw job name)
  send no `Origin` or the server's own, so they are unaffected. Writes without a body need no
  `Content-Type` (`curl -X POST .../disable`).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from flask import Flask, request

from scheduler.edge.console.origins import REPLICA_ORIGIN_KEY
from scheduler.model.config import NAME_MAX_LENGTH, shown
from scheduler.model.errors import CrossOriginRefused, InvalidRequest, UnsupportedMediaType

READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_DEFAULT_PORTS = {"http": 80, "https": 443}
# What ZooKeeper refuses in a node name, as its Java server sees it (UTF-16 code units, so a
# character beyond U+FFFF arrives as a surrogate pair and is refused too); lone surrogates also
# cannot be encoded as UTF-8 at all.
_NODE_NAME_REFUSED = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\uf8ff\ufff0-\U0010ffff]")
_PATH_NAMES = {"app_name": "appName", "job_name": "jobName"}


def install_input_checks(app: Flask) -> None:
    """Check path names and guard writes on every request of `app` (before authentication, so a
    refused request costs no password check)."""
    app.url_value_preprocessor(_check_path_names)
    app.before_request(_guard_writes)


def reference_name(value: object, field: str) -> str:
    """`value` if it can name a stored app or job (see module docstring); InvalidRequest naming
    `field` otherwise."""
    if not isinstance(value, str) or not value:
        raise InvalidRequest(f"{field} is required", {field: "is required"})
    problem = reference_problem(value)
    if problem is not None:
        raise InvalidRequest(f"invalid {field} {shown(value)}: {problem}", {field: problem})
    return value


def reference_problem(name: str) -> str | None:
    """Why `name` cannot name a stored app or job, or None."""
    if len(name) > NAME_MAX_LENGTH:
        return f"must be at most {NAME_MAX_LENGTH} characters"
    if "/" in name or name in (".", ".."):
        return "must be a single name, without '/' and other than '.' and '..'"
    if _NODE_NAME_REFUSED.search(name):
        return (
            "must not contain control characters, lone surrogates, private-use characters or "
            "characters beyond U+FFFF"
        )
    return None


def is_json(mimetype: str) -> bool:
    return mimetype == "application/json" or (
        mimetype.startswith("application/") and mimetype.endswith("+json")
    )


def _check_path_names(_endpoint: str | None, values: dict[str, Any] | None) -> None:
    for key, field in _PATH_NAMES.items():
        if values and key in values:
            reference_name(values[key], field)


def _guard_writes() -> None:
    if request.method in READ_METHODS:
        return
    origin = request.headers.get("Origin")
    if origin is not None and origin != request.environ.get(REPLICA_ORIGIN_KEY):
        own = f"{request.scheme}://{request.host}"
        if _origin_key(origin) is None or _origin_key(origin) != _origin_key(own):
            raise CrossOriginRefused(
                f"a write from the web origin {shown(origin)} is refused: only this server's "
                f"own pages ({shown(own)}) and clients that send no Origin may write"
            )
    has_body = bool(request.content_length) or "Transfer-Encoding" in request.headers
    if (has_body or "Content-Type" in request.headers) and not is_json(request.mimetype):
        sent = request.mimetype or "a body without Content-Type"
        raise UnsupportedMediaType(
            f"send the body as JSON (Content-Type: application/json), not {shown(sent)}"
        )


def _origin_key(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an origin such as `http://Host:8899`; None if it is not one."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        return None
    return scheme, parts.hostname, port if port is not None else _DEFAULT_PORTS[scheme]

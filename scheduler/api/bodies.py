"""Request bodies: JSON objects for apps and jobs, and the raw job names the original accepts."""

from __future__ import annotations

import json
from typing import Any

from flask import request

from scheduler.errors import InvalidRequest, SchedulerError


class UnsupportedMediaType(SchedulerError):
    http_status = 415


def json_body() -> Any:
    """The decoded JSON body; 415 when it is not sent as JSON, 400 when it does not parse."""
    mimetype = request.mimetype or ""
    if mimetype != "application/json" and not mimetype.endswith("+json"):
        raise UnsupportedMediaType(
            f"send the body as JSON (Content-Type: application/json), not {mimetype or 'nothing'}"
        )
    raw = request.get_data(cache=True)
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidRequest(f"the body is not valid JSON: {exc}", {"body": "not JSON"}) from exc


def name_body(field: str = "jobName") -> str:
    """A job name sent as the raw body (`foo`), a JSON string (`"foo"`) or `{"jobName": "foo"}`."""
    raw = request.get_data(cache=True)
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        raise InvalidRequest("the body is not UTF-8 text", {field: "not UTF-8"}) from exc
    name: Any = text
    if text[:1] in ('"', "{"):
        try:
            name = json.loads(text)
        except ValueError as exc:
            raise InvalidRequest(f"the body is not valid JSON: {exc}", {field: "not JSON"}) from exc
        if isinstance(name, dict):
            name = name.get(field)
    if not isinstance(name, str) or not name.strip():
        raise InvalidRequest(f"send the {field} as the body", {field: "missing"})
    return name.strip()

"""Request bodies: JSON objects for apps and jobs, and the raw job names the original accepts."""

from __future__ import annotations

from typing import Any

from flask import request

from scheduler.api.inputs import is_json, reference_name
from scheduler.model.config import parse_json
from scheduler.model.errors import InvalidRequest, UnsupportedMediaType

__all__ = ["UnsupportedMediaType", "json_body", "name_body"]


def json_body() -> Any:
    """The decoded JSON body (nested at most 32 levels); 415 when it is not sent as JSON, 400
    when it does not parse."""
    mimetype = request.mimetype or ""
    if not is_json(mimetype):
        raise UnsupportedMediaType(
            f"send the body as JSON (Content-Type: application/json), not {mimetype or 'nothing'}"
        )
    return parse_json(request.get_data(cache=True), "request body")


def name_body(field: str = "jobName") -> str:
    """A job name sent as the raw body (`foo`), a JSON string (`"foo"`) or `{"jobName": "foo"}`,
    with `Content-Type: application/json` as the original's documentation and console send it
    (other content types are refused before this runs). InvalidRequest unless the name can name
    a stored job."""
    raw = request.get_data(cache=True)
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        raise InvalidRequest("the body is not UTF-8 text", {field: "not UTF-8"}) from exc
    name: Any = text
    if text[:1] in ('"', "{"):
        name = parse_json(raw, "request body")
        if isinstance(name, dict):
            name = name.get(field)
    if not isinstance(name, str) or not name.strip():
        raise InvalidRequest(f"send the {field} as the body", {field: "missing"})
    return reference_name(name.strip(), field)

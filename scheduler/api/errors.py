"""JSON errors for every `/api` answer: `{"error": message, "type": name[, "fields": {...}]}`
(and `"quota": setting` for a quota refusal), and content types that tell the truth: an error
is `application/json`, and an answer without content (204, 304) has no `Content-Type` (Flask
gives every response `text/html` by default).

One handler per error type, registered on the app: `SchedulerError` (its own status), werkzeug's
`HTTPException`, sqlalchemy's `DBAPIError` (the event trace database: 503 when it cannot be
reached, else 500) and any other `Exception` (500, logged)."""

from __future__ import annotations

import logging
from typing import Any

from flask import Flask, Response, jsonify
from sqlalchemy.exc import DBAPIError
from werkzeug.exceptions import HTTPException

from scheduler.leader.statistics.writer import unreachable
from scheduler.model.errors import (
    InvalidRequest,
    QuotaExceeded,
    SchedulerError,
    TraceDatabaseUnavailable,
)

log = logging.getLogger(__name__)


def _without_content_type_when_empty(response: Response) -> Response:
    if response.status_code in (204, 304):
        response.headers.pop("Content-Type", None)
        response.headers.pop("Content-Length", None)
    return response


def error_response(status: int, message: str, kind: str, **extra: Any) -> Response:
    body: dict[str, Any] = {"error": message, "type": kind}
    body.update(extra)
    response = jsonify(body)
    response.status_code = status
    return response


def install_error_handlers(app: Flask) -> None:
    app.after_request(_without_content_type_when_empty)

    @app.errorhandler(SchedulerError)
    def _scheduler_error(exc: SchedulerError) -> Response:
        extra: dict[str, Any] = {}
        if isinstance(exc, InvalidRequest) and exc.fields:
            extra["fields"] = exc.fields
        if isinstance(exc, QuotaExceeded):
            extra["quota"] = exc.quota  # the setting's name, for tools
        return error_response(exc.http_status, exc.message, type(exc).__name__, **extra)

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException) -> Response:
        code = exc.code or 500
        return error_response(code, exc.description or exc.name, exc.name.replace(" ", ""))

    @app.errorhandler(DBAPIError)
    def _database_error(exc: DBAPIError) -> Response:
        if not unreachable(exc):
            log.exception("api: event trace query failed", exc_info=exc)
            return error_response(500, "internal error; see the scheduler log", "InternalError")
        log.warning("api: event trace database unavailable: %s", str(exc).splitlines()[0])
        error = TraceDatabaseUnavailable(
            "the event trace database cannot be reached; scheduling is not affected, retry later"
        )
        return error_response(error.http_status, error.message, type(error).__name__)

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception) -> Response:
        app.logger.exception("api: unexpected error")
        return error_response(500, "internal error; see the scheduler log", "InternalError")

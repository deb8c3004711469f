"""The API's error handlers are the app's, one per error type: a database error raised in any
blueprint is a 503 when the event trace database cannot be reached, and a 500 (logged, its
text not shown) when it refused the query."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from flask import Blueprint, Flask
from sqlalchemy import create_engine, text

from scheduler.api.errors import install_error_handlers


def _app(tmp_path: Path) -> Flask:
    app = Flask("test-errors")
    app.config["PROPAGATE_EXCEPTIONS"] = False
    install_error_handlers(app)
    bp = Blueprint("anywhere", __name__, url_prefix="/api/anywhere")

    @bp.get("/unreachable")
    def unreachable() -> str:
        # A directory that does not exist: SQLite cannot open the file (OperationalError).
        engine = create_engine(f"sqlite:///{tmp_path / 'missing' / 'trace.db'}")
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
        return "reached"

    @bp.get("/refused")
    def refused() -> str:
        engine = create_engine(f"sqlite:///{tmp_path / 'trace.db'}")
        with engine.begin() as connection:
            connection.execute(text("CREATE TABLE t (k INTEGER PRIMARY KEY)"))
            connection.execute(text("INSERT INTO t VALUES (1)"))
            connection.execute(text("INSERT INTO t VALUES (1)"))  # IntegrityError
        return "inserted twice"

    app.register_blueprint(bp)
    return app


def test_an_unreachable_trace_database_is_a_503_from_any_blueprint(tmp_path: Path) -> None:
    response = _app(tmp_path).test_client().get("/api/anywhere/unreachable")

    assert response.status_code == 503
    assert response.content_type == "application/json"
    assert response.get_json() == {
        "error": "the event trace database cannot be reached; scheduling is not affected, "
        "retry later",
        "type": "TraceDatabaseUnavailable",
    }


def test_a_query_the_database_refused_is_a_500_logged_and_not_shown(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="scheduler.api.errors"):
        response = _app(tmp_path).test_client().get("/api/anywhere/refused")

    assert response.status_code == 500
    assert response.get_json() == {
        "error": "internal error; see the scheduler log",
        "type": "InternalError",
    }
    [record] = [r for r in caplog.records if r.name == "scheduler.api.errors"]
    assert record.getMessage() == "api: event trace query failed"
    assert record.exc_info is not None
    assert "UNIQUE constraint failed" in str(record.exc_info[1])

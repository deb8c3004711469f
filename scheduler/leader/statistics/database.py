"""Connecting to the event trace database (`event_trace_rdb_url`) and migrating it.

SQLite in the data directory by default; PostgreSQL or MySQL by URL (their drivers are not
dependencies of this project: install `psycopg` or `pymysql` where they are used).
"""

from __future__ import annotations

import logging
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

__all__ = [
    "DEFAULT_URL",
    "HEAD_REVISION",
    "create_trace_engine",
    "resolve_url",
    "upgrade_to_head",
    "url_problem",
]

log = logging.getLogger(__name__)

DEFAULT_URL = "sqlite:///data/ejcloud.db"
HEAD_REVISION = "0002_counted_results"
_MIGRATIONS = Path(__file__).resolve().parent / "migrations"
_SQLITE_BUSY_TIMEOUT_MS = 5000
_CONNECT_TIMEOUT_S = 5


# The original's JDBC URLs (`jdbc:mysql://host:3306/db`) and the drivers that replace them.
_JDBC = {
    "jdbc:mysql://": "mysql+pymysql://",
    "jdbc:mariadb://": "mysql+pymysql://",
    "jdbc:postgresql://": "postgresql+psycopg://",
}


def resolve_url(text: str, username: str = "", password: str = "") -> URL:
    """A SQLAlchemy URL from `event_trace_rdb_url` text: a SQLAlchemy URL, or one of the
    original's JDBC URLs; `username`/`password` fill in what the URL does not say.

    Raises ValueError naming the problem (unknown JDBC database, unparsable URL).
    """
    text = text.strip()
    if text.lower().startswith("jdbc:"):
        prefix = next((p for p in _JDBC if text.lower().startswith(p)), None)
        if prefix is None:
            raise ValueError(
                "unsupported JDBC URL (jdbc:mysql, jdbc:mariadb and jdbc:postgresql are "
                "translated; give a SQLAlchemy URL for anything else)"
            )
        text = _JDBC[prefix] + text[len(prefix) :].split("?", 1)[0]
    try:
        url = make_url(text)
    except ArgumentError as exc:
        raise ValueError(f"not a database URL: {exc}") from None
    if username and url.username is None:
        url = url.set(username=username, password=password or None)
    return url


def url_problem(text: str) -> str | None:
    """Why `text` cannot be the trace database URL (None if it can, and for "" / "none")."""
    if not text.strip() or text.strip().lower() == "none":
        return None
    try:
        url = resolve_url(text)
        dialect = url.get_dialect()
    except ValueError as exc:
        return str(exc)
    except NoSuchModuleError:
        return f"no SQLAlchemy dialect for {text.split(':', 1)[0]!r}"
    try:
        dialect.import_dbapi()
    except ImportError as exc:
        return (
            f"the {url.get_backend_name()} driver is not installed ({exc.name}); "
            "install the extra: pip install 'ejcloud[postgresql]' or 'ejcloud[mysql]'"
        )
    return None


def create_trace_engine(url: str | URL) -> Engine:
    """An engine for `url`; for a SQLite file, creates its folder first.

    Raises sqlalchemy.exc.ArgumentError for a URL it cannot parse and ModuleNotFoundError when
    the database's driver is not installed. Connects lazily: a database that is down shows up
    on first use, not here.
    """
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        # A database host that does not answer must not hang the writer or an API request.
        connect_args: dict[str, object] = {"connect_timeout": _CONNECT_TIMEOUT_S}
        if parsed.get_driver_name() == "psycopg":
            # No server-side prepared statements: PostgreSQL would soon reuse one generic plan
            # for `id IN (...)` made while a table was small (a full scan), and keep using it as
            # the table grows (measured: 1,240 trace updates/s at 100k rows instead of 40,000).
            connect_args["prepare_threshold"] = None
        return create_engine(parsed, pool_pre_ping=True, connect_args=connect_args)
    if parsed.database and parsed.database != ":memory:":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(parsed)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: object, _record: object) -> None:
        # The writer thread and the API threads share the file: wait for a lock, don't fail.
        cursor = dbapi_connection.cursor()  # type: ignore[attr-defined]
        cursor.execute(f"PRAGMA busy_timeout = {_SQLITE_BUSY_TIMEOUT_MS}")
        cursor.close()

    return engine


def upgrade_to_head(url_or_engine: str | Engine) -> None:
    """Bring the schema to the newest revision (creates every table on an empty database).

    Blocks; run it once at start-up, before the writer starts. Raises what the database raises
    (sqlalchemy.exc.OperationalError when it is unreachable).
    """
    engine = create_trace_engine(url_or_engine) if isinstance(url_or_engine, str) else url_or_engine
    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
    log.info("trace database %s: schema at %s", engine.url.render_as_string(), HEAD_REVISION)
    if isinstance(url_or_engine, str):
        engine.dispose()

"""Connecting to the event trace database (`event_trace_rdb_url`) and migrating it.

SQLite in the data directory by default; PostgreSQL or MySQL by URL (their drivers are not
dependencies of this project: install `psycopg` or `pymysql` where they are used).
"""

from __future__ import annotations

import logging
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url

__all__ = [
    "DEFAULT_URL",
    "HEAD_REVISION",
    "create_trace_engine",
    "upgrade_to_head",
]

log = logging.getLogger(__name__)

DEFAULT_URL = "sqlite:///data/ejcloud.db"
HEAD_REVISION = "0005_traces_time_index"
_MIGRATIONS = Path(__file__).resolve().parent / "migrations"
_SQLITE_BUSY_TIMEOUT_MS = 5000
_CONNECT_TIMEOUT_S = 5


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
        if parsed.get_backend_name() == "postgresql":
            # A host gone from the network without a reset (no RST, packets dropped) would
            # leave a call on an open connection waiting for ever: TCP gives up on data not
            # acknowledged in 30 s, and keepalives find a silent peer while a call waits for
            # its answer (10 s idle, then 3 probes 5 s apart). A frozen server whose kernel
            # still acknowledges is seen by DatabaseState's stall instead.
            connect_args.update(
                keepalives=1,
                keepalives_idle=10,
                keepalives_interval=5,
                keepalives_count=3,
                tcp_user_timeout=30_000,
            )
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
        # Write-ahead log: a commit appends its pages once (the rollback journal wrote each
        # page twice and synced twice), and the API's readers never wait for the writer.
        # synchronous=NORMAL syncs at checkpoints only: a killed process loses nothing, a
        # power cut may lose the last commits of history (the runs themselves are in
        # ZooKeeper). Measured: 29-38 us of CPU a trace row against 51-57 with the journal.
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.close()

    return engine


def upgrade_to_head(url_or_engine: str | Engine) -> None:
    """Bring the schema to the newest revision (creates every table on an empty database).

    Blocks; run it once at start-up, before the writer starts. Raises what the database raises
    (sqlalchemy.exc.OperationalError when it is unreachable).
    """
    # Imported here, by the leader's statistics thread: Alembic (with Mako and Pygments) is about
    # 0.2 s of CPU at import, which a standby, the CLI and every replica's start need not pay.
    from alembic import command
    from alembic.config import Config

    engine = create_trace_engine(url_or_engine) if isinstance(url_or_engine, str) else url_or_engine
    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
    log.info("trace database %s: schema at %s", engine.url.render_as_string(), HEAD_REVISION)
    if isinstance(url_or_engine, str):
        engine.dispose()

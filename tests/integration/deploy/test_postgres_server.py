"""deploy/postgres.py against real PostgreSQL servers, and the trace schema migrated into them."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.exc import OperationalError

from deploy.postgres import PostgresServer, PostgresUnavailable
from scheduler.leader.statistics import create_trace_engine, upgrade_to_head
from scheduler.leader.statistics.models import Base
from tests.support.processes import group_alive, live_pids, pid_alive, pid_reaped


@pytest.fixture
def server(postgres_dir: Path) -> Iterator[PostgresServer]:
    """A server of this test's own, which it may stop, restart or pause."""
    server = PostgresServer(postgres_dir / "postgres")
    server.start()
    yield server
    server.stop()


def _postmasters_of(data_dir: Path) -> list[int]:
    """Pids of live processes whose command line names `data_dir` (a postmaster keeps its
    argv)."""
    pids = []
    for pid in live_pids():
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # exited meanwhile
        if os.fsencode(data_dir) in argv:
            pids.append(pid)
    return pids


def test_a_fresh_trace_database_is_migrated_to_every_table(trace_url: str) -> None:
    engine = create_trace_engine(trace_url)
    try:
        upgrade_to_head(engine)
        tables = set(inspect(engine).get_table_names())
    finally:
        engine.dispose()
    assert {"JOB_STATUS_TRACE_LOG", "TASK_RESULT_STATISTICS_MINUTE"} <= tables
    assert set(Base.metadata.tables) <= tables


def test_the_session_server_gives_each_test_an_empty_database_of_its_own(
    postgres: PostgresServer, postgres_url: str
) -> None:
    assert postgres_url.startswith(f"postgresql+psycopg://postgres@127.0.0.1:{postgres.port}/t_")
    engine = create_engine(postgres_url)
    try:
        with engine.connect() as connection:
            tables = connection.scalar(
                text("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
            )
            database = connection.scalar(text("SELECT current_database()"))
    finally:
        engine.dispose()
    assert tables == 0
    assert postgres_url.endswith(f"/{database}")


def test_data_survives_a_restart_on_the_same_port_and_the_engine_reconnects(
    server: PostgresServer,
) -> None:
    engine = create_trace_engine(server.create_database("kept"))
    try:
        upgrade_to_head(engine)
        with engine.begin() as connection:
            connection.execute(
                text(
                    'INSERT INTO "JOB_REGISTER_STATISTICS" '
                    "(registered_count, statistics_time, creation_time) "
                    "VALUES (7, '2024-01-01 00:00', '2024-01-01 00:00')"
                )
            )
        port, first_pid = server.port, server.pid

        server.stop()
        server.start()

        assert server.port == port
        assert server.pid != first_pid
        # The pooled connection died with the old server; pool_pre_ping replaces it.
        with engine.connect() as connection:
            count = connection.scalar(
                text('SELECT registered_count FROM "JOB_REGISTER_STATISTICS"')
            )
    finally:
        engine.dispose()
    assert count == 7


def test_a_stopped_server_refuses_connections_and_leaves_no_process(
    server: PostgresServer,
) -> None:
    engine = create_trace_engine(server.create_database("gone"))
    try:
        with engine.connect() as connection:  # a backend in the server's process group
            assert connection.scalar(text("SELECT 1")) == 1
            pid = server.pid
            assert pid is not None and pid_alive(pid)

            server.stop()

            assert server.pid is None
            assert not server.running
            assert pid_reaped(pid)  # stopped and waited for
            assert not group_alive(pid)  # the backends went with the postmaster
            with pytest.raises(OperationalError, match="terminating connection"):
                connection.scalar(text("SELECT 1"))
        with pytest.raises(OperationalError, match="refused"):
            engine.connect()
    finally:
        engine.dispose()


def test_a_paused_server_lets_connections_time_out_until_resumed(
    server: PostgresServer,
) -> None:
    url = server.create_database("frozen")
    engine = create_engine(url, connect_args={"connect_timeout": 2})
    try:
        server.pause()
        started = time.monotonic()
        with pytest.raises(OperationalError, match="timeout"):
            engine.connect()
        # Hung until the client gave up, unlike a stopped server, which refuses at once.
        assert time.monotonic() - started >= 1.5
        assert server.running

        server.resume()

        with engine.connect() as connection:
            assert connection.scalar(text("SELECT 1")) == 1
    finally:
        engine.dispose()


def test_a_taken_port_fails_start_with_the_servers_log_and_leaves_no_process(
    server: PostgresServer, postgres_dir: Path
) -> None:
    second = PostgresServer(postgres_dir / "second", port=server.port)

    with pytest.raises(PostgresUnavailable, match="Address already in use"):
        second.start(timeout_s=30)

    assert not second.running
    assert _postmasters_of(second.data_dir) == []
    # The server that holds the port is untouched.
    engine = create_engine(server.url("postgres"))
    try:
        with engine.connect() as connection:
            served = connection.scalar(text("SELECT current_setting('data_directory')"))
    finally:
        engine.dispose()
    assert served == str(server.data_dir)

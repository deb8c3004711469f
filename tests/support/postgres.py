"""Fixtures for a real PostgreSQL server: one per test session, a fresh database per test.

Registered for every suite by `pytest_plugins` in tests/conftest.py. The server starts only when
a test asks for it; the fixture never skips (./dev.sh setup installs PostgreSQL).
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.postgres import PostgresServer

__all__ = ["postgres", "postgres_dir", "postgres_url", "pytest_exception_interact"]

_servers: list[PostgresServer] = []


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One real PostgreSQL server for the whole session, stopped and removed at its end.

    Its directory is a fresh one directly under the system's temporary directory, not under
    pytest's `/tmp/pytest-of-<user>`: the server runs as the `postgres` account, and every new
    pytest session (another run on the same machine) makes that folder private to its owner
    again, which cut a running server off its own data ("Permission denied" on pg_control).
    """
    base = Path(tempfile.mkdtemp(prefix="ejcloud-postgres-"))
    server = PostgresServer(base)
    try:
        server.start()
        _servers.append(server)
        yield server
        _servers.remove(server)
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def postgres_dir() -> Iterator[Path]:
    """A directory of this test's own for PostgreSQL servers it starts itself (outside pytest's
    private temporary tree, for the same reason as the session server's), removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="ejcloud-postgres-"))
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres: PostgresServer) -> Iterator[str]:
    """The SQLAlchemy URL of an empty database of this test's own, dropped after it.

    The drop disconnects sessions still open in it, so an engine the test did not dispose of
    does not keep it alive.
    """
    name = f"t_{uuid.uuid4().hex[:12]}"
    url = postgres.create_database(name)
    yield url
    postgres.drop_database(name)


def pytest_exception_interact(
    node: pytest.Item, call: pytest.CallInfo[None], report: object
) -> None:
    """On a failure, show the end of the session PostgreSQL server's log."""
    for server in _servers:
        print(f"\n--- {server.log_path} (last 20 lines) ---\n{server.log_tail(20)}")

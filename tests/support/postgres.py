"""Fixtures for a real PostgreSQL server: one per test session, a fresh database per test.

Registered for every suite by `pytest_plugins` in tests/conftest.py. The server starts only when
a test asks for it; the fixture never skips (./dev.sh setup installs PostgreSQL).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from deploy.postgres import PostgresServer

__all__ = ["postgres", "postgres_url", "pytest_exception_interact"]

_servers: list[PostgresServer] = []


@pytest.fixture(scope="session")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    """One real PostgreSQL server for the whole session, stopped at its end."""
    server = PostgresServer(tmp_path_factory.mktemp("postgres"))
    server.start()
    _servers.append(server)
    yield server
    _servers.remove(server)
    server.stop()


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

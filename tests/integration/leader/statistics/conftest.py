"""A migrated trace database per test, on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine

from scheduler.leader.statistics import create_trace_engine, upgrade_to_head


@pytest.fixture
def engine(trace_url: str) -> Iterator[Engine]:
    engine = create_trace_engine(trace_url)
    upgrade_to_head(engine)
    yield engine
    engine.dispose()

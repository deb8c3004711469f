"""A migrated SQLite trace database per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from scheduler.statistics import create_trace_engine, upgrade_to_head


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = create_trace_engine(f"sqlite:///{tmp_path / 'data' / 'trace.db'}")
    upgrade_to_head(engine)
    yield engine
    engine.dispose()

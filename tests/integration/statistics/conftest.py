"""A migrated trace database per test, on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient
from sqlalchemy import Engine

from scheduler.leader.statistics import create_trace_engine, upgrade_to_head
from scheduler.storage.registry import Fence, Registry


@pytest.fixture
def engine(trace_url: str) -> Iterator[Engine]:
    engine = create_trace_engine(trace_url)
    upgrade_to_head(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def registry(zk_client: KazooClient, zk_namespace: str) -> Registry:
    return Registry(zk_client, zk_namespace)


@pytest.fixture
def fence(registry: Registry, zk_client: KazooClient) -> Fence:
    """A leader's fence: an election node of this test's own client session."""
    registry.ensure("/ha/election")
    node = zk_client.create(registry.abs("/ha/election/n_"), b"me", ephemeral=True, sequence=True)
    return Fence(node, lambda: True)

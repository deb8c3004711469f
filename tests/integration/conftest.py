"""Fixtures the integration tests share: the test's registry namespace and a leader's fence."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient

from scheduler.storage.registry import Registry
from scheduler.storage.transactions import Fence


@pytest.fixture
def registry(zk_client: KazooClient, zk_namespace: str) -> Registry:
    return Registry(zk_client, zk_namespace)


@pytest.fixture
def fence(registry: Registry, zk_client: KazooClient) -> Fence:
    """A leader's fence: an election node of this test's own client session."""
    registry.ensure("/ha/election")
    node = zk_client.create(registry.abs("/ha/election/n_"), b"me", ephemeral=True, sequence=True)
    return Fence(node, lambda: True)

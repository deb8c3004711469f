"""Fixtures the integration tests share: the test's registry namespace, a leader's fence, the
term's view of the queues and its stores."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from scheduler.storage.config_store import ConfigStore
from scheduler.storage.queue_cache import QueueCache
from scheduler.storage.registry import Registry
from scheduler.storage.term_stores import TermStores
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


@pytest.fixture
def queues(registry: Registry) -> Iterator[QueueCache]:
    """The term's view of the queues, as a term builds it for its producer and launcher (here
    nobody is woken by its changes); stopped with the test."""
    view = QueueCache(registry, ConfigStore(registry, None, "UTC"))
    yield view
    view.stop()


@pytest.fixture
def stores(registry: Registry, fence: Fence) -> TermStores:
    """The term's stores in this test's namespace, fenced by `fence`, queues of 10,000 jobs."""
    return TermStores.build(registry, fence, "UTC", 10_000)

"""Fixtures of the launcher's tests: a stand-in of two small agents, term stores with a fence."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from scheduler.storage.registry import Registry
from scheduler.storage.term_stores import TermStores
from scheduler.storage.transactions import Fence
from tests.support.mesosfw import StandIn


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[StandIn]:
    # Two agents of 1 cpu (a run of 4 shards of 0.5 cpu needs both).
    mesos = StandIn(
        tmp_path / "mesos",
        *("--agents", "2", "--resources", "cpus:1;mem:1024;disk:1024;ports:[31000-31100]"),
        *("--allocation-interval-seconds", "0.1"),
    ).start()
    yield mesos
    mesos.stop()


@pytest.fixture
def stores(zk_client: KazooClient, zk_namespace: str) -> TermStores:
    registry = Registry(zk_client, zk_namespace)
    registry.ensure("/ha/election")
    node = zk_client.create(registry.abs("/ha/election/n_"), b"me", ephemeral=True, sequence=True)
    return TermStores.build(registry, Fence(node, lambda: True), "UTC", 10_000)

"""The concurrency pools' gauges (issue 28): one series per pool, from the term's figures."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from scheduler.edge.metrics import ReplicaCollector, ReplicaFigures, TermFigures


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_each_pool_has_its_size_use_and_waiting_units() -> None:
    term = TermFigures(pools={"db": (3, 2, 5), "web": (1, 0, 0)})
    figures = ReplicaFigures(True, 1, 0, 1, 1, "CONNECTED", 1.7e9, term=term)
    registry = CollectorRegistry()
    registry.register(ReplicaCollector(lambda: figures))
    samples = _samples(registry)
    assert samples[("ejc_pool_size", (("pool", "db"),))] == 3
    assert samples[("ejc_pool_in_use", (("pool", "db"),))] == 2
    assert samples[("ejc_pool_waiting", (("pool", "db"),))] == 5
    assert samples[("ejc_pool_size", (("pool", "web"),))] == 1
    assert samples[("ejc_pool_waiting", (("pool", "web"),))] == 0


def test_a_standby_or_a_cluster_without_pools_has_no_pool_series() -> None:
    registry = CollectorRegistry()
    idle = ReplicaFigures(False, 0, 0, 1, 1, "CONNECTED", 1.7e9)
    registry.register(ReplicaCollector(lambda: idle))
    assert not [key for key in _samples(registry) if key[0].startswith("ejc_pool_")]

"""Resource arithmetic the offers and launch validation rely on (pure, no processes)."""

from __future__ import annotations

import pytest

from deploy.localmesos.resources import ResourceError, Resources


def test_agent_spec_parses_scalars_and_ranges() -> None:
    spec = Resources.parse_spec("cpus:4;mem:4096;disk:10240;ports:[31000-31005,32000-32000]")
    assert spec.scalars == {"cpus": 4.0, "mem": 4096.0, "disk": 10240.0}
    assert spec.ranges == {"ports": ((31000, 31005), (32000, 32000))}
    assert spec.to_map()["ports"] == "[31000-31005, 32000-32000]"
    with pytest.raises(ResourceError, match="cpus"):
        Resources.parse_spec("cpus:many")


def test_subtracting_ports_splits_ranges_and_adding_merges_them() -> None:
    total = Resources.parse_spec("cpus:1;ports:[31000-31009]")
    used = Resources.from_json(
        [
            {"name": "cpus", "type": "SCALAR", "scalar": {"value": 0.3}},
            {
                "name": "ports",
                "type": "RANGES",
                "ranges": {"range": [{"begin": 31003, "end": 31004}]},
            },
        ]
    )
    free = total - used
    assert free.scalars == {"cpus": 0.7}
    assert free.ranges == {"ports": ((31000, 31002), (31005, 31009))}
    assert not free.contains(used) and total.contains(used)
    assert free + used == total


def test_scalars_do_not_drift_and_leftovers_below_minimums_are_not_offered() -> None:
    tenth = Resources.parse_spec("cpus:0.1;mem:16")
    total = Resources.parse_spec("cpus:1;mem:160")
    for _ in range(10):
        total = total - tenth
    assert total.is_empty()
    assert not Resources.parse_spec("cpus:0.005;mem:31").allocatable()
    assert Resources.parse_spec("mem:32").allocatable()


def test_bad_resource_json_names_every_problem() -> None:
    with pytest.raises(ResourceError) as info:
        Resources.from_json(
            [
                {"name": "cpus", "type": "SCALAR", "scalar": {"value": -1}},
                {"type": "SCALAR"},
            ]
        )
    assert "cpus" in str(info.value) and "without a name" in str(info.value)

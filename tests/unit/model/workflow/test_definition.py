"""The workflow definition's validation: each problem a 400 that names it."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.model.errors import InvalidRequest
from scheduler.model.workflow import Condition, WorkflowConfig, find_cycle

JOBS = {"extract", "load", "report", "clean"}


def body(**over: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "workflowName": "nightly",
        "appName": "etl",
        "nodes": [
            {"name": "a", "job": "extract"},
            {"name": "b", "job": "load", "dependsOn": ["a"]},
            {"name": "c", "job": "report", "dependsOn": ["a"], "condition": "on_failure"},
            {"name": "d", "job": "clean", "dependsOn": ["b", "c"], "condition": "on_done"},
        ],
    }
    data.update(over)
    return data


def read(data: dict[str, Any], max_nodes: int = 200) -> WorkflowConfig:
    return WorkflowConfig.from_json(
        data, max_nodes=max_nodes, default_time_zone="UTC", job_exists=JOBS.__contains__
    )


def refused(data: dict[str, Any], max_nodes: int = 200) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        read(data, max_nodes)
    return caught.value


def test_a_diamond_reads_with_defaults_and_round_trips() -> None:
    config = read(body(cron="0 0 2 * * ?", timeoutSeconds=600, failFast=True))
    assert config.node("d").depends_on == ("b", "c")
    assert config.node("c").condition is Condition.ON_FAILURE
    assert config.node("b").condition is Condition.ON_SUCCESS
    assert config.overlap_policy.value == "FORBID" and not config.misfire
    assert config.children()["a"] == ("b", "c")
    assert read(config.to_json()) == config
    assert config.to_json()["timeoutSeconds"] == 600


def test_a_workflow_without_cron_has_no_schedule() -> None:
    assert read(body()).cron_spec("UTC") is None
    assert read(body(cron="")).cron == ""


def test_a_cycle_is_refused_and_named() -> None:
    nodes = [
        {"name": "a", "job": "extract", "dependsOn": ["c"]},
        {"name": "b", "job": "load", "dependsOn": ["a"]},
        {"name": "c", "job": "report", "dependsOn": ["b"]},
    ]
    error = refused(body(nodes=nodes))
    assert "cycle" in error.fields["nodes"]
    cycle = error.fields["nodes"].split("cycle: ")[1].split(" -> ")
    assert cycle[0] == cycle[-1] and set(cycle) == {"a", "b", "c"}


def test_a_node_depending_on_itself_is_a_cycle() -> None:
    error = refused(body(nodes=[{"name": "a", "job": "extract", "dependsOn": ["a"]}]))
    assert "cycle a -> a" in error.fields["nodes"]


def test_an_unknown_job_is_refused_and_named() -> None:
    error = refused(body(nodes=[{"name": "a", "job": "nope"}]))
    assert error.fields["nodes"] == "unknown job(s): nope"


def test_a_node_named_twice_is_refused() -> None:
    nodes = [{"name": "a", "job": "extract"}, {"name": "a", "job": "load"}]
    assert "named twice" in refused(body(nodes=nodes)).fields["nodes"]


def test_a_parent_that_is_not_a_node_is_refused() -> None:
    nodes = [{"name": "a", "job": "extract", "dependsOn": ["ghost"]}]
    assert refused(body(nodes=nodes)).fields["nodes"] == (
        "node a depends on ghost, which is not a node"
    )


def test_more_nodes_than_the_setting_are_refused() -> None:
    nodes = [{"name": f"n{i}", "job": "extract"} for i in range(4)]
    assert "at most 3 nodes" in refused(body(nodes=nodes), max_nodes=3).fields["nodes"]
    assert len(read(body(nodes=nodes), max_nodes=4).nodes) == 4


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"workflowName": "a/b"}, "workflowName"),
        ({"workflowName": None}, "workflowName"),
        ({"appName": ""}, "appName"),
        ({"cron": "not a cron"}, "cron"),
        ({"timeZone": "Mars/Olympus"}, "timeZone"),
        ({"overlapPolicy": "REPLACE"}, "overlapPolicy"),
        ({"timeoutSeconds": 0}, "timeoutSeconds"),
        ({"failFast": "maybe"}, "failFast"),
        ({"nodes": []}, "nodes"),
        ({"nodes": "a"}, "nodes"),
        ({"surprise": 1}, "surprise"),
        (
            {"nodes": [{"name": "a", "job": "extract", "condition": "sometimes"}]},
            "nodes[0].condition",
        ),
        ({"nodes": [{"name": "a", "job": "extract", "extra": 1}]}, "nodes[0].extra"),
        ({"nodes": [{"name": "a", "job": "extract", "dependsOn": "b"}]}, "nodes[0].dependsOn"),
        ({"nodes": [{"name": "a" * 101, "job": "extract"}]}, "nodes[0].name"),
        ({"nodes": [7]}, "nodes[0]"),
        ({"description": "x" * 20000}, "description"),
    ],
)
def test_each_bad_field_is_named(over: dict[str, Any], field: str) -> None:
    assert field in refused(body(**over)).fields


def test_a_long_chain_finds_no_cycle_without_recursion() -> None:
    chain = [(f"n{i}", [f"n{i - 1}"] if i else []) for i in range(5000)]
    assert find_cycle(chain) is None
    chain[0] = ("n0", ["n4999"])
    cycle = find_cycle(chain)
    assert cycle is not None and len(cycle) == 5001

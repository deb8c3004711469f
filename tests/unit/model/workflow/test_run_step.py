"""A workflow run's pure step: which nodes launch, which are skipped, when the run ends, for
every condition and failFast; property-tested over random graphs."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.model.errors import Conflict, NotFound
from scheduler.model.job_events import JobEventKind
from scheduler.model.workflow import (
    Cancel,
    Condition,
    MarkSuccess,
    NodeEnded,
    NodeState,
    Retry,
    RunState,
    Start,
    Step,
    Timeout,
    WorkflowConfig,
    WorkflowNode,
    WorkflowRun,
    ended_event,
    new_run,
    parse_run_id,
    run_id_of,
    step,
)


def graph(
    edges: dict[str, list[str]], *, fail_fast: bool = False, **conditions: str
) -> WorkflowConfig:
    nodes = tuple(
        WorkflowNode(
            name, f"job-{name}", tuple(parents), Condition(conditions.get(name, "on_success"))
        )
        for name, parents in edges.items()
    )
    return WorkflowConfig("wf", "app", nodes, fail_fast=fail_fast, timeout_seconds=60)


DIAMOND = {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]}


def started(config: WorkflowConfig) -> Step:
    return step(new_run(config, 1000.0), Start(1000.0))


def end(run: WorkflowRun, node: str, ok: bool, at: float = 1001.0) -> Step:
    return step(run, NodeEnded(node, run.node(node).attempt, ok, at, "" if ok else "boom"))


def states(run: WorkflowRun) -> dict[str, str]:
    return {name: record.state.value for name, record in run.nodes.items()}


def test_the_diamond_runs_in_order_and_the_fan_in_once_after_both() -> None:
    s = started(graph(DIAMOND))
    assert s.launch == ("a",)
    s = end(s.run, "a", True)
    assert s.launch == ("b", "c")
    s = end(s.run, "b", True)
    assert s.launch == () and s.run.node("d").state is NodeState.PENDING
    s = end(s.run, "c", True)
    assert s.launch == ("d",) and s.run.node("d").attempt == 1
    s = end(s.run, "d", True, at=1005.0)
    assert s.run.state is RunState.SUCCEEDED and s.run.ended_at == 1005.0


def test_a_failing_branch_skips_the_fan_in_but_the_other_branch_runs() -> None:
    s = end(started(graph(DIAMOND)).run, "a", True)
    s = end(s.run, "b", False)
    assert states(s.run) == {"a": "succeeded", "b": "failed", "c": "running", "d": "skipped"}
    assert s.run.node("d").reason == "upstream_failed"
    s = end(s.run, "c", True)
    assert s.run.state is RunState.FAILED and "b" in s.run.reason


def test_on_failure_runs_only_after_a_failure_and_on_done_always() -> None:
    config = graph({"a": [], "f": ["a"], "s": ["a"], "z": ["a"]}, f="on_failure", z="on_done")
    ok = end(started(config).run, "a", True)
    assert ok.launch == ("s", "z") and ok.run.node("f").state is NodeState.SKIPPED
    failed = end(started(config).run, "a", False)
    assert failed.launch == ("f", "z") and failed.run.node("s").state is NodeState.SKIPPED


def test_a_handled_failure_still_fails_the_run() -> None:
    config = graph({"a": [], "f": ["a"]}, f="on_failure")
    s = end(end(started(config).run, "a", False).run, "f", True)
    assert s.run.state is RunState.FAILED


def test_fail_fast_cancels_the_running_and_skips_the_rest() -> None:
    config = graph({"a": [], "b": [], "c": ["a"], "d": ["b"]}, fail_fast=True, d="on_done")
    s = started(config)
    assert s.launch == ("a", "b")
    s = end(s.run, "a", False)
    assert s.kill == ("b",)
    assert states(s.run) == {"a": "failed", "b": "cancelled", "c": "skipped", "d": "skipped"}
    assert s.run.state is RunState.FAILED
    # b's end comes after it was cancelled: ignored.
    assert step(s.run, NodeEnded("b", 1, True, 1002.0)).run == s.run


def test_cancel_and_timeout_stop_the_run() -> None:
    s = started(graph(DIAMOND))
    cancelled = step(s.run, Cancel(1002.0, "cancelled by alice"))
    assert cancelled.kill == ("a",) and cancelled.run.state is RunState.CANCELLED
    assert {r.state for r in cancelled.run.nodes.values()} == {
        NodeState.CANCELLED,
        NodeState.SKIPPED,
    }
    timed_out = step(s.run, Timeout(1060.0))
    assert timed_out.run.state is RunState.TIMED_OUT and "60 s" in timed_out.run.reason
    assert step(timed_out.run, Cancel(1070.0)).run == timed_out.run


def test_retry_reruns_only_what_did_not_succeed() -> None:
    s = end(started(graph(DIAMOND)).run, "a", True)
    s = end(end(s.run, "b", False).run, "c", True)
    with pytest.raises(Conflict):
        step(started(graph(DIAMOND)).run, Retry(1.0))
    again = step(s.run, Retry(1010.0))
    assert again.launch == ("b",) and again.run.state is RunState.RUNNING
    assert again.run.node("b").attempt == 2 and again.run.node("a").attempt == 1
    assert again.run.node("c").state is NodeState.SUCCEEDED
    # The first attempt's end, arriving late, is ignored.
    assert step(again.run, NodeEnded("b", 1, False, 1011.0)).run == again.run
    done = end(end(again.run, "b", True).run, "d", True)
    assert done.run.state is RunState.SUCCEEDED


def test_mark_success_releases_the_children() -> None:
    s = end(started(graph(DIAMOND)).run, "a", True)
    s = end(end(s.run, "b", False).run, "c", True)
    assert s.run.state is RunState.FAILED
    marked = step(s.run, MarkSuccess("b", 1020.0))
    assert marked.launch == ("d",) and marked.run.state is RunState.RUNNING
    assert marked.run.node("b").reason == "marked succeeded"
    with pytest.raises(Conflict):
        step(marked.run, MarkSuccess("d", 1021.0))  # running
    with pytest.raises(NotFound):
        step(marked.run, MarkSuccess("zz", 1021.0))


def test_a_run_round_trips_through_json() -> None:
    s = end(started(graph(DIAMOND, fail_fast=True)).run, "a", True)
    data: Any = s.run.to_json()
    assert WorkflowRun.from_json(data, max_nodes=200) == s.run
    assert [n["name"] for n in data["nodes"]] == ["a", "b", "c", "d"]


def test_run_ids_carry_the_workflow_and_the_fire_time_and_sort_by_it() -> None:
    assert run_id_of("wf", 1700000000.5) == "wf@1700000000500"
    assert parse_run_id("my.wf@1700000000500") == ("my.wf", 1700000000.5)
    assert run_id_of("wf", 9.0) < run_id_of("wf", 10.0)


# -- properties over random graphs ----------------------------------------------------------------


@st.composite
def workflows(draw: st.DrawFn) -> tuple[WorkflowConfig, dict[str, bool], list[int]]:
    count = draw(st.integers(1, 12))
    names = [f"n{i}" for i in range(count)]
    nodes = []
    for index, name in enumerate(names):
        parents = draw(st.lists(st.sampled_from(names[:index]), unique=True)) if index else []
        condition = draw(st.sampled_from(list(Condition)))
        nodes.append(WorkflowNode(name, f"job{index}", tuple(parents), condition))
    config = WorkflowConfig("wf", "app", tuple(nodes), fail_fast=draw(st.booleans()))
    outcomes = {name: draw(st.booleans()) for name in names}
    picks = draw(st.lists(st.integers(0, 1000), min_size=count, max_size=count))
    return config, outcomes, picks


def _holds(condition: Condition, parents: list[NodeState]) -> bool:
    """The condition over parents that have all ended (the oracle's own reading)."""
    if not parents:
        return True
    if condition is Condition.ON_SUCCESS:
        return all(p is NodeState.SUCCEEDED for p in parents)
    if condition is Condition.ON_FAILURE:
        return any(p is NodeState.FAILED for p in parents)
    return True


def _simulate(
    config: WorkflowConfig, outcomes: dict[str, bool], picks: list[int]
) -> tuple[WorkflowRun, list[str]]:
    """Run to the end, ending one running node at a time in an order `picks` chooses; checks
    the invariants at every step."""
    s = started(config)
    launched: list[tuple[str, int]] = []
    order: list[str] = []
    clock = 1000.0
    for _ in range(len(config.nodes) + 1):
        run = s.run
        for name in s.launch:
            record = run.node(name)
            # Launched at most once per attempt, never before every parent ended.
            assert (name, record.attempt) not in launched
            launched.append((name, record.attempt))
            parents = [run.node(p).state for p in config.node(name).depends_on]
            assert all(p.ended for p in parents)
            assert _holds(config.node(name).condition, parents)
            order.append(name)
        for name, record in run.nodes.items():
            if record.state is NodeState.SKIPPED and not config.fail_fast:
                node = config.node(name)
                parents = [run.node(p).state for p in node.depends_on]
                # Skipped only when the condition can no longer hold.
                assert parents and not any(
                    _holds(
                        node.condition,
                        [s2 if s2.ended else guess for s2, guess in zip(parents, g, strict=True)],
                    )
                    for g in _completions(parents)
                )
        running = [n for n, r in run.nodes.items() if r.state is NodeState.RUNNING]
        # The run ends exactly when no node can progress.
        assert run.ended == (not running)
        if run.ended:
            assert all(r.state.ended for r in run.nodes.values())
            return run, order
        clock += 1
        name = running[picks[len(order) % len(picks)] % len(running)]
        s = step(run, NodeEnded(name, run.node(name).attempt, outcomes[name], clock))
    raise AssertionError("the run did not end")


def _completions(parents: list[NodeState]) -> list[list[NodeState]]:
    """Every way the parents not ended yet could still end (succeeded or failed)."""
    out: list[list[NodeState]] = [[]]
    for parent in parents:
        options = [parent] if parent.ended else [NodeState.SUCCEEDED, NodeState.FAILED]
        out = [[*prefix, option] for prefix in out for option in options]
    return out


@settings(max_examples=150, deadline=None)
@given(workflows())
def test_random_graphs_keep_the_invariants_and_agree_with_the_oracle(
    case: tuple[WorkflowConfig, dict[str, bool], list[int]],
) -> None:
    config, outcomes, picks = case
    run, _order = _simulate(config, outcomes, picks)
    if config.fail_fast:
        return
    # The oracle: each node in topological (definition) order runs exactly when its condition
    # holds over its parents' final states, and then ends as drawn.
    expected: dict[str, NodeState] = {}
    for node in config.nodes:
        parents = [expected[p] for p in node.depends_on]
        if _holds(node.condition, parents):
            expected[node.name] = NodeState.SUCCEEDED if outcomes[node.name] else NodeState.FAILED
        else:
            expected[node.name] = NodeState.SKIPPED
    assert {n: r.state for n, r in run.nodes.items()} == expected
    failed = NodeState.FAILED in expected.values()
    assert run.state is (RunState.FAILED if failed else RunState.SUCCEEDED)


@settings(max_examples=100, deadline=None)
@given(workflows())
def test_retry_of_a_random_run_never_reruns_a_succeeded_node(
    case: tuple[WorkflowConfig, dict[str, bool], list[int]],
) -> None:
    config, outcomes, picks = case
    run, _order = _simulate(config, outcomes, picks)
    if run.state is RunState.SUCCEEDED:
        return
    succeeded = {n for n, r in run.nodes.items() if r.state is NodeState.SUCCEEDED}
    again = step(run, Retry(5000.0))
    assert not succeeded & set(again.launch)
    # Second time round every node succeeds: the run ends succeeded, succeeded nodes untouched.
    final, order = _simulate_from(again, dict.fromkeys(outcomes, True), picks)
    assert not succeeded & set(order)
    assert final.state is RunState.SUCCEEDED


def _simulate_from(
    s: Step, outcomes: dict[str, bool], picks: list[int]
) -> tuple[WorkflowRun, list[str]]:
    order = list(s.launch)
    clock = 6000.0
    while not s.run.ended:
        running = [n for n, r in s.run.nodes.items() if r.state is NodeState.RUNNING]
        assert running
        name = running[picks[len(order) % len(picks)] % len(running)]
        clock += 1
        s = step(s.run, NodeEnded(name, s.run.node(name).attempt, outcomes[name], clock))
        order.extend(s.launch)
    return s.run, order


def test_an_ended_run_is_one_event_failures_posted_successes_traced_only() -> None:
    s = end(started(graph(DIAMOND)).run, "a", True, at=1002.0)
    s = end(end(s.run, "b", False, at=1003.0).run, "c", True, at=1004.5)
    event = ended_event(s.run)
    assert event.kind is JobEventKind.WORKFLOW_FAILED and event.kind.is_failure
    assert event.job_name == "wf" and event.task_id == s.run.run_id
    assert "in 4.5 s" in event.reason and "b=failed" in event.reason and "d=skipped" in event.reason
    body = event.webhook_body()
    assert body["event"] == "workflow_failed" and body["workflowRunId"] == s.run.run_id
    timed_out = ended_event(step(started(graph(DIAMOND)).run, Timeout(1060.0)).run)
    assert timed_out.kind is JobEventKind.WORKFLOW_TIMED_OUT and timed_out.kind.is_failure
    done = end(
        end(end(end(started(graph(DIAMOND)).run, "a", True).run, "b", True).run, "c", True).run,
        "d",
        True,
    )
    assert not ended_event(done.run).kind.is_failure
    with pytest.raises(ValueError):
        ended_event(started(graph(DIAMOND)).run)


def test_a_node_lists_each_of_its_tasks_once() -> None:
    s = started(graph({"a": []}))
    # The engine reports a node's tasks from the launch record and from the ended shards: the
    # same task may come twice, and listed before.
    ended = step(
        s.run, NodeEnded("a", s.run.node("a").attempt, True, 1001.0, task_ids=("t1", "t2", "t1"))
    )
    assert ended.run.node("a").task_ids == ("t1", "t2")

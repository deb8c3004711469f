from __future__ import annotations

import base64
import json
import shlex

import pytest

from executor.taskdata import JobSpec, ShardingContext, TaskData, TaskDataError


def sample(**job: object) -> TaskData:
    spec = {"job_name": "j", "job_type": "SIMPLE", "job_class": "pkg.mod:run", **job}
    return TaskData(
        "TRANSIENT",
        ShardingContext("j", "j@-@1@-@READY@-@S1@-@u", 3, 1, "b", "p"),
        JobSpec(**spec),  # type: ignore[arg-type]
    )


def test_round_trip_is_base64_json_with_the_original_context_names() -> None:
    data = sample(job_properties={"k": "v"})
    encoded = data.encode()
    doc = json.loads(base64.b64decode(encoded))
    assert doc["shardingContext"] == {
        "jobName": "j",
        "taskId": "j@-@1@-@READY@-@S1@-@u",
        "shardingTotalCount": 3,
        "shardingItem": 1,
        "shardingParameter": "b",
        "jobParameter": "p",
    }
    assert TaskData.decode(encoded) == data


def test_script_argument_survives_the_shell() -> None:
    ctx = ShardingContext("j", "t", 2, 0, 'it\'s "quoted" $HOME `x`', "a b")
    assert json.loads(shlex.split(ctx.as_argument())[0]) == ctx.to_json()
    assert ctx.as_environment()["EJC_SHARDING_ITEM"] == "0"


@pytest.mark.parametrize(
    ("mutate", "named"),
    [
        (lambda d: d.pop("shardingContext"), "shardingContext"),
        (lambda d: d["shardingContext"].update(shardingItem=5), "shardingItem"),
        (lambda d: d["shardingContext"].update(shardingTotalCount="3"), "shardingTotalCount"),
        (lambda d: d["jobConfig"].update(jobType="JAVA"), "jobType"),
        (lambda d: d["jobConfig"].update(jobClass=""), "jobClass"),
        (lambda d: d.update(executionType="SOMETIMES"), "executionType"),
        (lambda d: d.update(version=7), "version"),
    ],
)
def test_bad_task_data_names_the_problem(mutate, named: str) -> None:
    doc = sample().to_json()
    mutate(doc)
    raw = base64.b64encode(json.dumps(doc).encode()).decode()
    with pytest.raises(TaskDataError, match=named):
        TaskData.decode(raw)


@pytest.mark.parametrize(
    "raw", ["", "%%%", base64.b64encode(b"\x80\x81").decode(), base64.b64encode(b"[1]").decode()]
)
def test_undecodable_data_is_refused(raw: str) -> None:
    with pytest.raises(TaskDataError):
        TaskData.decode(raw)


def test_a_workflow_nodes_shard_carries_its_run_in_context_argument_and_environment() -> None:
    """Issue 27: the run id and fire time reach job code three ways; a plain shard's context
    keeps the original's six fields."""
    plain = ShardingContext("etl", "t1", 2, 1, "b", "p")
    assert set(plain.to_json()) == {
        "jobName",
        "taskId",
        "shardingTotalCount",
        "shardingItem",
        "shardingParameter",
        "jobParameter",
    }
    assert "EJC_WORKFLOW_RUN_ID" not in plain.as_environment()
    ctx = ShardingContext(
        "etl", "t1", 2, 1, "b", "p", "nightly", "nightly@1700000000000", "2023-11-14T22:13:20Z"
    )
    argument = json.loads(shlex.split(ctx.as_argument())[0])
    assert argument["workflowRunId"] == "nightly@1700000000000"
    assert argument["fireTime"] == "2023-11-14T22:13:20Z"
    env = ctx.as_environment()
    assert env["EJC_WORKFLOW_NAME"] == "nightly"
    assert env["EJC_WORKFLOW_RUN_ID"] == "nightly@1700000000000"
    assert env["EJC_FIRE_TIME"] == "2023-11-14T22:13:20Z"
    data = TaskData("TRANSIENT", ctx, JobSpec("etl", "SCRIPT", script_command_line="echo"))
    assert TaskData.decode(data.encode()).sharding == ctx

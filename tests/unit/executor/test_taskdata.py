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

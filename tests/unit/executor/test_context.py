from __future__ import annotations

import dataclasses

import pytest

from executor.context import JobContext
from executor.taskdata import JobSpec, ShardingContext, TaskData


def task_data(job_parameter_in_context: str = "p") -> TaskData:
    return TaskData(
        "TRANSIENT",
        ShardingContext("j", "j@-@1@-@READY@-@S0@-@u", 3, 1, "b", job_parameter_in_context),
        JobSpec("j", "SIMPLE", "m:f", job_parameter="from-config", job_properties={"k": "v"}),
    )


def test_the_context_carries_the_shard_and_the_job_properties() -> None:
    ctx = JobContext.from_task_data(task_data())
    assert ctx.to_dict() == {
        "job_name": "j",
        "task_id": "j@-@1@-@READY@-@S0@-@u",
        "sharding_total_count": 3,
        "sharding_item": 1,
        "sharding_parameter": "b",
        "job_parameter": "p",
        "job_properties": {"k": "v"},
    }
    assert ctx.item_parameter == "b"


def test_the_job_parameter_falls_back_to_the_job_config() -> None:
    assert JobContext.from_task_data(task_data("")).job_parameter == "from-config"


def test_job_code_cannot_change_the_context() -> None:
    props = {"k": "v"}
    ctx = JobContext("j", "t", 1, 0, job_properties=props)
    props["k"] = "changed"
    assert ctx.job_properties["k"] == "v"
    with pytest.raises(TypeError):
        ctx.job_properties["k"] = "x"  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.sharding_item = 2  # type: ignore[misc]

"""Task ids: their text form, parsing, and the parses kept for reuse (issue 29)."""

from __future__ import annotations

import pytest

from scheduler.model.task_id import InvalidTaskId, TaskId, TaskType


def test_a_task_id_round_trips_through_its_text_and_a_parse_is_reused() -> None:
    task = TaskId.new("job_a", 3, TaskType.FAILOVER, "agent-1")
    text = str(task)
    assert text == f"job_a@-@3@-@FAILOVER@-@agent-1@-@{task.uid}"
    parsed = TaskId.parse(text)
    assert parsed == task and hash(parsed) == hash(task)
    assert (parsed.job_name, parsed.item, parsed.type) == ("job_a", 3, TaskType.FAILOVER)
    assert TaskId.parse(text) is parsed  # kept: the next parse of the same id costs nothing
    assert str(parsed) == text


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("job@-@0@-@READY@-@agent", "5 parts"),
        ("job@-@x@-@READY@-@agent@-@u", "sharding item 'x'"),
        ("job@-@0@-@LATER@-@agent@-@u", "type 'LATER'"),
    ],
)
def test_text_that_is_not_a_task_id_is_refused_every_time(text: str, names: str) -> None:
    for _ in range(2):  # a refusal is not kept as an answer
        with pytest.raises(InvalidTaskId, match=names):
            TaskId.parse(text)

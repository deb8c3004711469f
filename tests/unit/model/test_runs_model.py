"""How the scheduler counts runs and records command tasks (pure)."""

from __future__ import annotations

from datetime import datetime

import pytest

from executor.records import ExecutionRecord
from scheduler.api.runs import _whole_characters
from scheduler.model.runs import (
    COMMAND_EXECUTION_SOURCE,
    CommandRuns,
    backfill_of_message,
    exit_status,
    fire_time_of,
    is_command_update,
    launch_message,
    run_result,
)
from scheduler.model.task_id import TaskId

TASK = "job@-@2@-@READY@-@S0@-@abc"


def _record(success: bool | None) -> ExecutionRecord:
    started = ExecutionRecord.started(
        job_name="job", task_id=TASK, sharding_item=2, hostname="h", ip="i", start_time_ms=1
    )
    if success is None:
        return started
    return started.finished(2, None if success else "boom")


@pytest.mark.parametrize(
    ("state", "reason", "record", "result"),
    [
        ("TASK_FINISHED", None, None, "success"),
        ("TASK_FAILED", None, None, "failure"),
        ("TASK_LOST", "REASON_RECONCILIATION", None, "failure"),
        ("TASK_KILLED", None, _record(False), "killed"),
        ("TASK_FAILED", "REASON_MAX_COMPLETION_TIME_REACHED", None, "timeout"),
        ("TASK_RUNNING", None, _record(True), "success"),  # a daemon run's COMPLETE
        ("TASK_RUNNING", None, _record(False), "failure"),
    ],
)
def test_a_run_result_follows_state_reason_and_record(
    state: str, reason: str | None, record: ExecutionRecord | None, result: str
) -> None:
    assert run_result(state, reason, record) == result


def test_command_updates_are_those_whose_executor_is_the_task() -> None:
    assert is_command_update({"task_id": {"value": TASK}, "executor_id": {"value": TASK}})
    assert not is_command_update({"task_id": {"value": TASK}, "executor_id": {"value": "a@-@S0"}})
    assert not is_command_update({"task_id": {"value": TASK}})


def test_exit_status_and_fire_time_read_back_from_messages() -> None:
    assert exit_status("Command exited with status 3") == 3
    assert exit_status("script exited with status 0") == 0
    assert exit_status("Command terminated with signal Killed") is None
    assert exit_status(None) is None
    message = launch_message(1_700_000_000.25)
    assert message == "launched; fired at 2023-11-14T22:13:20.250Z"
    assert fire_time_of(message) == datetime(2023, 11, 14, 22, 13, 20, 250000)
    assert launch_message(None) == "launched"
    assert fire_time_of("launched") is None
    assert fire_time_of("launched; fired at yesterday") is None
    assert backfill_of_message(message) is None


def test_a_backfill_runs_launch_message_names_the_backfill_and_its_fire() -> None:
    message = launch_message(1_700_000_000.0, "20261126T210500Z-1f2e3d4c")
    assert (
        message == "launched; backfill 20261126T210500Z-1f2e3d4c; fired at 2023-11-14T22:13:20.000Z"
    )
    assert backfill_of_message(message) == "20261126T210500Z-1f2e3d4c"
    assert fire_time_of(message) == datetime(2023, 11, 14, 22, 13, 20)
    assert backfill_of_message("launched; backfill ../x; fired at 2023-11-14T22:13:20.000Z") is None
    assert backfill_of_message(None) is None


def _status(state: str, at: float, **extra: object) -> dict[str, object]:
    return {
        "task_id": {"value": TASK},
        "executor_id": {"value": TASK},
        "state": state,
        "source": "SOURCE_EXECUTOR",
        "timestamp": at,
        **extra,
    }


def test_command_runs_start_on_running_and_end_on_the_terminal_update() -> None:
    runs = CommandRuns()
    tid = TaskId.parse(TASK)
    assert runs.record_of(_status("TASK_STARTING", 10.0), tid) is None
    started = runs.record_of(_status("TASK_RUNNING", 11.0), tid)
    assert started is not None and not started.complete
    assert started.start_time_ms == 11_000 and started.sharding_item == 2
    assert started.execution_source == COMMAND_EXECUTION_SOURCE
    assert runs.started_ms(TASK) == 11_000
    ended = runs.record_of(
        _status("TASK_FAILED", 14.5, message="Command exited with status 3"), tid
    )
    assert ended is not None and ended.id == started.id
    assert (ended.start_time_ms, ended.complete_time_ms) == (11_000, 14_500)
    assert ended.is_success is False and ended.failure_cause == "Command exited with status 3"
    # Not a command task's own update: nothing.
    master = _status("TASK_RUNNING", 20.0, source="SOURCE_MASTER")
    assert runs.record_of(master, tid) is None
    custom = {**_status("TASK_RUNNING", 20.0), "executor_id": {"value": "app@-@S0"}}
    assert runs.record_of(custom, tid) is None


@pytest.mark.parametrize(
    ("raw", "whole"),
    [
        (b"", 0),
        (b"abc", 3),
        ("héllo".encode(), 6),
        ("日本".encode()[:-1], 3),  # the second character is cut: left for the next read
        ("日本".encode()[:-2], 3),
        ("x😀".encode()[:-1], 1),
        (b"ok\xff", 3),  # not UTF-8: kept (shown as U+FFFD)
        (b"\x80\x80", 2),
    ],
)
def test_a_read_keeps_whole_characters_only(raw: bytes, whole: int) -> None:
    assert _whole_characters(raw) == whole

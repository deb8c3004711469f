"""Runs and log reads parsed from the answers of the runs and log endpoints."""

from __future__ import annotations

import pytest

from ejcloud_cli.errors import ApiError, UsageProblem
from ejcloud_cli.output import render_table
from ejcloud_cli.runs import (
    RUN_HEADERS,
    LogChunk,
    escape_controls,
    job_of_task,
    parse_log_chunk,
    parse_runs,
)

TASK = "hello@-@0@-@READY@-@agent-1@-@6b2a"


def test_runs_are_read_with_the_api_names() -> None:
    runs = parse_runs(
        [
            {
                "taskId": TASK,
                "shardingItem": 0,
                "fireTime": "2024-03-01T10:00:00.000Z",
                "state": "TASK_FAILED",
                "startTime": "2024-03-01T10:00:00.250Z",
                "endTime": "2024-03-01T10:03:04.250Z",
                "reason": "ValueError: bad row (at demo/jobs.py:12 in hello)",
                "backfillId": "20240301T095900Z-0badcafe",
            }
        ]
    )
    assert [r.row() for r in runs] == [
        (
            TASK,
            0,
            "2024-03-01 10:00:00",
            "TASK_FAILED",
            "2024-03-01 10:00:00",
            "3m04s",
            "20240301T095900Z-0badcafe",
            "ValueError: bad row (at demo/jobs.py:12 in hello)",
        )
    ]


def test_runs_are_read_tolerantly_from_other_shapes_and_names() -> None:
    answer = {
        "runs": [
            {"id": "t1", "item": 2, "status": "TASK_RUNNING", "startedAt": 1709287200000},
            {"taskId": "t2", "shardingItems": [0, 1], "state": "TASK_FINISHED"},
            "not a run",
        ]
    }
    rows = [r.row() for r in parse_runs(answer)]
    assert rows == [
        ("t1", 2, None, "TASK_RUNNING", "2024-03-01 10:00:00", "-", None, None),
        ("t2", "0,1", None, "TASK_FINISHED", None, "-", None, None),
    ]
    assert parse_runs({"items": []}) == []


def test_long_reasons_are_cut_in_the_table() -> None:
    (run,) = parse_runs([{"taskId": "t", "reason": "x" * 500}])
    reason = run.row()[-1]
    assert len(reason) == 80 and reason.endswith("…")
    assert render_table(RUN_HEADERS, [run.row()]).splitlines()[0].split() == list(RUN_HEADERS)


@pytest.mark.parametrize("answer", [None, {"runs": "x"}, "text", 3])
def test_an_answer_without_runs_is_an_error(answer: object) -> None:
    with pytest.raises(ApiError, match="no list of runs"):
        parse_runs(answer)


def test_log_chunks_and_the_offset_after_them() -> None:
    chunk = parse_log_chunk({"data": "héllo\n", "offset": 10})
    assert chunk == LogChunk("héllo\n", 10)
    assert chunk.end == 17  # é is two bytes in UTF-8
    assert parse_log_chunk({"data": "", "offset": 0}).end == 0


def test_the_servers_next_offset_wins_where_bytes_were_not_utf8() -> None:
    # Two bytes that are not UTF-8 are shown as two U+FFFD (three bytes each in UTF-8).
    chunk = parse_log_chunk({"data": "a\ufffd\ufffd", "offset": 5, "nextOffset": 8})
    assert chunk.end == 8
    # A nextOffset that goes back (or is not a number) is ignored.
    assert parse_log_chunk({"data": "ab", "offset": 5, "nextOffset": 1}).end == 7
    assert parse_log_chunk({"data": "ab", "offset": 5, "nextOffset": "9"}).end == 7


@pytest.mark.parametrize(
    "answer", [{"data": "x"}, {"data": 1, "offset": 0}, {"data": "x", "offset": True}, []]
)
def test_a_log_answer_of_another_shape_is_an_error(answer: object) -> None:
    with pytest.raises(ApiError, match="data, offset"):
        parse_log_chunk(answer)


def test_the_job_is_the_start_of_the_task_id() -> None:
    assert job_of_task(TASK) == "hello"
    for bad in ("hello", "@-@0@-@READY"):
        with pytest.raises(UsageProblem, match="give the job with --job"):
            job_of_task(bad)


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("plain text\twith a tab\n", "plain text\twith a tab\n"),
        ("\x1b]52;c;ZWNobw==\x07", "\\x1b]52;c;ZWNobw==\\x07"),  # OSC 52: a clipboard write
        ("\x1b]0;title\x1b\\", "\\x1b]0;title\\x1b\\"),  # a title change ended by ST
        ("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H"),  # clear the screen
        ("\x9b31m\x9d0;t\x9c", "\\x9b31m\\x9d0;t\\x9c"),  # C1 CSI, OSC and ST
        ("hidden\rshown", "hidden\\x0dshown"),
        ("bell\x07nul\x00del\x7f", "bell\\x07nul\\x00del\\x7f"),
        ("ünïcödé ✓ 日本", "ünïcödé ✓ 日本"),
    ],
)
def test_log_output_has_its_control_characters_escaped(raw: str, shown: str) -> None:
    assert escape_controls(raw) == shown

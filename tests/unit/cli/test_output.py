"""Tables, fields, times and durations as the CLI prints them."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ejcloud_cli.output import (
    cell,
    clean,
    format_duration,
    format_time,
    ordered_fields,
    parse_time,
    render_fields,
    render_table,
)


def test_table_aligns_columns_and_leaves_the_last_one_unpadded() -> None:
    text = render_table(
        ("NAME", "CPUS", "URL"),
        [("demo_app", 0.5, "file:///a.tar.gz"), ("b", 12.0, None)],
    )
    assert text.splitlines() == [
        "NAME      CPUS  URL",
        "demo_app  0.5   file:///a.tar.gz",
        "b         12    -",
    ]


def test_table_with_only_a_header() -> None:
    assert render_table(("A", "B"), []) == "A  B"


def test_cells_show_none_booleans_numbers_and_structures() -> None:
    assert [cell(None), cell(""), cell(True), cell(False)] == ["-", "-", "yes", "no"]
    assert [cell(3), cell(3.0), cell(0.1), cell(128.5)] == ["3", "3", "0.1", "128.5"]
    assert cell({"b": 1, "a": [1]}) == '{"a": [1], "b": 1}'


def test_control_characters_from_a_server_are_escaped() -> None:
    assert clean("a\x1b[31mred\nb\tc\x9b") == "a\\x1b[31mred\\x0ab\\x09c\\x9b"
    assert render_table(("X",), [("\x1b]0;title\x07",)]).splitlines()[1] == "\\x1b]0;title\\x07"


def test_fields_are_aligned_after_the_longest_name() -> None:
    assert render_fields([("appName", "a"), ("cpuCount", 0.5), ("disabled", False)]) == (
        "appName:  a\ncpuCount: 0.5\ndisabled: no"
    )


def test_ordered_fields_put_known_fields_first_and_keep_the_rest() -> None:
    obj = {"z": 1, "cron": "c", "jobName": "j", "extra": 2}
    assert ordered_fields(obj, ("jobName", "cron", "absent")) == [
        ("jobName", "j"),
        ("cron", "c"),
        ("z", 1),
        ("extra", 2),
    ]
    assert ordered_fields(["not", "an", "object"], ("a",)) == []


WHEN = datetime(2024, 3, 1, 10, 0, 5, tzinfo=UTC)


@pytest.mark.parametrize(
    "value",
    [
        "2024-03-01T10:00:05.000Z",
        "2024-03-01T11:00:05+01:00",
        "2024-03-01 10:00:05",
        WHEN.timestamp(),
        int(WHEN.timestamp() * 1000),
        str(int(WHEN.timestamp())),
    ],
)
def test_times_are_read_from_iso_text_and_epoch_seconds_or_milliseconds(value: object) -> None:
    assert parse_time(value) == WHEN
    assert format_time(value) == "2024-03-01 10:00:05"


@pytest.mark.parametrize("value", [None, True, "yesterday", "", float("nan"), [1]])
def test_what_is_not_a_time_is_shown_as_given(value: object) -> None:
    assert parse_time(value) is None
    assert format_time(value) == cell(value)


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0.35, "0.35s"),
        (12.04, "12.0s"),
        (184, "3m04s"),
        (7500, "2h05m"),
        (273600, "3d04h"),
        (None, "-"),
        (-1, "-"),
    ],
)
def test_durations(seconds: float | None, shown: str) -> None:
    assert format_duration(seconds) == shown

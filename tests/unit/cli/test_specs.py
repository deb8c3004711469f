"""App and job bodies from JSON or YAML files, `--set` and flags."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from ejcloud_cli.errors import UsageProblem
from ejcloud_cli.specs import MAX_SPEC_BYTES, build_body, load_spec, parse_sets

NO_STDIN = io.BytesIO(b"")


def test_yaml_file_gives_the_same_object_as_json(tmp_path: Path) -> None:
    yaml_file = tmp_path / "job.yaml"
    yaml_file.write_text(
        "jobName: j\ncron: 0/5 * * * * ?\nshardingTotalCount: 2\nfailover: true\n"
        "cpuCount: 0.5\njobProperties: {job_exception_handler: x}\n"
    )
    json_file = tmp_path / "job.json"
    expected = {
        "jobName": "j",
        "cron": "0/5 * * * * ?",
        "shardingTotalCount": 2,
        "failover": True,
        "cpuCount": 0.5,
        "jobProperties": {"job_exception_handler": "x"},
    }
    json_file.write_text(json.dumps(expected))
    assert load_spec(str(yaml_file), NO_STDIN) == expected
    assert load_spec(str(json_file), NO_STDIN) == expected


def test_dash_reads_stdin_as_json_or_yaml() -> None:
    assert load_spec("-", io.BytesIO(b'{"appName": "a"}')) == {"appName": "a"}
    assert load_spec("-", io.BytesIO(b"appName: a\n")) == {"appName": "a"}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("- a\n- b\n", "must hold one object (field: value), not a list"),
        ("just text", "must hold one object (field: value), not a string"),
        ("", "must hold one object (field: value), not nothing"),
        ("when: 2024-03-01\n", "when is a YAML date, not a JSON value (quote it)"),
        ("a: {b: [1, 2001-01-01]}\n", "a.b[1] is a YAML date"),
        ("1: x\n", "field names must be strings"),
        ("a: [1\n", "is not valid YAML"),
        ('{"a": 1,}', "is not valid JSON"),
        ("a: .nan\n", "a is not a finite number"),
    ],
)
def test_files_that_are_not_one_object_of_json_values_are_refused(
    tmp_path: Path, text: str, problem: str
) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    with pytest.raises(UsageProblem) as raised:
        load_spec(str(path), NO_STDIN)
    assert problem in raised.value.message and str(path) in raised.value.message


def test_yaml_errors_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text("a: 1\nb: [1\n")
    with pytest.raises(UsageProblem, match=r"line \d+, column \d+"):
        load_spec(str(path), NO_STDIN)


def test_missing_huge_and_binary_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageProblem, match="cannot read"):
        load_spec(str(tmp_path / "absent.json"), NO_STDIN)
    with pytest.raises(UsageProblem, match="larger than"):
        load_spec("-", io.BytesIO(b" " * (MAX_SPEC_BYTES + 1)))
    with pytest.raises(UsageProblem, match="not UTF-8"):
        load_spec("-", io.BytesIO(b"\xff\xfe\x00"))


def test_set_values_are_json_when_they_parse_else_strings() -> None:
    assert parse_sets(["a=1", "b=true", "c=hello", "d=", 'e="1"', "f=[1]", "g=a=b", "h=NaN"]) == {
        "a": 1,
        "b": True,
        "c": "hello",
        "d": "",
        "e": "1",
        "f": [1],
        "g": "a=b",
        "h": "NaN",
    }
    with pytest.raises(UsageProblem, match="FIELD=VALUE"):
        parse_sets(["novalue"])
    with pytest.raises(UsageProblem, match="FIELD=VALUE"):
        parse_sets(["=1"])


def test_flags_win_over_set_which_wins_over_the_file() -> None:
    body = build_body(
        "jobName",
        None,
        {"jobName": "j", "cron": "file", "shardingTotalCount": 1, "description": "file"},
        {"cron": "set", "shardingTotalCount": 2},
        {"cron": "flag", "description": None},
    )
    assert body == {"jobName": "j", "cron": "flag", "shardingTotalCount": 2, "description": "file"}


def test_the_name_argument_must_agree_with_the_file() -> None:
    assert build_body("appName", "a", {"appName": "a"}, {}, {}) == {"appName": "a"}
    assert build_body("appName", "a", None, {}, {"cpuCount": 1.0}) == {
        "cpuCount": 1.0,
        "appName": "a",
    }
    with pytest.raises(UsageProblem, match="differs from appName 'b'"):
        build_body("appName", "a", {"appName": "b"}, {}, {})
    with pytest.raises(UsageProblem, match="give the name"):
        build_body("appName", None, {"cpuCount": 1}, {}, {})

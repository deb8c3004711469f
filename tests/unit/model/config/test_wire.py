"""The Gson-compatible encoder and the lenient value readers behind both models."""

from __future__ import annotations

import json

import pytest

from scheduler.model.config import _wire


@pytest.mark.parametrize(
    ("value", "java"),
    [
        (1.0, "1.0"),
        (128.0, "128.0"),
        (0.1, "0.1"),
        (0.001, "0.001"),
        (0.5, "0.5"),
        (1234567.5, "1234567.5"),
        (9999999.0, "9999999.0"),
        (1e7, "1.0E7"),
        (12345678.9, "1.23456789E7"),
        (0.0001, "1.0E-4"),
        (0.00015, "1.5E-4"),
        (-2.5e-5, "-2.5E-5"),
        (1e300, "1.0E300"),
        (0.0, "0.0"),
        (-0.0, "-0.0"),
    ],
)
def test_doubles_are_written_as_java_double_to_string(value: float, java: str) -> None:
    assert _wire.java_double(value) == java
    assert float(java) == value


def test_non_finite_doubles_cannot_be_written() -> None:
    with pytest.raises(ValueError, match="cannot be written"):
        _wire.java_double(float("nan"))


@pytest.mark.parametrize(
    ("text", "gson"),
    [
        ("0=a,1=b", '"0\\u003da,1\\u003db"'),
        ("<b>&'x'", '"\\u003cb\\u003e\\u0026\\u0027x\\u0027"'),
        ('say "hi" \\ bye', '"say \\"hi\\" \\\\ bye"'),
        ("tab\tnl\ncr\rbs\bff\f", '"tab\\tnl\\ncr\\rbs\\bff\\f"'),
        ("\x00\x1f\x7f", '"\\u0000\\u001f\x7f"'),
        ("\u2028\u2029", '"\\u2028\\u2029"'),
        ("中文 é", '"中文 é"'),
        ("\ud800", '"\\ud800"'),
    ],
)
def test_strings_are_escaped_as_gson_does_by_default(text: str, gson: str) -> None:
    written = _wire.gson_dumps(text)
    assert written == gson
    assert json.loads(written) == text
    written.encode("utf-8")  # lone surrogates are escaped, so this never fails


def test_objects_are_written_compactly_in_order_without_nulls() -> None:
    value = {"b": 1, "a": {"y": True, "x": None}, "c": 2.0, "d": None, "e": False}
    assert _wire.gson_dumps(value) == '{"b":1,"a":{"y":true},"c":2.0,"e":false}'


def test_lists_are_written_as_arrays() -> None:
    assert _wire.gson_dumps({"excludeCalendars": ["a", "b"], "n": []}) == (
        '{"excludeCalendars":["a","b"],"n":[]}'
    )


def test_unsupported_values_cannot_be_written() -> None:
    with pytest.raises(TypeError, match="set"):
        _wire.gson_dumps({"a": {1}})


@pytest.mark.parametrize(
    ("value", "expected"),
    [(5, 5), ("5", 5), (" -7 ", -7), ("+3", 3), (5.0, 5), ("5.0", 5), ("1e2", 100)],
)
def test_integers_are_read_leniently(value: object, expected: int) -> None:
    assert _wire.to_int(value) == expected


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (True, "not a boolean"),
        (5.5, "must be an integer"),
        ("5.5", "must be an integer"),
        ("0x10", "must be a number"),
        ("", "must be a number"),
        (None, "must be a number"),
        (2**31, "at most 2147483647"),
        (-(2**31) - 1, "at most 2147483647"),
        ("99999999999999999999", "at most 2147483647"),
    ],
)
def test_bad_integers_are_refused(value: object, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        _wire.to_int(value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(1, 1.0), ("0.1", 0.1), (".5", 0.5), ("5.", 5.0), ("1e3", 1000.0), (" 2 ", 2.0)],
)
def test_numbers_are_read_leniently(value: object, expected: float) -> None:
    assert _wire.to_float(value) == expected


@pytest.mark.parametrize(
    "value", ["nan", "inf", "-Infinity", "1_0", "\u0661", "1e99999", ".", "e5"]
)
def test_number_strings_python_would_take_but_java_would_not_are_refused(value: str) -> None:
    with pytest.raises(ValueError, match="number"):
        _wire.to_float(value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(True, True), (False, False), ("true", True), (" FALSE ", False), ("True", True)],
)
def test_booleans_are_read_leniently(value: object, expected: bool) -> None:
    assert _wire.to_bool(value) is expected


@pytest.mark.parametrize("value", ["yes", "1", 1, 0, None, "", "t"])
def test_other_boolean_spellings_are_refused(value: object) -> None:
    with pytest.raises(ValueError, match="must be true or false"):
        _wire.to_bool(value)


def test_long_values_are_shortened_in_messages() -> None:
    assert _wire.shown("x" * 100) == repr("x" * 100)[:37] + "..."
    assert _wire.shown("short") == "'short'"

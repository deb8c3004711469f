"""Bounds of new API input: every string valid Unicode within its size, numbers within range,
JSON nested at most 32 levels, whole objects at most 256 KiB stored; stored data stays readable."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.model.config import (
    CRON_MAX_BYTES,
    DESCRIPTION_MAX_BYTES,
    MAX_CPU_COUNT,
    MAX_JSON_DEPTH,
    MAX_MEMORY_MB,
    PARAMETER_MAX_BYTES,
    SCRIPT_MAX_BYTES,
    STORED_MAX_BYTES,
    TEXT_MAX_BYTES,
    URL_MAX_BYTES,
    AppConfig,
    JobConfig,
    _wire,
    parse_json,
)
from scheduler.model.errors import InvalidRequest

ZONE = "UTC"
APP: dict[str, object] = {
    "appName": "app",
    "appURL": "http://host/app.tar.gz",
    "bootstrapScript": "bin/start.sh",
}
JOB: dict[str, object] = {
    "jobName": "job",
    "jobClass": "pkg.mod:run",
    "jobType": "SIMPLE",
    "cron": "0/30 * * * * ?",
    "shardingTotalCount": 2,
    "appName": "app",
    "cpuCount": 0.5,
    "memoryMB": 64,
    "jobExecutionType": "TRANSIENT",
}
SCRIPT_JOB = {**JOB, "jobType": "SCRIPT", "scriptCommandLine": "run.sh"}

# Field -> (its bound in UTF-8 bytes, a valid value to pad up to it).
APP_TEXT = {"appURL": (URL_MAX_BYTES, "http://h/"), "bootstrapScript": (SCRIPT_MAX_BYTES, "s")}
JOB_TEXT = {
    "jobParameter": (PARAMETER_MAX_BYTES, "p"),
    "description": (DESCRIPTION_MAX_BYTES, "d"),
    "beanName": (TEXT_MAX_BYTES, "b"),
    "applicationContext": (TEXT_MAX_BYTES, "c"),
}


def app_problems(body: object) -> dict[str, str]:
    with pytest.raises(InvalidRequest) as caught:
        AppConfig.from_json(body)
    return caught.value.fields


def job_problems(body: object) -> dict[str, str]:
    with pytest.raises(InvalidRequest) as caught:
        JobConfig.from_json(body, default_time_zone=ZONE)
    return caught.value.fields


def read_job(body: object) -> JobConfig:
    return JobConfig.from_json(body, default_time_zone=ZONE)


@pytest.mark.parametrize("field", sorted(APP_TEXT))
def test_app_strings_are_bounded_in_utf8_bytes(field: str) -> None:
    limit, prefix = APP_TEXT[field]
    at_limit = prefix + "x" * (limit - len(prefix))
    assert AppConfig.from_json({**APP, field: at_limit}).to_json()[field] == at_limit
    # Two-byte characters: fewer characters than the bound, more bytes.
    too_big = prefix + "é" * (limit // 2)
    assert app_problems({**APP, field: too_big}) == {
        field: f"must be at most {limit} bytes in UTF-8"
    }


@pytest.mark.parametrize("field", sorted(JOB_TEXT))
def test_job_strings_are_bounded_in_utf8_bytes(field: str) -> None:
    limit, prefix = JOB_TEXT[field]
    extra = {"applicationContext": "ctx.xml"} if field == "beanName" else {}
    if field == "applicationContext":
        extra = {"beanName": "bean"}
    at_limit = prefix + "x" * (limit - len(prefix))
    assert read_job({**JOB, **extra, field: at_limit}).to_json()[field] == at_limit
    assert job_problems({**JOB, **extra, field: at_limit + "x"}) == {
        field: f"must be at most {limit} bytes in UTF-8"
    }


def test_script_cron_sharding_and_properties_are_bounded() -> None:
    long_script = "x" * (SCRIPT_MAX_BYTES + 1)
    assert job_problems({**SCRIPT_JOB, "scriptCommandLine": long_script}) == {
        "scriptCommandLine": f"must be at most {SCRIPT_MAX_BYTES} bytes in UTF-8"
    }
    long_cron = "0 " * (CRON_MAX_BYTES // 2) + "?"
    assert job_problems({**JOB, "cron": long_cron}) == {
        "cron": f"must be at most {CRON_MAX_BYTES} bytes in UTF-8"
    }
    items = "0=" + "a" * PARAMETER_MAX_BYTES
    assert job_problems({**JOB, "shardingItemParameters": items}) == {
        "shardingItemParameters": f"must be at most {PARAMETER_MAX_BYTES} bytes in UTF-8"
    }
    handler = {"job_exception_handler": "h" * (TEXT_MAX_BYTES + 1)}
    assert job_problems({**JOB, "jobProperties": handler}) == {
        "jobProperties.job_exception_handler": f"must be at most {TEXT_MAX_BYTES} bytes in UTF-8"
    }


def test_the_legacy_job_fields_are_bounded_too() -> None:
    assert job_problems({**JOB, "appURL": "u" * (URL_MAX_BYTES + 1)}) == {
        "appURL": f"must be at most {URL_MAX_BYTES} bytes in UTF-8"
    }


LONE_SURROGATE = json.loads('"a\\ud800b"')


@pytest.mark.parametrize(
    "field",
    [
        "appName",
        "appURL",
        "bootstrapScript",
    ],
)
def test_a_lone_surrogate_in_any_app_string_is_refused_naming_the_field(field: str) -> None:
    problems = app_problems({**APP, field: LONE_SURROGATE})
    assert set(problems) == {field}
    assert "valid Unicode" in problems[field] or "may contain only" in problems[field]


@pytest.mark.parametrize(
    "field",
    [
        "jobName",
        "jobClass",
        "jobType",
        "cron",
        "shardingItemParameters",
        "jobParameter",
        "description",
        "appName",
        "jobExecutionType",
        "timeZone",
        "beanName",
        "appURL",
        "bootstrapScript",
    ],
)
def test_a_lone_surrogate_in_any_job_string_is_refused_naming_the_field(field: str) -> None:
    problems = job_problems({**JOB, field: LONE_SURROGATE})
    assert field in problems
    assert set(problems) <= {field, "applicationContext"}  # beanName needs its partner


def test_a_lone_surrogate_in_a_script_or_a_job_property_is_refused() -> None:
    assert set(job_problems({**SCRIPT_JOB, "scriptCommandLine": LONE_SURROGATE})) == {
        "scriptCommandLine"
    }
    props = {"executor_service_handler": LONE_SURROGATE}
    assert set(job_problems({**JOB, "jobProperties": props})) == {
        "jobProperties.executor_service_handler"
    }


def test_nul_characters_are_refused_in_strings() -> None:
    assert job_problems({**JOB, "jobParameter": "a\x00b"}) == {
        "jobParameter": "must not contain NUL characters"
    }


def test_unknown_field_names_that_are_not_text_are_shown_safely() -> None:
    problems = app_problems({**APP, LONE_SURROGATE: 1, "x" * 500: 2})
    assert len(problems) == 2
    assert all(len(name) <= 100 for name in problems)
    assert all(name.encode("utf-8") for name in problems)  # no lone surrogate left in a name


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (MAX_CPU_COUNT + 1, f"must be at most {MAX_CPU_COUNT:g}"),
        (1e308, f"must be at most {MAX_CPU_COUNT:g}"),
        ("1e308", f"must be at most {MAX_CPU_COUNT:g}"),
        ("1e309", "must be a finite number"),
        ("inf", "must be a number, not 'inf'"),
        ("NaN", "must be a number, not 'NaN'"),
        (10**400, "is too large"),
        ("1" * 65, "must be a number of at most 64 characters"),
    ],
)
def test_cpu_counts_are_bounded(value: object, problem: str) -> None:
    assert app_problems({**APP, "cpuCount": value}) == {"cpuCount": problem}
    assert job_problems({**JOB, "cpuCount": value}) == {"cpuCount": problem}


@pytest.mark.parametrize("value", [MAX_MEMORY_MB * 2, 1e308, "1.7976931348623157e308"])
def test_memory_is_bounded_at_16_tib(value: object) -> None:
    problem = f"must be at most {MAX_MEMORY_MB:.0f} (16 TiB)"
    assert app_problems({**APP, "memoryMB": value}) == {"memoryMB": problem}
    assert job_problems({**JOB, "memoryMB": value}) == {"memoryMB": problem}
    assert read_job({**JOB, "memoryMB": MAX_MEMORY_MB}).memory_mb == MAX_MEMORY_MB


def test_stored_jobs_beyond_the_new_bounds_stay_readable() -> None:
    stored = {**JOB, "memoryMB": 1e308, "cpuCount": 4096, "jobParameter": "p" * 100_000}
    job = JobConfig.from_json(stored, default_time_zone=ZONE, strict=False)
    assert (job.memory_mb, job.cpu_count) == (1e308, 4096)


def test_a_whole_job_is_at_most_256_kib_as_stored() -> None:
    # '=' is stored as the 6-byte escape \\u003d, so 3 fields within their bounds exceed it.
    body = {
        **JOB,
        "jobParameter": "=" * 20_000,
        "description": "=" * 16_000,
        "shardingItemParameters": "0=" + "=" * 30_000,
    }
    problems = job_problems(body)
    assert list(problems) == ["body"]
    assert f"at most {STORED_MAX_BYTES}" in problems["body"]


def test_numbers_sent_as_long_strings_are_refused_in_linear_time() -> None:
    # The old pattern backtracked quadratically: this input would take far beyond the test
    # timeout. The reader refuses it by length first; the pattern itself is linear now.
    digits = "1" * 200_000 + "x"
    assert _wire._DECIMAL.fullmatch(digits) is None
    assert job_problems({**JOB, "cpuCount": digits}) == {
        "cpuCount": "must be a number of at most 64 characters"
    }


def test_json_nesting_is_bounded_without_recursing() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(InvalidRequest) as caught:
        parse_json(deep, "request body")
    assert caught.value.fields == {"body": f"is nested deeper than {MAX_JSON_DEPTH} levels"}
    at_limit = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert parse_json(at_limit.encode(), "x") is not None
    one_more = "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1)
    with pytest.raises(InvalidRequest):
        parse_json(one_more.encode(), "x")


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    text = json.dumps({"a": "[{" * 1000, "b": '\\"[[[', "c": ["]]]\\" * 50]})
    assert parse_json(text.encode(), "x") == json.loads(text)


@pytest.mark.parametrize(
    "raw",
    [b"{", b"\xff\xfe", b'{"a": NaN}', b'{"a": Infinity}', b"1" * 5000, b'{"a": 1} x'],
)
def test_unparsable_or_overflowing_json_is_invalid_input(raw: bytes) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_json(raw, "request body")
    assert list(caught.value.fields) == ["body"]


def test_a_patch_is_checked_before_the_stored_object_is_read() -> None:
    assert JobConfig.check_patch({"jobName": "job", "cron": "0 * * * * ?"}) == "job"
    assert AppConfig.check_patch({"appName": "app", "memoryMB": "1e9"}) == "app"
    for patch, field in [
        ({"cron": "0 * * * * ?"}, "jobName"),
        ({"jobName": LONE_SURROGATE}, "jobName"),
        ({"jobName": "job", "retries": 3}, "retries"),
        ({"jobName": "job", "jobParameter": LONE_SURROGATE}, "jobParameter"),
        ({"jobName": "a/b"}, "jobName"),
    ]:
        with pytest.raises(InvalidRequest) as caught:
            JobConfig.check_patch(patch)
        assert list(caught.value.fields) == [field], patch
    with pytest.raises(InvalidRequest) as caught:
        AppConfig.check_patch([1])
    assert list(caught.value.fields) == ["body"]


def test_a_hundred_thousand_unknown_fields_get_a_short_answer() -> None:
    body = {**JOB, **{f"k{i}": i for i in range(100_000)}}
    with pytest.raises(InvalidRequest) as caught:
        JobConfig.from_json(body, default_time_zone=ZONE)
    assert len(caught.value.fields) == 11
    assert caught.value.fields["..."] == "and 99990 more unknown fields"
    assert len(caught.value.message) < 2000


_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()  # NaN and the infinities too: json.dumps writes them as NaN and Infinity
    | st.text(),  # lone surrogates too: written escaped (\ud800)
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


def _decoded(decode: Any, raw: bytes) -> str:
    """What `decode` makes of `raw`: the repr of its value (types and -0.0 told apart), or the
    problem it names."""
    try:
        return repr(decode(raw, "x"))
    except InvalidRequest as exc:
        return f"refused: {exc.fields}"


@settings(max_examples=400)
@given(
    value=_JSON_VALUES,
    ascii_only=st.booleans(),
    prefix=st.sampled_from([b"", b"\xef\xbb\xbf", b" ", b"\n"]),
    cut=st.integers(min_value=0, max_value=4),
)
def test_the_fast_decoder_takes_a_document_only_as_the_standard_decoder_reads_it(
    value: object, ascii_only: bool, prefix: bytes, cut: int
) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    raw = prefix + text.encode("utf-8", errors="surrogatepass")  # lone surrogates: bad UTF-8
    raw = raw[: len(raw) - cut] if cut else raw  # and truncated documents
    assert _decoded(parse_json, raw) == _decoded(_wire.parse_json_standard, raw)

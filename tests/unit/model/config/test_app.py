"""AppConfig: the original's JSON byte for byte, strict API input, lenient stored reads, merge."""

from __future__ import annotations

import pytest

from scheduler.model.config import AppConfig
from scheduler.model.errors import InvalidRequest

# Elastic-Job-Cloud 2.1.5, T/fixture/CloudAppJsonConstants.java
ORIGINAL = (
    b'{"appName":"test_app","appURL":"http://localhost/app.jar","bootstrapScript":"bin/start.sh",'
    b'"cpuCount":1.0,"memoryMB":128.0,"appCacheEnable":true,"eventTraceSamplingCount":0}'
)


def valid(**changes: object) -> dict[str, object]:
    body: dict[str, object] = {
        "appName": "test_app",
        "appURL": "http://localhost/app.jar",
        "bootstrapScript": "bin/start.sh",
    }
    body.update(changes)
    return body


def invalid(data: object, *, strict: bool = True) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        AppConfig.from_json(data, strict=strict)
    return caught.value


@pytest.mark.parametrize("strict", [True, False])
def test_original_app_json_round_trips_byte_for_byte(strict: bool) -> None:
    app = AppConfig.from_bytes(ORIGINAL, strict=strict)
    assert app == AppConfig(
        app_name="test_app",
        app_url="http://localhost/app.jar",
        bootstrap_script="bin/start.sh",
    )
    assert app.to_bytes() == ORIGINAL


def test_to_json_keeps_the_original_field_order() -> None:
    assert list(AppConfig.from_bytes(ORIGINAL).to_json()) == [
        "appName",
        "appURL",
        "bootstrapScript",
        "cpuCount",
        "memoryMB",
        "appCacheEnable",
        "eventTraceSamplingCount",
    ]


def test_absent_fields_take_the_original_defaults() -> None:
    app = AppConfig.from_json(valid())
    assert (app.cpu_count, app.memory_mb, app.app_cache_enable) == (1.0, 128.0, True)
    assert app.event_trace_sampling_count == 0
    assert app.to_bytes() == ORIGINAL


def test_numbers_and_booleans_sent_as_strings_are_accepted() -> None:
    app = AppConfig.from_json(
        valid(
            cpuCount="0.1",
            memoryMB=" 64 ",
            appCacheEnable="false",
            eventTraceSamplingCount="5",
        )
    )
    assert (app.cpu_count, app.memory_mb, app.app_cache_enable) == (0.1, 64.0, False)
    assert app.event_trace_sampling_count == 5
    assert b'"cpuCount":0.1,"memoryMB":64.0,"appCacheEnable":false' in app.to_bytes()


def test_integral_numbers_are_written_as_java_doubles() -> None:
    app = AppConfig.from_json(valid(cpuCount=2, memoryMB=1024))
    assert b'"cpuCount":2.0,"memoryMB":1024.0' in app.to_bytes()


def test_unknown_fields_are_refused_in_new_input_and_ignored_in_stored_apps() -> None:
    data = valid(extra="x", appVersion=3, nested={"a": 1})
    refused = invalid(data)
    assert set(refused.fields) == {"extra", "appVersion", "nested"}
    assert refused.fields["extra"] == "is not a field of an app"
    app = AppConfig.from_json(data, strict=False)
    assert "extra" not in app.to_json()


def test_every_field_the_original_console_sends_is_accepted() -> None:
    # The original console's app form (app_common.js getApp()), values as the form's strings.
    console = valid(
        cpuCount="0.5",
        memoryMB="128",
        appCacheEnable=True,
        eventTraceSamplingCount="0",
    )
    assert AppConfig.from_json(console).memory_mb == 128.0


def test_null_means_absent() -> None:
    app = AppConfig.from_json(valid(cpuCount=None, appCacheEnable=None))
    assert (app.cpu_count, app.app_cache_enable) == (1.0, True)


@pytest.mark.parametrize(
    ("changes", "field", "problem"),
    [
        ({"appName": None}, "appName", "is required"),
        ({"appName": ""}, "appName", "must not be empty"),
        ({"appName": "  "}, "appName", "must not be empty"),
        ({"appName": "list"}, "appName", "'list' is reserved"),
        ({"appName": "a" * 101}, "appName", "must be at most 100 characters"),
        ({"appName": "a/b"}, "appName", "may contain only letters, digits"),
        ({"appName": "a@-@b"}, "appName", "may contain only letters, digits"),
        ({"appName": "a b"}, "appName", "may contain only letters, digits"),
        ({"appName": ".hidden"}, "appName", "must not start with '-' or '.'"),
        ({"appName": "-x"}, "appName", "must not start with '-' or '.'"),
        ({"appName": "应用"}, "appName", "may contain only letters, digits"),
        ({"appName": 5}, "appName", "must be a string"),
        ({"appURL": None}, "appURL", "is required"),
        ({"appURL": ""}, "appURL", "must not be empty"),
        ({"appURL": "http://host/my app.jar"}, "appURL", "must not contain spaces"),
        ({"appURL": "http://host/a\nb"}, "appURL", "must not contain spaces or control"),
        ({"bootstrapScript": None}, "bootstrapScript", "is required"),
        ({"bootstrapScript": " "}, "bootstrapScript", "must not be empty"),
        ({"bootstrapScript": ["bin/start.sh"]}, "bootstrapScript", "must be a string"),
        ({"cpuCount": 0}, "cpuCount", "must be at least 0.001"),
        ({"cpuCount": "0.0009"}, "cpuCount", "must be at least 0.001"),
        ({"cpuCount": -1}, "cpuCount", "must be at least 0.001"),
        ({"cpuCount": True}, "cpuCount", "must be a number, not a boolean"),
        ({"cpuCount": "NaN"}, "cpuCount", "must be a number, not 'NaN'"),
        ({"cpuCount": "Infinity"}, "cpuCount", "must be a number"),
        ({"cpuCount": float("inf")}, "cpuCount", "must be a finite number"),
        ({"cpuCount": float("nan")}, "cpuCount", "must be a finite number"),
        ({"cpuCount": "1e999"}, "cpuCount", "must be a finite number"),
        ({"cpuCount": 10**400}, "cpuCount", "is too large"),
        ({"cpuCount": "1_000"}, "cpuCount", "must be a number"),
        ({"cpuCount": "one"}, "cpuCount", "must be a number, not 'one'"),
        ({"cpuCount": [1]}, "cpuCount", "must be a number"),
        ({"memoryMB": 0.5}, "memoryMB", "must be at least 1"),
        ({"memoryMB": {}}, "memoryMB", "must be a number"),
        ({"appCacheEnable": "yes"}, "appCacheEnable", "must be true or false, not 'yes'"),
        ({"appCacheEnable": 1}, "appCacheEnable", "must be true or false, not 1"),
        ({"eventTraceSamplingCount": -1}, "eventTraceSamplingCount", "must not be negative"),
        ({"eventTraceSamplingCount": 1.5}, "eventTraceSamplingCount", "must be an integer"),
        ({"eventTraceSamplingCount": False}, "eventTraceSamplingCount", "not a boolean"),
        ({"eventTraceSamplingCount": 2**31}, "eventTraceSamplingCount", "at most 2147483647"),
    ],
)
def test_invalid_field_is_refused_by_name(
    changes: dict[str, object], field: str, problem: str
) -> None:
    error = invalid(valid(**changes))
    assert set(error.fields) == {field}
    assert problem in error.fields[field]
    assert error.message.startswith("invalid app configuration: ")
    assert error.http_status == 400


def test_every_bad_field_is_reported_at_once() -> None:
    error = invalid({"appName": "list", "cpuCount": "x", "memoryMB": 0, "appCacheEnable": "?"})
    assert set(error.fields) == {
        "appName",
        "appURL",
        "bootstrapScript",
        "cpuCount",
        "memoryMB",
        "appCacheEnable",
    }
    assert "appName: 'list' is reserved; appURL: is required;" in error.message


def test_name_of_exactly_100_safe_characters_is_accepted() -> None:
    name = "Ab0_.-" + "x" * 94
    assert AppConfig.from_json(valid(appName=name)).app_name == name


def test_integral_numbers_are_accepted_where_an_integer_is_expected() -> None:
    assert AppConfig.from_json(valid(eventTraceSamplingCount=3.0)).event_trace_sampling_count == 3
    assert AppConfig.from_json(valid(eventTraceSamplingCount="3.0")).event_trace_sampling_count == 3


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        ([], "an array"),
        ("test_app", "a string"),
        (None, "null"),
        (5, "a number"),
        (True, "a boolean"),
    ],
)
def test_body_that_is_not_an_object_is_refused(body: object, kind: str) -> None:
    for strict in (True, False):
        assert invalid(body, strict=strict).fields == {"body": f"must be a JSON object, not {kind}"}


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"{", "is not valid JSON"),
        (b'{"appName": NaN}', "is not valid JSON"),
        (b'{"cpuCount": Infinity}', "is not valid JSON"),
        (b"\xff\xfe{}", "is not valid UTF-8"),
        (b"[1, 2]", "must be a JSON object, not an array"),
        (b'{"n": ' + b"1" * 5000 + b"}", "is not valid JSON"),
    ],
)
def test_bytes_that_are_not_a_json_object_are_refused(data: bytes, problem: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        AppConfig.from_bytes(data)
    assert set(caught.value.fields) == {"body"}
    assert problem in caught.value.fields["body"]


def test_utf8_bom_and_non_ascii_text_are_read_and_written_as_utf8() -> None:
    data = "\ufeff".encode() + ORIGINAL.replace(b"bin/start.sh", "bin/启动.sh".encode())
    app = AppConfig.from_bytes(data)
    assert app.bootstrap_script == "bin/启动.sh"
    assert app.to_bytes() == data[3:]


def test_stored_app_is_read_with_only_type_checks() -> None:
    # The original validated nothing: an empty or odd app read back from ZooKeeper still loads.
    app = AppConfig.from_json(
        {"appName": "list", "cpuCount": 0, "memoryMB": "0.5", "eventTraceSamplingCount": -1},
        strict=False,
    )
    assert app == AppConfig(
        app_name="list", cpu_count=0.0, memory_mb=0.5, event_trace_sampling_count=-1
    )
    assert AppConfig.from_json({}, strict=False) == AppConfig(app_name="")


def test_stored_app_with_wrong_types_is_still_refused() -> None:
    error = invalid({"appName": 1, "cpuCount": "x", "appCacheEnable": "maybe"}, strict=False)
    assert set(error.fields) == {"appName", "cpuCount", "appCacheEnable"}


def test_merge_keeps_the_fields_the_update_leaves_out() -> None:
    existing = AppConfig.from_json(valid(cpuCount=2, eventTraceSamplingCount=10))
    updated = existing.merged({"appName": "test_app", "memoryMB": "256"})
    assert updated == AppConfig(
        app_name="test_app",
        app_url="http://localhost/app.jar",
        bootstrap_script="bin/start.sh",
        cpu_count=2.0,
        memory_mb=256.0,
        event_trace_sampling_count=10,
    )


def test_merge_null_resets_a_field_to_its_default() -> None:
    existing = AppConfig.from_json(valid(cpuCount=2, appCacheEnable=False))
    updated = existing.merged({"cpuCount": None, "appCacheEnable": None, "appName": None})
    assert (updated.cpu_count, updated.app_cache_enable, updated.app_name) == (
        1.0,
        True,
        "test_app",
    )


def test_merge_validates_the_whole_result() -> None:
    stored = AppConfig.from_json({"appName": "test_app", "appURL": ""}, strict=False)
    with pytest.raises(InvalidRequest) as caught:
        stored.merged({"cpuCount": 0})
    assert set(caught.value.fields) == {"appURL", "bootstrapScript", "cpuCount"}


def test_merge_refuses_another_apps_name_and_a_non_object() -> None:
    existing = AppConfig.from_json(valid())
    with pytest.raises(InvalidRequest) as caught:
        existing.merged({"appName": "other_app"})
    assert caught.value.fields == {"appName": "does not match the one being updated ('test_app')"}
    with pytest.raises(InvalidRequest) as caught:
        existing.merged(["cpuCount", 2])
    assert set(caught.value.fields) == {"body"}


def test_app_is_frozen_and_hashable() -> None:
    app = AppConfig.from_bytes(ORIGINAL)
    with pytest.raises(AttributeError):
        app.cpu_count = 2.0  # type: ignore[misc]
    assert len({app, AppConfig.from_bytes(ORIGINAL)}) == 1

"""Error answers of the API as messages and exit codes."""

from __future__ import annotations

import json

import pytest

from ejcloud_cli.client import Answer, error_of
from ejcloud_cli.errors import ApiError, ConnectFailed, UsageProblem


def _answer(status: int, body: object) -> Answer:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return Answer(status, {}, raw, "http://h:1/api/x")


def test_the_servers_error_type_and_fields_are_kept() -> None:
    error = error_of(
        _answer(
            400,
            {
                "error": "invalid job: 2 problems",
                "type": "InvalidRequest",
                "fields": {"cron": "does not parse", "shardingTotalCount": "must be > 0"},
            },
        )
    )
    assert (error.status, error.message, error.kind, error.exit_code) == (
        400,
        "invalid job: 2 problems",
        "InvalidRequest",
        1,
    )
    assert error.details() == ["cron: does not parse", "shardingTotalCount: must be > 0"]
    assert error.to_json() == {
        "error": "invalid job: 2 problems",
        "type": "InvalidRequest",
        "status": 400,
        "exitCode": 1,
        "fields": {"cron": "does not parse", "shardingTotalCount": "must be > 0"},
    }


def test_fields_the_message_already_names_are_not_listed_again() -> None:
    error = error_of(
        _answer(
            400,
            {
                "error": "invalid job: cron: does not parse; shardingTotalCount: must be > 0",
                "type": "InvalidRequest",
                "fields": {
                    "cron": "does not parse",
                    "shardingTotalCount": "must be > 0",
                    "memoryMB": "must be > 0",
                },
            },
        )
    )
    assert error.details() == ["memoryMB: must be > 0"]
    one = error_of(
        _answer(400, {"error": "invalid cron 'x': got 1 field", "fields": {"cron": "got 1 field"}})
    )
    assert one.details() == []
    assert one.to_json()["fields"] == {"cron": "got 1 field"}


def test_an_answer_that_is_not_the_apis_json_shows_status_and_text() -> None:
    error = error_of(_answer(502, b"<html>Bad Gateway</html>"))
    assert error.message == "HTTP 502 Bad Gateway: <html>Bad Gateway</html>"
    assert error_of(_answer(500, b"")).message == "HTTP 500 Internal Server Error"
    assert error_of(_answer(418, {"message": "teapot"})).message == "teapot"


@pytest.mark.parametrize(
    ("status", "code"),
    [(400, 1), (401, 5), (403, 5), (404, 4), (409, 6), (415, 1), (429, 1), (500, 1), (503, 1)],
)
def test_exit_codes_by_status(status: int, code: int) -> None:
    assert ApiError(status, "x").exit_code == code


def test_exit_codes_of_local_failures() -> None:
    assert UsageProblem("x").exit_code == 2
    assert ConnectFailed("x").exit_code == 3


def test_an_answer_body_that_is_not_json_is_an_api_error() -> None:
    with pytest.raises(ApiError, match="not JSON"):
        _answer(200, b"<html>").json()
    assert _answer(204, b"").json() is None

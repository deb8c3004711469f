"""Writes only from real clients: every write route refuses bodies a web page of another origin can
send without asking (form, multipart, text: 415) and any foreign `Origin` (403), before auth and
without writing; the original's console and documented curl calls keep working."""

from __future__ import annotations

from typing import Any

import pytest
from werkzeug.test import TestResponse

from tests.integration.api.conftest import ADMIN, APP, JOB, Api
from tests.integration.api.routes import Operation, assert_answer, json_bytes, operations, url

CROSS_SITE_BODIES = [
    (b"appName=demo_app&jobName=demo_job", "application/x-www-form-urlencoded"),
    (
        b'--b\r\nContent-Disposition: form-data; name="jobName"\r\n\r\ndemo_job\r\n--b--\r\n',
        "multipart/form-data; boundary=b",
    ),
    (b"demo_job", "text/plain"),
    (b'{"jobName": "demo_job"}', "text/plain;charset=UTF-8"),
    (b"demo_job", None),  # a body without Content-Type
    (b"", "application/x-www-form-urlencoded"),  # an HTML form with no fields
]
FOREIGN_ORIGINS = [
    "http://evil.example",
    "null",
    "http://localhost:8899",  # same host, other port
    "https://localhost",  # same host, other scheme
    "http://localhost.evil.example",
    "http://user@localhost",
    "not a url",
]


@pytest.fixture
def write_ops(api: Api) -> list[Operation]:
    assert api.call("POST", "/api/app", APP).status_code == 204
    assert api.call("POST", "/api/job/register", JOB).status_code == 204
    found = [op for op in operations(api) if op.writes]
    assert len(found) >= 15  # the url_map really was read
    return found


def _open(
    api: Api,
    op: Operation,
    body: bytes | None,
    content_type: str | None,
    headers: dict[str, str] | None = None,
) -> TestResponse:
    hdrs = {**ADMIN, **(headers or {})}
    kwargs: dict[str, Any] = {"method": op.method, "headers": hdrs}
    if body is not None:
        kwargs["data"] = body
    if content_type is not None:
        kwargs["content_type"] = content_type
    return api.client.open(url(op), **kwargs)


def _valid_body(op: Operation) -> bytes | None:
    template = op.template()
    return None if template is None else json_bytes(template)


def test_every_write_route_refuses_bodies_that_are_not_json_with_415(
    api: Api, write_ops: list[Operation]
) -> None:
    before = api.snapshot()
    for op in write_ops:
        for body, content_type in CROSS_SITE_BODIES:
            answer = _open(api, op, body, content_type)
            assert_answer(answer, (str(op), content_type))
            assert answer.status_code == 415, (str(op), content_type, answer.json)
            assert (answer.json or {})["type"] == "UnsupportedMediaType"
    assert api.snapshot() == before


def test_every_write_route_refuses_a_foreign_origin_with_403_before_auth(
    api: Api, write_ops: list[Operation]
) -> None:
    before = api.snapshot()
    for op in write_ops:
        for origin in FOREIGN_ORIGINS:
            answer = _open(api, op, _valid_body(op), "application/json", headers={"Origin": origin})
            assert answer.status_code == 403, (str(op), origin, answer.json)
            assert (answer.json or {})["type"] == "CrossOriginRefused"
        # Without credentials too: no password is checked for a refused request.
        anonymous = api.client.open(
            url(op), method=op.method, headers={"Origin": "http://evil.example"}
        )
        assert anonymous.status_code == 403, str(op)
    assert api.snapshot() == before


def test_reads_are_not_refused_for_their_origin_or_content_type(api: Api) -> None:
    assert api.call("POST", "/api/app", APP).status_code == 204
    answer = api.call(
        "GET",
        "/api/app/demo_app",
        headers={**ADMIN, "Origin": "http://evil.example", "Content-Type": "text/plain"},
    )
    assert answer.status_code == 200


@pytest.mark.parametrize(
    "origin",
    [None, "http://localhost", "http://LOCALHOST:80", "http://localhost/"],
    ids=["no-origin", "same", "same-default-port", "same-trailing-slash"],
)
def test_json_writes_from_the_same_origin_or_without_origin_work(
    api: Api, origin: str | None
) -> None:
    headers = {**ADMIN} if origin is None else {**ADMIN, "Origin": origin}

    def call(method: str, path: str, body: object = None, raw: str | None = None) -> int:
        status: int = api.call(method, path, body, raw=raw, headers=headers).status_code
        return status

    assert call("POST", "/api/app", APP) == 204
    assert call("PUT", "/api/app", {"appName": "demo_app", "memoryMB": 256}) == 204
    assert call("POST", "/api/job/register", JOB) == 204
    assert call("PUT", "/api/job/update", {"jobName": "demo_job", "cron": "0 0/2 * * * ?"}) == 204
    # The original's documented curl calls: a raw name with Content-Type: application/json.
    assert call("POST", "/api/job/trigger", raw="demo_job") == 204
    assert call("POST", "/api/job/trigger", raw='"demo_job"') == 204
    assert call("POST", "/api/job/trigger", raw='{"jobName": "demo_job"}') == 204
    # The original console's jQuery calls: JSON content type, no body.
    console = {**headers, "Content-Type": "application/json"}
    assert (
        api.client.open("/api/job/demo_job/disable", method="POST", headers=console).status_code
        == 204
    )
    assert (
        api.client.open("/api/job/demo_job/enable", method="POST", headers=console).status_code
        == 204
    )
    # curl -X POST without a body: no content type at all.
    assert (
        api.client.open("/api/job/demo_job/disable", method="POST", headers=headers).status_code
        == 204
    )
    assert call("DELETE", "/api/job/demo_job/disable") == 204
    assert call("POST", "/api/operate/reconcile/explicit") == 204
    assert call("DELETE", "/api/job/deregister", raw="demo_job") == 204
    assert call("DELETE", "/api/app/demo_app") == 204
    assert api.call("GET", "/api/app/list").json == []

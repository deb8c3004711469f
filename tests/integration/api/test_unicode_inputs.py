"""Arbitrary Unicode, lone surrogates included, into every field and path of every route.

A lone surrogate cannot be encoded as UTF-8, so a client sends it as a `\\ud800` escape in JSON
(and in a path or query as the invalid UTF-8 bytes it would encode to). One such string used to
reach a ZooKeeper path, where kazoo's connection thread died encoding it and the replica lost its
session for good. Now it is a 400 naming the field, nothing is written, the client lives on.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kazoo.client import KazooClient

from deploy.zookeeper import ZooKeeperEnsemble
from scheduler.model.errors import InvalidRequest
from scheduler.storage.registry import Registry
from tests.integration.api.conftest import APP, JOB, Api
from tests.integration.api.routes import (
    Operation,
    WriteWatch,
    assert_answer,
    json_bytes,
    live_api,
    operations,
    send,
)

# kazoo's connection thread calls random.randint on every turn of its loop; hypothesis sees the
# global random state change while it draws an example and blames the strategy (which uses no
# `random` at all), and pytest turns that warning into a failure at random moments.
pytestmark = pytest.mark.filterwarnings("ignore:Do not use the `random` module inside strategies")

SURROGATES = st.sampled_from(["\ud800", "\udfff", "a\udc80b", "\ud83d", "\ud83d\ude00"])
UNICODE = st.one_of(
    # Every category, surrogates (Cs) included.
    st.text(st.characters(exclude_categories=()), max_size=24),
    SURROGATES,
    st.lists(st.one_of(SURROGATES, st.text(max_size=4)), max_size=4).map("".join),
)


@pytest.fixture(scope="module")
def live(zk: ZooKeeperEnsemble, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    with live_api(zk.hosts, tmp_path_factory.mktemp("trace")) as api:
        yield api


@pytest.fixture(scope="module")
def every_operation(live: Api) -> list[Operation]:
    return operations(live)


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data(), text=UNICODE)
def test_any_unicode_anywhere_is_answered_below_500_and_refusals_write_nothing(
    live: Api, every_operation: list[Operation], data: st.DataObject, text: str
) -> None:
    op = data.draw(st.sampled_from(every_operation), label="operation")
    kind, name = data.draw(st.sampled_from(op.slots()), label="slot")
    watch = WriteWatch(live)
    path: dict[str, str] = {}
    query: list[tuple[str, str]] = []
    body = None if op.body is None else json_bytes(op.template())
    if kind == "path":
        path[name] = text
    elif kind == "query":
        query.append((name, text))
    elif kind == "field":
        body = json_bytes({**op.template(), name: text})
    else:
        form = data.draw(st.sampled_from(["string", "object", "raw"]), label="name form")
        if form == "string":
            body = json_bytes(text)
        elif form == "object":
            body = json_bytes({"jobName": text})
        else:
            body = text.encode("utf-8", "surrogatepass")  # invalid UTF-8 where surrogates are
    response = send(live, op, path=path, query=query, body=body)
    what = (str(op), kind, name, text)
    assert_answer(response, what)
    watch.check(response, what)


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("PUT", "/api/app", {"appName": "\ud800"}, "appName"),
        ("POST", "/api/app", {**APP, "appName": "\ud800"}, "appName"),
        ("PUT", "/api/job/update", {"jobName": "\ud800"}, "jobName"),
        ("PUT", "/api/job/update", {"jobName": "demo_job", "description": "\udfff"}, "description"),
        (
            "POST",
            "/api/job/register",
            {**JOB, "jobName": "x", "jobParameter": "\ud800"},
            "jobParameter",
        ),
        ("DELETE", "/api/job/deregister", "\ud800", "jobName"),
        ("DELETE", "/api/job/deregister", {"jobName": "\ud800"}, "jobName"),
        ("POST", "/api/job/trigger", "a\ud800", "jobName"),
    ],
)
def test_the_lone_surrogates_that_killed_the_session_are_400_naming_the_field(
    api: Api, method: str, path: str, body: object, field: str
) -> None:
    assert api.call("POST", "/api/app", APP).status_code == 204
    assert api.call("POST", "/api/job/register", JOB).status_code == 204
    before = api.snapshot()
    answer = api.call(method, path, raw=json.dumps(body))
    assert answer.status_code == 400, answer.json
    assert field in answer.json["fields"], answer.json
    assert api.snapshot() == before
    client = api.registry.client
    assert client.connected
    client.exists_async("/").get(timeout=10)  # kazoo's thread still answers
    assert api.call("GET", "/api/job/jobs/demo_job").status_code == 200


def test_a_2_mb_job_parameter_is_400_and_keeps_the_connection(api: Api) -> None:
    assert api.call("POST", "/api/app", APP).status_code == 204
    before = api.snapshot()
    answer = api.call("POST", "/api/job/register", {**JOB, "jobParameter": "x" * 2_000_000})
    assert answer.status_code == 400
    assert answer.json["fields"] == {"jobParameter": "must be at most 65536 bytes in UTF-8"}
    assert api.snapshot() == before
    assert api.call("POST", "/api/job/register", JOB).status_code == 204


def test_the_storage_layer_refuses_paths_kazoo_cannot_encode(
    zk_client: KazooClient, zk_namespace: str
) -> None:
    registry = Registry(zk_client, zk_namespace)
    for call in (
        lambda: registry.get("/config/app/\ud800"),
        lambda: registry.exists("/config/job/a\udfffb"),
        lambda: registry.put("/config/job/\ud800", b"{}"),
        lambda: registry.create("/state/ready/\ud83d", b"1"),
        lambda: registry.delete("/config/app/\ud800"),
    ):
        with pytest.raises(InvalidRequest) as caught:
            call()
        assert caught.value.http_status == 400
    zk_client.exists_async("/").get(timeout=10)
    registry.put("/config/app/fine", b"{}")
    assert registry.get("/config/app/fine") == b"{}"


def test_names_in_paths_are_checked_before_zookeeper_is_asked(api: Api) -> None:
    for path, field in [
        ("/api/app/" + "a" * 101, "appName"),
        ("/api/job/jobs/%EF%A3%BF", "jobName"),  # U+F8FF, private use: ZooKeeper refuses it
        ("/api/job/%F0%9F%98%80/disable", "jobName"),  # beyond U+FFFF
        ("/api/app/..", "appName"),
        ("/api/operate/sandbox?appName=%01", "appName"),
    ]:
        answer = api.call("GET", path)
        assert answer.status_code == 400, (path, answer.json)
        assert field in answer.json["fields"], (path, answer.json)
    # Names the original allowed but new input does not are still looked up (here: absent).
    assert api.call("GET", "/api/app/%E5%BA%94%E7%94%A8 1").status_code == 404

"""Every route in the url_map, with hostile values in every place a client controls: never a 500,
every refusal is JSON naming the problem and writes nothing, and ZooKeeper's client lives on."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from deploy.zookeeper import ZooKeeperEnsemble
from tests.integration.api.conftest import APP, JOB, Api, make_api
from tests.integration.api.routes import (
    Operation,
    WriteWatch,
    assert_answer,
    ensure_demo,
    json_bytes,
    live_api,
    operations,
    send,
)

HUGE_TEXT = "x" * 2_000_000
# Text a client may put in a path, a query parameter or a raw name.
HOSTILE_TEXT = [
    "10000000000000000000",
    "-1",
    "0",
    "1e309",
    "NaN",
    "0001-01-01T00:00:00+14:00",
    "9999-12-31T23:59:59-14:00",
    "2024-13-45 25:61:61",
    "١٢٣",  # digits of another script: int() takes them, SQL does not
    "a\r\nSet-Cookie: x=1",
    "\x00",
    "a\x00b",
    "..",
    ".",
    "%2e%2e",
    "\ud800",
    "\U0001f600",
    "\uffff",
    "x" * 5000,
    "' OR '1'='1",
    "[[[[",
]
# JSON values for a body field: wrong types, numbers out of range, strings out of bounds.
HOSTILE_VALUES: list[object] = [
    "10000000000000000000",
    "1e309",
    "NaN",
    "a\r\nb",
    "a\x00b",
    "..",
    "\ud800",
    "\U0001f600",
    "x" * 100_000,
    1e308,
    -1e308,
    10**30,
    -1,
    0,
    True,
    [],
    {},
    {"nested": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["deep"]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]},
]
# Whole bodies, as bytes with their content type.
HOSTILE_BODIES: list[tuple[bytes, str | None]] = [
    (b"[" * 100_000 + b"]" * 100_000, "application/json"),
    (b'{"a":' * 50_000 + b"1" + b"}" * 50_000, "application/json"),
    (b"{", "application/json"),
    (b"", "application/json"),
    (b"null", "application/json"),
    (b"[]", "application/json"),
    (b"1e999999", "application/json"),
    (b"9" * 5000, "application/json"),
    (b'"\\ud800"', "application/json"),
    (b"\xff\xfe\x00", "application/json"),
    (b"NaN", "application/json"),
    (b"{}" * 10, "application/json"),
    (('{"jobParameter": "' + HUGE_TEXT + '"}').encode(), "application/json"),
    (b"demo_job\r\n", "application/json"),
    (b"appName=demo_app", "application/x-www-form-urlencoded"),
    (b"demo_job", "text/plain"),
    (b"demo_job", None),
]


@pytest.fixture(scope="module")
def live(zk: ZooKeeperEnsemble, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    with live_api(zk.hosts, tmp_path_factory.mktemp("trace")) as api:
        yield api


def _walk(api: Api, op: Operation) -> int:
    """Send `op` every hostile variant; returns how many requests were sent."""
    ensure_demo(api)
    watch = WriteWatch(api)
    sent = 0

    def one(what: object, **request: object) -> None:
        nonlocal sent
        response = send(api, op, **request)  # type: ignore[arg-type]
        assert_answer(response, (str(op), what))
        watch.check(response, (str(op), what))
        sent += 1

    template = op.template()
    default_body = None if template is None else json_bytes(template)
    for kind, name in op.slots():
        for value in HOSTILE_VALUES if kind == "field" else HOSTILE_TEXT:
            if kind == "path" and isinstance(value, str):
                one((kind, name, value), path={name: value}, body=default_body)
            elif kind == "query" and isinstance(value, str):
                one((kind, name, value), query=[(name, value)], body=default_body)
            elif kind == "field":
                one((kind, name, value), body=json_bytes({**template, name: value}))
            elif kind == "name":
                one((kind, value), body=json_bytes(value))
                one((kind, "object", value), body=json_bytes({"jobName": value}))
    # Every route, reads included, gets every hostile body (a body-less GET ignores it).
    for body, content_type in HOSTILE_BODIES:
        one(("body", body[:40], content_type), body=body, content_type=content_type)
    # All query parameters hostile at once, and paging far past the end.
    if op.query:
        one("every query", query=[(q, "10000000000000000000") for q in op.query])
        one("last page", query=[("page", "1000000"), ("per_page", "1000")])
    return sent


def test_every_route_answers_hostile_input_below_500_and_refusals_write_nothing(
    live: Api,
) -> None:
    ops = operations(live)
    assert len(ops) >= 30  # the url_map really was read
    sent = sum(_walk(live, op) for op in ops)
    print(f"\n{len(ops)} operations, {sent} hostile requests")
    # Methods no route declares, and the ones Flask answers by itself, on every route.
    ensure_demo(live)
    watch = WriteWatch(live)
    for rule, params in {op.rule: op.path_params for op in ops}.items():
        for method in ("HEAD", "OPTIONS", "PATCH", "TRACE", "PROPFIND"):
            op = Operation(method, rule, params, (), None, ())
            response = send(live, op, body=b"{}")
            if method == "HEAD":  # no body to name the problem in
                assert response.status_code < 500, str(op)
            else:
                assert_answer(response, str(op))
            watch.check(response, str(op))
    # The API still works for a real client afterwards.
    ensure_demo(live)
    assert live.call("POST", "/api/job/trigger", raw="demo_job").status_code == 204


@pytest.mark.parametrize(
    "query",
    [
        "page=10000000000000000000",
        "page=0",
        "page=-1",
        "page=1_000",
        "page=%D9%A1",
        "per_page=1001",
        "per_page=99999999999999999999999",
        "startTime=0001-01-01T00:00:00%2B14:00",
        "endTime=9999-12-31T23:59:59-14:00",
        "startTime=" + "9" * 500,
        "startTime=2024-02-30%2000:00:00",
        "jobName=a%00b",
        "taskId=" + "x" * 2000,
        "isSuccess=maybe&state=a%00",  # isSuccess for executions, state for status traces
        "sort=id;DROP%20TABLE%20JOB_EXECUTION_LOG",
        "order=sideways",
    ],
)
@pytest.mark.parametrize("path", ["/api/job/events/executions", "/api/job/events/statusTraces"])
def test_event_queries_refuse_bad_parameters_on_every_database(
    zk_client: KazooClient, zk_namespace: str, trace_url: str, path: str, query: str
) -> None:
    from types import SimpleNamespace

    from scheduler.leader.statistics import create_trace_engine, upgrade_to_head

    engine = create_trace_engine(trace_url)
    try:
        upgrade_to_head(engine)
        api = make_api(zk_client, zk_namespace)
        access = api.client.application.extensions["ejc_term_access"]
        access.statistics = SimpleNamespace(engine=engine)
        answer = api.call("GET", f"{path}?{query}")
        assert answer.status_code == 400, (query, answer.data[:300])
        assert answer.json["fields"], answer.json
        # The last real page still answers (empty), far beyond the data.
        ok = api.call("GET", f"{path}?page=1000000&per_page=1000&startTime=0001-01-02%2000:00:00")
        assert ok.status_code == 200 and ok.json == {"total": 0, "rows": []}
    finally:
        engine.dispose()


def test_an_unknown_field_is_refused_naming_it_and_console_bodies_still_work(api: Api) -> None:
    refused = api.call("POST", "/api/app", {**APP, "appVersion": 2, "cpus": 1})
    assert refused.status_code == 400
    assert set(refused.json["fields"]) == {"appVersion", "cpus"}
    assert api.call("POST", "/api/app", APP).status_code == 204
    refused = api.call("POST", "/api/job/register", {**JOB, "shards": 3})
    assert refused.status_code == 400 and set(refused.json["fields"]) == {"shards"}
    refused = api.call("PUT", "/api/job/update", {"jobName": "nope", "shards": 3})
    assert refused.status_code == 400  # unknown fields refused before the job is looked up
    # The original console's job form, as its getJob() sends it (strings, legacy fields).
    console = {
        "jobName": "console_job",
        "appName": "demo_app",
        "jobClass": "demo.jobs.Hello",
        "cron": "0/5 * * * * ?",
        "jobType": "SIMPLE",
        "cpuCount": "0.1",
        "jobExecutionType": "TRANSIENT",
        "memoryMB": "64",
        "bootstrapScript": "bin/start.sh",
        "beanName": "",
        "shardingTotalCount": "2",
        "jobParameter": "",
        "failover": True,
        "misfire": False,
        "streamingProcess": False,
        "applicationContext": "",
        "shardingItemParameters": "0=a,1=b",
        "scriptCommandLine": "",
        "description": "",
    }
    assert api.call("POST", "/api/job/register", console).status_code == 204
    assert api.call("PUT", "/api/job/update", {**console, "cpuCount": "0.2"}).status_code == 204
    app_form = {
        "appName": "console_app",
        "cpuCount": "1",
        "memoryMB": "128",
        "bootstrapScript": "bin/start.sh",
        "appCacheEnable": True,
        "appURL": "http://host/app.tar.gz",
        "eventTraceSamplingCount": "0",
    }
    assert api.call("POST", "/api/app", app_form).status_code == 204
    assert api.call("PUT", "/api/app", app_form).status_code == 204

"""Every endpoint and error path of the leader's REST API, against a real ZooKeeper."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kazoo.client import KazooClient

from tests.integration.api.conftest import APP, GUEST, JOB, Api, make_api


def register(
    api: Api, app: dict[str, Any] | None = None, job: dict[str, Any] | None = None
) -> None:
    assert api.call("POST", "/api/app", app or APP).status_code == 204
    if job is not None:
        assert api.call("POST", "/api/job/register", job).status_code == 204


def test_app_lifecycle(api: Api) -> None:
    register(api)
    got = api.call("GET", "/api/app/demo_app")
    assert got.status_code == 200
    assert list(got.json) == [
        "appName",
        "appURL",
        "bootstrapScript",
        "cpuCount",
        "memoryMB",
        "appCacheEnable",
        "eventTraceSamplingCount",
    ]
    assert got.json["cpuCount"] == 0.5 and got.json["appCacheEnable"] is True
    assert [a["appName"] for a in api.call("GET", "/api/app/list").json] == ["demo_app"]
    # PUT keeps what it leaves out.
    assert (
        api.call("PUT", "/api/app", {"appName": "demo_app", "memoryMB": "256"}).status_code == 204
    )
    got = api.call("GET", "/api/app/demo_app").json
    assert got["memoryMB"] == 256.0 and got["bootstrapScript"] == "bin/start.sh"
    assert api.call("GET", "/api/app/demo_app/disable").json is False
    assert api.call("POST", "/api/app/demo_app/disable").status_code == 204
    assert api.call("GET", "/api/app/demo_app/disable").json is True
    assert api.call("DELETE", "/api/app/demo_app/disable").status_code == 204
    assert api.call("GET", "/api/app/demo_app/disable").json is False
    assert api.call("POST", "/api/app/demo_app/disable").status_code == 204
    assert api.call("POST", "/api/app/demo_app/enable").status_code == 204
    assert api.call("GET", "/api/app/demo_app/disable").json is False


def test_app_errors(api: Api) -> None:
    register(api)
    dup = api.call("POST", "/api/app", APP)
    assert dup.status_code == 409 and "already exists" in dup.json["error"]
    bad = api.call("POST", "/api/app", {"appName": "list", "cpuCount": -1, "memoryMB": "x"})
    assert bad.status_code == 400
    assert {"appName", "appURL", "bootstrapScript", "cpuCount", "memoryMB"} <= set(
        bad.json["fields"]
    )
    assert api.call("GET", "/api/app/nope").status_code == 404
    assert api.call("PUT", "/api/app", {**APP, "appName": "nope"}).status_code == 404
    assert api.call("DELETE", "/api/app/nope").status_code == 404
    assert api.call("POST", "/api/app/nope/disable").status_code == 404
    not_json = api.call("POST", "/api/app", raw="appName=x", content_type="text/plain")
    assert not_json.status_code == 415
    broken = api.call("POST", "/api/app", raw="{", content_type="application/json")
    assert broken.status_code == 400 and "JSON" in broken.json["error"]
    assert api.call("POST", "/api/app", [1, 2]).status_code == 400


def test_job_lifecycle(api: Api) -> None:
    register(api, job=JOB)
    got = api.call("GET", "/api/job/jobs/demo_job")
    assert got.status_code == 200
    assert got.json["shardingTotalCount"] == 3 and got.json["jobExecutionType"] == "TRANSIENT"
    assert [j["jobName"] for j in api.call("GET", "/api/job/jobs").json] == ["demo_job"]
    assert (
        api.call(
            "PUT", "/api/job/update", {"jobName": "demo_job", "cron": "0 0/1 * * * ?"}
        ).status_code
        == 204
    )
    got = api.call("GET", "/api/job/jobs/demo_job").json
    assert got["cron"] == "0 0/1 * * * ?" and got["jobClass"] == "demo.jobs:run"
    # Trigger: a raw name, a JSON string or an object all work.
    assert api.call("POST", "/api/job/trigger", raw="demo_job").status_code == 204
    assert api.call("POST", "/api/job/trigger", raw='"demo_job"').status_code == 204
    assert api.call("GET", "/api/job/tasks/ready").json == [{"jobName": "demo_job", "times": "1"}]
    assert api.call("POST", "/api/job/demo_job/disable").status_code == 204
    assert api.call("GET", "/api/job/demo_job/disable").json is True
    assert api.call("GET", "/api/job/tasks/ready").json == []  # no burst on enable
    assert api.call("POST", "/api/job/trigger", raw="demo_job").status_code == 409
    assert api.call("POST", "/api/job/demo_job/enable").status_code == 204
    assert api.call("GET", "/api/job/demo_job/disable").json is False
    # A disabled app disables its jobs.
    assert api.call("POST", "/api/app/demo_app/disable").status_code == 204
    assert api.call("GET", "/api/job/demo_job/disable").json is True
    assert api.call("DELETE", "/api/app/demo_app/disable").status_code == 204
    assert api.call("DELETE", "/api/job/deregister", raw="demo_job").status_code == 204
    assert api.call("GET", "/api/job/jobs/demo_job").status_code == 404
    register_again = api.call("POST", "/api/job/register", JOB)
    assert register_again.status_code == 204
    assert api.call("DELETE", "/api/job/demo_job/deregister").status_code == 204


def test_job_errors(api: Api) -> None:
    no_app = api.call("POST", "/api/job/register", JOB)
    assert no_app.status_code == 400 and "appName" in no_app.json["fields"]
    register(api, job=JOB)
    assert api.call("POST", "/api/job/register", JOB).status_code == 409
    bad = api.call(
        "POST",
        "/api/job/register",
        {**JOB, "jobName": "x", "cron": "0 0 0 15W * ?", "shardingTotalCount": 0, "cpuCount": 0},
    )
    assert bad.status_code == 400
    assert {"cron", "shardingTotalCount", "cpuCount"} <= set(bad.json["fields"])
    assert api.call("PUT", "/api/job/update", {**JOB, "jobName": "nope"}).status_code == 404
    assert (
        api.call("PUT", "/api/job/update", {"jobName": "demo_job", "cron": "bad"}).status_code
        == 400
    )
    assert api.call("DELETE", "/api/job/deregister", raw="nope").status_code == 404
    assert api.call("DELETE", "/api/job/deregister", raw="").status_code == 400
    assert api.call("POST", "/api/job/trigger", raw="nope").status_code == 404
    assert api.call("GET", "/api/job/nope/disable").status_code == 404
    daemon = {**JOB, "jobName": "daemon_job", "jobExecutionType": "DAEMON"}
    assert api.call("POST", "/api/job/register", daemon).status_code == 204
    refused = api.call("POST", "/api/job/trigger", raw="daemon_job")
    assert refused.status_code == 409 and "daemon" in refused.json["error"].lower()
    assert api.call("POST", "/api/app/demo_app/disable").status_code == 204
    disabled_app = api.call("POST", "/api/job/register", {**JOB, "jobName": "other"})
    assert disabled_app.status_code == 409 and "disabled" in disabled_app.json["error"]


def test_app_delete_removes_its_jobs_and_stops_executors(api: Api) -> None:
    register(api, job=JOB)
    api.call("POST", "/api/job/trigger", raw="demo_job")
    api.call("POST", "/api/job/demo_job/disable")
    assert api.call("DELETE", "/api/app/demo_app").status_code == 204
    left = [path for path in api.snapshot() if "demo" in path]
    assert left == []  # config, disable nodes and the ready queue of app and job are gone
    assert ("stop_app_executors", "demo_app") in api.actions.calls


def test_task_views_and_statistics_shapes(api: Api) -> None:
    register(api, job=JOB)
    assert api.call("GET", "/api/job/tasks/running").json == []
    assert api.call("GET", "/api/job/tasks/failover").json == []
    assert api.call("GET", "/api/job/events/executions").json == {"total": 0, "rows": []}
    assert api.call("GET", "/api/job/events/statusTraces").json == {"total": 0, "rows": []}
    assert api.call("GET", "/api/job/statistics/jobs/type").json == {
        "scriptJobCount": 0,
        "simpleJobCount": 1,
        "dataflowJobCount": 0,
    }
    assert api.call("GET", "/api/job/statistics/jobs/executionType").json == {
        "transientJobCount": 1,
        "daemonJobCount": 0,
    }
    assert api.call("GET", "/api/job/statistics/tasks/results/lastHour").status_code == 200
    assert api.call("GET", "/api/job/statistics/tasks/results/yesterday").status_code == 400


def test_operate_endpoints(api: Api) -> None:
    register(api)
    assert api.call("POST", "/api/operate/reconcile/explicit").status_code == 204
    again = api.call("POST", "/api/operate/reconcile/implicit")
    assert again.status_code == 429 and "Retry-After" in again.headers
    assert api.actions.calls == [("reconcile", "explicit")]
    assert api.call("GET", "/api/operate/sandbox").status_code == 400
    assert api.call("GET", "/api/operate/sandbox?appName=nope").status_code == 404
    assert api.call("GET", "/api/operate/sandbox?appName=demo_app").json == []


def test_auth_roles(api: Api) -> None:
    register(api)
    anonymous = api.call("GET", "/api/app/list", headers={})
    assert anonymous.status_code == 401
    assert anonymous.headers["WWW-Authenticate"].startswith("Basic realm=")
    wrong = api.call("GET", "/api/app/list", headers={"Authorization": "Basic eDp5"})
    assert wrong.status_code == 401
    read = api.call("GET", "/api/app/list", headers=GUEST)
    assert read.status_code == 200 and read.headers["identify"] == "guest"
    before = api.snapshot()
    write = api.call("POST", "/api/app", {**APP, "appName": "guest_app"}, headers=GUEST)
    assert write.status_code == 403
    assert api.snapshot() == before
    assert api.call("GET", "/api/app/list").headers["identify"] == "root"


def test_password_hash_and_auth_off(zk_client: KazooClient, zk_namespace: str) -> None:
    from werkzeug.security import generate_password_hash

    hashed = make_api(
        zk_client, zk_namespace, auth_admin_password_hash=generate_password_hash("s3cret")
    )
    import base64

    good = {"Authorization": "Basic " + base64.b64encode(b"root:s3cret").decode()}
    assert hashed.call("GET", "/api/app/list", headers=good).status_code == 200
    assert hashed.call("GET", "/api/app/list").status_code == 401  # root:root no longer works
    off = make_api(zk_client, zk_namespace, auth_enabled="false")
    assert off.call("GET", "/api/app/list", headers={}).status_code == 200


def test_deposed_leader_api_refuses_writes(api: Api, zk_client: KazooClient) -> None:
    register(api)
    zk_client.delete(api.term.node_path)
    refused = api.call("POST", "/api/app", {**APP, "appName": "late"})
    assert refused.status_code == 503 and refused.json["type"] == "NotLeader"
    assert api.call("GET", "/api/app/late").status_code == 404


def test_openapi_document_lists_every_route(api: Api) -> None:
    doc = api.call("GET", "/api/openapi.json").json
    assert doc["openapi"].startswith("3.")
    documented = {(method.upper(), path) for path, ops in doc["paths"].items() for method in ops}
    app = api.client.application
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith("/api"):
            continue
        path = (
            rule.rule.replace("<", "{")
            .replace(">", "}")
            .replace("{app_name}", "{appName}")
            .replace("{job_name}", "{jobName}")
        )
        for method in (rule.methods or set()) - {"HEAD", "OPTIONS"}:
            assert (method, path) in documented, (method, path)


@pytest.mark.parametrize("path", ["/api/nothing", "/api/job/jobs/a/b"])
def test_unknown_paths_are_json_404(api: Api, path: str) -> None:
    got = api.call("GET", path)
    assert got.status_code == 404 and "error" in got.json


def test_wrong_method_is_json_405(api: Api) -> None:
    got = api.call("PATCH", "/api/app")
    assert got.status_code == 405 and json.loads(got.data)["type"]


def test_reads_what_elastic_job_cloud_2_1_5_wrote(api: Api) -> None:
    # Byte for byte what the original's Gson wrote (including its \u003d escaping of '=').
    app = (
        b'{"appName":"test_app","appURL":"http://localhost/app.jar","bootstrapScript":"bin/start.sh",'
        b'"cpuCount":1.0,"memoryMB":128.0,"appCacheEnable":true,"eventTraceSamplingCount":0}'
    )
    job = (
        b'{"jobName":"test_job","jobClass":"com.example.Job$Inner","jobType":"SIMPLE",'
        b'"cron":"0/30 * * * * ?","shardingTotalCount":10,'
        b'"shardingItemParameters":"0\\u003dA,1\\u003dB","jobParameter":"",'
        b'"failover":true,"misfire":true,"description":"",'
        b'"jobProperties":{"job_exception_handler":"com.dangdang.ddframe.job.executor.handler.impl.DefaultJobExceptionHandler",'
        b'"executor_service_handler":"com.dangdang.ddframe.job.executor.handler.impl.DefaultExecutorServiceHandler"},'
        b'"appName":"test_app","cpuCount":1.0,"memoryMB":128.0,"jobExecutionType":"TRANSIENT"}'
    )
    api.registry.put("/config/app/test_app", app)
    api.registry.put("/config/job/test_job", job)
    got_app = api.call("GET", "/api/app/test_app")
    assert got_app.status_code == 200 and got_app.json["appURL"] == "http://localhost/app.jar"
    got_job = api.call("GET", "/api/job/jobs/test_job")
    assert got_job.status_code == 200
    assert got_job.json["shardingItemParameters"] == "0=A,1=B"
    assert got_job.json["jobClass"] == "com.example.Job$Inner"
    assert [j["jobName"] for j in api.call("GET", "/api/job/jobs").json] == ["test_job"]

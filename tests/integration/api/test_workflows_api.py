"""The workflows API (issue 27) over a real ZooKeeper: the contract's routes, validation that
writes nothing, runs and their operations, paging and access."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pytest
from werkzeug.security import generate_password_hash

from scheduler.model.access.records import UserRecord, encode_grant, encode_user, new_grant_id
from scheduler.model.access.roles import Grant, Role
from scheduler.storage import layout
from tests.integration.api.conftest import GUEST, Api
from tests.support.bodies import app_body, job_body

PASSWORD = "workflow-pass-1"


def diamond(name: str = "nightly", **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "workflowName": name,
        "appName": "etl",
        "nodes": [
            {"name": "a", "job": "extract"},
            {"name": "b", "job": "load", "dependsOn": ["a"]},
            {"name": "c", "job": "report", "dependsOn": ["a"], "condition": "on_done"},
            {"name": "d", "job": "publish", "dependsOn": ["b", "c"]},
        ],
    }
    body.update(fields)
    return body


@pytest.fixture
def etl(api: Api) -> Api:
    assert api.call("POST", "/api/app", app_body("etl")).status_code < 300
    assert api.call("POST", "/api/app", app_body("secret")).status_code < 300
    for job in ("extract", "load", "report", "publish"):
        assert api.call("POST", "/api/job/register", job_body(job, appName="etl")).status_code < 300
    hidden = api.call("POST", "/api/job/register", job_body("hidden", appName="secret"))
    assert hidden.status_code < 300
    return api


def _user(api: Api, name: str, *grants: tuple[Role, str]) -> dict[str, str]:
    """A user of the access records with `grants`; its Basic auth header."""
    now_ms = int(time.time() * 1000)
    hashed = generate_password_hash(PASSWORD)
    client = api.registry.client
    client.create(
        api.registry.abs(layout.access_user_path(name)),
        encode_user(UserRecord(name, hashed, now_ms)),
        makepath=True,
    )
    for role, app in grants:
        grant = Grant(new_grant_id(), f"user:{name}", role, app)
        client.create(
            api.registry.abs(layout.access_grant_path(grant.id)), encode_grant(grant), makepath=True
        )
    # The replica's follower re-reads the records (as after a write of its own).
    api.client.application.extensions["ejc_authenticator"].access.refresh(api.registry)
    token = base64.b64encode(f"{name}:{PASSWORD}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def test_a_registered_workflow_reads_back_with_enabled_and_is_listed(etl: Api) -> None:
    created = etl.call("POST", "/api/workflow", diamond(cron="0 0 2 * * ?", failFast=True))
    assert created.status_code == 201, created.get_json()
    shown = etl.call("GET", "/api/workflow/nightly").get_json()
    assert shown["enabled"] is True and shown["failFast"] is True
    assert shown["nodes"][3] == {
        "name": "d",
        "job": "publish",
        "dependsOn": ["b", "c"],
        "condition": "on_success",
    }
    listed = etl.call("GET", "/api/workflows?limit=10").get_json()
    assert [w["workflowName"] for w in listed["items"]] == ["nightly"]
    by_job = etl.call("GET", "/api/workflows?limit=10&job=publish").get_json()
    assert [w["workflowName"] for w in by_job["items"]] == ["nightly"]
    assert etl.call("GET", "/api/workflows?limit=10&job=hidden").get_json()["items"] == []
    again = etl.call("POST", "/api/workflow", diamond())
    assert again.status_code == 409


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        (
            diamond(
                nodes=[
                    {"name": "a", "job": "extract", "dependsOn": ["b"]},
                    {"name": "b", "job": "load", "dependsOn": ["a"]},
                ]
            ),
            "nodes",
            "cycle: a -> b -> a",
        ),
        (diamond(nodes=[{"name": "a", "job": "nope"}]), "nodes", "unknown job(s): nope"),
        (
            diamond(nodes=[{"name": "a", "job": "extract"}, {"name": "a", "job": "load"}]),
            "nodes",
            "named twice",
        ),
        (
            diamond(nodes=[{"name": "a", "job": "extract", "dependsOn": ["zz"]}]),
            "nodes",
            "which is not a node",
        ),
        (
            diamond(nodes=[{"name": f"n{i}", "job": "extract"} for i in range(201)]),
            "nodes",
            "at most 200 nodes",
        ),
        (diamond(appName="ghost_app"), "appName", "does not exist"),
        (diamond(cron="61 * * * * ?"), "cron", ""),
        (diamond(workflowName="x" * 101), "workflowName", "at most 100"),
        (diamond(extra=1), "extra", "not a field"),
    ],
)
def test_a_bad_workflow_is_a_400_that_names_it_and_writes_nothing(
    etl: Api, body: dict[str, Any], field: str, words: str
) -> None:
    before = etl.snapshot()
    answer = etl.call("POST", "/api/workflow", body)
    assert answer.status_code == 400, answer.get_json()
    error = answer.get_json()
    assert field in error["fields"] and words in error["fields"][field]
    assert etl.snapshot() == before


def test_a_trigger_makes_a_run_that_queues_the_roots_launch_in_the_same_write(etl: Api) -> None:
    etl.call("POST", "/api/workflow", diamond())
    answer = etl.call("POST", "/api/workflow/nightly/trigger", {"parameter": "day=1"})
    assert answer.status_code == 201
    run_id = answer.get_json()["runId"]
    assert run_id.startswith("nightly@")
    run = etl.call("GET", f"/api/workflow/nightly/runs/{run_id}").get_json()
    assert run["state"] == "running" and run["parameter"] == "day=1"
    assert {n["name"]: n["state"] for n in run["nodes"]} == {
        "a": "running",
        "b": "pending",
        "c": "pending",
        "d": "pending",
    }
    assert run["definition"]["workflowName"] == "nightly"
    queued = etl.registry.children(layout.workflow_queue_folder("extract"))
    assert queued == [f"{run_id}~a~1"]
    entry = json.loads(etl.registry.get(layout.workflow_queue_path("extract", queued[0])) or b"")
    assert entry["parameter"] == "day=1" and entry["workflowRunId"] == run_id
    assert etl.registry.exists(layout.workflow_active_path(run_id))
    # FORBID (the default): no second run while this one runs.
    assert etl.call("POST", "/api/workflow/nightly/trigger").status_code == 409


def test_cancel_withdraws_the_queued_launch_and_retry_queues_it_again(etl: Api) -> None:
    etl.call("POST", "/api/workflow", diamond())
    run_id = etl.call("POST", "/api/workflow/nightly/trigger").get_json()["runId"]
    cancelled = etl.call("POST", f"/api/workflow/nightly/runs/{run_id}/cancel")
    assert cancelled.status_code == 200
    body = cancelled.get_json()
    assert body["state"] == "cancelled"
    assert {n["name"]: n["state"] for n in body["nodes"]} == {
        "a": "cancelled",
        "b": "skipped",
        "c": "skipped",
        "d": "skipped",
    }
    assert etl.registry.children(layout.workflow_queue_folder("extract")) == []
    assert not etl.registry.exists(layout.workflow_active_path(run_id))
    assert etl.call("POST", f"/api/workflow/nightly/runs/{run_id}/cancel").status_code == 409
    # mark-success of a cancelled root lets b and c go on.
    marked = etl.call("POST", f"/api/workflow/nightly/runs/{run_id}/nodes/a/mark-success")
    assert marked.status_code == 200
    states = {n["name"]: n["state"] for n in marked.get_json()["nodes"]}
    assert states == {"a": "succeeded", "b": "running", "c": "running", "d": "pending"}
    assert etl.call("POST", f"/api/workflow/nightly/runs/{run_id}/retry").status_code == 409
    assert (
        etl.call("POST", f"/api/workflow/nightly/runs/{run_id}/nodes/d/mark-success").status_code
        == 409
    )
    assert (
        etl.call("POST", f"/api/workflow/nightly/runs/{run_id}/nodes/zz/mark-success").status_code
        == 404
    )


def test_retry_of_a_cancelled_run_queues_only_what_did_not_succeed(etl: Api) -> None:
    etl.call("POST", "/api/workflow", diamond())
    run_id = etl.call("POST", "/api/workflow/nightly/trigger").get_json()["runId"]
    etl.call("POST", f"/api/workflow/nightly/runs/{run_id}/cancel")
    retried = etl.call("POST", f"/api/workflow/nightly/runs/{run_id}/retry").get_json()
    assert retried["state"] == "running"
    node_a = retried["nodes"][0]
    assert node_a["state"] == "running" and node_a["attempt"] == 2
    assert etl.registry.children(layout.workflow_queue_folder("extract")) == [f"{run_id}~a~2"]


def test_runs_are_listed_newest_first_and_paged(etl: Api) -> None:
    etl.call("POST", "/api/workflow", diamond(overlapPolicy="ALLOW"))
    ids = [etl.call("POST", "/api/workflow/nightly/trigger").get_json()["runId"] for _ in range(3)]
    first = etl.call("GET", "/api/workflow/nightly/runs?limit=2").get_json()
    assert [r["runId"] for r in first["items"]] == [ids[2], ids[1]]
    assert set(first["items"][0]) == {"runId", "fireTime", "state", "startedAt", "endedAt"}
    second = etl.call("GET", f"/api/workflow/nightly/runs?limit=2&cursor={first['nextCursor']}")
    assert [r["runId"] for r in second.get_json()["items"]] == [ids[0]]
    assert second.get_json()["nextCursor"] is None
    assert etl.call("GET", "/api/workflow/nightly/runs?limit=0").status_code == 400
    assert etl.call("GET", "/api/workflow/nightly/runs?limit=2&cursor=xyz").status_code == 400


def test_an_edit_leaves_a_run_in_flight_on_its_snapshot(etl: Api) -> None:
    etl.call("POST", "/api/workflow", diamond())
    run_id = etl.call("POST", "/api/workflow/nightly/trigger").get_json()["runId"]
    edited = diamond(nodes=[{"name": "only", "job": "extract"}], description="v2")
    assert etl.call("PUT", "/api/workflow", edited).status_code < 300
    run = etl.call("GET", f"/api/workflow/nightly/runs/{run_id}").get_json()
    assert [n["name"] for n in run["nodes"]] == ["a", "b", "c", "d"]
    assert etl.call("GET", "/api/workflow/nightly").get_json()["description"] == "v2"
    moved = diamond(appName="secret")
    assert etl.call("PUT", "/api/workflow", moved).status_code == 400


def test_disable_enable_and_delete(etl: Api) -> None:
    etl.call("POST", "/api/workflow", diamond())
    assert etl.call("POST", "/api/workflow/nightly/disable").status_code == 204
    assert etl.call("GET", "/api/workflow/nightly").get_json()["enabled"] is False
    assert etl.call("POST", "/api/workflow/nightly/trigger").status_code == 409
    assert etl.call("POST", "/api/workflow/nightly/enable").status_code == 204
    assert etl.call("DELETE", "/api/workflow/nightly").status_code == 204
    assert etl.call("GET", "/api/workflow/nightly").status_code == 404
    assert etl.call("DELETE", "/api/workflow/nightly").status_code == 404


def test_hostile_names_and_bodies_are_refused(etl: Api) -> None:
    etl.call("POST", "/api/workflow", diamond())
    assert etl.call("GET", "/api/workflow/nightly/runs/not-a-run").status_code == 400
    assert etl.call("GET", "/api/workflow/nightly/runs/other@0000000000001").status_code == 404
    assert etl.call("GET", "/api/workflow/nightly/runs/nightly@0000000000001").status_code == 404
    too_long = etl.call("GET", "/api/workflow/" + "x" * 500)
    assert too_long.status_code == 400
    bad = etl.call("POST", "/api/workflow/nightly/trigger", {"parameter": 5})
    assert bad.status_code == 400 and "parameter" in bad.get_json()["fields"]
    unknown = etl.call("POST", "/api/workflow/nightly/trigger", {"surprise": 1})
    assert unknown.status_code == 400
    huge = etl.call("POST", "/api/workflow/nightly/trigger", {"parameter": "p" * 70000})
    assert huge.status_code == 400
    assert etl.call("POST", "/api/workflow", [1, 2]).status_code == 400
    assert etl.registry.children(layout.WORKFLOW_ACTIVE) == []


def test_roles_apply_per_app_and_hide_what_the_caller_cannot_see(etl: Api) -> None:
    etl.call("POST", "/api/workflow", diamond())
    # The guest account is a viewer everywhere: reads, never triggers or edits.
    assert etl.call("GET", "/api/workflow/nightly", headers=GUEST).status_code < 300
    assert etl.call("POST", "/api/workflow/nightly/trigger", headers=GUEST).status_code == 403
    assert etl.call("POST", "/api/workflow", diamond("other"), headers=GUEST).status_code == 403
    outsider = _user(etl, "outsider", (Role.EDITOR, "secret"))
    assert etl.call("GET", "/api/workflow/nightly", headers=outsider).status_code == 404
    assert etl.call("POST", "/api/workflow/nightly/trigger", headers=outsider).status_code == 404
    listed = etl.call("GET", "/api/workflows?limit=5", headers=outsider).get_json()
    assert listed["items"] == []
    operator = _user(etl, "operator_etl", (Role.OPERATOR, "etl"))
    run = etl.call("POST", "/api/workflow/nightly/trigger", headers=operator)
    assert run.status_code == 201
    assert etl.call("DELETE", "/api/workflow/nightly", headers=operator).status_code == 403
    # An editor of etl may not put a job of an app it cannot see in a workflow.
    editor = _user(etl, "editor_etl", (Role.EDITOR, "etl"))
    sneaky = diamond("sneaky", nodes=[{"name": "a", "job": "hidden"}])
    answer = etl.call("POST", "/api/workflow", sneaky, headers=editor)
    assert answer.status_code == 400 and "unknown job" in answer.get_json()["fields"]["nodes"]


def test_a_job_without_cron_registers_and_runs_only_when_triggered(api: Api) -> None:
    assert api.call("POST", "/api/app", app_body("etl")).status_code < 300
    body = job_body("on_demand", appName="etl")
    del body["cron"]
    assert api.call("POST", "/api/job/register", body).status_code < 300
    stored = api.call("GET", "/api/job/jobs/on_demand").get_json()
    assert stored["cron"] == ""
    assert api.registry.get(layout.ready_path("on_demand")) is None
    assert api.call("POST", "/api/job/trigger", raw="on_demand").status_code < 300
    assert api.registry.get(layout.ready_path("on_demand")) == b"1"
    daemon = job_body("daemon_no_cron", appName="etl", cron="", jobExecutionType="DAEMON")
    refused = api.call("POST", "/api/job/register", daemon)
    assert refused.status_code == 400 and "DAEMON" in refused.get_json()["fields"]["cron"]

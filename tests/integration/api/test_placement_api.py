"""Jobs no known agent could ever run: refused at register/update once agents are known,
accepted while none is, and `GET /api/job/{jobName}/placement` says which and why."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.leader.mesos.capacity import AgentCapacity
from tests.integration.api.conftest import APP, JOB, Api

# The demo app's executor takes 0.5 cpus and 64 MB on every agent its jobs run on.
AGENTS = {"agent-1": (4.0, 4096.0), "agent-2": (2.0, 8192.0)}
HUGE = {**JOB, "jobName": "huge_job", "memoryMB": 65536}


def with_agents(api: Api, totals: dict[str, tuple[float, float]] | None) -> AgentCapacity:
    """Give the app the capacity a leader's launcher would (`None`: none read yet)."""
    capacity = AgentCapacity()
    if totals is not None:
        capacity.set_reported(totals)
    api.client.application.extensions["ejc_term_access"].capacity = capacity
    return capacity


def placement(api: Api, job: str) -> dict[str, Any]:
    got = api.call("GET", f"/api/job/{job}/placement")
    assert got.status_code == 200, got.json
    body: dict[str, Any] = got.json
    return body


@pytest.fixture
def demo(api: Api) -> Api:
    assert api.call("POST", "/api/app", APP).status_code == 204
    return api


def test_a_job_bigger_than_every_agent_is_refused_once_agents_are_known(demo: Api) -> None:
    with_agents(demo, AGENTS)
    before = demo.snapshot()
    got = demo.call("POST", "/api/job/register", HUGE)
    assert got.status_code == 400
    assert set(got.json["fields"]) == {"memoryMB"}
    assert "65600 MB per task" in got.json["fields"]["memoryMB"]
    assert "8192" in got.json["fields"]["memoryMB"]
    assert "8192 MB" in got.json["error"] and "huge_job" in got.json["error"]
    assert demo.snapshot() == before

    too_many_cpus = demo.call("POST", "/api/job/register", {**HUGE, "memoryMB": 32, "cpuCount": 8})
    assert too_many_cpus.status_code == 400 and set(too_many_cpus.json["fields"]) == {"cpuCount"}
    assert demo.snapshot() == before


def test_an_update_that_could_never_run_is_refused_and_writes_nothing(demo: Api) -> None:
    with_agents(demo, AGENTS)
    assert demo.call("POST", "/api/job/register", JOB).status_code == 204
    before = demo.snapshot()
    got = demo.call("PUT", "/api/job/update", {"jobName": "demo_job", "cpuCount": 16})
    assert got.status_code == 400 and set(got.json["fields"]) == {"cpuCount"}
    assert demo.snapshot() == before
    # A run of more tasks than the agents hold together (all or nothing) is refused too.
    many = demo.call(
        "PUT", "/api/job/update", {"jobName": "demo_job", "cpuCount": 1.5, "shardingTotalCount": 6}
    )
    assert many.status_code == 400 and set(many.json["fields"]) == {"shardingTotalCount"}
    assert demo.snapshot() == before
    ok = demo.call("PUT", "/api/job/update", {"jobName": "demo_job", "cpuCount": 1})
    assert ok.status_code == 204
    assert demo.call("GET", "/api/job/jobs/demo_job").json["cpuCount"] == 1.0


def test_while_no_agent_is_known_any_job_is_accepted_and_reported_later(demo: Api) -> None:
    capacity = with_agents(demo, None)
    capacity.observe_offer("agent-1", 1.0, 512.0)  # an offer, but the master not read yet
    assert demo.call("POST", "/api/job/register", HUGE).status_code == 204
    assert placement(demo, "huge_job") == {
        "jobName": "huge_job",
        "placeable": None,
        "reason": "no Mesos agent is known yet",
        "fields": {},
        "agentsKnown": 0,
        "largestAgentCpus": None,
        "largestAgentMemoryMB": None,
    }
    capacity.set_reported(AGENTS)
    status = placement(demo, "huge_job")
    assert status["placeable"] is False and set(status["fields"]) == {"memoryMB"}
    assert status["agentsKnown"] == 2
    assert (status["largestAgentCpus"], status["largestAgentMemoryMB"]) == (4.0, 8192.0)
    assert "can never run" in status["reason"]


def test_placement_of_a_job_that_fits(demo: Api) -> None:
    with_agents(demo, AGENTS)
    assert demo.call("POST", "/api/job/register", JOB).status_code == 204
    status = placement(demo, "demo_job")
    assert status["placeable"] is True and status["reason"] is None and status["fields"] == {}


def test_placement_of_an_unknown_job_is_404(demo: Api) -> None:
    with_agents(demo, AGENTS)
    got = demo.call("GET", "/api/job/nothing/placement")
    assert got.status_code == 404 and got.json["type"] == "NotFound"


def test_a_term_without_a_launcher_accepts_every_job(demo: Api) -> None:
    # create_app alone (no launcher in the term) has no capacity at all.
    assert demo.call("POST", "/api/job/register", HUGE).status_code == 204
    assert placement(demo, "huge_job")["placeable"] is None

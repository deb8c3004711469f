"""Observability (/master/state, agent /state, operator API), faults, SIGTERM, ZooKeeper."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from deploy.zookeeper import ZooKeeperEnsemble
from tests.support.mesosfw import (
    Framework,
    RecordingScheduler,
    StandIn,
    command_task,
    executor_info,
    executor_task,
    wait_for,
)
from tests.support.processes import wait_reaped


def _running_pair(scheduler: RecordingScheduler) -> None:
    scheduler.launch(
        executor_task("exec-task", executor_info("app@-@state", cpus=0.5, mem=64), mode="run"),
        command_task("cmd-task", "echo $$ > cmd.pid; exec sleep 60", cpus=0.25, mem=32),
    )
    scheduler.wait_state("exec-task", "TASK_RUNNING")
    scheduler.wait_state("cmd-task", "TASK_RUNNING")


def test_state_documents_show_frameworks_agents_executors_and_tasks(
    make_standin: Callable[..., StandIn],
) -> None:
    standin = make_standin("--agents", "2", "--resources", "cpus:2;mem:2048;disk:1000")
    scheduler = RecordingScheduler()
    framework = Framework(standin.address, scheduler).start()
    try:
        _running_pair(scheduler)
        state = standin.state()
        work_dir = state["flags"]["work_dir"]
        assert len({s["id"] for s in state["slaves"]}) == 2
        assert len({s["hostname"] for s in state["slaves"]}) == 2
        assert state["slaves"][0]["resources"]["cpus"] == 2.0
        (fw,) = state["frameworks"]
        assert fw["id"] == framework.id and fw["active"] and fw["connected"]
        tasks = {t["id"]: t for t in fw["tasks"]}
        assert tasks["exec-task"]["executor_id"] == "app@-@state"
        assert tasks["cmd-task"]["executor_id"] == ""
        for task in tasks.values():
            assert task["state"] == "TASK_RUNNING"
            assert task["framework_id"] == framework.id
            assert task["slave_id"] in {s["id"] for s in state["slaves"]}
        assert tasks["exec-task"]["resources"]["cpus"] == 0.1
        assert tasks["cmd-task"]["resources"] == {
            "cpus": 0.25,
            "gpus": 0.0,
            "mem": 32.0,
            "disk": 0.0,
        }
        used_cpus = sum(s["used_resources"]["cpus"] for s in state["slaves"])
        assert used_cpus == pytest.approx(0.1 + 0.5 + 0.25)  # tasks + the executor's own
        # As on real Mesos: the master shows the executor's ExecutorInfo and its agent, and only
        # the agent's own /state shows where its sandbox is.
        (executor,) = fw["executors"]
        assert executor["executor_id"] == "app@-@state"
        assert executor["slave_id"] == tasks["exec-task"]["slave_id"]
        assert "directory" not in executor and "id" not in executor

        agent = next(s for s in state["slaves"] if s["id"] == executor["slave_id"])
        agent_state = standin.get_json("/state", agent["pid"].split("@")[1])
        assert agent_state["id"] == agent["id"]
        assert agent_state["flags"]["work_dir"] == work_dir
        (agent_executor,) = [
            e for f in agent_state["frameworks"] for e in f["executors"] if e["id"] == "app@-@state"
        ]
        assert agent_executor["directory"].startswith(work_dir)
        assert Path(agent_executor["directory"], "executor.pid").exists()
        assert [t["id"] for t in agent_executor["tasks"]] == ["exec-task"]

        for path in ("/api/v1", "/api/v1/operator"):
            status, body = standin.post_json(path, {"type": "GET_STATE"})
            assert status == 200 and body["type"] == "GET_STATE"
            get_state = body["get_state"]
            v1_tasks = {t["task_id"]["value"]: t for t in get_state["get_tasks"]["tasks"]}
            assert v1_tasks["exec-task"]["executor_id"] == {"value": "app@-@state"}
            assert v1_tasks["exec-task"]["state"] == "TASK_RUNNING"
            assert {r["name"] for r in v1_tasks["cmd-task"]["resources"]} == {"cpus", "mem"}
            assert len(get_state["get_agents"]["agents"]) == 2
            (v1_framework,) = get_state["get_frameworks"]["frameworks"]
            assert v1_framework["framework_info"]["id"] == {"value": framework.id}
            (v1_executor,) = get_state["get_executors"]["executors"]
            assert v1_executor["executor_info"]["executor_id"] == {"value": "app@-@state"}
        for kind in ("GET_TASKS", "GET_FRAMEWORKS", "GET_AGENTS", "GET_EXECUTORS"):
            status, body = standin.post_json("/api/v1", {"type": kind})
            assert status == 200 and kind.lower() in body
    finally:
        framework.stop()


@pytest.mark.parametrize("partition_aware", [False, True])
def test_removing_an_agent_rescinds_its_offers_and_loses_its_tasks(
    make_standin: Callable[..., StandIn], partition_aware: bool
) -> None:
    standin = make_standin("--agents", "2")
    scheduler = RecordingScheduler(hold_offers=True)
    scheduler.launch(command_task("doomed", "echo $$ > doomed.pid; exec sleep 60"))
    capabilities = [{"type": "PARTITION_AWARE"}] if partition_aware else []
    framework = Framework(standin.address, scheduler, capabilities=capabilities).start()
    try:
        scheduler.wait_state("doomed", "TASK_RUNNING")
        agent_id = scheduler.last("doomed").status["agent_id"]["value"]  # type: ignore[union-attr]

        def held_offer_on_agent() -> str | None:
            fw = standin.framework_state(framework.id)
            assert fw is not None
            return next((o["id"] for o in fw["offers"] if o["slave_id"] == agent_id), None)

        offer_id = wait_for(held_offer_on_agent, 10, message="an outstanding offer on the agent")
        sandbox = next(
            Path(e["directory"])
            for f in standin.get_json(
                "/state",
                standin.agent_endpoint(
                    [s["id"] for s in standin.state()["slaves"]].index(agent_id)
                ),
            )["frameworks"]
            for e in f["executors"]
        )
        pid = int(wait_for(lambda: (sandbox / "doomed.pid").read_text(), 5))

        assert standin.post_json("/faults/remove_agent", {"agent_id": agent_id}) == (
            200,
            {"removed": agent_id},
        )
        lost = scheduler.wait_state("doomed", "TASK_GONE" if partition_aware else "TASK_LOST")
        assert lost.status["reason"] == "REASON_AGENT_REMOVED"
        wait_for(lambda: offer_id in scheduler.rescinded, 10, message="RESCIND of the offer")
        wait_for(lambda: (None, agent_id, None) in scheduler.failures, 10, message="agent lost")
        wait_reaped(pid)
        assert [s["id"] for s in standin.state()["slaves"]] != [agent_id]
        assert len(standin.state()["slaves"]) == 1
        assert standin.post_json("/faults/remove_agent", {"agent_id": agent_id})[0] == 404

        status, added = standin.post_json("/faults/add_agent", {"resources": "cpus:1;mem:512"})
        assert status == 200
        wait_for(
            lambda: any(o["agent_id"]["value"] == added["agent_id"] for o in scheduler.offers),
            10,
            message="offers from the added agent",
        )
    finally:
        framework.stop()


def test_sigterm_stops_the_stand_in_and_kills_its_executors(
    make_standin: Callable[..., StandIn],
) -> None:
    standin = make_standin()
    scheduler = RecordingScheduler()
    framework = Framework(standin.address, scheduler, checkpoint=True).start()
    try:
        _running_pair(scheduler)
        fw = standin.framework_state(framework.id)
        assert fw is not None
        sandbox = standin.sandboxes(framework.id)[fw["executors"][0]["executor_id"]]
        executor_pid = int((sandbox / "executor.pid").read_text())
        agent_state = standin.get_json("/state", standin.agent_endpoint())
        cmd_dir = next(
            Path(e["directory"])
            for f in agent_state["frameworks"]
            for e in f["executors"]
            if e["id"] == "cmd-task"
        )
        cmd_pid = int(wait_for(lambda: (cmd_dir / "cmd.pid").read_text(), 5))
        assert standin.stop() == 0
        wait_reaped(executor_pid, 5)
        wait_reaped(cmd_pid, 5)
    finally:
        framework.stop(failover=True)


def test_zk_announces_the_master_for_pymesos_detection(
    make_standin: Callable[..., StandIn], zk: ZooKeeperEnsemble, zk_client: KazooClient
) -> None:
    path = f"/t-{uuid.uuid4().hex[:12]}/mesos"
    standin = make_standin("--zk", f"zk://{zk.hosts}{path}")
    (child,) = zk_client.get_children(path)
    assert child.startswith("json.info_")
    info: dict[str, Any] = json.loads(zk_client.get(f"{path}/{child}")[0])
    assert f"{info['address']['ip']}:{info['address']['port']}" == standin.address

    scheduler = RecordingScheduler()
    framework = Framework(f"zk://{zk.hosts}{path}", scheduler)
    try:
        framework.start(timeout_s=20)
        assert standin.framework_state(framework.id) is not None

        # A master failover replaces the master's node with the new master's (higher
        # sequence), and the framework, following ZooKeeper, subscribes again with its id.
        status, answer = standin.post_json("/faults/master_failover", {})
        assert status == 200
        (after,) = wait_for(
            lambda: [c for c in zk_client.get_children(path) if c != child] or None,
            10,
            message="the new master's node",
        )
        assert after > child
        assert json.loads(zk_client.get(f"{path}/{after}")[0])["id"] == answer["master_id"]
        assert zk_client.get_children(path) == [after]
        # (pymesos may re-subscribe at the old address first and then follow ZooKeeper: the
        # framework can be seen disconnected once more in between.)
        wait_for(
            lambda: (
                scheduler.reregistrations >= 1
                and (standin.framework_state(framework.id) or {}).get("connected")
            ),
            20,
            message="re-subscription",
        )
    finally:
        framework.stop()
    assert standin.stop() == 0
    assert zk_client.get_children(path) == []

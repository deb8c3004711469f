"""Agent loss as a Mesos master reports it: every task it still holds on the agent, including
one that ended there but whose end the framework never acknowledged (issue 24)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.support.mesosfw import Framework, RecordingScheduler, StandIn, command_task, wait_for


@pytest.mark.parametrize("partition_aware", [False, True])
def test_a_task_whose_end_was_not_acknowledged_is_reported_lost_with_its_agent(
    make_standin: Callable[..., StandIn], partition_aware: bool
) -> None:
    standin = make_standin("--agents", "2")
    # No acknowledgements at all: only the first update of the task (STARTING) is ever in
    # flight, its RUNNING and FINISHED wait behind it at the agent.
    scheduler = RecordingScheduler()
    scheduler.launch(command_task("short", "exit 0"))
    capabilities = [{"type": "PARTITION_AWARE"}] if partition_aware else []
    framework = Framework(
        standin.address, scheduler, capabilities=capabilities, implicit_acknowledgements=False
    ).start()
    try:
        scheduler.wait_state("short", "TASK_STARTING")

        def master_task() -> dict[str, object] | None:
            fw = standin.framework_state(framework.id)
            assert fw is not None
            return next((t for t in fw["tasks"] if t["id"] == "short"), None)

        wait_for(
            lambda: (master_task() or {}).get("state") == "TASK_FINISHED",
            10,
            message="the master to know the task finished",
        )
        assert scheduler.states("short") == ["TASK_STARTING"]
        agent_id = master_task()["slave_id"]  # type: ignore[index]

        assert standin.post_json("/faults/remove_agent", {"agent_id": agent_id})[0] == 200

        expected = "TASK_GONE" if partition_aware else "TASK_LOST"
        lost = scheduler.wait_state("short", expected)
        assert lost.reason == "REASON_AGENT_REMOVED"
        assert lost.source == "SOURCE_MASTER"
        assert "uuid" not in lost.status
        # The master forgets the task; its recorded state stays the one the agent reported.
        fw = standin.framework_state(framework.id)
        assert fw is not None and not fw["tasks"]
        (completed,) = [t for t in fw["completed_tasks"] if t["id"] == "short"]
        assert completed["state"] == "TASK_FINISHED"
        assert [s["state"] for s in completed["statuses"]][-1] == expected
    finally:
        framework.stop()

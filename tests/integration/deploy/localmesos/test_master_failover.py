"""A Mesos master failover in the stand-in, seen by a real pymesos framework (issue 24): a new
master id, the subscription dropped and made again with the same framework id, held offers
void, tasks kept, reconciliation unanswered until the agents re-registered, and every update
not acknowledged before sent again."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from tests.support.mesosfw import Framework, RecordingScheduler, StandIn, command_task, wait_for


def test_a_master_failover_drops_subscriptions_and_offers_and_keeps_tasks_and_updates(
    make_standin: Callable[..., StandIn],
) -> None:
    standin = make_standin("--agents", "2")
    scheduler = RecordingScheduler(hold_offers=True)
    scheduler.launch(
        command_task("long", "exec sleep 60"), command_task("short", "exit 0", cpus=0.2)
    )
    framework = Framework(
        standin.address,
        scheduler,
        capabilities=[{"type": "PARTITION_AWARE"}],
        implicit_acknowledgements=False,
        failover_timeout=60.0,
    ).start()
    try:
        # Given a running task, a task that finished while its first update is unacknowledged
        # (nothing is acknowledged here), and an offer held
        old_master = standin.state()["id"]

        def master_states() -> dict[str, str]:
            fw = standin.framework_state(framework.id)
            assert fw is not None
            return {t["id"]: t["state"] for t in fw["tasks"]}

        wait_for(
            lambda: master_states() == {"long": "TASK_RUNNING", "short": "TASK_FINISHED"},
            10,
            message="one task running, one finished unacknowledged",
        )
        held = wait_for(lambda: list(scheduler.offers), 10, message="an offer held")[-1]
        # The master's state has the updates before the framework's stream has brought them.
        wait_for(
            lambda: (
                [scheduler.states(t).count("TASK_STARTING") for t in ("long", "short")] == [1, 1]
            ),
            10,
            message="each task's first update received once",
        )

        # When the master fails over, the agents re-registering 1 s later
        status, answer = standin.post_json(
            "/faults/master_failover", {"agent_reregister_delay_s": 1.0}
        )
        assert status == 200 and answer["previous_master_id"] == old_master
        new_master = answer["master_id"]
        assert new_master != old_master and standin.state()["id"] == new_master

        # Then the framework is disconnected and subscribes again with its id at once
        wait_for(lambda: scheduler.reregistrations >= 1, 10, message="re-subscription")
        assert scheduler.disconnections >= 1
        assert scheduler.framework_ids == [framework.id]
        fw = standin.framework_state(framework.id)
        assert fw is not None and fw["connected"] and fw["active"]
        # Reconciliation before the agents re-registered: no answer for their tasks
        framework.driver.reconcileTasks([{"task_id": {"value": "long"}}])
        # The offer held is void: a launch on it is dropped
        framework.driver.launchTasks(
            held["id"], [{**command_task("late", "exit 0"), "agent_id": held["agent_id"]}]
        )
        dropped = scheduler.wait_state("late", "TASK_DROPPED", 10)
        assert dropped.reason == "REASON_INVALID_OFFERS"
        assert "no longer valid" in dropped.message

        # Once the agents re-registered, their unacknowledged updates come again, new offers
        # carry the new master's id, and reconciliation is answered
        def sent_again(task_id: str) -> bool:
            return scheduler.states(task_id).count("TASK_STARTING") == 2

        for task_id in ("long", "short"):
            wait_for(partial(sent_again, task_id), 10, message=f"{task_id}'s update sent again")
            assert "uuid" in (scheduler.last(task_id) or _none()).status
        wait_for(
            lambda: any(o["id"]["value"].startswith(new_master) for o in scheduler.offers),
            10,
            message="an offer of the new master",
        )

        def reconciled() -> list[Any]:
            return [u for u in scheduler.of("long") if u.reason == "REASON_RECONCILIATION"]

        assert reconciled() == []  # the call made before the agents were back got no answer
        framework.driver.reconcileTasks([{"task_id": {"value": "long"}}])
        answers = wait_for(reconciled, 10, message="a reconciliation answer")
        assert [u.state for u in answers] == ["TASK_RUNNING"]
        assert master_states() == {"long": "TASK_RUNNING", "short": "TASK_FINISHED"}
    finally:
        framework.stop()


def _none() -> Any:
    raise AssertionError("no update")

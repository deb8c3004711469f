"""When a task's end wakes the launcher (issue 29): only when work is pending, which is what
the end may let launch (the job's next run, a pool's waiting run, a node fire). Waking it for
every end made about 80 rounds a second at 100 fires a second, nearly all with nothing to do."""

from __future__ import annotations

from scheduler.leader.lifecycle import WakeSignal
from scheduler.leader.mesos.driver import MesosDriver
from scheduler.leader.mesos.launcher import Launcher
from scheduler.model.task_id import TaskId, TaskType
from scheduler.storage.queue_cache import QueueCache
from scheduler.storage.term_stores import TermStores
from scheduler.storage.workflow_store import NodeFire, WorkflowQueue
from tests.integration.leader.mesos.helpers import Acting, FrameworkIds, settings_for
from tests.support.mesosfw import StandIn
from tests.support.waiting import wait_for


def _woken(wake: WakeSignal, launcher: Launcher) -> bool:
    """Whether a task's end, now, wakes the launcher."""
    wake.clear()
    launcher.wake_for_work()
    return wake.wait(0)


def _until(queues: QueueCache, pending: bool, what: str) -> None:
    def seen() -> bool:
        queues.sync()
        return queues.has_pending() is pending

    wait_for(seen, 10, message=what)


def test_a_task_end_wakes_the_launcher_only_when_work_is_pending(
    standin: StandIn,
    stores: TermStores,
    queues: QueueCache,
    wake: WakeSignal,
    zk_namespace: str,
) -> None:
    node_fires = WorkflowQueue()
    driver = MesosDriver(settings_for(standin, zk_namespace), FrameworkIds())
    launcher = Launcher(stores, Acting(), driver, queues, wake=wake, workflows=node_fires)
    # The view's running tasks coming and going go to the launcher's check, not to its wake.
    assert queues.on_running_change == launcher.wake_for_work
    queues.sync()
    assert not _woken(wake, launcher)
    stores.ready.add_transient("a", misfire=True)  # a run waiting (its job may be running)
    _until(queues, True, "the pending run in the view")
    assert _woken(wake, launcher)
    stores.ready.take("a")
    _until(queues, False, "the run taken")
    assert not _woken(wake, launcher)
    stores.failover.add(str(TaskId.new("f", 0, TaskType.READY, "agent-1")))
    _until(queues, True, "a failover shard in the view")
    assert _woken(wake, launcher)
    stores.failover.remove("f", 0)
    _until(queues, False, "the shard gone")
    node_fires.add([NodeFire("wf", "wf@0000000000001", "a", 0, "a", 1.0)])
    assert _woken(wake, launcher)  # a node fire waits for its job's task too

"""The in-process API other code builds on: LocalMesos(...).start() / .stop(timeout_s)."""

from __future__ import annotations

import threading
from pathlib import Path

from deploy.localmesos import LocalMesos, Resources
from tests.support.mesosfw import Framework, RecordingScheduler, command_task, wait_for


def test_local_mesos_runs_in_process_and_stops_every_thread(tmp_path: Path) -> None:
    mesos = LocalMesos(
        port=0,
        agents=2,
        resources="cpus:2;mem:1024;ports:[31000-31009]",
        work_dir=tmp_path / "mesos",
        allocation_interval_s=0.1,
    )
    host, port = mesos.address.split(":")
    assert host == "127.0.0.1" and int(port) == mesos.port > 0  # bound before start()
    with mesos:
        assert len(mesos.agent_ids) == 2
        endpoints = {mesos.agent_endpoint(a) for a in mesos.agent_ids}
        assert len(endpoints) == 2 and mesos.address not in endpoints
        third = mesos.add_agent(Resources.parse_spec("cpus:1;mem:256"))
        assert len(mesos.agent_ids) == 3

        scheduler = RecordingScheduler()
        framework = Framework(mesos.address, scheduler).start()
        scheduler.launch(command_task("api", "true"))
        scheduler.wait_state("api", "TASK_FINISHED")
        state = mesos.state()
        assert state["flags"]["work_dir"] == str((tmp_path / "mesos").resolve())
        assert {s["id"] for s in state["slaves"]} == set(mesos.agent_ids)

        assert mesos.remove_agent(third)
        assert not mesos.remove_agent(third)
        assert not mesos.kill_executor(framework.id, "no-such-executor")
        framework.stop()
    assert (tmp_path / "mesos").is_dir()  # a work dir we passed in is kept

    def leftovers() -> list[str]:
        return [t.name for t in threading.enumerate() if t.name.startswith("localmesos")]

    assert wait_for(lambda: not leftovers(), 5, message="no stand-in threads") is True

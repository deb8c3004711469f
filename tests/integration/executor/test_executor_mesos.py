"""The real executor (`bin/start.sh` → `python -m executor`) under the local Mesos stand-in.

Every task's executor comes from an app archive built by the packaging command, which the
stand-in's fetcher copies into the sandbox and extracts.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import sys
from pathlib import Path

from deploy.localmesos import LocalMesos
from executor.records import parse_output_message, task_output_dir
from executor.taskdata import executor_id
from tests.support.mesosfw import App, Framework, RecordingScheduler
from tests.support.processes import group_alive, pid_alive
from tests.support.waiting import wait_for

from .conftest import sandboxes
from .helpers import executor_pid, read_pid, task_data


def only_agent(scheduler: RecordingScheduler) -> str:
    return wait_for(lambda: next(iter(scheduler.agent_ids), None), 10.0, message="an offer")


def test_simple_dataflow_and_script_jobs_finish_with_their_records(
    scheduler: RecordingScheduler, test_app: App, tmp_path: Path
) -> None:
    tasks = [
        task_data(tmp_path, "SIMPLE", "testjobs.simple:ok", item=0, total=2),
        task_data(tmp_path, "DATAFLOW", "testjobs.flow:Numbers", streaming=True),
        task_data(tmp_path, "SCRIPT", script="scripts/ok.sh", item=1, total=2),
    ]
    ids = [scheduler.launch_app(test_app, data) for data in tasks]
    for task_id in ids:
        assert scheduler.wait_terminal(task_id).state == "TASK_FINISHED", task_id
        states = scheduler.states(task_id)
        assert states == ["TASK_RUNNING", "TASK_FINISHED"], states
        running, finished = scheduler.of(task_id)
        assert running.record is not None and finished.record is not None
        assert finished.record.id == running.record.id
        assert finished.record.is_success is True
        assert finished.record.task_id == task_id
        assert finished.source == "SOURCE_EXECUTOR"
        assert (finished.record.hostname, finished.record.ip) == ("agent0.localmesos", "127.0.0.1")
    simple, dataflow, script = tasks
    ctx = json.loads((tmp_path / f"{simple.sharding.job_name}-0.json").read_text())
    assert (ctx["sharding_item"], ctx["sharding_total_count"]) == (0, 2)
    assert Path(ctx["cwd"]).parts[-2] == "runs"  # ran in the sandbox, where Mesos extracted it
    batches = (tmp_path / f"{dataflow.sharding.job_name}-0.batches").read_text().splitlines()
    assert len(batches) == 3
    argument = (tmp_path / f"{script.sharding.job_name}-1.script").read_text().splitlines()[0]
    assert json.loads(argument) == script.sharding.to_json()
    # One executor for the app on the agent ran all three.
    agent = only_agent(scheduler)
    assert scheduler.lost_executors() == []
    assert len(scheduler.agent_ids) == 1
    assert executor_id("testapp", agent) == f"testapp@-@{agent}"


def test_failing_jobs_report_task_failed_with_the_reason(
    scheduler: RecordingScheduler, test_app: App, tmp_path: Path
) -> None:
    simple = scheduler.launch_app(test_app, task_data(tmp_path, "SIMPLE", "testjobs.simple:fail"))
    flow = scheduler.launch_app(test_app, task_data(tmp_path, "DATAFLOW", "testjobs.flow:Broken"))
    script = scheduler.launch_app(test_app, task_data(tmp_path, "SCRIPT", script="scripts/fail.sh"))
    bad_class = scheduler.launch_app(test_app, task_data(tmp_path, "SIMPLE", "testjobs.nope:run"))
    failed = {
        task_id: scheduler.wait_terminal(task_id) for task_id in (simple, flow, script, bad_class)
    }
    assert {s.state for s in failed.values()} == {"TASK_FAILED"}
    assert failed[simple].message.startswith("ValueError: bad shard 0 (at testjobs/simple.py:")
    assert failed[flow].message.startswith("KeyError: 'no home for 0'")
    assert failed[script].message == "script exited with status 3"
    assert failed[bad_class].message.startswith("jobClass 'testjobs.nope:run': no module named")
    record = failed[simple].record
    assert record is not None and record.is_success is False
    assert "Traceback" in record.failure_cause


def test_a_hanging_job_is_killed_and_reported_only_after_it_stopped(
    framework: Framework, scheduler: RecordingScheduler, test_app: App, tmp_path: Path
) -> None:
    data = task_data(tmp_path, "SIMPLE", "testjobs.simple:hang")
    task_id = scheduler.launch_app(test_app, data)
    pid = read_pid(tmp_path / f"{data.sharding.job_name}-0.pid")
    scheduler.wait_state(task_id, "TASK_RUNNING")
    framework.kill(task_id)
    killed = scheduler.wait_terminal(task_id)
    # The executor reports KILLED after reaping the worker: by now it must be gone.
    assert killed.state == "TASK_KILLED"
    assert not pid_alive(pid) and not group_alive(pid)
    assert (tmp_path / f"{data.sharding.job_name}-0.stopped").exists()  # SIGTERM first


def test_a_daemon_job_reports_begin_and_complete_for_each_fire(
    framework: Framework, scheduler: RecordingScheduler, test_app: App, tmp_path: Path
) -> None:
    data = task_data(tmp_path, "SIMPLE", "testjobs.simple:count", execution="DAEMON")
    task_id = scheduler.launch_app(test_app, data)
    wait_for(
        lambda: len(scheduler.with_message(task_id, "COMPLETE")) >= 3,
        20.0,
        message="three daemon runs",
    )
    begins = scheduler.with_message(task_id, "BEGIN")
    completes = scheduler.with_message(task_id, "COMPLETE")
    assert len(begins) >= 3
    assert [s.state for s in begins + completes] == ["TASK_RUNNING"] * len(begins + completes)
    assert [c.record.id for c in completes[:3] if c.record] == [
        b.record.id for b in begins[:3] if b.record
    ]
    assert all(c.record is not None and c.record.is_success for c in completes)
    framework.kill(task_id)
    assert scheduler.wait_terminal(task_id).state == "TASK_KILLED"


def test_one_failing_task_leaves_the_other_tasks_of_the_app_running(
    framework: Framework, scheduler: RecordingScheduler, test_app: App, tmp_path: Path
) -> None:
    hang = task_data(tmp_path, "SIMPLE", "testjobs.simple:hang")
    hang_id = scheduler.launch_app(test_app, hang)
    crash_id = scheduler.launch_app(
        test_app, task_data(tmp_path, "SIMPLE", "testjobs.simple:exit_hard")
    )
    pid = read_pid(tmp_path / f"{hang.sharding.job_name}-0.pid")
    assert scheduler.wait_terminal(crash_id).state == "TASK_FAILED"
    # The same executor still runs the other task and takes new ones.
    assert pid_alive(pid)
    assert scheduler.states(hang_id) == ["TASK_RUNNING"]
    later = scheduler.launch_app(test_app, task_data(tmp_path, "SIMPLE", "testjobs.simple:ok"))
    assert scheduler.wait_terminal(later).state == "TASK_FINISHED"
    assert scheduler.lost_executors() == []
    framework.kill(hang_id)
    assert scheduler.wait_terminal(hang_id).state == "TASK_KILLED"


def test_bad_task_data_is_a_task_error_and_the_executor_keeps_serving(
    scheduler: RecordingScheduler, test_app: App, tmp_path: Path
) -> None:
    not_json = scheduler.launch_app(test_app, base64.b64encode(b"{not json").decode())
    bad_type = task_data(tmp_path, "SIMPLE", "testjobs.simple:ok").to_json()
    bad_type["jobConfig"]["jobType"] = "JAVA"
    bad = scheduler.launch_app(
        test_app, base64.b64encode(json.dumps(bad_type).encode()).decode(), task_id="bad@-@0"
    )
    error = scheduler.wait_terminal(not_json)
    assert error.state == "TASK_ERROR"
    assert "not base64 of UTF-8 JSON" in error.message
    error = scheduler.wait_terminal(bad)
    assert error.state == "TASK_ERROR"
    assert "jobConfig.jobType: 'JAVA'" in error.message
    good = scheduler.launch_app(test_app, task_data(tmp_path, "SIMPLE", "testjobs.simple:ok"))
    assert scheduler.wait_terminal(good).state == "TASK_FINISHED"


def test_the_stop_message_stops_every_task_and_the_executor_exits_0(
    framework: Framework, scheduler: RecordingScheduler, test_app: App, tmp_path: Path
) -> None:
    hang = task_data(tmp_path, "SIMPLE", "testjobs.simple:hang")
    hang_id = scheduler.launch_app(test_app, hang)
    daemon_id = scheduler.launch_app(
        test_app, task_data(tmp_path, "SIMPLE", "testjobs.simple:count", execution="DAEMON")
    )
    pid = read_pid(tmp_path / f"{hang.sharding.job_name}-0.pid")
    scheduler.wait_state(daemon_id, "TASK_RUNNING")
    agent = only_agent(scheduler)
    framework.send_message(test_app.executor_id(agent), agent, "STOP")
    killed = scheduler.wait_terminal(hang_id)
    assert (killed.state, killed.message) == ("TASK_KILLED", "the scheduler sent STOP")
    assert scheduler.wait_terminal(daemon_id).state == "TASK_KILLED"
    assert not pid_alive(pid)
    lost = wait_for(scheduler.lost_executors, 20.0, message="the executor to exit")
    assert lost == [(f"testapp@-@{only_agent(scheduler)}", 0)]


def test_an_agent_shutdown_stops_every_task_and_the_executor_exits_0(
    framework: Framework, scheduler: RecordingScheduler, test_app: App, tmp_path: Path
) -> None:
    hang = task_data(tmp_path, "SIMPLE", "testjobs.simple:stubborn")
    hang_id = scheduler.launch_app(test_app, hang)
    pid = read_pid(tmp_path / f"{hang.sharding.job_name}-0.pid")
    scheduler.wait_state(hang_id, "TASK_RUNNING")
    agent = only_agent(scheduler)
    framework.shutdown_executor(test_app.executor_id(agent), agent)
    # SIGTERM is ignored by this job: SIGKILL within the shutdown grace period ends it.
    killed = scheduler.wait_terminal(hang_id)
    assert (killed.state, killed.message) == ("TASK_KILLED", "the agent shut the executor down")
    assert not pid_alive(pid)
    lost = wait_for(scheduler.lost_executors, 20.0, message="the executor to exit")
    assert lost == [(f"testapp@-@{only_agent(scheduler)}", 0)]


def test_sigterm_stops_every_task_and_the_executor_exits_0(
    framework: Framework, scheduler: RecordingScheduler, test_app: App, tmp_path: Path
) -> None:
    hang = task_data(tmp_path, "SIMPLE", "testjobs.simple:hang")
    hang_id = scheduler.launch_app(test_app, hang)
    pid = read_pid(tmp_path / f"{hang.sharding.job_name}-0.pid")
    scheduler.wait_state(hang_id, "TASK_RUNNING")
    agent = only_agent(scheduler)
    executor = executor_pid(framework.id, executor_id("testapp", agent))
    assert executor is not None
    os.kill(executor, signal.SIGTERM)
    assert scheduler.wait_terminal(hang_id).state == "TASK_KILLED"
    assert not pid_alive(pid)
    lost = wait_for(scheduler.lost_executors, 20.0, message="the executor to exit")
    assert lost == [(f"testapp@-@{agent}", 0)]


def test_a_crashed_executor_takes_its_job_processes_with_it(
    framework: Framework,
    scheduler: RecordingScheduler,
    test_app: App,
    mesos: LocalMesos,
    tmp_path: Path,
) -> None:
    hang = task_data(tmp_path, "SIMPLE", "testjobs.simple:stubborn")
    hang_id = scheduler.launch_app(test_app, hang)
    pid = read_pid(tmp_path / f"{hang.sharding.job_name}-0.pid")
    scheduler.wait_state(hang_id, "TASK_RUNNING")
    agent = only_agent(scheduler)
    assert mesos.kill_executor(framework.id, executor_id("testapp", agent))
    failed = scheduler.wait_terminal(hang_id)
    assert (failed.state, failed.reason) == ("TASK_FAILED", "REASON_EXECUTOR_TERMINATED")
    wait_for(lambda: not group_alive(pid), 10.0, message="the orphaned job to die")


def test_an_archive_with_the_executor_bundled_runs_that_executor(
    scheduler: RecordingScheduler, app_archives: dict[str, Path], mesos: LocalMesos, tmp_path: Path
) -> None:
    app = App("bundled", app_archives["bundled"], environment={"EJC_PYTHON": sys.executable})
    task_id = scheduler.launch_app(app, task_data(tmp_path, "SIMPLE", "testjobs.simple:ok"))
    assert scheduler.wait_terminal(task_id).state == "TASK_FINISHED"
    (sandbox,) = sandboxes(mesos.work_dir, executor_id("bundled", only_agent(scheduler)))
    assert (sandbox / "executor" / "__main__.py").is_file()
    assert (sandbox / "testapp-bundled.tar.gz").is_file()  # fetched, then extracted
    assert f"executor package {sandbox / 'executor'}" in (sandbox / "stderr").read_text()


def test_the_demo_app_runs_its_three_jobs(
    scheduler: RecordingScheduler, app_archives: dict[str, Path], mesos: LocalMesos, tmp_path: Path
) -> None:
    app = App("demo", app_archives["demo"], environment={"EJC_PYTHON": sys.executable})
    ids = [
        scheduler.launch_app(
            app, task_data(tmp_path, "SIMPLE", "demo.jobs:hello", item=1, total=2)
        ),
        scheduler.launch_app(
            app, task_data(tmp_path, "DATAFLOW", "demo.jobs:NumberSquares", job_parameter="12")
        ),
        scheduler.launch_app(app, task_data(tmp_path, "SCRIPT", script="scripts/hello.sh")),
    ]
    for task_id in ids:
        assert scheduler.wait_terminal(task_id).state == "TASK_FINISHED"
    (sandbox,) = sandboxes(mesos.work_dir, executor_id("demo", only_agent(scheduler)))
    # Each task's output is in files of its own, named in its TASK_RUNNING message.
    hello, squares, script = (
        (sandbox / task_output_dir(task_id) / "stdout").read_text() for task_id in ids
    )
    assert "hello from " in hello and "shard 1/2" in hello
    assert "shard 0: [0, 1, 4]" in squares and "hello from " not in squares
    assert script and "shard 0: [0, 1, 4]" not in script
    running = scheduler.of(ids[0])[0]
    assert running.state == "TASK_RUNNING"
    assert parse_output_message(running.message) == {
        "stdout": f"{task_output_dir(ids[0])}/stdout",
        "stderr": f"{task_output_dir(ids[0])}/stderr",
    }
    assert "hello from " not in (sandbox / "stdout").read_text()

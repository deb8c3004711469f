"""Task runners with real worker processes, below the pymesos layer (no Mesos involved)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from executor.records import parse_output_message, task_output_dir
from executor.supervisor import worker_environment
from executor.taskdata import TaskData
from executor.tasks import DaemonTask, RunEnvironment, TaskRunner, new_runner
from tests.support.processes import group_alive, pid_alive
from tests.support.updates import Recorder
from tests.support.waiting import wait_for

from .helpers import TEST_APP, read_pid, task_data

GRACE_S = 0.5


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def env() -> RunEnvironment:
    return RunEnvironment(
        app_dir=TEST_APP,
        python=sys.executable,
        worker_env=worker_environment(os.environ, TEST_APP),
        hostname="agent0.test",
        ip="127.0.0.1",
    )


@pytest.fixture
def runners() -> Iterator[list[TaskRunner]]:
    """Every runner a test starts; killed and joined at the end whatever happened."""
    started: list[TaskRunner] = []
    yield started
    for runner in started:
        runner.request_kill()
    for runner in started:
        assert runner.join(30.0)


@pytest.fixture
def run(env: RunEnvironment, recorder: Recorder, runners: list[TaskRunner]):
    def start(data: TaskData, kill_grace_s: float = GRACE_S) -> TaskRunner:
        runner = new_runner(data.sharding.task_id, data.encode(), data, env, recorder, kill_grace_s)
        runners.append(runner)
        runner.start()
        return runner

    return start


def test_a_simple_job_finishes_with_a_started_and_a_completed_record(
    run, recorder: Recorder, tmp_path: Path
) -> None:
    data = task_data(tmp_path, "SIMPLE", "testjobs.simple:ok", item=1, total=2)
    run(data)
    task_id = data.sharding.task_id
    assert recorder.wait_terminal(task_id).state == "TASK_FINISHED"
    updates = recorder.of(task_id)
    assert [u.state for u in updates] == ["TASK_RUNNING", "TASK_FINISHED"]
    begun, ended = updates[0].record, updates[1].record
    assert begun is not None and ended is not None
    assert not begun.complete and ended.is_success is True and ended.id == begun.id
    assert (ended.job_name, ended.task_id, ended.sharding_item) == (
        data.sharding.job_name,
        task_id,
        1,
    )
    assert (ended.hostname, ended.ip) == ("agent0.test", "127.0.0.1")
    assert ended.start_time_ms <= (ended.complete_time_ms or 0)
    ctx = json.loads((tmp_path / f"{data.sharding.job_name}-1.json").read_text())
    assert ctx == {
        "job_name": data.sharding.job_name,
        "task_id": task_id,
        "sharding_total_count": 2,
        "sharding_item": 1,
        "sharding_parameter": "param1",
        "job_parameter": str(tmp_path),
        "job_properties": {"color": "blue"},
        "cwd": str(TEST_APP),
    }


def test_a_class_job_runs_its_execute(run, recorder: Recorder, tmp_path: Path) -> None:
    data = task_data(tmp_path, "SIMPLE", "testjobs.simple.Greeter", item=0)
    run(data)
    assert recorder.wait_terminal(data.sharding.task_id).state == "TASK_FINISHED"
    assert (tmp_path / f"{data.sharding.job_name}-0.greeted").read_text() == "param0"


def test_a_raising_job_fails_with_the_exception_and_where_it_was_raised(
    run, recorder: Recorder, tmp_path: Path
) -> None:
    data = task_data(tmp_path, "SIMPLE", "testjobs.simple:fail", item=0)
    run(data)
    update = recorder.wait_terminal(data.sharding.task_id)
    assert update.state == "TASK_FAILED"
    assert update.message.startswith("ValueError: bad shard 0 (at testjobs/simple.py:")
    assert update.message.endswith(" in fail)")
    assert update.record is not None and update.record.is_success is False
    assert "Traceback" in update.record.failure_cause
    assert update.record.failure_cause.rstrip().endswith("ValueError: bad shard 0")


def test_with_a_sandbox_each_task_writes_to_files_of_its_own_and_names_them(
    env: RunEnvironment, recorder: Recorder, runners: list[TaskRunner], tmp_path: Path
) -> None:
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    boxed = replace(env, sandbox=sandbox)
    good = task_data(tmp_path, "SIMPLE", "testjobs.simple:ok", item=0)
    bad = task_data(tmp_path, "SIMPLE", "testjobs.simple:fail", item=1, total=2, job_name="o")
    for data in (good, bad):
        runner = new_runner(data.sharding.task_id, data.encode(), data, boxed, recorder, GRACE_S)
        runners.append(runner)
        runner.start()
    assert recorder.wait_terminal(good.sharding.task_id).state == "TASK_FINISHED"
    assert recorder.wait_terminal(bad.sharding.task_id).state == "TASK_FAILED"
    for data in (good, bad):
        task_id = data.sharding.task_id
        (running,) = [u for u in recorder.of(task_id) if u.state == "TASK_RUNNING"]
        files = parse_output_message(running.message)
        folder = task_output_dir(task_id)
        assert files == {"stdout": f"{folder}/stdout", "stderr": f"{folder}/stderr"}
    good_dir = sandbox / task_output_dir(good.sharding.task_id)
    bad_dir = sandbox / task_output_dir(bad.sharding.task_id)
    assert (good_dir / "stdout").read_text() == f"ok {good.sharding.job_name} 0\n"
    assert "Traceback" not in (good_dir / "stderr").read_text()
    # The failing job's traceback is in its own stderr, and nothing of the other task.
    assert (bad_dir / "stdout").read_text() == ""
    bad_err = (bad_dir / "stderr").read_text()
    assert "Traceback" in bad_err and "ValueError: bad shard 1" in bad_err
    assert good.sharding.job_name not in bad_err
    # Nothing went to the executor's own streams' stand-ins in the sandbox root.
    assert sorted(p.name for p in sandbox.iterdir()) == ["tasks"]


@pytest.mark.parametrize(
    ("job_class", "message"),
    [
        ("testjobs.nothing:run", "jobClass 'testjobs.nothing:run': no module named"),
        ("testjobs.simple:NoExecute", "class NoExecute has no execute(ctx) method"),
        ("testjobs.simple:NOT_CALLABLE", "a int is not callable"),
    ],
)
def test_a_job_that_cannot_be_loaded_fails_naming_its_job_class(
    run, recorder: Recorder, tmp_path: Path, job_class: str, message: str
) -> None:
    data = task_data(tmp_path, "SIMPLE", job_class)
    run(data)
    update = recorder.wait_terminal(data.sharding.task_id)
    assert update.state == "TASK_FAILED"
    assert message in update.message


def test_a_worker_that_dies_without_a_word_fails_with_its_exit_status(
    run, recorder: Recorder, tmp_path: Path
) -> None:
    data = task_data(tmp_path, "SIMPLE", "testjobs.simple:exit_hard")
    run(data)
    update = recorder.wait_terminal(data.sharding.task_id)
    assert (update.state, update.message) == (
        "TASK_FAILED",
        "the job's worker process exited with status 7",
    )


@pytest.mark.parametrize(
    ("streaming", "batches"), [(True, [[0, 1, 2], [3, 4, 5], [6]]), (False, [[0, 1, 2]])]
)
def test_a_dataflow_job_processes_while_data_comes_when_streaming(
    run, recorder: Recorder, tmp_path: Path, streaming: bool, batches: list[list[int]]
) -> None:
    data = task_data(tmp_path, "DATAFLOW", "testjobs.flow:Numbers", streaming=streaming)
    run(data)
    assert recorder.wait_terminal(data.sharding.task_id).state == "TASK_FINISHED"
    lines = (tmp_path / f"{data.sharding.job_name}-0.batches").read_text().splitlines()
    assert [json.loads(line) for line in lines] == batches


def test_a_failing_dataflow_job_fails(run, recorder: Recorder, tmp_path: Path) -> None:
    data = task_data(tmp_path, "DATAFLOW", "testjobs.flow:Broken")
    run(data)
    update = recorder.wait_terminal(data.sharding.task_id)
    assert update.state == "TASK_FAILED"
    assert update.message.startswith("KeyError: 'no home for 0' (at testjobs/flow.py:")


def test_a_script_gets_the_context_as_a_quoted_argument_and_environment(
    run, recorder: Recorder, tmp_path: Path
) -> None:
    data = task_data(tmp_path, "SCRIPT", script="scripts/ok.sh", item=2, total=3)
    run(data)
    assert recorder.wait_terminal(data.sharding.task_id).state == "TASK_FINISHED"
    argument, *env_lines = (
        (tmp_path / f"{data.sharding.job_name}-2.script").read_text().splitlines()
    )
    assert json.loads(argument) == data.sharding.to_json()
    env = dict(line.split("=", 1) for line in env_lines)
    assert env["EJC_SHARDING_ITEM"] == "2"
    assert env["EJC_SHARDING_TOTAL_COUNT"] == "3"
    assert env["EJC_TASK_ID"] == data.sharding.task_id
    assert env["EJC_APP_DIR"] == str(TEST_APP)


def test_a_failing_script_fails_with_its_exit_status(
    run, recorder: Recorder, tmp_path: Path
) -> None:
    data = task_data(tmp_path, "SCRIPT", script="scripts/fail.sh")
    run(data)
    update = recorder.wait_terminal(data.sharding.task_id)
    assert (update.state, update.message) == ("TASK_FAILED", "script exited with status 3")


def test_a_killed_job_stops_before_killed_is_reported(
    run, recorder: Recorder, tmp_path: Path
) -> None:
    data = task_data(tmp_path, "SIMPLE", "testjobs.simple:hang")
    alive_at_report: list[bool] = []
    runner = run(data)
    pid = read_pid(tmp_path / f"{data.sharding.job_name}-0.pid")
    assert pid_alive(pid)
    original = recorder.report

    def check_then_report(task_id: str, state: str, *args: object, **kwargs: object) -> None:
        if state == "TASK_KILLED":
            alive_at_report.append(pid_alive(pid) or group_alive(pid))
        original(task_id, state, *args, **kwargs)  # type: ignore[arg-type]

    recorder.report = check_then_report  # type: ignore[method-assign]
    runner.request_kill()
    update = recorder.wait_terminal(data.sharding.task_id)
    assert update.state == "TASK_KILLED"
    assert alive_at_report == [False]
    # SIGTERM came first: the job's finally block ran.
    assert (tmp_path / f"{data.sharding.job_name}-0.stopped").read_text() == "finally ran"
    assert update.record is not None and update.record.is_success is False


def test_a_job_that_ignores_sigterm_is_killed_after_the_grace_period(
    run, recorder: Recorder, tmp_path: Path
) -> None:
    data = task_data(tmp_path, "SIMPLE", "testjobs.simple:stubborn")
    runner = run(data, kill_grace_s=GRACE_S)
    pid = read_pid(tmp_path / f"{data.sharding.job_name}-0.pid")
    started = time.monotonic()
    runner.request_kill()
    assert recorder.wait_terminal(data.sharding.task_id).state == "TASK_KILLED"
    assert time.monotonic() - started >= GRACE_S
    assert not pid_alive(pid)


def test_killing_a_script_stops_its_whole_process_group(
    run, recorder: Recorder, tmp_path: Path
) -> None:
    data = task_data(tmp_path, "SCRIPT", script="scripts/hang.sh")
    runner = run(data)
    pid_file = tmp_path / f"{data.sharding.job_name}-0.pid"
    read_pid(pid_file)
    shell_pid, sleep_pid = (int(p) for p in pid_file.read_text().split())
    pgid = os.getpgid(shell_pid)
    runner.request_kill()
    assert recorder.wait_terminal(data.sharding.task_id).state == "TASK_KILLED"
    assert not pid_alive(shell_pid)
    # The background `sleep` got the group's signals too; it is gone (or being reaped by init).
    wait_for(lambda: not pid_alive(sleep_pid), 5.0, message="the script's child to go")
    assert not group_alive(pgid)


def test_a_task_killed_before_it_started_never_runs(
    env: RunEnvironment, recorder: Recorder, runners: list[TaskRunner], tmp_path: Path
) -> None:
    data = task_data(tmp_path, "SIMPLE", "testjobs.simple:ok")
    runner = new_runner(data.sharding.task_id, data.encode(), data, env, recorder, GRACE_S)
    runners.append(runner)
    runner.request_kill()
    runner.start()
    assert recorder.wait_terminal(data.sharding.task_id).state == "TASK_KILLED"
    assert recorder.states(data.sharding.task_id) == ["TASK_KILLED"]
    assert not (tmp_path / f"{data.sharding.job_name}-0.json").exists()


def test_a_daemon_reports_begin_and_complete_around_each_run(
    run, recorder: Recorder, tmp_path: Path
) -> None:
    data = task_data(tmp_path, "SIMPLE", "testjobs.simple:count", execution="DAEMON")
    task_id = data.sharding.task_id
    runner = run(data)
    wait_for(lambda: len(recorder.with_message(task_id, "COMPLETE")) >= 3, 20.0, message="3 runs")
    runner.request_kill()
    assert recorder.wait_terminal(task_id).state == "TASK_KILLED"
    assert runner.join(10.0)
    updates = recorder.of(task_id)
    assert updates[0].state == "TASK_RUNNING"
    assert updates[0].message == ""
    runs = [u for u in updates[1:-1]]
    # Each run: BEGIN (open record), then COMPLETE (the same record, successful).
    for begin, complete in zip(runs[::2], runs[1::2], strict=False):
        assert (begin.message, complete.message) == ("BEGIN", "COMPLETE")
        assert begin.record is not None and complete.record is not None
        assert begin.record.id == complete.record.id
        assert complete.record.is_success is True
    assert not [t for t in threading.enumerate() if t.name.startswith("exec-daemon-")]


def test_a_daemon_reports_only_every_nth_run_when_sampling(
    run, recorder: Recorder, tmp_path: Path
) -> None:
    data = task_data(tmp_path, "SIMPLE", "testjobs.simple:count", execution="DAEMON", sampling=2)
    task_id = data.sharding.task_id
    runner = run(data)
    assert isinstance(runner, DaemonTask)
    wait_for(
        lambda: len(recorder.with_message(task_id, "COMPLETE")) >= 2, 20.0, message="2 reports"
    )
    runner.request_kill()
    assert recorder.wait_terminal(task_id).state == "TASK_KILLED"
    assert runner.join(10.0)
    runs = runner.runs
    assert runs >= 4
    assert len(recorder.with_message(task_id, "BEGIN")) == runs // 2


def test_a_failing_daemon_run_is_reported_and_the_daemon_keeps_running(
    run, recorder: Recorder, tmp_path: Path
) -> None:
    # Every second run fails; with sampling 3, runs 2 and 4 are reported although unsampled.
    data = task_data(
        tmp_path,
        "SIMPLE",
        "testjobs.simple:count_then_fail_every_second_run",
        execution="DAEMON",
        sampling=3,
    )
    task_id = data.sharding.task_id
    runner = run(data)

    def completes() -> list[bool | None]:
        return [u.record.is_success for u in recorder.with_message(task_id, "COMPLETE") if u.record]

    wait_for(lambda: len(completes()) >= 3, 30.0, message="runs 2, 3 and 4 reported")
    assert completes()[:3] == [False, True, False]
    failed = recorder.with_message(task_id, "COMPLETE")[0].record
    assert failed is not None and "RuntimeError: even run fails" in failed.failure_cause
    assert len(recorder.with_message(task_id, "BEGIN")) == 1  # only run 3 was sampled
    assert not [u for u in recorder.of(task_id) if u.state != "TASK_RUNNING"]
    runner.request_kill()
    assert recorder.wait_terminal(task_id).state == "TASK_KILLED"


def test_killing_a_daemon_mid_run_stops_the_run_first(
    run, recorder: Recorder, tmp_path: Path
) -> None:
    data = task_data(tmp_path, "SIMPLE", "testjobs.simple:hang", execution="DAEMON")
    task_id = data.sharding.task_id
    runner = run(data)
    pid = read_pid(tmp_path / f"{data.sharding.job_name}-0.pid")
    runner.request_kill()
    update = recorder.wait_terminal(task_id)
    assert update.state == "TASK_KILLED"
    assert not pid_alive(pid)
    # The cut-short run's record comes back complete with the KILLED update.
    begin = recorder.with_message(task_id, "BEGIN")[0].record
    assert begin is not None and update.record is not None
    assert update.record.id == begin.id and update.record.is_success is False
    assert not recorder.with_message(task_id, "COMPLETE")


def test_a_daemon_with_an_invalid_cron_is_a_task_error(
    run, recorder: Recorder, tmp_path: Path
) -> None:
    data = task_data(
        tmp_path,
        "SIMPLE",
        "testjobs.simple:count",
        execution="DAEMON",
        cron_fields={"second": "75"},
    )
    run(data)
    update = recorder.wait_terminal(data.sharding.task_id)
    assert update.state == "TASK_ERROR"
    assert update.message.startswith("invalid cron for daemon job: ")


_ORPHAN_PARENT = """
import sys, threading
from pathlib import Path
from executor.process import WorkerProcess
from executor.supervisor import worker_environment
import os
app = Path(sys.argv[1])
worker = WorkerProcess.spawn("orphan", task_data=sys.argv[2], app_dir=app,
                             python=sys.executable, env=worker_environment(os.environ, app))
print(worker.pid, flush=True)
threading.Event().wait()
"""


def test_a_worker_does_not_outlive_its_executor(tmp_path: Path) -> None:
    data = task_data(tmp_path, "SIMPLE", "testjobs.simple:hang")
    parent = subprocess.Popen(
        [sys.executable, "-c", _ORPHAN_PARENT, str(TEST_APP), data.encode()],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None
        worker_pid = int(parent.stdout.readline())
        read_pid(tmp_path / f"{data.sharding.job_name}-0.pid")
        assert pid_alive(worker_pid)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()
    wait_for(lambda: not group_alive(worker_pid), 10.0, message="the orphan to die")

"""The job's timeoutSeconds in the executor, with real worker processes: a transient task that
runs too long fails `timed out after N s`; a daemon run that does is reported failed and the
daemon goes on."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from executor.supervisor import worker_environment
from executor.taskdata import TaskData
from executor.tasks import RunEnvironment, TaskRunner, new_runner
from tests.support.processes import pid_alive
from tests.support.updates import Recorder
from tests.support.waiting import wait_for

from .helpers import TEST_APP, read_pid, task_data

GRACE_S = 0.5


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def runners() -> Iterator[list[TaskRunner]]:
    started: list[TaskRunner] = []
    yield started
    for runner in started:
        runner.request_kill()
    for runner in started:
        assert runner.join(30.0)


def start(data: TaskData, recorder: Recorder, runners: list[TaskRunner]) -> TaskRunner:
    env = RunEnvironment(
        app_dir=TEST_APP,
        python=sys.executable,
        worker_env=worker_environment(os.environ, TEST_APP),
        hostname="agent0.test",
        ip="127.0.0.1",
    )
    runner = new_runner(data.sharding.task_id, data.encode(), data, env, recorder, GRACE_S)
    runners.append(runner)
    runner.start()
    return runner


def with_timeout(data: TaskData, timeout_s: int) -> TaskData:
    return replace(data, job=replace(data.job, timeout_s=timeout_s))


def test_a_hung_transient_task_fails_after_its_timeout(
    recorder: Recorder, runners: list[TaskRunner], tmp_path: Path
) -> None:
    data = with_timeout(task_data(tmp_path, "SIMPLE", "testjobs.simple:hang"), 1)
    began = time.monotonic()
    start(data, recorder, runners)
    pid = read_pid(tmp_path / f"{data.sharding.job_name}-0.pid")
    update = recorder.wait_terminal(data.sharding.task_id)
    assert (update.state, update.message) == ("TASK_FAILED", "timed out after 1 s")
    assert time.monotonic() - began >= 1.0
    assert not pid_alive(pid)
    # SIGTERM first: the job's finally block ran; the record says why the run failed.
    assert (tmp_path / f"{data.sharding.job_name}-0.stopped").read_text() == "finally ran"
    assert update.record is not None and update.record.is_success is False
    assert update.record.failure_cause == "timed out after 1 s"


def test_a_job_that_ignores_sigterm_is_killed_after_the_grace(
    recorder: Recorder, runners: list[TaskRunner], tmp_path: Path
) -> None:
    data = with_timeout(task_data(tmp_path, "SIMPLE", "testjobs.simple:stubborn"), 1)
    began = time.monotonic()
    start(data, recorder, runners)
    pid = read_pid(tmp_path / f"{data.sharding.job_name}-0.pid")
    update = recorder.wait_terminal(data.sharding.task_id)
    assert (update.state, update.message) == ("TASK_FAILED", "timed out after 1 s")
    assert time.monotonic() - began >= 1.0 + GRACE_S
    assert not pid_alive(pid)


def test_a_run_within_its_timeout_finishes(
    recorder: Recorder, runners: list[TaskRunner], tmp_path: Path
) -> None:
    data = with_timeout(task_data(tmp_path, "SIMPLE", "testjobs.simple:ok"), 30)
    start(data, recorder, runners)
    assert recorder.wait_terminal(data.sharding.task_id).state == "TASK_FINISHED"


def test_a_daemon_run_that_hangs_is_reported_timed_out_and_the_daemon_goes_on(
    recorder: Recorder, runners: list[TaskRunner], tmp_path: Path
) -> None:
    data = with_timeout(
        task_data(tmp_path, "SIMPLE", "testjobs.simple:hang", execution="DAEMON"), 1
    )
    task_id = data.sharding.task_id
    runner = start(data, recorder, runners)

    def timed_out() -> list[str]:
        return [
            u.record.failure_cause
            for u in recorder.with_message(task_id, "COMPLETE")
            if u.record is not None and u.record.is_success is False
        ]

    wait_for(lambda: len(timed_out()) >= 2, 20.0, message="two runs timed out")
    assert set(timed_out()) == {"timed out after 1 s"}
    assert recorder.states(task_id)[-1] == "TASK_RUNNING"  # the daemon itself keeps running
    runner.request_kill()
    assert recorder.wait_terminal(task_id).state == "TASK_KILLED"

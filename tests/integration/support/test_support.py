"""The tests' own notions, checked on real processes: what is a live process or group
(tests.support.processes), what a wait on task updates reports when it times out
(tests.support.updates), and a process put ahead of the rest of the suite
(tests.support.parallel)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy import children
from tests.support.parallel import ahead_of_the_suite
from tests.support.processes import group_alive, live_pids, pid_alive, pid_reaped, wait_reaped
from tests.support.updates import Recorder, Update
from tests.support.waiting import wait_for


@pytest.fixture
def spawned() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test starts, each in a session of its own; the groups are killed and the
    leaders reaped at the end, pass or fail."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(10)


def _stat_state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]


def test_a_zombie_is_dead_but_not_reaped_until_waited_for(
    spawned: list[subprocess.Popen[bytes]],
) -> None:
    proc = subprocess.Popen(["sleep", "300"], start_new_session=True)
    spawned.append(proc)
    assert pid_alive(proc.pid) and not pid_reaped(proc.pid)
    assert proc.pid in set(live_pids())

    os.kill(proc.pid, signal.SIGKILL)  # not waited for: it stays a zombie of this process
    wait_for(lambda: _stat_state(proc.pid) == "Z", 10, message="the killed child to be a zombie")
    assert not pid_alive(proc.pid)
    assert not pid_reaped(proc.pid)
    assert proc.pid not in set(live_pids())

    proc.wait(10)
    assert pid_reaped(proc.pid)
    wait_reaped(proc.pid, 1.0)


def test_a_command_name_with_a_parenthesis_and_z_is_still_read_as_alive(
    spawned: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    sleep = shutil.which("sleep")
    assert sleep is not None
    tricky = tmp_path / "x) Z y"  # the kernel's name of the process: what /proc/PID/stat shows
    tricky.symlink_to(sleep)
    proc = subprocess.Popen([str(tricky), "300"], start_new_session=True)
    spawned.append(proc)
    wait_for(
        lambda: "x) Z y" in Path(f"/proc/{proc.pid}/stat").read_text(),
        10,
        message="the exec'd name in /proc",
    )
    assert pid_alive(proc.pid)


def test_a_group_lives_while_any_member_lives_even_after_its_leader_is_gone(
    spawned: list[subprocess.Popen[bytes]],
) -> None:
    leader = subprocess.Popen(
        ["sh", "-c", "sleep 300 & echo $!; exit 0"], stdout=subprocess.PIPE, start_new_session=True
    )
    spawned.append(leader)
    assert leader.stdout is not None
    member = int(leader.stdout.readline())
    leader.stdout.close()
    leader.wait(10)
    assert pid_reaped(leader.pid)
    assert pid_alive(member)
    assert group_alive(leader.pid)  # the group keeps its leader's id

    os.killpg(leader.pid, signal.SIGKILL)
    wait_for(lambda: not group_alive(leader.pid), 10, message="the group to die")
    assert not pid_alive(member)


class _Watched(Recorder):
    """A Recorder that tells when a wait first reads it."""

    def __init__(self) -> None:
        super().__init__()
        self.read = threading.Event()

    def of(self, task_id: str) -> list[Update]:
        self.read.set()
        return super().of(task_id)


def test_a_wait_that_times_out_names_the_states_seen_by_the_deadline() -> None:
    recorder = _Watched()
    recorder.report("t1", "TASK_STARTING")

    def report_while_waited_on() -> None:
        assert recorder.read.wait(10)
        recorder.report("t1", "TASK_RUNNING")

    reporter = threading.Thread(target=report_while_waited_on, name="test-reporter")
    reporter.start()
    try:
        with pytest.raises(AssertionError, match=r"\['TASK_STARTING', 'TASK_RUNNING'\]"):
            recorder.wait_terminal("t1", timeout_s=2.0)
    finally:
        reporter.join(10)
    recorder.report("t1", "TASK_GONE_BY_OPERATOR")
    assert recorder.wait_terminal("t1", timeout_s=1.0).state == "TASK_GONE_BY_OPERATOR"
    assert recorder.states("t1") == ["TASK_STARTING", "TASK_RUNNING", "TASK_GONE_BY_OPERATOR"]


def _autogroup(pid: int) -> str:
    return Path(f"/proc/{pid}/autogroup").read_text().strip()


def test_ahead_of_the_suite_raises_a_started_session_and_leaves_the_workers_own() -> None:
    # Where the kernel has no autogroups or this process may not lower a nice value, the helper
    # says so (False) and the flood tests run as before: that answer is what is checked there.
    can = Path("/proc/self/autogroup").exists() and os.geteuid() == 0
    child = children.start(["sleep", "60"])
    try:
        assert ahead_of_the_suite(child.pid) is can
        if can:
            assert _autogroup(child.pid).endswith(" nice -10")
    finally:
        children.stop(child, signal.SIGKILL, 0)
    # A process that is not its session's leader is left alone: its session may be the test
    # workers' own (a plain child of this worker is in this worker's session).
    plain = subprocess.Popen(["sleep", "60"])
    try:
        shared = _autogroup(plain.pid) if can else ""
        assert os.getsid(plain.pid) != plain.pid
        assert ahead_of_the_suite(plain.pid) is False
        assert (_autogroup(plain.pid) if can else "") == shared
    finally:
        plain.kill()
        plain.wait(10)

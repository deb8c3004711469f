"""deploy.children (children die with their starter, groups are killed whole), deploy.ports
(who holds a port) and a ZooKeeper that finds its port served, with real processes and sockets."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy import children
from deploy.ports import describe_holder, holders, port_free
from deploy.zookeeper import ZooKeeperEnsemble, ZooKeeperServer, ZooKeeperUnavailable
from tests.support.processes import pid_alive
from tests.support.waiting import wait_for

# Starts `sleep` through deploy.children, prints its pid, then waits to be killed.
STARTER = """
import sys, threading
from deploy import children
child = children.start(["sleep", "300"])
print(child.pid, flush=True)
threading.Event().wait()
"""
# Starts `sleep` armed by die_with_parent (the preexec_fn used where setpriv is missing),
# prints its pid, then waits.
ARMED_STARTER = """
import subprocess, threading
from deploy import children
child = subprocess.Popen(
    ["sleep", "300"], start_new_session=True, preexec_fn=children.die_with_parent()
)
print(child.pid, flush=True)
threading.Event().wait()
"""
# Starts a child that has a process of its own group, forgets it, and exits normally.
FORGETS = """
import subprocess
from deploy import children
child = children.start(["sh", "-c", "sleep 300 & echo $!; wait"], stdout=subprocess.PIPE)
member = int(child.stdout.readline())
print(child.pid, member, flush=True)
"""
# A leader that leaves a process of its own group behind when it exits.
LEAVES_ONE_BEHIND = "sleep 300 & echo $!; exit 0"


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        children.stop(proc, signal.SIGKILL, 5)
        if proc.stdout is not None:
            proc.stdout.close()


def _child_of_a_starter(script: str, started: list[subprocess.Popen[str]]) -> tuple[int, int]:
    """(starter pid, its child's pid): `script` run by a starter that prints its child's pid."""
    root = Path(__file__).resolve().parents[3]
    starter = children.start(
        [sys.executable, "-c", script], cwd=root, stdout=subprocess.PIPE, text=True
    )
    started.append(starter)
    assert starter.stdout is not None
    return starter.pid, int(starter.stdout.readline())


def _kill_starter_and_see_its_child_die(starter: int, child: int) -> None:
    os.kill(starter, signal.SIGKILL)
    wait_for(lambda: not pid_alive(child), 10, message="the child of the killed starter dies")


def test_a_child_dies_with_its_starter_even_when_the_starter_is_sigkilled(
    started: list[subprocess.Popen[str]],
) -> None:
    starter, grandchild = _child_of_a_starter(STARTER, started)
    # start() wraps the command (dying_with_parent), which then runs in the wrapper's place:
    # the same pid, `sleep` now.
    sleep = f"{shutil.which('sleep')}\x00300\x00".encode()
    wait_for(
        lambda: Path(f"/proc/{grandchild}/cmdline").read_bytes() == sleep,
        10,
        message="the wrapped command runs",
    )
    _kill_starter_and_see_its_child_die(starter, grandchild)


def test_a_child_armed_by_a_preexec_fn_dies_when_the_starter_is_sigkilled(
    started: list[subprocess.Popen[str]],
) -> None:
    # The way without setpriv (die_with_parent in the child before exec).
    starter, grandchild = _child_of_a_starter(ARMED_STARTER, started)
    assert pid_alive(grandchild)
    _kill_starter_and_see_its_child_die(starter, grandchild)


def test_a_wrapped_child_whose_starter_is_gone_before_it_runs_does_not_run() -> None:
    # The check the wrapper makes after the signal is set: its parent must still be the
    # starter. Given another pid as the starter's, it exits 137 without running the command.
    argv = children.dying_with_parent(["sh", "-c", "echo ran"])
    assert argv is not None
    at = argv.index(str(os.getpid()))
    argv[at] = "1"
    done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    assert done.returncode == 137 and "ran" not in done.stdout
    argv[at] = str(os.getpid())
    done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    assert done.returncode == 0 and done.stdout == "ran\n"


def test_start_finds_the_program_as_popen_does_and_raises_for_a_missing_one(
    tmp_path: Path, started: list[subprocess.Popen[str]]
) -> None:
    # start() runs the program through the wrapper, which would turn a missing program into
    # sh's exit 127: it looks the program up first, on the PATH of `env`, or from `cwd`.
    tool = tmp_path / "bin" / "say-where"
    tool.parent.mkdir()
    tool.write_text('#!/bin/sh\necho "$0 in $PWD"\n')
    tool.chmod(0o755)
    for argv, kwargs in (
        (["say-where"], {"env": {"PATH": str(tool.parent)}}),
        (["bin/say-where"], {"cwd": tmp_path}),
    ):
        child = children.start(argv, stdout=subprocess.PIPE, text=True, **kwargs)
        started.append(child)
        out, _ = child.communicate(timeout=10)
        assert child.returncode == 0
        assert out.startswith(f"{tool} in ")
    with pytest.raises(FileNotFoundError):
        children.start(["say-where"], env={"PATH": str(tmp_path)})
    with pytest.raises(FileNotFoundError):
        children.start(["./say-where"], cwd=tool.parent.parent)
    with pytest.raises(FileNotFoundError):
        children.start(["no-such-program-anywhere"])


def test_stop_kills_what_the_leader_left_in_its_group(
    started: list[subprocess.Popen[str]],
) -> None:
    leader = children.start(["sh", "-c", LEAVES_ONE_BEHIND], stdout=subprocess.PIPE, text=True)
    started.append(leader)
    assert leader.stdout is not None
    straggler = int(leader.stdout.readline())
    wait_for(lambda: children.exited(leader), 10, message="the leader exits")
    assert pid_alive(straggler)
    assert children.stop(leader) == 0
    wait_for(lambda: not pid_alive(straggler), 10, message="the straggler is killed")


def test_children_never_stopped_are_killed_with_their_group_when_the_starter_exits(
    started: list[subprocess.Popen[str]],
) -> None:
    root = Path(__file__).resolve().parents[3]
    starter = children.start(
        [sys.executable, "-c", FORGETS], cwd=root, stdout=subprocess.PIPE, text=True
    )
    started.append(starter)
    assert starter.stdout is not None
    leader, member = map(int, starter.stdout.readline().split())  # sleep 300 in the group
    assert starter.wait(10) == 0  # a normal exit: the parent-death signal is not what kills
    wait_for(
        lambda: not pid_alive(leader) and not pid_alive(member), 10, message="the group is gone"
    )


def test_a_taken_port_is_named_with_the_process_that_listens_on_it() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert not port_free(port)
        assert [pid for pid, _ in holders(port)] == [os.getpid()]
        assert describe_holder(port).startswith(f"pid {os.getpid()} (")
    assert port_free(port)


def test_a_zookeeper_whose_port_another_one_serves_is_refused_and_stopped(
    zk: ZooKeeperEnsemble, tmp_path: Path
) -> None:
    taken = zk.servers[0].client_port
    second = ZooKeeperServer(tmp_path / "zk", client_port=taken)
    with pytest.raises(ZooKeeperUnavailable, match=f"port {taken} is served by another ZooKeeper"):
        second.start(timeout_s=30)
    assert not second.running
    assert zk.servers[0].running


def _jvm_options(server: ZooKeeperServer) -> list[str]:
    assert server._proc is not None
    return Path(f"/proc/{server._proc.pid}/cmdline").read_bytes().decode().split("\0")


def test_a_quick_start_zookeeper_jits_with_the_client_compiler_only_and_serves(
    zk: ZooKeeperEnsemble, tmp_path: Path
) -> None:
    # The suite's session server is one (tests/conftest.py), and serves every test.
    assert "-XX:TieredStopAtLevel=1" in _jvm_options(zk.servers[0])
    assert zk.servers[0].mode() == "standalone"
    # The default (`./dev.sh run`, the benchmarks) keeps the JVM's full JIT.
    full = ZooKeeperServer(tmp_path / "zk")
    full.start(timeout_s=60)
    try:
        assert not any(o.startswith("-XX:TieredStopAtLevel") for o in _jvm_options(full))
        assert full.mode() == "standalone"
    finally:
        full.stop()

"""Child processes that cannot outlive what started them.

Three layers, each covering a way out that the others miss:

- Every child runs in a session, and so a process group, of its own (`start_new_session`): it and
  whatever it starts in that group can be signalled as one, and a Ctrl-C or SIGHUP aimed at the
  terminal's foreground group does not reach it behind its owner's back.
- On Linux every child asks the kernel for a signal (SIGKILL unless told otherwise) when the
  thread that started it ends (`prctl(PR_SET_PDEATHSIG)`, set by util-linux's setpriv before the
  command runs: `dying_with_parent`), so a starter that is SIGKILLed, crashes or is killed with
  its whole test run takes its children along. The kernel ties this to the
  starting *thread*, not the process: start children from a thread that lives as long as they
  should (the main thread, or a long-lived thread of the owner's), never from a short-lived one.
- Every child started here is remembered until `stop()` has reaped it. `kill_leftovers()`, run at
  interpreter exit and by the test session when it ends, SIGKILLs the groups of those still
  remembered, so a test that forgot its clean-up cannot leave a server running.

Process group ids are plain pids, and this machine may reuse a pid within seconds, so a group is
only ever signalled while its leader is known not to have been reaped (alive or a zombie, which
keeps the number reserved): `stop()` waits for the exit without reaping, kills what is left of
the group, and only then reaps.
"""

from __future__ import annotations

import atexit
import ctypes
import errno
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "die_with_parent",
    "dying_with_parent",
    "exited",
    "kill_leftovers",
    "set_parent_death_signal",
    "signal_group",
    "start",
    "stop",
]

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def _load_prctl() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


# Looked up once here: the child side of a fork must not load libraries.
_prctl = _load_prctl()


def set_parent_death_signal(sig: int) -> bool:
    """Ask the kernel to send `sig` to this process when the thread that started it ends.

    Returns False where that is not available (not Linux). A parent that died before the call is
    not noticed by it; compare `os.getppid()` with the parent's pid afterwards for that.
    """
    if _prctl is None:
        return False
    return bool(_prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0)


def die_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A `preexec_fn` that makes the child receive `sig` when the starting thread ends.

    None where the kernel has no such setting. Runs in the forked child before exec, so it only
    calls the pre-loaded prctl; a parent that died between fork and prctl is caught by comparing
    the child's parent pid with the starter's.
    """
    if _prctl is None:
        return None
    parent = os.getpid()
    prctl = _prctl

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), sig)

    return arm


# util-linux's setpriv (2.33 and later) sets the parent-death signal and then runs the command.
_SETPRIV = shutil.which("setpriv", path="/usr/bin:/bin")
# Run by `sh -c` after setpriv has set the signal: a parent that died before that (the child is
# someone else's now) is not waited for, as `die_with_parent` checks it.
_CHECK_PARENT = 'test "$PPID" = "$0" || exit 137; exec "$@"'


def dying_with_parent(argv: Sequence[str], sig: int = signal.SIGKILL) -> list[str] | None:
    """`argv` wrapped so that it gets `sig` when the starting thread ends, as `die_with_parent`
    arranges, but without a `preexec_fn`; None where setpriv is missing (then use that).

    A `preexec_fn` makes subprocess fork (copying the starter's page tables) and run Python in
    the child; without one it uses vfork. Measured with 100 MB resident: 4.7-4.8 ms of the
    starter's CPU a start with `die_with_parent`, 0.2 ms wrapped. The command is looked up on
    the PATH of the environment it is given, as subprocess does; one that cannot be run ends
    with sh's 126 or 127 instead of an OSError from Popen.
    """
    if _SETPRIV is None or _prctl is None:
        return None
    name = signal.Signals(sig).name.removeprefix("SIG")
    return [
        _SETPRIV,
        "--pdeathsig",
        name,
        "--",
        "/bin/sh",
        "-c",
        _CHECK_PARENT,
        str(os.getpid()),
        *argv,
    ]


_lock = threading.Lock()
_started: dict[int, subprocess.Popen[Any]] = {}


def start(
    args: Sequence[str], *, death_signal: int = signal.SIGKILL, **popen_kwargs: Any
) -> subprocess.Popen[Any]:
    """`subprocess.Popen(args, **popen_kwargs)` in a new session that dies with this thread.

    The child is remembered until `stop()` reaps it. Raises what Popen raises: the program is
    looked up first (on the PATH of `env`, or from `cwd`), so one that is missing is an OSError
    here, not a wrapper's exit code later.

    Started through `dying_with_parent` where setpriv is present: no `preexec_fn`, which would
    make subprocess fork the whole starter and run Python in the child, where a lock another
    thread held at the fork (the test workers and the stand-in run many) can never be released.
    """
    for reserved in ("start_new_session", "preexec_fn", "process_group"):
        if reserved in popen_kwargs:
            raise TypeError(f"deploy.children.start sets {reserved} itself")
    argv = list(args)
    wrapped = None
    if argv and not popen_kwargs.get("shell") and popen_kwargs.get("executable") is None:
        wrapped = dying_with_parent([_program(argv[0], popen_kwargs), *argv[1:]], death_signal)
    proc: subprocess.Popen[Any] = subprocess.Popen(
        wrapped or argv,
        start_new_session=True,
        preexec_fn=None if wrapped else die_with_parent(death_signal),
        **popen_kwargs,
    )
    with _lock:
        _started[proc.pid] = proc
    return proc


def _program(name: str, popen_kwargs: dict[str, Any]) -> str:
    """The file Popen would run for `name`: a path (from `cwd` when relative), else looked up
    on the PATH of `env` (this process's without one); FileNotFoundError if there is none."""
    if os.sep in name:
        path = os.path.join(os.fspath(popen_kwargs.get("cwd") or "."), name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return os.path.abspath(path)
    else:
        env = popen_kwargs.get("env")
        search = (env if env is not None else os.environ).get("PATH", os.defpath)
        found = shutil.which(name, path=search)
        if found is not None:
            return os.path.abspath(found)
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), name)


def _unreaped(proc: subprocess.Popen[Any]) -> bool:
    """True while `proc`'s pid is still ours: running, or exited but not reaped (a zombie)."""
    if proc.returncode is not None:
        return False
    try:
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False  # reaped behind Popen's back
    return True


def exited(proc: subprocess.Popen[Any]) -> bool:
    """True once `proc` has exited (reaped or not); never reaps it."""
    if proc.returncode is not None:
        return True
    try:
        result = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return result is not None


def signal_group(proc: subprocess.Popen[Any], sig: int) -> bool:
    """Send `sig` to `proc`'s whole group; False (and nothing sent) once it has been reaped."""
    if not _unreaped(proc):
        return False
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def stop(
    proc: subprocess.Popen[Any],
    sig: int = signal.SIGTERM,
    timeout_s: float = 15.0,
    *,
    whole_group: bool = False,
    hurry: threading.Event | None = None,
) -> int:
    """Stop a child started by `start()` and reap it; returns its exit code.

    Sends `sig` to the child (to its whole group with `whole_group`), waits up to `timeout_s`
    for it to exit (less once `hurry` is set), then SIGKILLs whatever is left of its group, the
    child included, before reaping it. Blocks; safe to call again or on a child that has exited.
    Raises subprocess.TimeoutExpired if it is still there 10 s after SIGKILL.
    """
    try:
        if not exited(proc):
            target = proc.pid
            try:
                if whole_group:
                    os.killpg(target, sig)
                else:
                    os.kill(target, sig)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + timeout_s
            while not exited(proc):
                if time.monotonic() >= deadline or (hurry is not None and hurry.is_set()):
                    log.warning("pid %s did not stop in time; killing its process group", target)
                    break
                time.sleep(0.02)
        # The leader is alive or a zombie here, so its pid still names our group.
        signal_group(proc, signal.SIGKILL)
        return proc.wait(10)
    finally:
        with _lock:
            if proc.returncode is not None:
                _started.pop(proc.pid, None)


def kill_leftovers() -> list[int]:
    """SIGKILL the group of every child started here and not yet stopped; returns their pids.

    Reaps them too (waiting at most a few seconds each). Safe to call more than once.
    """
    with _lock:
        left = list(_started.values())
    killed: list[int] = []
    for proc in left:
        if signal_group(proc, signal.SIGKILL):
            killed.append(proc.pid)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            log.error("pid %s did not die after SIGKILL", proc.pid)
            continue
        with _lock:
            _started.pop(proc.pid, None)
    return killed


atexit.register(kill_leftovers)

"""Executor and command-task processes: each in its own session, reaped by one thread.

Every process is started with `start_new_session=True` (a pymesos executor ends with
`os.killpg(0, SIGKILL)`, which would otherwise take the stand-in with it) and watched through a
pidfd. When the session leader exits, what is left of its process group is killed before the
leader is reaped, so the group id cannot have been reused yet; the exit is reported with the raw
`waitpid` status, which is what Mesos puts in a FAILURE event.

Every process also dies (SIGKILL from the kernel) when the stand-in dies, however it dies. The
kernel ties that to the thread that forked the process, so every fork happens on one thread that
lives as long as the supervisor (`<name>-spawn`), never on a pool thread that could end first.
That reaches only the process itself, though: an executor started as `sh -c bin/start.sh` is the
shell's child, orphaned rather than killed with it. So a guard process holds the list of live
sessions, fed through a pipe, and SIGKILLs what is left of them when the pipe reaches its end,
which is when the stand-in exits, whatever way it exits.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from deploy.children import die_with_parent, dying_with_parent

log = logging.getLogger(__name__)


class ProcessHandle:
    """A started process. `exited` is set once it has been reaped."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        pidfd: int,
        tag: str,
        on_exit: Callable[[ProcessHandle, int], None],
    ) -> None:
        self.popen = popen
        self.pid = popen.pid
        self.pidfd = pidfd
        self.tag = tag
        self.on_exit = on_exit
        self.exited = threading.Event()
        self.wait_status: int | None = None


# The guard's program: "+pgid" / "-pgid" lines until end of file, then SIGKILL what is listed.
_GUARD = """
import os, signal, sys
groups = set()
for line in sys.stdin:
    if line[:1] == "+":
        groups.add(int(line[1:]))
    elif line[:1] == "-":
        groups.discard(int(line[1:]))
for pgid in groups:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
"""


class _SessionGuard:
    """The guard process: told of each session started and ended; kills the ones left when this
    process exits. Thread-safe."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        # Its own session, and no parent-death signal: it must outlive the stand-in to act.
        # The pipe's write end stays here only (not inherited), so its end of file means this
        # process is gone.
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _GUARD],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
        self._broken = False

    def started(self, pgid: int) -> None:
        self._send(f"+{pgid}\n")

    def ended(self, pgid: int) -> None:
        self._send(f"-{pgid}\n")

    def _send(self, line: str) -> None:
        stdin = self._proc.stdin
        with self._lock:
            if self._broken or stdin is None or stdin.closed:
                return
            try:
                stdin.write(line.encode())
                stdin.flush()
            except OSError as exc:
                self._broken = True
                log.warning(
                    "%s: guard process gone (%s); sessions are not guarded", self._name, exc
                )

    def close(self, timeout_s: float) -> None:
        """End the guard (nothing is listed once every session has been reaped)."""
        with self._lock:
            if self._proc.stdin is not None and not self._proc.stdin.closed:
                try:
                    self._proc.stdin.close()
                except OSError:
                    pass
        try:
            self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


class ProcessSupervisor:
    """Starts processes and reports each exit once to its `on_exit` (on the reaper thread)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._live: dict[int, ProcessHandle] = {}  # pidfd -> handle
        self._stopping = False
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._thread: threading.Thread | None = None
        # One worker thread that stays until shutdown (a pool of one never retires its thread).
        self._spawner = ThreadPoolExecutor(1, f"{name}-spawn")
        self._guard: _SessionGuard | None = None

    def start(self) -> None:
        """Start the reaper thread and the guard process. Raises OSError."""
        self._guard = _SessionGuard(self._name)
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def spawn(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        tag: str,
        on_exit: Callable[[ProcessHandle, int], None],
    ) -> ProcessHandle:
        """Start `argv` in a new session with stdout/stderr files in `cwd`. Raises OSError.

        Blocks until the process is forked (on the spawn thread)."""
        popen = self._spawner.submit(self._popen, list(argv), cwd, dict(env)).result()
        if self._guard is not None:
            self._guard.started(popen.pid)
        try:
            pidfd = os.pidfd_open(popen.pid)
        except OSError:
            os.killpg(popen.pid, signal.SIGKILL)
            if self._guard is not None:
                self._guard.ended(popen.pid)
            popen.wait()
            raise
        handle = ProcessHandle(popen, pidfd, tag, on_exit)
        with self._lock:
            self._live[pidfd] = handle
        self._wake()
        log.info("process %s: started pid %d: %s", tag, popen.pid, " ".join(argv))
        return handle

    @staticmethod
    def _popen(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
        # Wrapped rather than armed by a preexec_fn: a start costs the stand-in about 0.2 ms of
        # CPU instead of 5 (no fork of the whole process), once per task it runs.
        wrapped = dying_with_parent(argv)
        with open(cwd / "stdout", "ab") as out, open(cwd / "stderr", "ab") as err:
            return subprocess.Popen(
                wrapped or argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
                preexec_fn=None if wrapped else die_with_parent(),
                close_fds=True,
            )

    @staticmethod
    def signal_group(handle: ProcessHandle, sig: signal.Signals) -> None:
        """Send `sig` to the process's whole session group (no-op once it has exited)."""
        if handle.exited.is_set():
            return
        try:
            os.killpg(handle.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def live_handles(self) -> list[ProcessHandle]:
        with self._lock:
            return list(self._live.values())

    def stop(self, timeout_s: float) -> None:
        """SIGKILL every live process group, wait for the reaps, then stop the thread."""
        handles = self.live_handles()
        for handle in handles:
            self.signal_group(handle, signal.SIGKILL)
        for handle in handles:
            if not handle.exited.wait(timeout_s):
                log.error("process %s (pid %d) was not reaped in time", handle.tag, handle.pid)
        with self._lock:
            self._stopping = True
        self._spawner.shutdown(wait=True, cancel_futures=True)
        if self._guard is not None:
            self._guard.close(timeout_s)
        self._wake()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.error("thread %s did not stop within %.1fs", self._name, timeout_s)
                return
        os.close(self._wake_r)
        os.close(self._wake_w)

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"\0")
        except BlockingIOError:
            pass

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._stopping:
                    return
                fds = [self._wake_r, *self._live]
            ready, _, _ = select.select(fds, [], [])
            for fd in ready:
                if fd == self._wake_r:
                    os.read(fd, 4096)
                    continue
                with self._lock:
                    handle = self._live.pop(fd, None)
                if handle is not None:
                    self._reap(handle)

    def _reap(self, handle: ProcessHandle) -> None:
        # The leader is a zombie here, so its pid (= the group id) is still reserved: killing
        # the group now cannot hit an unrelated process. Mesos destroys the whole container too.
        try:
            os.killpg(handle.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self._guard is not None:
            self._guard.ended(handle.pid)
        _, status = os.waitpid(handle.pid, 0)
        os.close(handle.pidfd)
        handle.popen.returncode = os.waitstatus_to_exitcode(status)
        handle.wait_status = status
        handle.exited.set()
        log.info("process %s: pid %d exited with wait status %d", handle.tag, handle.pid, status)
        try:
            handle.on_exit(handle, status)
        except Exception:
            log.exception("process %s: exit handler failed", handle.tag)

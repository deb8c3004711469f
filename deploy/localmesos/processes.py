"""Executor and command-task processes: each in its own session, reaped by one thread.

Every process is started with `start_new_session=True` (a pymesos executor ends with
`os.killpg(0, SIGKILL)`, which would otherwise take the stand-in with it) and watched through a
pidfd. When the session leader exits, what is left of its process group is killed before the
leader is reaped, so the group id cannot have been reused yet; the exit is reported with the raw
`waitpid` status, which is what Mesos puts in a FAILURE event.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

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

    def start(self) -> None:
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
        """Start `argv` in a new session with stdout/stderr files in `cwd`. Raises OSError."""
        with open(cwd / "stdout", "ab") as out, open(cwd / "stderr", "ab") as err:
            popen = subprocess.Popen(
                list(argv),
                cwd=cwd,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
                close_fds=True,
            )
        try:
            pidfd = os.pidfd_open(popen.pid)
        except OSError:
            os.killpg(popen.pid, signal.SIGKILL)
            popen.wait()
            raise
        handle = ProcessHandle(popen, pidfd, tag, on_exit)
        with self._lock:
            self._live[pidfd] = handle
        self._wake()
        log.info("process %s: started pid %d: %s", tag, popen.pid, " ".join(argv))
        return handle

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

"""`WorkerProcess`: the executor's handle on one `python -m executor.worker` process.

Each worker runs in a new session, so its process group (pgid = its pid) holds the job and
everything the job starts (a script's shell and its children). Stopping a run signals that whole
group: SIGTERM, then SIGKILL after a grace period. When the worker itself exits, whatever is
left of its group is SIGKILLed before the worker is reaped: a zombie leader keeps its pid and
pgid from being reused, so the group kill can never reach an unrelated process.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .jobs import describe_exit

log = logging.getLogger(__name__)

__all__ = ["EXECUTOR_ROOT", "WorkerExit", "WorkerProcess"]

EXECUTOR_ROOT = Path(__file__).resolve().parent.parent
"""The directory holding this `executor` package: the worker imports the very same copy."""

# `python -c` rather than `-m executor.worker`: the worker must load this executor package
# (bundled, installed or a checkout) without a PYTHONPATH that job code and its scripts would
# inherit. The entry is taken off sys.path again before any job code is imported.
_BOOTSTRAP = (
    "import sys; sys.path.insert(0, {root!r}); from executor.worker import main; "
    "sys.path.remove({root!r}); sys.exit(main())"
)


@dataclass(frozen=True)
class WorkerExit:
    """How a worker ended: its wait status and the result document it wrote (if any)."""

    returncode: int
    result: dict[str, Any] | None

    @property
    def success(self) -> bool:
        return self.returncode == 0 and bool(self.result and self.result.get("success") is True)

    @property
    def summary(self) -> str:
        """One line for TaskStatus.message."""
        summary = self.result.get("summary") if self.result else None
        if isinstance(summary, str) and summary:
            return summary
        return describe_exit(self.returncode, "the job's worker process")

    @property
    def failure_cause(self) -> str:
        """The traceback (or the summary) for the execution record."""
        cause = self.result.get("failureCause") if self.result else None
        return cause if isinstance(cause, str) and cause else self.summary


class WorkerProcess:
    """One worker process. `wait()` is called by exactly one thread; `terminate()` by any."""

    def __init__(self, name: str, popen: subprocess.Popen[bytes], result_fd: int) -> None:
        self.name = name
        self._popen = popen
        self._result_fd = result_fd
        self._lock = threading.Lock()
        self._reaped = False
        self.exited = threading.Event()

    @classmethod
    def spawn(
        cls,
        name: str,
        *,
        task_data: str,
        app_dir: Path,
        python: str,
        env: Mapping[str, str],
        executor_root: Path = EXECUTOR_ROOT,
        extra_args: Sequence[str] = (),
        output: tuple[Path, Path] | None = None,
    ) -> WorkerProcess:
        """Start a worker for `task_data` (TaskInfo.data, base64). Raises OSError.

        `output` is the (stdout, stderr) files the worker and everything it starts write to,
        opened for appending; None: the executor's own stdout and stderr.
        """
        read_fd, write_fd = os.pipe()
        files: list[Any] = []
        try:
            for path in output or ():
                files.append(open(path, "ab"))  # closed in `finally`
            popen = subprocess.Popen(
                [
                    python,
                    "-c",
                    _BOOTSTRAP.format(root=str(executor_root)),
                    "--result-fd",
                    str(write_fd),
                    *extra_args,
                ],
                cwd=app_dir,
                env=dict(env),
                stdin=subprocess.PIPE,
                stdout=files[0] if files else None,
                stderr=files[1] if files else None,
                pass_fds=(write_fd,),
                start_new_session=True,
            )
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
            for handle in files:
                handle.close()  # the worker holds its own descriptors now
        worker = cls(name, popen, read_fd)
        request = json.dumps({"taskData": task_data, "appDir": str(app_dir)}) + "\n"
        assert popen.stdin is not None
        try:
            popen.stdin.write(request.encode("utf-8"))
            popen.stdin.flush()
        except BrokenPipeError:
            # The worker died at once; wait() reports how. stdin stays open otherwise: its
            # end-of-file tells the worker that the executor is gone.
            log.warning("worker %s: exited before reading its request", name)
        log.debug("worker %s: started pid %d", name, popen.pid)
        return worker

    @property
    def pid(self) -> int:
        return self._popen.pid

    def signal_group(self, signum: int) -> bool:
        """Send `signum` to the worker's process group; False if it has already been reaped."""
        with self._lock:
            if self._reaped:
                return False
            try:
                os.killpg(self._popen.pid, signum)
            except ProcessLookupError:
                return False
            return True

    def terminate(self, grace_s: float, kill_wait_s: float = 10.0) -> bool:
        """SIGTERM the group, SIGKILL it after `grace_s`; True once the worker is reaped.

        Blocks until the thread in `wait()` has reaped the worker (or `kill_wait_s` passed
        after the SIGKILL).
        """
        if self.signal_group(signal.SIGTERM):
            log.info("worker %s: SIGTERM sent to process group %d", self.name, self.pid)
        if self.exited.wait(grace_s):
            return True
        if self.signal_group(signal.SIGKILL):
            log.warning(
                "worker %s: still running %.1fs after SIGTERM, SIGKILL sent", self.name, grace_s
            )
        return self.exited.wait(kill_wait_s)

    def wait(self) -> WorkerExit:
        """Block until the worker exits; kill the rest of its group, reap it, read its result."""
        try:
            os.waitid(os.P_PID, self._popen.pid, os.WEXITED | os.WNOWAIT)
        except ChildProcessError:
            pass  # already reaped elsewhere; Popen.wait() below still yields the status
        with self._lock:
            try:
                os.killpg(self._popen.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            returncode = self._popen.wait()
            self._reaped = True
        result = self._read_result()
        if self._popen.stdin is not None:
            try:
                self._popen.stdin.close()
            except BrokenPipeError:
                pass
        self.exited.set()
        log.debug("worker %s: pid %d exited with %d", self.name, self.pid, returncode)
        return WorkerExit(returncode, result)

    def _read_result(self) -> dict[str, Any] | None:
        chunks: list[bytes] = []
        os.set_blocking(self._result_fd, False)
        try:
            while True:
                try:
                    chunk = os.read(self._result_fd, 65536)
                except BlockingIOError:
                    break
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            os.close(self._result_fd)
        if not chunks:
            return None
        try:
            doc = json.loads(b"".join(chunks).decode("utf-8"))
        except ValueError:
            log.warning("worker %s: unreadable result document", self.name)
            return None
        return doc if isinstance(doc, dict) else None

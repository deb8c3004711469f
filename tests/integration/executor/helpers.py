"""Shared by the executor's integration tests: task data, a recording reporter, process checks."""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

from executor.records import ExecutionRecord
from executor.taskdata import JobSpec, ShardingContext, TaskData
from tests.support.waiting import wait_for

TEST_APP = Path(__file__).resolve().parent / "testapp"
EVERY_SECOND = {"second": "*"}


def task_data(
    out_dir: Path,
    job_type: str = "SIMPLE",
    job_class: str = "",
    *,
    script: str = "",
    execution: str = "TRANSIENT",
    cron_fields: dict[str, str] | None = None,
    sampling: int = 0,
    streaming: bool = False,
    item: int = 0,
    total: int = 1,
    job_name: str | None = None,
    task_id: str | None = None,
    job_parameter: str | None = None,
) -> TaskData:
    """A task whose job writes its markers into `out_dir` (the job parameter)."""
    name = job_name or f"job{uuid.uuid4().hex[:6]}"
    tid = task_id or f"{name}@-@{item}@-@READY@-@S0@-@{uuid.uuid4()}"
    return TaskData(
        execution,
        ShardingContext(
            name,
            tid,
            total,
            item,
            f"param{item}",
            str(out_dir) if job_parameter is None else job_parameter,
        ),
        JobSpec(
            job_name=name,
            job_type=job_type,
            job_class=job_class,
            cron="* * * * * ?" if execution == "DAEMON" else "",
            cron_fields=dict(cron_fields or ({} if execution == "TRANSIENT" else EVERY_SECOND)),
            streaming_process=streaming,
            script_command_line=script,
            job_properties={"color": "blue"},
            event_trace_sampling_count=sampling,
        ),
    )


@dataclass(frozen=True)
class Update:
    task_id: str
    state: str
    message: str
    record: ExecutionRecord | None


class Recorder:
    """A StatusReporter that keeps every update, for assertions."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.updates: list[Update] = []

    def report(
        self, task_id: str, state: str, message: str = "", record: ExecutionRecord | None = None
    ) -> None:
        with self._lock:
            self.updates.append(Update(task_id, state, message, record))

    def of(self, task_id: str) -> list[Update]:
        with self._lock:
            return [u for u in self.updates if u.task_id == task_id]

    def states(self, task_id: str) -> list[str]:
        return [u.state for u in self.of(task_id)]

    def messages(self, task_id: str, message: str) -> list[Update]:
        return [u for u in self.of(task_id) if u.message == message]

    def wait_terminal(self, task_id: str, timeout_s: float = 20.0) -> Update:
        terminal = {"TASK_FINISHED", "TASK_FAILED", "TASK_KILLED", "TASK_ERROR", "TASK_LOST"}
        return wait_for(
            lambda: next((u for u in self.of(task_id) if u.state in terminal), None),
            timeout_s,
            message=f"a terminal update of {task_id}",
        )


def pid_alive(pid: int) -> bool:
    """True if `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def read_pid(path: Path, timeout_s: float = 20.0) -> int:
    def content() -> str:
        return path.read_text().strip() if path.exists() else ""

    return int(wait_for(content, timeout_s, message=str(path)).split()[0])


def process_group_alive(pgid: int) -> bool:
    """True if any non-zombie process is in group `pgid`."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


__all__ = [
    "EVERY_SECOND",
    "TEST_APP",
    "Recorder",
    "Update",
    "pid_alive",
    "process_group_alive",
    "read_pid",
    "task_data",
]


def executor_pid(framework_id: str, executor_id: str) -> int | None:
    """The pid of the `python -m executor` process of that executor, if one runs."""
    wanted = {f"MESOS_FRAMEWORK_ID={framework_id}", f"MESOS_EXECUTOR_ID={executor_id}"}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            environ = set((entry / "environ").read_bytes().decode(errors="replace").split("\0"))
        except OSError:
            continue
        if argv[1:3] == [b"-m", b"executor"] and wanted <= environ and pid_alive(int(entry.name)):
            return int(entry.name)
    return None

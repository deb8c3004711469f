"""Shared by the executor's integration tests: task data, pid files, the executor's process."""

from __future__ import annotations

import uuid
from pathlib import Path

from executor.taskdata import JobSpec, ShardingContext, TaskData
from tests.support.processes import live_pids
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


def read_pid(path: Path, timeout_s: float = 20.0) -> int:
    def content() -> str:
        return path.read_text().strip() if path.exists() else ""

    return int(wait_for(content, timeout_s, message=str(path)).split()[0])


def executor_pid(framework_id: str, executor_id: str) -> int | None:
    """The pid of the `python -m executor` process of that executor, if one runs."""
    wanted = {f"MESOS_FRAMEWORK_ID={framework_id}", f"MESOS_EXECUTOR_ID={executor_id}"}
    for pid in live_pids():
        entry = Path(f"/proc/{pid}")
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            environ = set((entry / "environ").read_bytes().decode(errors="replace").split("\0"))
        except OSError:
            continue
        if argv[1:3] == [b"-m", b"executor"] and wanted <= environ:
            return pid
    return None


__all__ = ["EVERY_SECOND", "TEST_APP", "executor_pid", "read_pid", "task_data"]

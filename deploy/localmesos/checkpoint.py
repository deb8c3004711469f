"""What an agent checkpoints in its work directory, and what it recovers from it on a restart.

A Mesos agent restarted with the same `--work_dir` recovers from `<work_dir>/meta`: its agent id
(`meta/slaves/latest`) and, for the frameworks that asked for checkpointing
(`FrameworkInfo.checkpoint`), every executor run with its sandbox directory and the tasks it
was given (`meta/slaves/<agent>/frameworks/<fw>/executors/<ex>/runs/<container>/...`). A run
whose executor is gone is kept as a completed executor: the agent's `/state` lists it under
`completed_frameworks` / `completed_executors`, with its `directory`, and `/files` serves its
sandbox until the sandbox is garbage-collected (Mesos: `--gc_delay`, a week by default). See
Mesos's docs/agent-recovery.md.

The stand-in does the same for a stand-in restarted on the same `--work-dir`: each agent (by its
place in the stand-in, agent0, agent1, ...) keeps its id, and lists the executor runs of earlier
lives as completed, their tasks with the last state recorded (one not ended then is shown
TASK_LOST: the stand-in killed it when it stopped). What it does not do that a real agent does:
reconnect to executors that outlived it (its stop kills them all), and resend the status
updates not acknowledged before its stop (they are not checkpointed). A stand-in on a work
directory of its own (a temporary one) removes it when it stops, so it never recovers anything.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from .deferred import Deferred
from .protocol import TERMINAL_STATES, Json

log = logging.getLogger(__name__)

_MAX_RECOVERED_RUNS = 200  # the agent keeps as many completed executors


@dataclass
class RecoveredRun:
    """An executor run of an earlier life of the agent."""

    framework_id: str
    executor_id: str
    container_id: str
    directory: Path
    info: Json
    command: bool
    tasks: dict[str, tuple[Json, str]] = field(default_factory=dict)
    """Task id -> (TaskInfo, its last state recorded)."""
    ended_at: float = 0.0


def _write(path: Path, data: str) -> None:
    """Write `path` whole (a temporary file renamed over it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    temporary.write_text(data)
    os.replace(temporary, path)


class AgentCheckpoint:
    """The `meta` folder of one agent of the stand-in. Called under the state lock; each write
    is one small file, made in order by a writer thread of the checkpoint's own: a Mesos master
    answers an ACCEPT without waiting for the agent's disk (the agent checkpoints when the
    launch reaches it), and three file writes a task under the stand-in's one lock cost a burst
    of 500 tasks half a second. `close()` (the stand-in's stop) writes what is queued."""

    def __init__(self, work_dir: Path, agent_id: str) -> None:
        self._root = work_dir / "meta" / "slaves" / agent_id
        self._writes: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._writer_lock = threading.Lock()
        self._deferred = Deferred()

    @staticmethod
    def agent_id(work_dir: Path, index: int, fresh: str) -> str:
        """The id agent `index` had in an earlier life on `work_dir`, else `fresh` (recorded)."""
        latest = work_dir / "meta" / "agents" / f"agent{index}"
        try:
            known = latest.read_text().strip()
        except OSError:
            known = ""
        if known and "/" not in known and known not in (".", ".."):
            return known
        _write(latest, fresh)
        return fresh

    def _run(self, framework_id: str, executor_id: str, container_id: str) -> Path:
        return (
            self._root
            / "frameworks"
            / framework_id
            / "executors"
            / executor_id
            / "runs"
            / container_id
        )

    def executor_started(
        self,
        framework_id: str,
        executor_id: str,
        container_id: str,
        directory: Path,
        info: Json,
        command: bool,
    ) -> None:
        run = self._run(framework_id, executor_id, container_id)
        body = {"directory": str(directory), "info": info, "command": command}
        self._safely(lambda: _write(run / "executor.info", json.dumps(body)))

    def task_added(
        self, framework_id: str, executor_id: str, container_id: str, task: Json
    ) -> None:
        task_id = str(task["task_id"]["value"])
        folder = self._run(framework_id, executor_id, container_id) / "tasks" / _safe(task_id)
        self._safely(lambda: _write(folder / "task.info", json.dumps(task)))

    def task_state(
        self, framework_id: str, executor_id: str, container_id: str, task_id: str, state: str
    ) -> None:
        folder = self._run(framework_id, executor_id, container_id) / "tasks" / _safe(task_id)
        self._safely(lambda: _write(folder / "state", state))

    def executor_ended(self, framework_id: str, executor_id: str, container_id: str) -> None:
        """Mesos's `completed` sentinel of a run."""
        run = self._run(framework_id, executor_id, container_id)
        self._safely(lambda: _write(run / "completed", ""))

    def recover(self) -> list[RecoveredRun]:
        """The executor runs recorded here, oldest first (at most the newest 200)."""
        runs: list[RecoveredRun] = []
        for info_file in self._root.glob("frameworks/*/executors/*/runs/*/executor.info"):
            run_dir = info_file.parent
            try:
                body = json.loads(info_file.read_text())
                ended_at = run_dir.stat().st_mtime
            except (OSError, ValueError):
                continue
            if not isinstance(body, dict) or not isinstance(body.get("directory"), str):
                continue
            info = body.get("info")
            found = RecoveredRun(
                framework_id=run_dir.parents[3].name,
                executor_id=run_dir.parents[1].name,
                container_id=run_dir.name,
                directory=Path(body["directory"]),
                info=info if isinstance(info, dict) else {},
                command=bool(body.get("command")),
                ended_at=ended_at,
            )
            for task_file in run_dir.glob("tasks/*/task.info"):
                try:
                    task = json.loads(task_file.read_text())
                    task_id = str(task["task_id"]["value"])
                except (OSError, ValueError, KeyError, TypeError):
                    continue
                try:
                    state = (task_file.parent / "state").read_text().strip()
                except OSError:
                    state = "TASK_STAGING"
                if state not in TERMINAL_STATES:
                    state = "TASK_LOST"  # it did not outlive the stand-in's stop
                found.tasks[task_id] = (task, state)
            runs.append(found)
        runs.sort(key=lambda r: r.ended_at)
        return runs[-_MAX_RECOVERED_RUNS:]

    def held(self) -> AbstractContextManager[None]:
        """Writes asked for inside (under the state lock) are queued when it ends, in order
        (`deferred.py`: the agent checkpoints a launch once the ACCEPT handed it over)."""
        return self._deferred.held()

    def _safely(self, write: Callable[[], None]) -> None:
        """Queue `write` for the writer thread (started with the first write after a close)."""
        if not self._deferred.later(partial(self._queue, write)):
            self._queue(write)

    def _queue(self, write: Callable[[], None]) -> None:
        with self._writer_lock:
            if self._writer is None:
                self._writer = threading.Thread(
                    target=self._write_queued, name="localmesos-checkpoint", daemon=True
                )
                self._writer.start()
            self._writes.put(write)

    def _write_queued(self) -> None:
        while (write := self._writes.get()) is not None:
            _write_safely(write)

    def close(self, timeout_s: float = 10.0) -> None:
        """Write everything queued, then stop the writer thread (a later write starts another,
        after these)."""
        with self._writer_lock:
            writer, self._writer = self._writer, None
            if writer is not None:
                self._writes.put(None)
                writer.join(timeout_s)


def _write_safely(write: Callable[[], None]) -> None:
    try:
        write()
    except OSError as exc:
        log.warning("agent checkpoint: cannot write: %s", exc)


def _safe(task_id: str) -> str:
    """A task id as one path component (Mesos task ids may hold `/`)."""
    return task_id.replace("/", "%2F")

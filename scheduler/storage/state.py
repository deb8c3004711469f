"""Stores of the scheduling state. Reads are plain; every write is fenced by the leader's term.

The nodes (`layout`, the same as Elastic-Job-Cloud 2.1.5's): pending run counts under `READY`,
task JSON under `RUNNING`, original task ids under `FAILOVER`, disabled names under
`DISABLE_APP` and `DISABLE_JOB`.

Queue caps (`job_state_queue_size`) refuse new entries with a WARNING and a False return instead
of dropping them silently.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import orjson

from scheduler.model.errors import Conflict, NotFound
from scheduler.model.task_id import TaskId
from scheduler.storage.layout import (
    DISABLE_APP,
    DISABLE_JOB,
    FAILOVER,
    READY,
    RUNNING,
    backoff_folder,
    backoff_path,
    decode_backoff,
    decode_count,
    disable_path,
    encode_backoff,
    encode_count,
    failover_folder,
    failover_item,
    failover_path,
    ready_path,
    running_folder,
    running_path,
)
from scheduler.storage.registry import Registry
from scheduler.storage.transactions import Fence, FencedWriter, Op

log = logging.getLogger(__name__)

FAILOVER_DELAY_MAX_S = 60


class _Store:
    def __init__(self, registry: Registry, fence: Fence | None, cap: int = 10000) -> None:
        self._registry = registry
        self._fence = fence
        self._cap = cap

    @property
    def _writer(self) -> FencedWriter:
        if self._fence is None:
            raise RuntimeError("this store was built read-only (no fence)")
        return FencedWriter(self._registry, self._fence)

    def _drop_if_empty(self, path: str) -> None:
        """Delete a job's folder once it is empty: one fenced delete, never recursive, which
        ZooKeeper itself refuses while the folder has an entry (one another thread adds at
        any moment survives). One request: listing it first cost two more per task."""
        try:
            self._writer.commit(f"drop {path}", [Op.delete(path)])
        except (Conflict, NotFound):
            pass  # not empty, or gone already

    def _full(self, path: str, name: str) -> bool:
        names = self._registry.children(path)
        if name not in names and len(names) >= self._cap:
            log.warning("state: %s is full (%s entries); %s not added", path, self._cap, name)
            return True
        return False


class ReadyQueue(_Store):
    """Pending runs per job at `/state/ready/{job}` (a decimal count)."""

    def add_transient(self, job: str, misfire: bool) -> bool:
        """One more pending run (misfire) or exactly one (no misfire). False when full."""
        if self._full(READY, job):
            return False
        self._writer.compare_and_set(
            ready_path(job), lambda old: encode_count(decode_count(old) + 1 if misfire else 1)
        )
        return True

    def add_daemon(self, job: str) -> bool:
        """Queue a daemon job once (a no-op when already queued)."""
        if self._full(READY, job):
            return False
        self._writer.compare_and_set(ready_path(job), lambda old: encode_count(1))
        return True

    def take(self, job: str) -> None:
        """One pending run was launched: decrement, deleting the node at zero."""

        def dec(old: bytes | None) -> bytes | None:
            left = decode_count(old) - 1
            return encode_count(left) if left > 0 else None

        self._writer.compare_and_set(ready_path(job), dec)

    def remove(self, job: str) -> None:
        """Drop every pending run of `job` (disable, delete)."""
        self._writer.delete(ready_path(job))

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for job in self._registry.children(READY):
            n = decode_count(self._registry.get(ready_path(job)))
            if n:
                out[job] = n
        return out


class DisableStore(_Store):
    """Disabled apps and jobs: the presence of `/state/disable/app|job/{name}`."""

    def disable_app(self, app: str) -> bool:
        return self._disable(DISABLE_APP, app)

    def enable_app(self, app: str) -> None:
        self._writer.delete(disable_path(DISABLE_APP, app))

    def is_app_disabled(self, app: str) -> bool:
        return self._registry.exists(disable_path(DISABLE_APP, app))

    def disable_job(self, job: str) -> bool:
        return self._disable(DISABLE_JOB, job)

    def enable_job(self, job: str) -> None:
        self._writer.delete(disable_path(DISABLE_JOB, job))

    def is_job_disabled(self, job: str) -> bool:
        return self._registry.exists(disable_path(DISABLE_JOB, job))

    def _disable(self, base: str, name: str) -> bool:
        if self._registry.exists(disable_path(base, name)):
            return True
        if self._full(base, name):
            return False
        self._writer.put(disable_path(base, name), name.encode())
        return True


@dataclass
class RunningTask:
    """A launched task the scheduler follows, stored at `/state/running/{job}/{taskId}`."""

    task_id: str
    agent_id: str
    hostname: str = ""
    state: str = "TASK_STAGING"
    idle: bool = False
    launched_at: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    kill_reason: str = ""
    """Why the scheduler killed it (KILLED_BY_USER, KILLED_BY_REPLACE), "" if it did not."""
    workflow_fire: str = ""
    """The workflow node fire it runs for (`workflow_store.fire_key`), "" if none (issue 27)."""
    pool: str | None = None
    """The concurrency pool its job named when it launched (issue 28); None: none, or a record
    written before pools (then the job's current configuration says)."""
    pool_slots: int = 0
    """The pool's slots it holds (its job's `poolSlots` at launch); 0 when `pool` is None."""

    @property
    def parsed(self) -> TaskId:
        return TaskId.parse(self.task_id)

    def to_json(self) -> dict[str, Any]:
        parsed = self.parsed
        return {
            "id": self.task_id,
            "metaInfo": {"jobName": parsed.job_name, "shardingItems": [parsed.item]},
            "type": parsed.type.value,
            "slaveId": self.agent_id,
            "idle": self.idle,
            "hostname": self.hostname,
            "state": self.state,
            "launchedAt": self.launched_at,
            **({"killReason": self.kill_reason} if self.kill_reason else {}),
            **({"workflowFire": self.workflow_fire} if self.workflow_fire else {}),
            **({"pool": self.pool, "poolSlots": self.pool_slots} if self.pool else {}),
        }

    def to_bytes(self) -> bytes:
        """The running node's data: `to_json` as compact JSON (orjson: a fifth of the
        standard library's time, for each task of a launch round and each status write)."""
        return orjson.dumps(self.to_json())

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunningTask:
        return cls(
            task_id=str(data["id"]),
            agent_id=str(data.get("slaveId", "")),
            hostname=str(data.get("hostname", "")),
            state=str(data.get("state", "TASK_RUNNING")),
            idle=bool(data.get("idle", False)),
            launched_at=float(data.get("launchedAt", 0.0)),
            kill_reason=str(data.get("killReason") or ""),
            workflow_fire=str(data.get("workflowFire") or ""),
            **_pool_of(data),
        )


def _pool_of(data: dict[str, Any]) -> dict[str, Any]:
    """A record's `pool` and `poolSlots` (issue 28); none when absent or not what the
    launcher writes (a record from before pools: the job's configuration then says)."""
    pool, slots = data.get("pool"), data.get("poolSlots")
    if (
        isinstance(pool, str)
        and pool
        and isinstance(slots, int)
        and not isinstance(slots, bool)
        and slots >= 1
    ):
        return {"pool": pool, "pool_slots": slots}
    return {}


class RunningStore(_Store):
    """Every launched, not yet terminal task (transient and daemon)."""

    def add(self, task: RunningTask) -> None:
        job = task.parsed.job_name
        self._writer.put(running_path(job, task.task_id), task.to_bytes())

    def task(self, job: str, task_id: str) -> tuple[RunningTask, int] | None:
        """The running task `task_id` of `job` from its own node, with the node's version (for
        `update`); None when there is no node of that name (the original named daemon nodes
        `{job}@-@{item}`: `tasks` lists those). One request."""
        got = self._registry.get_versioned(running_path(job, task_id))
        if got is None:
            return None
        try:
            data = json.loads(got[0])
        except ValueError:
            return None
        if not isinstance(data, dict) or "id" not in data:
            return None
        return RunningTask.from_json(data), got[1]

    @staticmethod
    def update_op(task: RunningTask, version: int) -> Op:
        """The op that writes the task's node over `version` (to commit with others)."""
        path = running_path(task.parsed.job_name, task.task_id)
        return Op.set(path, task.to_bytes(), version)

    @staticmethod
    def remove_op(job: str, task_id: str, version: int) -> Op:
        """The op that deletes the node of `job`'s task `task_id` at `version` (-1: any)."""
        return Op.delete(running_path(job, task_id), version)

    @staticmethod
    def folder_remove_op(job: str) -> Op:
        """The op that deletes `job`'s folder, which ZooKeeper refuses while it holds a task."""
        return Op.delete(running_folder(job))

    def update(
        self, task: RunningTask, also: list[Op] | None = None, version: int | None = None
    ) -> None:
        """Write the task's node; with `also`, in one transaction with those ops. With
        `version` (read by `task`), only over that version: Conflict when the node changed
        since (a kill reason recorded meanwhile must not be written over), NotFound when it is
        gone; one request."""
        if version is not None:
            first = self.update_op(task, version)
            self._writer.commit(f"update {first.path}", [first, *(also or [])])
            return
        if not also:
            self.add(task)
            return
        job = task.parsed.job_name
        path = running_path(job, task.task_id)
        data = task.to_bytes()
        if self._registry.exists(path):
            first = Op.set(path, data)
        else:
            self._registry.ensure(running_folder(job))
            first = Op.create(path, data)
        self._writer.commit(f"update {path}", [first, *also])

    def remove(
        self, task_id: str, also: list[Op] | None = None, version: int | None = None
    ) -> None:
        """Delete the task's node, and its job's folder when the node was the folder's last;
        with `also`, in one transaction with those ops (NotFound when the node is already
        gone, and then none of them is applied; without `also` a node already gone is no
        error). With `version`, only the node at that version: Conflict when it changed.

        One request when the task was its job's last (the common one-shard job): the delete
        and the folder's in one transaction, which ZooKeeper refuses whole while the folder
        holds another task; then the delete alone (two, as a delete and a separate drop
        always cost)."""
        job = TaskId.parse(task_id).job_name
        first = self.remove_op(job, task_id, -1 if version is None else version)
        ops = [first, *(also or [])]
        what = f"remove {first.path}"
        folder = running_folder(job)
        try:
            try:
                self._writer.commit(what, [*ops, self.folder_remove_op(job)])
                return
            except Conflict:
                pass  # another task in the folder (or the node changed: the delete alone says)
            self._writer.commit(what, ops)
        except NotFound:
            if also:
                raise
            self._drop_if_empty(folder)

    def remove_job(self, job: str) -> None:
        self._writer.delete(running_folder(job))

    def mark_killed(self, task_id: str, reason: str) -> bool:
        """Record why the scheduler kills a task (before the kill is sent), so that whichever
        leader gets its end knows it is no failure; False when the task is not running."""
        job = TaskId.parse(task_id).job_name

        def mark(old: bytes | None) -> bytes | None:
            if old is None:
                return None
            try:
                data = json.loads(old)
            except ValueError:
                data = None
            if not isinstance(data, dict) or "id" not in data:
                data = RunningTask(task_id, TaskId.parse(task_id).agent_id).to_json()
            data["killReason"] = reason
            return json.dumps(data).encode()

        return self._writer.compare_and_set(running_path(job, task_id), mark) is not None

    def tasks(self, job: str | None = None) -> list[RunningTask]:
        jobs = [job] if job is not None else self._registry.children(RUNNING)
        out: list[RunningTask] = []
        for name in jobs:
            for node in self._registry.children(running_folder(name)):
                raw = self._registry.get(running_path(name, node)) or b""
                try:
                    data = json.loads(raw)
                except ValueError:
                    data = None
                if isinstance(data, dict) and "id" in data:
                    out.append(RunningTask.from_json(data))
                    continue
                # The original stored daemon tasks as `{job}@-@{item}` = task id.
                task_id = raw.decode(errors="replace").strip() or node
                try:
                    out.append(
                        RunningTask(task_id=task_id, agent_id=TaskId.parse(task_id).agent_id)
                    )
                except ValueError:
                    log.warning("state: ignoring running node %s/%s: no task id", name, node)
        return out


KILLED_BY_USER = "user"
KILLED_BY_REPLACE = "replace"


class Retry(StrEnum):
    """What became of a failed shard (`FailoverQueue.retry`)."""

    QUEUED = "queued"
    EXHAUSTED = "exhausted"
    """maxRetries relaunches were made already: it is not relaunched."""
    FULL = "full"
    """The failover queue is full (job_state_queue_size)."""


def failover_delay(failures: int) -> float:
    """Seconds before relaunching a shard after `failures` failures in a row: the first failover
    is immediate (usually a lost agent), then 1, 2, 4, ... seconds, at most FAILOVER_DELAY_MAX_S,
    so a shard that fails at once on every launch does not hammer the cluster."""
    if failures <= 1:
        return 0.0
    return float(min(FAILOVER_DELAY_MAX_S, 2 ** min(failures - 2, 16)))


class FailoverQueue(_Store):
    """Shards to relaunch first: `/state/failover/{job}/{job@-@item}` = original task id.

    Consecutive failures of a shard are counted at `FAILOVER_BACKOFF/{job}/{item}`
    (`{"failures": n, "notBefore": epoch seconds}`; not in the original's layout) until a run of
    that shard succeeds; the launcher holds a queued shard back until `notBefore`.
    """

    def add(self, task_id: str) -> bool:
        parsed = TaskId.parse(task_id)
        path = failover_path(parsed.job_name, parsed.item)
        if self._registry.exists(path):
            return True
        if self._full(failover_folder(parsed.job_name), parsed.shard_key):
            return False
        failures = self._count_failure(parsed.job_name, parsed.item)
        self._writer.put(path, task_id.encode())
        if failures > 1:
            log.warning(
                "state: shard %s of %s failed %d times in a row; relaunch in %.0f s",
                parsed.item,
                parsed.job_name,
                failures,
                failover_delay(failures),
            )
        return True

    def relaunch(self, task_id: str) -> bool:
        """Queue the task's shard for a relaunch without counting a failure (no back-off): its
        task ended through no fault of its own (an idle daemon task gone with its cluster).
        False when the queue is full."""
        parsed = TaskId.parse(task_id)
        path = failover_path(parsed.job_name, parsed.item)
        if self._registry.exists(path):
            return True
        if self._full(failover_folder(parsed.job_name), parsed.shard_key):
            return False
        self._writer.put(path, task_id.encode())
        return True

    def retry(self, task_id: str, max_retries: int | None) -> tuple[Retry, int]:
        """A task failed: queue its shard for a relaunch unless `max_retries` relaunches were
        made since the shard last succeeded (None: no limit). Returns what happened and the
        failures in a row counted so far; once exhausted the count is forgotten, so the next
        fire's run has its own retries."""
        parsed = TaskId.parse(task_id)
        if max_retries is None:
            return (Retry.QUEUED if self.add(task_id) else Retry.FULL), 0
        path = failover_path(parsed.job_name, parsed.item)
        if self._registry.exists(path):
            return Retry.QUEUED, 0
        if self._full(failover_folder(parsed.job_name), parsed.shard_key):
            return Retry.FULL, 0
        failures = self._count_failure(parsed.job_name, parsed.item)
        if failures > max_retries:
            self.succeeded(parsed.job_name, parsed.item)  # forgets the count
            return Retry.EXHAUSTED, failures
        self._writer.put(path, task_id.encode())
        return Retry.QUEUED, failures

    def _count_failure(self, job: str, item: int) -> int:
        now = time.time()

        def bump(old: bytes | None) -> bytes:
            failures = 1 + decode_backoff(old)[0]
            return encode_backoff(failures, now + failover_delay(failures))

        return decode_backoff(self._writer.compare_and_set(backoff_path(job, item), bump))[0]

    def not_before(self, job: str, item: int) -> float:
        """Epoch seconds before which the shard is not relaunched (0: now)."""
        return decode_backoff(self._registry.get(backoff_path(job, item)))[1]

    def succeeded(self, job: str, item: int) -> None:
        """A run of the shard succeeded: forget its failures."""
        path = backoff_path(job, item)
        if self._registry.exists(path):
            self._writer.delete(path)
            self._drop_if_empty(backoff_folder(job))

    def remove(self, job: str, item: int) -> None:
        self._writer.delete(failover_path(job, item))
        self._drop_if_empty(failover_folder(job))

    def remove_job(self, job: str) -> None:
        self._writer.delete(failover_folder(job))
        self._writer.delete(backoff_folder(job))

    def entries(self) -> list[tuple[str, int, str]]:
        """(job, item, original task id) of every queued shard."""
        out: list[tuple[str, int, str]] = []
        for job in self._registry.children(FAILOVER):
            for key in self._registry.children(failover_folder(job)):
                item = failover_item(key)
                if item is None:
                    continue
                original = (self._registry.get(f"{failover_folder(job)}/{key}") or b"").decode()
                out.append((job, item, original))
        return out

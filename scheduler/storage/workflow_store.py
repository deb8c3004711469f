"""Workflows in ZooKeeper (issue 27): definitions, runs, and the node fires between the engine,
the launcher and the status handler.

The nodes (`layout`): a definition at `WORKFLOWS/{name}`; each run at
`WORKFLOW_RUNS/{workflow}/{runId}` (its state with its definition snapshot; the run id is derived
from the workflow and the fire time, so a fire makes one run even when two leaders race: the
run is created, never overwritten) and, while it runs, `WORKFLOW_ACTIVE/{runId}`, which a new
leader reads to resume every run where it stood. A run changes only by `apply`: read it with its
version, let the pure step decide, and write the new state in one fenced, versioned transaction
together with what the step launches: for each node launched, a queue entry
`WORKFLOW_QUEUE/{job}/{fireKey}` (the launcher takes it in the transaction that records the
node's tasks) and a fire record `WORKFLOW_FIRES/{fireKey}` (the status handler records each
shard's end in it). A node launched is therefore queued exactly when the run says it runs, and
a node whose parents just finished is launched once whichever leader writes it; a node that
succeeded is never queued again (the step never launches it).

`fireKey` is `{runId}~{node}~{attempt}`: `~` is in no name, and each attempt of a node (a retry)
has its own, so the end of an earlier attempt can never be taken for the current one's.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from scheduler.model.config._wire import STORED_MAX_BYTES
from scheduler.model.errors import Conflict, InvalidRequest, NotFound, RegistryError, TooLarge
from scheduler.model.workflow import (
    NodeState,
    Step,
    WorkflowConfig,
    WorkflowRun,
)
from scheduler.storage.layout import (
    WORKFLOW_ACTIVE,
    WORKFLOW_FIRES,
    WORKFLOW_QUEUE,
    WORKFLOW_TASKS,
    WORKFLOWS,
    WORKFLOWS_DISABLED,
    decode_fire_time,
    encode_fire_time,
    workflow_active_path,
    workflow_disabled_path,
    workflow_fire_path,
    workflow_last_fire_path,
    workflow_path,
    workflow_queue_folder,
    workflow_queue_path,
    workflow_run_path,
    workflow_runs_folder,
    workflow_task_path,
)
from scheduler.storage.registry import Registry
from scheduler.storage.transactions import Fence, FencedWriter, Op
from scheduler.storage.watched_children import WatchedChildren

__all__ = [
    "FireRecord",
    "NodeFire",
    "WorkflowQueue",
    "WorkflowStore",
    "fire_key",
    "fire_of_task",
    "iso_fire_time",
    "launch_ops",
    "relaunch_ops",
]

log = logging.getLogger(__name__)

_KEY_SEPARATOR = "~"
_APPLY_TRIES = 20
RUNS_KEPT = 100
"""Ended runs kept per workflow (the oldest beyond go when a new run is made)."""


def fire_key(run_id: str, node: str, attempt: int) -> str:
    return f"{run_id}{_KEY_SEPARATOR}{node}{_KEY_SEPARATOR}{attempt}"


@functools.lru_cache(maxsize=1024)
def iso_fire_time(fire_time: float) -> str:
    """A fire time as its shards see it: ISO 8601 in UTC, to the millisecond. Kept for the
    last fires (the shards of a burst share their fire)."""
    moment = datetime.fromtimestamp(fire_time, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class NodeFire:
    """A workflow node's fire: one fire of its job, with the run its shards belong to."""

    workflow: str
    run_id: str
    node: str
    attempt: int
    job: str
    fire_time: float
    parameter: str | None = None
    """The trigger's override of the job parameter (None: the job's own)."""
    backfill_id: str = ""
    """A backfill's fire (issue 28): the backfill's id; `workflow` is then "", `run_id` the
    backfill's id and `node` the fire's index in it. A node of a workflow backfill's run
    carries its backfill's id too (its shards get `backfillId`), `workflow` its workflow's
    name. "": a node's fire of any other workflow run."""

    @property
    def key(self) -> str:
        return fire_key(self.run_id, self.node, self.attempt)

    @property
    def queue_path(self) -> str:
        return workflow_queue_path(self.job, self.key)

    @property
    def record_path(self) -> str:
        return workflow_fire_path(self.key)

    def to_json(self) -> dict[str, object]:
        return {
            "workflowName": self.workflow,
            "workflowRunId": self.run_id,
            "node": self.node,
            "attempt": self.attempt,
            "job": self.job,
            "fireTime": self.fire_time,
            "parameter": self.parameter,
            **({"backfillId": self.backfill_id} if self.backfill_id else {}),
        }

    @classmethod
    def from_json(cls, data: Any) -> NodeFire:
        """ValueError/KeyError/TypeError when `data` is not a node fire."""
        parameter = data.get("parameter")
        return cls(
            workflow=str(data["workflowName"]),
            run_id=str(data["workflowRunId"]),
            node=str(data["node"]),
            attempt=int(data["attempt"]),
            job=str(data["job"]),
            fire_time=float(data["fireTime"]),
            parameter=None if parameter is None else str(parameter),
            backfill_id=str(data.get("backfillId") or ""),
        )

    def encode(self) -> bytes:
        return json.dumps(self.to_json()).encode()


@dataclass
class FireRecord:
    """What is known of a node fire's shards (`WORKFLOW_FIRES/{fireKey}`)."""

    shards: int | None = None
    """Shards launched (None: not launched yet)."""
    task_ids: list[str] = field(default_factory=list)
    done: dict[int, tuple[bool, str, str]] = field(default_factory=dict)
    """Each ended shard: (succeeded, reason, task id). A shard relaunched by failover is not
    here until its last attempt ended."""

    @property
    def complete(self) -> bool:
        return self.shards is not None and all(i in self.done for i in range(self.shards))

    @property
    def succeeded(self) -> bool:
        return self.complete and all(ok for ok, _r, _t in self.done.values())

    def reason(self) -> str:
        failed = sorted((i, why) for i, (ok, why, _t) in self.done.items() if not ok)
        return "; ".join(f"shard {i}: {why}" for i, why in failed[:5])

    def encode(self) -> bytes:
        return json.dumps(
            {
                "shards": self.shards,
                "taskIds": self.task_ids,
                "done": {str(i): [ok, why, task] for i, (ok, why, task) in self.done.items()},
            }
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> FireRecord:
        try:
            doc = json.loads(data) if data else {}
            done = {
                int(i): (bool(v[0]), str(v[1]), str(v[2])) for i, v in dict(doc["done"]).items()
            }
            shards = doc.get("shards")
            return cls(
                None if shards is None else int(shards), [str(t) for t in doc["taskIds"]], done
            )
        except (ValueError, KeyError, TypeError, IndexError):
            return cls()


class WorkflowStore:
    """Reads and fenced writes of workflows and their runs (any thread)."""

    def __init__(
        self, registry: Registry, fence: Fence | None, default_time_zone: str, max_nodes: int
    ) -> None:
        self._registry = registry
        self._fence = fence
        self.default_time_zone = default_time_zone
        self.max_nodes = max_nodes
        # The markers of running runs, kept by a child watch: the engine looks at them after
        # every task's end, workflow or not (a listing per launched task before). Its own
        # marker writes are on the watch's session, whose event comes before their answer.
        self._active = WatchedChildren(registry, WORKFLOW_ACTIVE)

    def _writer(self) -> FencedWriter:
        if self._fence is None:
            raise RuntimeError("read-only workflow store")
        return FencedWriter(self._registry, self._fence)

    # -- definitions ------------------------------------------------------------------------

    def get(self, name: str) -> WorkflowConfig | None:
        """The workflow named `name`, None when there is none; RegistryError when unreadable."""
        data = self._registry.get(workflow_path(name))
        if data is None:
            return None
        return self._decode(name, data)

    def _decode(self, name: str, data: bytes) -> WorkflowConfig:
        try:
            doc = json.loads(data)
            return WorkflowConfig.from_json(
                doc,
                max_nodes=max(self.max_nodes, len(doc.get("nodes") or [])),
                default_time_zone=self.default_time_zone,
                strict=False,
            )
        except (ValueError, AttributeError, InvalidRequest) as exc:
            raise RegistryError(f"stored workflow {name!r} cannot be read: {exc}") from exc

    def require(self, name: str) -> WorkflowConfig:
        found = self.get(name)
        if found is None:
            raise NotFound(f"workflow '{name}' does not exist")
        return found

    def names(self) -> list[str]:
        return sorted(self._registry.children(WORKFLOWS))

    def count(self) -> int:
        return self._registry.child_count(WORKFLOWS)

    def all(self) -> list[WorkflowConfig]:
        """Every readable workflow, read with pipelined requests (one that is not readable is
        logged and left out)."""
        names = self.names()
        got = self._registry.get_many([workflow_path(n) for n in names])
        out = []
        for name in names:
            found = got.get(workflow_path(name))
            if found is None:
                continue  # deleted meanwhile
            try:
                out.append(self._decode(name, found[0]))
            except RegistryError as exc:
                log.warning("workflows: skipping %s: %s", name, exc.message)
        return out

    def save(self, config: WorkflowConfig, *, create: bool) -> None:
        """Register (`create`: Conflict when it exists) or update (NotFound when it does not)."""
        data = json.dumps(config.to_json(), separators=(",", ":")).encode()
        if len(data) > STORED_MAX_BYTES:
            raise TooLarge(
                "max_job_bytes",
                f"workflow '{config.workflow_name}' is {len(data)} bytes as JSON; "
                f"at most {STORED_MAX_BYTES}",
            )
        path = workflow_path(config.workflow_name)
        if create:
            self._registry.ensure(WORKFLOWS)
            try:
                self._writer().commit(
                    f"register workflow {config.workflow_name}", [Op.create(path, data)]
                )
            except Conflict:
                raise Conflict(f"workflow '{config.workflow_name}' already exists") from None
            return
        try:
            self._writer().set(path, data)
        except NotFound:
            raise NotFound(f"workflow '{config.workflow_name}' does not exist") from None

    def delete(self, name: str) -> bool:
        """Delete the definition, its disabled mark and its cron record; runs in flight keep
        their snapshot (the engine cancels them). False when it did not exist."""
        writer = self._writer()
        found = writer.delete(workflow_path(name), recursive=False)
        writer.delete(workflow_disabled_path(name), recursive=False)
        writer.delete(workflow_last_fire_path(name), recursive=False)
        return found

    def disable(self, name: str) -> None:
        self._registry.ensure(WORKFLOWS_DISABLED)
        if not self._registry.exists(workflow_disabled_path(name)):
            try:
                self._writer().create(workflow_disabled_path(name), b"")
            except Conflict:
                pass  # disabled meanwhile

    def enable(self, name: str) -> None:
        self._writer().delete(workflow_disabled_path(name), recursive=False)
        # Counting restarts from the next fire: what fell while disabled is not caught up.
        self._writer().delete(workflow_last_fire_path(name), recursive=False)

    def is_disabled(self, name: str) -> bool:
        return self._registry.exists(workflow_disabled_path(name))

    def disabled_names(self) -> set[str]:
        return set(self._registry.children(WORKFLOWS_DISABLED))

    # -- the cron record ----------------------------------------------------------------------

    def last_fire(self, name: str) -> tuple[float | None, int]:
        """(newest cron fire accounted for, the record's version; -1: no record)."""
        got = self._registry.get_versioned(workflow_last_fire_path(name))
        if got is None:
            return None, -1
        return decode_fire_time(got[0]), got[1]

    def last_fire_op(self, name: str, when: float, version: int) -> Op:
        """The op that records `when` as `name`'s newest fire, at the version read."""
        path = workflow_last_fire_path(name)
        if version < 0:
            self._registry.ensure(path.rsplit("/", 1)[0])
            return Op.create(path, encode_fire_time(when))
        return Op.set(path, encode_fire_time(when), version)

    # -- runs ---------------------------------------------------------------------------------

    def run(self, workflow: str, run_id: str) -> tuple[WorkflowRun, int] | None:
        """A run with its node version; None when there is none. RegistryError if unreadable."""
        got = self._registry.get_versioned(workflow_run_path(workflow, run_id))
        if got is None:
            return None
        try:
            return WorkflowRun.from_json(json.loads(got[0]), max_nodes=self.max_nodes), got[1]
        except (ValueError, KeyError, TypeError, InvalidRequest) as exc:
            raise RegistryError(f"stored run {run_id!r} cannot be read: {exc}") from exc

    def run_ids(self, workflow: str) -> list[str]:
        """The workflow's run ids, newest first (ids sort by fire time)."""
        return sorted(self._registry.children(workflow_runs_folder(workflow)), reverse=True)

    def runs(self, workflow: str, run_ids: list[str]) -> list[WorkflowRun]:
        """The runs of `run_ids` (pipelined reads; one unreadable or gone is left out)."""
        got = self._registry.get_many([workflow_run_path(workflow, r) for r in run_ids])
        out = []
        for run_id in run_ids:
            found = got.get(workflow_run_path(workflow, run_id))
            if found is None:
                continue
            try:
                out.append(WorkflowRun.from_json(json.loads(found[0]), max_nodes=self.max_nodes))
            except (ValueError, KeyError, TypeError, InvalidRequest) as exc:
                log.warning("workflows: run %s unreadable: %s", run_id, exc)
        return out

    def active(self) -> list[str]:
        """Ids of the runs still running."""
        return list(self._active.names())

    def _encoded_run(self, run: WorkflowRun) -> bytes:
        data = json.dumps(run.to_json(), separators=(",", ":")).encode()
        if len(data) > 900 * 1024:
            raise TooLarge("max_workflow_nodes", f"run {run.run_id} would be {len(data)} bytes")
        return data

    def _launch_ops(
        self, run: WorkflowRun, launched: tuple[str, ...]
    ) -> tuple[list[Op], list[NodeFire]]:
        ops: list[Op] = []
        fires = []
        for name in launched:
            node = run.definition.node(name)
            fire = NodeFire(
                run.workflow_name,
                run.run_id,
                name,
                run.node(name).attempt,
                node.job,
                run.fire_time,
                run.parameter,
                run.backfill_id,
            )
            self._registry.ensure(workflow_queue_folder(node.job))
            ops.append(Op.create(fire.queue_path, fire.encode()))
            ops.append(Op.create(fire.record_path, FireRecord().encode()))
            fires.append(fire)
        if fires:
            # The folders the launch and the status handler write in, by transactions that
            # cannot create a parent.
            self._registry.ensure(WORKFLOW_FIRES)
            self._registry.ensure(WORKFLOW_TASKS)
        return ops, fires

    def _stop_ops(
        self, before: WorkflowRun, stopped: tuple[str, ...]
    ) -> tuple[list[Op], list[NodeFire]]:
        """Ops withdrawing the queue entries of stopped nodes not launched yet."""
        ops: list[Op] = []
        fires = []
        for name in stopped:
            node = before.definition.node(name)
            fire = NodeFire(
                before.workflow_name,
                before.run_id,
                name,
                before.node(name).attempt,
                node.job,
                before.fire_time,
                before.parameter,
            )
            fires.append(fire)
            got = self._registry.get_versioned(fire.queue_path)
            if got is not None:
                ops.append(Op.delete(fire.queue_path, got[1]))
        return ops, fires

    def create_run(self, step: Step, extra: list[Op] | None = None) -> list[NodeFire]:
        """Write a new run (its first step applied) with its launches, `extra` in the same
        transaction. Conflict when the run exists (the fire made it already); returns the
        node fires queued."""
        run = step.run
        self._registry.ensure(workflow_runs_folder(run.workflow_name))
        self._registry.ensure(WORKFLOW_ACTIVE)
        ops = [Op.create(workflow_run_path(run.workflow_name, run.run_id), self._encoded_run(run))]
        if not run.ended:
            ops.append(Op.create(workflow_active_path(run.run_id)))
        launch_ops, fires = self._launch_ops(run, step.launch)
        try:
            self._writer().commit(f"create run {run.run_id}", [*ops, *launch_ops, *(extra or [])])
        except Conflict:
            raise Conflict(f"run {run.run_id} exists already") from None
        self._prune(run.workflow_name)
        return fires

    def apply(
        self,
        workflow: str,
        run_id: str,
        decide: Callable[[WorkflowRun], Step | None],
        on_end: Callable[[WorkflowRun], list[Op]] | None = None,
    ) -> tuple[Step, list[NodeFire], list[NodeFire]] | None:
        """Read the run, let `decide` step it (None: nothing to write), and write the new state
        with its launches and the withdrawal of stopped nodes' queue entries, in one fenced
        transaction at the version read; again from a fresh read when something changed
        meanwhile. Returns (the step written, node fires queued, node fires stopped), None when
        `decide` wrote nothing. NotFound when the run does not exist; `decide` may raise.
        `on_end`: the ops written with the step that ends the run (a backfill's outcome)."""
        for _ in range(_APPLY_TRIES):
            got = self.run(workflow, run_id)
            if got is None:
                raise NotFound(f"workflow '{workflow}' has no run '{run_id}'")
            before, version = got
            step = decide(before)
            if step is None or (step.run == before and not step.launch and not step.kill):
                return None
            run = step.run
            ops = [Op.set(workflow_run_path(workflow, run_id), self._encoded_run(run), version)]
            active = workflow_active_path(run_id)
            if before.ended != run.ended:
                if run.ended:
                    ops.append(Op.delete(active))
                    ops.extend(on_end(run) if on_end is not None else [])
                else:
                    self._registry.ensure(WORKFLOW_ACTIVE)
                    ops.append(Op.create(active))
            launch_ops, fires = self._launch_ops(run, step.launch)
            stop_ops, stopped = self._stop_ops(before, step.kill)
            try:
                self._writer().commit(f"step run {run_id}", [*ops, *launch_ops, *stop_ops])
            except (Conflict, NotFound):
                continue  # changed meanwhile (another step, a launch taking a queue entry)
            return step, fires, stopped
        raise Conflict(f"run {run_id}: too many concurrent changes")

    def _prune(self, workflow: str) -> None:
        """Delete the oldest ended runs beyond RUNS_KEPT (best effort)."""
        ids = self.run_ids(workflow)
        if len(ids) <= RUNS_KEPT:
            return
        active = set(self.active())
        for run_id in ids[RUNS_KEPT:]:
            if run_id in active:
                continue
            try:
                self._writer().delete(workflow_run_path(workflow, run_id), recursive=False)
            except (Conflict, NotFound):
                pass

    def delete_runs(self, workflow: str) -> None:
        """Delete every ended run of a deleted workflow (the active ones stay until they end)."""
        active = set(self.active())
        for run_id in self.run_ids(workflow):
            if run_id not in active:
                self._writer().delete(workflow_run_path(workflow, run_id), recursive=False)

    # -- node fires -----------------------------------------------------------------------------

    def queued(self) -> list[tuple[NodeFire, int]]:
        """Every node fire waiting for its launch, with its entry's version (term start)."""
        out = []
        for job in self._registry.children(WORKFLOW_QUEUE):
            folder = workflow_queue_folder(job)
            names = self._registry.children(folder)
            got = self._registry.get_many([f"{folder}/{n}" for n in names])
            for name in names:
                found = got.get(f"{folder}/{name}")
                if found is None:
                    continue
                try:
                    out.append((NodeFire.from_json(json.loads(found[0])), found[1]))
                except (ValueError, KeyError, TypeError, AttributeError):
                    log.warning("workflows: queue entry %s/%s unreadable; ignored", job, name)
        return out

    def fire_record(self, key: str) -> tuple[FireRecord, int] | None:
        got = self._registry.get_versioned(workflow_fire_path(key))
        if got is None:
            return None
        return FireRecord.decode(got[0]), got[1]

    def fire_records(self, keys: list[str]) -> dict[str, FireRecord]:
        got = self._registry.get_many([workflow_fire_path(k) for k in keys])
        return {
            k: FireRecord.decode(found[0])
            for k in keys
            if (found := got.get(workflow_fire_path(k))) is not None
        }

    def fire_of_task(self, task_id: str) -> NodeFire | None:
        """The node fire a launched task runs for (None: not a workflow node's task)."""
        return fire_of_task(self._registry, task_id)

    def shard_ended_ops(self, key: str, item: int, ok: bool, reason: str, task_id: str) -> list[Op]:
        """The op recording a shard's end in its fire record, at the version read; [] when the
        record is gone (the run ended) or holds this shard's end already."""
        got = self.fire_record(key)
        if got is None:
            return []
        record, version = got
        if item in record.done:
            return []
        record.done[item] = (ok, reason[:500], task_id)
        return [Op.set(workflow_fire_path(key), record.encode(), version)]

    def forget_fire(self, key: str) -> None:
        """Delete a fire record and its tasks' index entries (the run is done with them)."""
        got = self.fire_record(key)
        writer = self._writer()
        if got is not None:
            record = got[0]
            ended = [task for _ok, _why, task in record.done.values()]
            for task_id in {*record.task_ids, *ended}:
                writer.delete(workflow_task_path(task_id), recursive=False)
            writer.delete(workflow_fire_path(key), recursive=False)


def fire_of_task(registry: Registry, task_id: str) -> NodeFire | None:
    """The node fire a launched task runs for, from its index entry (None: none, or
    unreadable)."""
    data = registry.get(workflow_task_path(task_id))
    if not data:
        return None
    try:
        return NodeFire.from_json(json.loads(data))
    except (ValueError, KeyError, TypeError, AttributeError):
        log.warning("workflows: index entry of task %s unreadable; ignored", task_id)
        return None


def launch_ops(fire: NodeFire, version: int, task_ids: list[str], shards: int) -> tuple[Op, ...]:
    """The ops a launch of node fire `fire` (its queue entry read at `version`) writes with its
    tasks' bookkeeping: the entry taken, the fire record (shards and tasks; nothing ended yet:
    a relaunch after an undone launch starts it afresh) and each task's index entry."""
    record = FireRecord(shards, list(task_ids))
    return (
        Op.delete(fire.queue_path, version),
        Op.set(fire.record_path, record.encode()),
        *(Op.create(workflow_task_path(t), fire.encode()) for t in task_ids),
    )


def relaunch_ops(fire: NodeFire, original: str, task_id: str) -> tuple[Op, ...]:
    """The ops of a failover relaunch of a node fire's shard: the new task indexed, the one it
    replaces no longer (only the newest task of a shard keeps an entry)."""
    ops = [Op.create(workflow_task_path(task_id), fire.encode())]
    if original and original != task_id:
        ops.insert(0, Op.delete(workflow_task_path(original)))
    return tuple(ops)


class WorkflowQueue:
    """The term's node fires waiting for a launch, shared by the engine (which queues them,
    after its write) and the launcher (which takes them in its bookkeeping transaction). Only
    the leader writes the queue, so this copy, loaded at term start and kept by both, is the
    queue; every take is still versioned in ZooKeeper (any thread)."""

    def __init__(self, on_change: Callable[[], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._fires: dict[str, tuple[NodeFire, int]] = {}
        self._on_change = on_change

    def load(self, entries: list[tuple[NodeFire, int]]) -> None:
        with self._lock:
            self._fires = {fire.key: (fire, version) for fire, version in entries}
        if entries and self._on_change is not None:
            self._on_change()

    def add(self, fires: list[NodeFire]) -> None:
        """Fires just written (their entries at version 0)."""
        if not fires:
            return
        with self._lock:
            for fire in fires:
                self._fires[fire.key] = (fire, 0)
        if self._on_change is not None:
            self._on_change()

    def drop(self, keys: list[str]) -> None:
        with self._lock:
            for key in keys:
                self._fires.pop(key, None)

    def pending(self) -> list[tuple[NodeFire, int]]:
        """The fires waiting, oldest fire first."""
        with self._lock:
            fires = list(self._fires.values())
        return sorted(fires, key=lambda pair: (pair[0].fire_time, pair[0].key))

    def __len__(self) -> int:
        with self._lock:
            return len(self._fires)


def node_state_of(record: FireRecord | None) -> NodeState | None:
    """The node's end its fire record says (None: not ended yet)."""
    if record is None or not record.complete:
        return None
    return NodeState.SUCCEEDED if record.succeeded else NodeState.FAILED

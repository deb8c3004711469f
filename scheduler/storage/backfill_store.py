"""Backfills in ZooKeeper (issue 28): each backfill's state, its active marker and outcome, and
the node fires of its past fires.

The nodes (`layout`): the state at `BACKFILLS/{job}/{backfillId}` (`Backfill.to_json`), its
outcome under it (`.../outcome`: `{"succeeded": N, "failed": M}`, the fires that ended), and,
while it is RUNNING or PAUSED, `BACKFILLS_ACTIVE/{job}~{backfillId}` (the quota
`max_active_backfills` counts these; a new leader resumes them).

A backfill changes only by `apply`: read the state with its version, let the pure model decide
the new one, and write it in one fenced transaction at the version read, together with what
the change implies:
- a fire launched (`next_index` moved by one): fire `i`'s queue entry (`NodeFire.queue_path`)
  and its empty fire record (`NodeFire.record_path`), so a fire is queued exactly when the state
  says it launched, whichever leader writes and however often a step is replayed;
- a final status (CANCELLED, DONE): the active marker deleted;
- a cancel: the queue entries of its fires not launched yet withdrawn (each at the version
  read, with its unlaunched fire record), so the launcher never takes one afterwards.

A fire of backfill `B` is the node fire `NodeFire(workflow="", run_id=B, node=str(i),
attempt=0, job, fire_time, backfill_id=B)`: its key is `B~i~0`. The launcher launches it as one
run of its job and the status handler records each shard's end in its record; `count_ended`
then adds the fire to the outcome and deletes its record in one transaction, so each fire is
counted once.

A workflow's backfill (issue 28) is the same state under `WORKFLOW_BACKFILLS` (the store built
with `WORKFLOW_PATHS`, its `job` arguments the workflow's name): each fire is a workflow run,
which the workflow engine creates in the transaction of `launch_ops` (the state advanced); a
fire that already has a run is recorded by `record_had_run` (the state advanced and `hadRun`
counted); the outcome counts a run's end in the transaction that ends it (`outcome_op`).
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from scheduler.model.backfill import (
    Backfill,
    BackfillRequest,
    BackfillStatus,
    FireList,
    new_backfill_id,
)
from scheduler.model.errors import Conflict, InvalidRequest, NotFound, QuotaExceeded, RegistryError
from scheduler.storage.layout import (
    BACKFILLS,
    BACKFILLS_ACTIVE,
    WORKFLOW_BACKFILLS,
    WORKFLOW_BACKFILLS_ACTIVE,
    WORKFLOW_FIRES,
    WORKFLOW_TASKS,
    backfill_active_path,
    backfill_folder,
    backfill_outcome_path,
    backfill_path,
    workflow_backfill_active_path,
    workflow_backfill_folder,
    workflow_backfill_outcome_path,
    workflow_backfill_path,
    workflow_fire_path,
    workflow_queue_folder,
    workflow_queue_path,
    workflow_task_path,
)
from scheduler.storage.registry import Registry
from scheduler.storage.transactions import Fence, FencedWriter, Op
from scheduler.storage.workflow_store import FireRecord, NodeFire, fire_key

__all__ = [
    "ENDED_KEPT",
    "JOB_PATHS",
    "WORKFLOW_PATHS",
    "BackfillPaths",
    "BackfillStore",
    "Change",
    "Outcome",
    "backfill_fire",
    "backfill_of_key",
    "key_of",
]

log = logging.getLogger(__name__)

_CREATE_TRIES = 5


class _IdTaken(Conflict):
    """A new backfill's id is taken (two drawn alike within one second): draw another."""


ENDED_KEPT = 50
"""Ended backfills kept per job (the oldest beyond go when a new one is made)."""
_APPLY_TRIES = 20
_ID = re.compile(r"[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8}")


def backfill_fire(backfill: Backfill, index: int) -> NodeFire:
    """The node fire of fire `index` of `backfill`."""
    return NodeFire(
        workflow="",
        run_id=backfill.backfill_id,
        node=str(index),
        attempt=0,
        job=backfill.job_name,
        fire_time=backfill.fire_times[index].timestamp(),
        parameter=None,
        backfill_id=backfill.backfill_id,
    )


def backfill_of_key(key: str) -> tuple[str, int] | None:
    """(backfill id, fire index) of a fire key `B~i~0`, or None when it is no backfill's (a
    workflow run's key starts with a workflow name, never a backfill id)."""
    parts = key.split("~")
    if len(parts) != 3 or not _ID.fullmatch(parts[0]) or parts[2] != "0":
        return None
    if not parts[1].isdigit():
        return None
    return parts[0], int(parts[1])


@dataclass(frozen=True)
class BackfillPaths:
    """Where one kind of backfill lives: a job's (`JOB_PATHS`) or a workflow's
    (`WORKFLOW_PATHS`); each builder takes the owner's name and the backfill id."""

    root: str
    active_root: str
    folder: Callable[[str], str]
    state: Callable[[str, str], str]
    outcome: Callable[[str, str], str]
    active: Callable[[str, str], str]
    node_fires: bool
    """Whether a fire launched is a node fire queued for the launcher (a job's) or a workflow
    run its engine creates (a workflow's)."""


JOB_PATHS = BackfillPaths(
    BACKFILLS,
    BACKFILLS_ACTIVE,
    backfill_folder,
    backfill_path,
    backfill_outcome_path,
    backfill_active_path,
    node_fires=True,
)
WORKFLOW_PATHS = BackfillPaths(
    WORKFLOW_BACKFILLS,
    WORKFLOW_BACKFILLS_ACTIVE,
    workflow_backfill_folder,
    workflow_backfill_path,
    workflow_backfill_outcome_path,
    workflow_backfill_active_path,
    node_fires=False,
)
_ACTIVE_ROOTS = (BACKFILLS_ACTIVE, WORKFLOW_BACKFILLS_ACTIVE)
"""What `max_active_backfills` counts: the backfills of jobs and of workflows together."""


@dataclass(frozen=True)
class Outcome:
    """A backfill's fires that ended: every shard succeeded, or some shard failed for good
    (a workflow's: its run succeeded, or ended otherwise); `had_run`: a workflow's fires that
    had a run already (made by its cron, a trigger or an earlier backfill), not run again."""

    succeeded: int = 0
    failed: int = 0
    had_run: int = 0

    def encode(self) -> bytes:
        doc = {"succeeded": self.succeeded, "failed": self.failed}
        if self.had_run:
            doc["hadRun"] = self.had_run
        return json.dumps(doc).encode()

    @classmethod
    def decode(cls, data: bytes | None) -> Outcome:
        try:
            doc = json.loads(data) if data else {}
            return cls(
                int(doc.get("succeeded", 0)), int(doc.get("failed", 0)), int(doc.get("hadRun", 0))
            )
        except (ValueError, TypeError, AttributeError):
            return cls()


@dataclass(frozen=True)
class Change:
    """What `apply` wrote: the state before and after, the fires it queued and the keys of
    the queued fires it withdrew."""

    before: Backfill
    after: Backfill
    queued: tuple[NodeFire, ...] = ()
    withdrawn: tuple[str, ...] = ()


class BackfillStore:
    """Reads and fenced writes of backfills (any thread; `create` is serialised so that the
    quota holds against concurrent requests of this replica)."""

    def __init__(
        self,
        registry: Registry,
        fence: Fence | None,
        max_active: int,
        paths: BackfillPaths = JOB_PATHS,
    ) -> None:
        self._registry = registry
        self._fence = fence
        self.max_active = max_active
        self.paths = paths
        self._create_lock = threading.Lock()

    def _writer(self) -> FencedWriter:
        if self._fence is None:
            raise RuntimeError("read-only backfill store")
        return FencedWriter(self._registry, self._fence)

    # -- reads ----------------------------------------------------------------------------------

    def get(self, job: str, backfill_id: str) -> tuple[Backfill, int] | None:
        """The backfill with its node version; None when there is none. RegistryError when
        its stored state cannot be read."""
        got = self._registry.get_versioned(self.paths.state(job, backfill_id))
        if got is None:
            return None
        return self._decode(backfill_id, got[0]), got[1]

    @staticmethod
    def _decode(backfill_id: str, data: bytes) -> Backfill:
        try:
            return Backfill.from_json(json.loads(data))
        except (ValueError, InvalidRequest) as exc:
            why = exc.message if isinstance(exc, InvalidRequest) else str(exc)
            raise RegistryError(f"stored backfill {backfill_id!r} cannot be read: {why}") from exc

    def ids(self, job: str) -> list[str]:
        """The job's backfill ids, newest first (ids sort by creation time)."""
        return sorted(self._registry.children(self.paths.folder(job)), reverse=True)

    def backfills(self, job: str, ids: list[str] | None = None) -> list[Backfill]:
        """The job's backfills (or those of `ids`), newest first; one unreadable is logged and
        left out. Pipelined reads."""
        chosen = self.ids(job) if ids is None else ids
        got = self._registry.get_many([self.paths.state(job, i) for i in chosen])
        out = []
        for backfill_id in chosen:
            found = got.get(self.paths.state(job, backfill_id))
            if found is None:
                continue
            try:
                out.append(self._decode(backfill_id, found[0]))
            except RegistryError as exc:
                log.warning("backfills: %s", exc.message)
        return out

    def outcome(self, job: str, backfill_id: str) -> Outcome:
        return Outcome.decode(self._registry.get(self.paths.outcome(job, backfill_id)))

    def outcomes(self, job: str, ids: list[str]) -> dict[str, Outcome]:
        """The outcome of each of `ids` (pipelined reads; none recorded: zeros)."""
        got = self._registry.get_many([self.paths.outcome(job, i) for i in ids])
        out = {}
        for backfill_id in ids:
            found = got.get(self.paths.outcome(job, backfill_id))
            out[backfill_id] = Outcome.decode(None if found is None else found[0])
        return out

    def active(self) -> list[tuple[str, str]]:
        """(job, backfill id) of every RUNNING or PAUSED backfill, cluster-wide."""
        out = []
        for name in self._registry.children(self.paths.active_root):
            job, _sep, backfill_id = name.rpartition("~")
            if job and _ID.fullmatch(backfill_id):
                out.append((job, backfill_id))
            else:
                log.warning("backfills: active marker %s names no backfill; ignored", name)
        return sorted(out, key=lambda pair: pair[1])

    def active_count(self) -> int:
        return sum(self._registry.child_count(root) for root in _ACTIVE_ROOTS)

    def jobs_of(self, backfill_ids: set[str]) -> dict[str, str]:
        """The job of each of `backfill_ids` found (a walk of the jobs' folders: term start)."""
        out: dict[str, str] = {}
        if not backfill_ids:
            return out
        for job in self._registry.children(self.paths.root):
            for backfill_id in self._registry.children(self.paths.folder(job)):
                if backfill_id in backfill_ids:
                    out[backfill_id] = job
        return out

    def open_fire_keys(self) -> list[str]:
        """The keys of every backfill fire whose record is still there (not counted yet)."""
        return sorted(
            key for key in self._registry.children(WORKFLOW_FIRES) if backfill_of_key(key)
        )

    def queued_keys(self, job: str, backfill_id: str) -> list[tuple[str, int]]:
        """(key, entry version) of the backfill's fires waiting in the launch queue."""
        folder = workflow_queue_folder(job)
        names = [n for n in self._registry.children(folder) if n.startswith(f"{backfill_id}~")]
        got = self._registry.get_many([f"{folder}/{n}" for n in names])
        return [
            (name, found[1]) for name in names if (found := got.get(f"{folder}/{name}")) is not None
        ]

    # -- writes ---------------------------------------------------------------------------------

    def create(self, backfill: Backfill) -> None:
        """Record a new RUNNING backfill with its active marker and an empty outcome, fenced.
        QuotaExceeded (409) when `max_active` backfills are RUNNING or PAUSED already;
        Conflict when the id exists."""
        if backfill.status is not BackfillStatus.RUNNING:
            raise ValueError("a new backfill is RUNNING")
        job, backfill_id = backfill.job_name, backfill.backfill_id
        with self._create_lock:
            self._registry.ensure(self.paths.active_root)
            active = self.active_count()
            if active >= self.max_active:
                raise QuotaExceeded(
                    "max_active_backfills",
                    f"{active} backfills are running or paused, at most {self.max_active} may be "
                    "(max_active_backfills); wait for one to end, or cancel one",
                )
            self._registry.ensure(self.paths.folder(job))
            try:
                self._writer().commit(
                    f"create backfill {backfill_id} of {job}",
                    [
                        Op.create(self.paths.state(job, backfill_id), _encode(backfill)),
                        Op.create(self.paths.outcome(job, backfill_id), Outcome().encode()),
                        Op.create(self.paths.active(job, backfill_id)),
                    ],
                )
            except Conflict:
                raise _IdTaken(f"backfill {backfill_id} of job {job} exists already") from None
        self._prune(job)

    def create_new(
        self, owner: str, request: BackfillRequest, fires: FireList, now: float
    ) -> Backfill:
        """Record a new RUNNING backfill of `fires` for `owner` (a job, or a workflow with the
        workflow paths) under a freshly drawn id (drawn again when two of one second collide).
        InvalidRequest (400) when the range holds no fire, QuotaExceeded (409) as `create`."""
        for _ in range(_CREATE_TRIES):
            created_at = datetime.fromtimestamp(now, UTC)
            backfill_id = new_backfill_id(created_at, secrets.token_hex(4))
            backfill = Backfill.start_new(backfill_id, owner, request, fires, created_at)
            try:
                self.create(backfill)
            except _IdTaken:
                continue  # the same id drawn twice in a second: draw again
            return backfill
        raise Conflict(f"'{owner}': could not draw a free backfill id")

    def apply(
        self, job: str, backfill_id: str, decide: Callable[[Backfill], Backfill | None]
    ) -> Change | None:
        """Read the backfill, let `decide` give its new state (None: nothing to write) and
        write it in one fenced transaction at the version read, with the fire it launched
        queued, its active marker dropped when it ends, its queued fires withdrawn when it is
        cancelled (see the module docstring); again from a fresh read when something changed
        meanwhile. None when nothing was written. NotFound when it does not exist; whatever
        `decide` raises (the model's Conflict for an impossible transition) propagates;
        NotLeader when the term is over."""
        for _ in range(_APPLY_TRIES):
            got = self.get(job, backfill_id)
            if got is None:
                raise NotFound(f"job '{job}' has no backfill '{backfill_id}'")
            before, version = got
            after = decide(before)
            if after is None or after == before:
                return None
            ops = [Op.set(self.paths.state(job, backfill_id), _encode(after), version)]
            queued: list[NodeFire] = []
            withdrawn: list[str] = []
            if after.next_index == before.next_index + 1:
                if not self.paths.node_fires:
                    raise ValueError("a workflow's backfill launches by launch_ops")
                fire = backfill_fire(before, before.next_index)
                self._registry.ensure(workflow_queue_folder(job))
                # The folders the launch and the status handler write in, by transactions
                # that cannot create a parent.
                self._registry.ensure(WORKFLOW_FIRES)
                self._registry.ensure(WORKFLOW_TASKS)
                ops.append(Op.create(fire.queue_path, fire.encode()))
                ops.append(Op.create(fire.record_path, FireRecord().encode()))
                queued.append(fire)
            elif after.next_index != before.next_index:
                raise ValueError("a change launches at most one fire")
            if after.status.final and not before.status.final:
                ops.append(Op.delete(self.paths.active(job, backfill_id)))
            cancelled = after.status is BackfillStatus.CANCELLED and not before.status.final
            if cancelled and self.paths.node_fires:
                for key, entry_version in self.queued_keys(job, backfill_id):
                    ops.append(Op.delete(workflow_queue_path(job, key), entry_version))
                    record = self._registry.get_versioned(workflow_fire_path(key))
                    if record is not None and FireRecord.decode(record[0]).shards is None:
                        ops.append(Op.delete(workflow_fire_path(key), record[1]))
                    withdrawn.append(key)
            try:
                self._writer().commit(f"change backfill {backfill_id} of {job}", ops)
            except (Conflict, NotFound):
                continue  # changed meanwhile (another write, a launch taking a queue entry)
            return Change(before, after, tuple(queued), tuple(withdrawn))
        raise Conflict(f"backfill {backfill_id} of job {job}: too many concurrent changes")

    def launch_ops(self, before: Backfill, version: int, after: Backfill) -> list[Op]:
        """A workflow's backfill: the ops that advance its state from `before` (read at
        `version`) to `after` (one fire launched), written with the fire's run, so the run
        exists exactly when the state says its fire launched."""
        job, backfill_id = before.job_name, before.backfill_id
        ops = [Op.set(self.paths.state(job, backfill_id), _encode(after), version)]
        if after.status.final and not before.status.final:
            ops.append(Op.delete(self.paths.active(job, backfill_id)))
        return ops

    def record_had_run(self, before: Backfill, version: int, after: Backfill) -> bool:
        """A workflow's backfill whose next fire has a run already: the state advanced (as by
        `launch_ops`) and `hadRun` counted, in one fenced transaction at the versions read.
        False when something changed meanwhile (read again)."""
        job, backfill_id = before.job_name, before.backfill_id
        ops = self.launch_ops(before, version, after)
        got = self._registry.get_versioned(self.paths.outcome(job, backfill_id))
        if got is not None:
            counted = replace(Outcome.decode(got[0]), had_run=Outcome.decode(got[0]).had_run + 1)
            ops.append(Op.set(self.paths.outcome(job, backfill_id), counted.encode(), got[1]))
        try:
            self._writer().commit(f"record a fire of backfill {backfill_id} that had a run", ops)
        except (Conflict, NotFound):
            return False
        return True

    def outcome_op(self, job: str, backfill_id: str, succeeded: bool) -> Op | None:
        """The op counting one more fire of the backfill ended (`succeeded` or not) at the
        outcome's version read, for the transaction that ends the fire's run; None when the
        backfill is gone."""
        path = self.paths.outcome(job, backfill_id)
        got = self._registry.get_versioned(path)
        if got is None:
            return None
        counted = Outcome.decode(got[0])
        if succeeded:
            counted = replace(counted, succeeded=counted.succeeded + 1)
        else:
            counted = replace(counted, failed=counted.failed + 1)
        return Op.set(path, counted.encode(), got[1])

    def count_ended(self, fire: NodeFire, record: FireRecord, version: int) -> bool:
        """A fire whose shards all ended: its tasks' index entries deleted, then its outcome
        counted and its record deleted in one transaction at the versions read (so it is
        counted once). False when something changed meanwhile (read again); a backfill
        deleted meanwhile: only the record goes."""
        writer = self._writer()
        ended = [task for _ok, _why, task in record.done.values()]
        for task_id in {*record.task_ids, *ended}:
            if task_id:
                writer.delete(workflow_task_path(task_id), recursive=False)
        outcome_path = self.paths.outcome(fire.job, fire.backfill_id)
        ops = [Op.delete(fire.record_path, version)]
        got = self._registry.get_versioned(outcome_path)
        if got is not None:
            counted = Outcome.decode(got[0])
            if record.succeeded:
                counted = Outcome(counted.succeeded + 1, counted.failed)
            else:
                counted = Outcome(counted.succeeded, counted.failed + 1)
            ops.insert(0, Op.set(outcome_path, counted.encode(), got[1]))
        try:
            writer.commit(f"count the end of {fire.key}", ops)
        except (Conflict, NotFound):
            return False
        return True

    def fire_record(self, key: str) -> tuple[FireRecord, int] | None:
        got = self._registry.get_versioned(workflow_fire_path(key))
        if got is None:
            return None
        return FireRecord.decode(got[0]), got[1]

    def fire_records(self, keys: list[str]) -> dict[str, tuple[FireRecord, int]]:
        got = self._registry.get_many([workflow_fire_path(k) for k in keys])
        return {
            k: (FireRecord.decode(found[0]), found[1])
            for k in keys
            if (found := got.get(workflow_fire_path(k))) is not None
        }

    def _prune(self, job: str) -> None:
        """Delete the oldest ended backfills of `job` beyond ENDED_KEPT (best effort)."""
        ids = self.ids(job)
        if len(ids) <= ENDED_KEPT:
            return
        active = {i for j, i in self.active() if j == job}
        ended = [i for i in ids if i not in active]
        for backfill_id in ended[ENDED_KEPT:]:
            try:
                self._writer().delete(self.paths.state(job, backfill_id))
            except (Conflict, NotFound):
                pass


def _encode(backfill: Backfill) -> bytes:
    return json.dumps(backfill.to_json(), separators=(",", ":")).encode()


def key_of(backfill_id: str, index: int) -> str:
    """The fire key of fire `index` of backfill `backfill_id`."""
    return fire_key(backfill_id, str(index), 0)

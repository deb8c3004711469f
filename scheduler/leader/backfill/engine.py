"""The backfill engine (issue 28): a leader room that launches the fires of each running backfill
in order, paced, once each, and counts how they ended.

On its thread (`sched-backfill`), woken by the API, by a task's end and at least once a second,
each pass:
- for each RUNNING or PAUSED backfill (listed from the active markers at term start, then kept
  by the engine's own writes and the API's): when its job is gone, it is cancelled; while it is
  PAUSED, or its job (or the job's app) is disabled, it waits; otherwise, when its next fire is
  due by its pacing (`Backfill.due_at`: `firesPerMinute`, none = as fast as its overlap policy
  allows) and its overlap policy allows
  it, the fire is written (`BackfillStore.apply` with `fire_launched`: the state at
  `next_index + 1` and the fire's queue entry and record in one fenced compare-and-set) and
  handed to the launcher's queue (the term's `WorkflowQueue`, shared with the workflow engine).
  The policy is the backfill's `overlapPolicy`, else the job's: FORBID (and REPLACE, which a
  backfill treats as FORBID: a past fire never kills another) waits for the previous fire of
  the backfill to end (every shard's end in its record, after failover and retries); ALLOW
  does not wait (the launcher still runs one run of the job at a time unless the JOB's policy
  is ALLOW).
- each fire whose shards all ended is counted in the backfill's outcome and its record and
  task index entries deleted (`BackfillStore.count_ended`).

At the term's start: RUNNING backfills continue from their stored `next_index` (a fire queued but
not launched is still in the queue, which the workflow engine loads for the launcher); the
records of fires launched under an earlier leader are followed, and a launched shard with no
task running, none queued for failover and no end recorded counts as failed (its end was lost
in the leader change), so no backfill waits for ever.

The API's operations (`create`, `pause`, `resume`, `cancel`) run on API threads; every write is
a fenced compare-and-set, so they and the engine's thread never overwrite each other, and a
deposed leader's engine cannot write at all.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from scheduler.leader.lifecycle import TermView, ThreadedComponent
from scheduler.model.backfill import (
    Backfill,
    BackfillRequest,
    BackfillStatus,
    FireList,
)
from scheduler.model.config.job import JobConfig
from scheduler.model.config.policies import OverlapPolicy
from scheduler.model.errors import Conflict, NotFound, NotLeader, SchedulerError
from scheduler.model.runs import FIRE_TASK_KEY
from scheduler.model.task_id import TaskId
from scheduler.model.task_states import ACTIVE_STATES
from scheduler.storage.backfill_store import (
    BackfillStore,
    Change,
    backfill_of_key,
    key_of,
)
from scheduler.storage.layout import workflow_fire_path
from scheduler.storage.state import KILLED_BY_USER
from scheduler.storage.term_stores import TermStores
from scheduler.storage.transactions import FencedWriter, Op
from scheduler.storage.workflow_store import NodeFire, WorkflowQueue, fire_of_task

__all__ = ["TICK_S", "BackfillEngine"]

log = logging.getLogger(__name__)

TICK_S = 1.0
_BURST = 50
"""Fires written at most per backfill and pass (ALLOW without a rate: the rest on the next)."""


class BackfillEngine(ThreadedComponent):
    name = "backfills"
    thread_name = "sched-backfill"

    def __init__(
        self,
        store: BackfillStore,
        stores: TermStores,
        term: TermView,
        queue: WorkflowQueue,
        kill: Callable[[str], bool],
        *,
        tick_s: float = TICK_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`queue`: the node fires for the launcher (the term's, shared with the workflow
        engine, which loads it at term start: start this engine after it). `kill`: the
        driver's kill of a task. `clock`: epoch seconds (tests step it)."""
        super().__init__()
        self._store = store
        self._stores = stores
        self._term = term
        self._queue = queue
        self._kill = kill
        self._tick_s = tick_s
        self._clock = clock
        self._wake = threading.Event()
        self._paused = False
        self._lock = threading.Lock()
        self._active: set[tuple[str, str]] = set()
        """(job, backfill id) of the RUNNING and PAUSED backfills."""
        self._open: dict[str, NodeFire] = {}
        """Fires written whose record is not counted yet, by key."""
        self.fires_written = 0

    @property
    def store(self) -> BackfillStore:
        return self._store

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Read the active backfills and the fires not counted yet, settle the shards whose end
        was lost, then start the thread. Raises (refusing the term) when ZooKeeper cannot be
        read."""
        self._load()
        self._settle_lost_shards()
        self._start_thread()

    def stop(self) -> None:
        self._stop_thread()

    def pause(self) -> None:
        self._paused = True

    def resume(self) -> None:
        self._paused = False
        self._wake.set()

    def _interrupt(self) -> None:
        self._wake.set()

    def wake(self) -> None:
        """Look at the backfills now (any thread; never blocks)."""
        self._wake.set()

    def on_status(self, status: dict[str, Any], parsed: TaskId) -> None:
        """Status listener: the end of a task that runs a fire may end a backfill's fire
        (sched-mesos-events; never blocks); other tasks' ends do not wake the thread."""
        if status.get(FIRE_TASK_KEY) and str(status.get("state", "")) not in ACTIVE_STATES:
            self._wake.set()

    def _load(self) -> None:
        active = set(self._store.active())
        keys = self._store.open_fire_keys()
        ids = {parsed[0] for key in keys if (parsed := backfill_of_key(key)) is not None}
        jobs = self._store.jobs_of(ids)
        opened: dict[str, NodeFire] = {}
        for key in keys:
            parsed = backfill_of_key(key)
            assert parsed is not None
            job = jobs.get(parsed[0])
            if job is None:
                log.warning("backfills: fire record %s belongs to no backfill; ignored", key)
                continue
            opened[key] = _fire_of(job, parsed[0], parsed[1])
        with self._lock:
            self._active = active
            self._open = opened
        if active or opened:
            log.info(
                "backfills: %s active, %s fires not counted yet (resumed)", len(active), len(opened)
            )

    def _run(self) -> None:
        wait_s = self._tick_s
        while not self._stopping.is_set():
            self._wake.wait(wait_s)
            self._wake.clear()
            if self._stopping.is_set():
                return
            wait_s = self._tick_s
            if self._paused or not self._term.acting:
                continue
            try:
                wait_s = self.run_pass()
            except NotLeader:
                log.info("backfills: not acting; pass abandoned")
            except Exception:
                log.exception("backfills: pass failed")

    def run_pass(self) -> float:
        """One pass (the engine's thread; tests call it): launch what is due, count what ended.
        Returns how long the thread may wait before the next pass. NotLeader when the term is
        over."""
        now = self._clock()
        wait_s = self._tick_s
        with self._lock:
            active = sorted(self._active)
        for job, backfill_id in active:
            try:
                due_in = self._advance(job, backfill_id, now)
            except NotLeader:
                raise
            except SchedulerError as exc:
                log.error("backfills: %s of %s not advanced: %s", backfill_id, job, exc.message)
                continue
            if due_in is not None:
                wait_s = min(wait_s, max(due_in, 0.0))
        self._count_ended()
        return wait_s

    # -- the API's operations (API threads) ----------------------------------------------------

    def create(self, job: JobConfig, request: BackfillRequest, fires: FireList) -> Backfill:
        """Record a RUNNING backfill of `fires` for `job` and wake the thread. InvalidRequest
        (400) when the range holds no fire; QuotaExceeded (409) past `max_active_backfills`."""
        backfill = self._store.create_new(job.job_name, request, fires, self._clock())
        with self._lock:
            self._active.add((job.job_name, backfill.backfill_id))
        log.info(
            "backfills: %s of %s created: %s fires from %s to %s",
            backfill.backfill_id,
            job.job_name,
            backfill.fires,
            backfill.fire_times[0].isoformat(),
            backfill.fire_times[-1].isoformat(),
        )
        self._wake.set()
        return backfill

    def pause_backfill(self, job: str, backfill_id: str) -> Backfill:
        """PAUSED: no more fires launch until resumed (those running go on). NotFound, or the
        model's Conflict (409) when it has ended."""
        return self._operate(job, backfill_id, "paused", lambda b, _now: b.pause())

    def resume_backfill(self, job: str, backfill_id: str) -> Backfill:
        return self._operate(job, backfill_id, "resumed", lambda b, _now: b.resume())

    def cancel_backfill(
        self, job: str, backfill_id: str, *, kill_running: bool = False
    ) -> Backfill:
        """Cancel: no more fires launch; a fire queued but not launched is withdrawn. With
        `kill_running`, the tasks of its fires still running are killed and their failover
        shards dropped; else they run to their end (and are counted)."""
        after = self._operate(job, backfill_id, "cancelled", lambda b, now: b.cancel(now))
        if kill_running:
            self._kill_tasks(job, backfill_id)
        return after

    def _operate(
        self,
        job: str,
        backfill_id: str,
        what: str,
        decide: Callable[[Backfill, datetime], Backfill],
    ) -> Backfill:
        now = datetime.fromtimestamp(self._clock(), UTC)
        change = self._store.apply(job, backfill_id, lambda b: decide(b, now))
        if change is None:
            got = self._store.get(job, backfill_id)
            if got is None:
                raise NotFound(f"job '{job}' has no backfill '{backfill_id}'")
            return got[0]
        self._after(change)
        log.info("backfills: %s of %s %s", backfill_id, job, what)
        self._wake.set()
        return change.after

    # -- launching ------------------------------------------------------------------------------

    def _advance(self, job_name: str, backfill_id: str, now: float) -> float | None:
        """Write the fires of one backfill that are due; the seconds until its next is due
        (None: nothing to wait for on a clock)."""
        got = self._store.get(job_name, backfill_id)
        if got is None:
            self._forget(job_name, backfill_id)
            return None
        backfill = got[0]
        if backfill.status.final:
            self._forget(job_name, backfill_id)
            return None
        at = datetime.fromtimestamp(now, UTC)
        job = self._stores.config.job(job_name)
        if job is None:  # a PAUSED one too: it would hold its place in the quota for ever
            change = self._store.apply(job_name, backfill_id, lambda b: b.cancel(at))
            if change is not None:
                self._after(change)
                log.warning(
                    "backfills: %s cancelled: its job %s was deleted", backfill_id, job_name
                )
            return None
        if backfill.status is BackfillStatus.PAUSED or self._stores.is_disabled(job):
            return None  # waits to be resumed, or for the job (and its app) to be enabled
        policy = backfill.overlap_policy or job.overlap
        for _ in range(_BURST):
            due = backfill.due_at(at)
            if due is None:
                return None
            if due > at:
                return (due - at).total_seconds()
            index = backfill.next_index
            if policy is not OverlapPolicy.ALLOW and index > 0:
                if not self._ended(key_of(backfill_id, index - 1)):
                    return None  # the previous fire runs (FORBID; REPLACE treated so)
            try:
                change = self._store.apply(job_name, backfill_id, _launching(index, at))
            except Conflict as exc:
                log.info("backfills: %s: %s; read again", backfill_id, exc.message)
                self._wake.set()
                return None
            if change is None:
                return None
            self._after(change)
            self.fires_written += 1
            log.info(
                "backfills: %s of %s: fire %s/%s (%s) queued",
                backfill_id,
                job_name,
                index + 1,
                backfill.fires,
                backfill.fire_times[index].isoformat(),
            )
            backfill = change.after
            if policy is not OverlapPolicy.ALLOW:
                return None
        self._wake.set()  # more due: at once on the next pass
        return None

    def _ended(self, key: str) -> bool:
        """Whether a fire ended: every shard's end recorded, or its record counted and gone."""
        got = self._store.fire_record(key)
        return got is None or got[0].complete

    def _after(self, change: Change) -> None:
        """What follows a write: fires queued for the launcher, withdrawn ones dropped, the
        sets of active backfills and open fires kept."""
        after = change.after
        pair = (after.job_name, after.backfill_id)
        self._queue.drop(list(change.withdrawn))
        with self._lock:
            for key in change.withdrawn:
                self._open.pop(key, None)
            for fire in change.queued:
                self._open[fire.key] = fire
            if after.status.final:
                self._active.discard(pair)
            else:
                self._active.add(pair)
        self._queue.add(list(change.queued))

    def _forget(self, job: str, backfill_id: str) -> None:
        with self._lock:
            self._active.discard((job, backfill_id))

    # -- counting ends --------------------------------------------------------------------------

    def _count_ended(self) -> None:
        with self._lock:
            fires = dict(self._open)
        if not fires:
            return
        records = self._store.fire_records(list(fires))
        for key, fire in fires.items():
            got = records.get(key)
            if got is None:
                with self._lock:
                    self._open.pop(key, None)  # counted by an earlier leader, or withdrawn
                continue
            record, version = got
            if not record.complete:
                continue
            if self._store.count_ended(fire, record, version):
                with self._lock:
                    self._open.pop(key, None)
                log.log(
                    logging.INFO if record.succeeded else logging.WARNING,
                    "backfills: %s of %s: fire %s %s%s",
                    fire.backfill_id,
                    fire.job,
                    fire.node,
                    "succeeded" if record.succeeded else "failed",
                    f" ({record.reason()})" if not record.succeeded else "",
                )
            else:
                self._wake.set()  # changed meanwhile: read again

    # -- cancel's kill ----------------------------------------------------------------------------

    def _kill_tasks(self, job: str, backfill_id: str) -> None:
        """Kill the running tasks of the backfill's fires and drop their failover shards."""
        stores = self._stores
        prefix = f"{backfill_id}~"
        for task in stores.running.tasks(job):
            if task.workflow_fire.startswith(prefix) and stores.running.mark_killed(
                task.task_id, KILLED_BY_USER
            ):
                self._kill(task.task_id)
                log.info("backfills: %s of %s: %s killed", backfill_id, job, task.task_id)
        for entry_job, item, original in stores.failover.entries():
            if entry_job != job:
                continue
            owner = fire_of_task(stores.registry, original)
            if owner is not None and owner.backfill_id == backfill_id:
                stores.failover.remove(job, item)
                self._record_lost(owner.key, item, "killed by a user (backfill cancelled)")

    def _record_lost(self, key: str, item: int, why: str) -> None:
        """Record shard `item` of fire `key` as failed (its end will never come)."""
        got = self._store.fire_record(key)
        if got is None:
            return
        record, version = got
        if item in record.done:
            return
        record.done[item] = (False, why[:500], "")
        assert self._stores.fence is not None
        try:
            FencedWriter(self._stores.registry, self._stores.fence).commit(
                f"record the end of shard {item} of {key}",
                [Op.set(workflow_fire_path(key), record.encode(), version)],
            )
        except (Conflict, NotFound):
            log.info("backfills: fire %s changed meanwhile; shard %s not recorded", key, item)

    # -- resume -----------------------------------------------------------------------------------

    def _settle_lost_shards(self) -> None:
        """Term start: a launched shard of a fire not counted yet with no task running, none
        queued for failover and no end recorded counts as failed (see the module docstring)."""
        with self._lock:
            fires = dict(self._open)
        if not fires:
            return
        records = self._store.fire_records(list(fires))
        stores = self._stores
        alive: dict[str, set[int]] = {}
        jobs = {fire.job for fire in fires.values()}
        for job in jobs:
            for task in stores.running.tasks(job):
                if task.workflow_fire in fires:
                    alive.setdefault(task.workflow_fire, set()).add(task.parsed.item)
        for entry_job, item, original in stores.failover.entries():
            if entry_job in jobs:
                owner = fire_of_task(stores.registry, original)
                if owner is not None and owner.key in fires:
                    alive.setdefault(owner.key, set()).add(item)
        for key, (record, _version) in records.items():
            if record.shards is None or record.complete:
                continue
            for item in range(record.shards):
                if item in record.done or item in alive.get(key, set()):
                    continue
                why = "its end was lost in a leader change (no task running, none relaunched)"
                log.warning("backfills: fire %s shard %s: %s", key, item, why)
                self._record_lost(key, item, why)


def _launching(index: int, at: datetime) -> Callable[[Backfill], Backfill]:
    """The decision that fire `index` launched at `at` (the model's Conflict when another
    write moved the backfill meanwhile)."""
    return lambda backfill: backfill.fire_launched(index, at)


def _fire_of(job: str, backfill_id: str, index: int) -> NodeFire:
    """A fire known by its key alone (term start): enough to count it (its time unused)."""
    return NodeFire("", backfill_id, str(index), 0, job, 0.0, None, backfill_id)

"""Backfills of workflows (issue 28): each fire of a past range makes one workflow run, in
order, paced, once each; the workflow engine steps them on its thread.

Why here and not in the backfill engine (`leader/backfill`): a workflow backfill's fire is a
workflow run, which only this room makes (its first step, the nodes that cannot launch failed
at once, the launches queued, the run's end told to the listeners); the runs it makes are then
stepped like any other. The backfill engine, whose fires are node fires of one job, would need
all of that through a protocol; here it is one callable of the engine (`make_run`).

Each pass (`run_pass`, after the engine's runs moved), for each RUNNING or PAUSED backfill of a
workflow (read at term start, then kept by these writes and the API's): when its workflow is
gone, it is cancelled; while it is PAUSED or its workflow disabled, it waits; otherwise, when
its next fire is due by its pacing (`Backfill.due_at`) and its overlap policy allows it (FORBID,
and REPLACE treated so: the run of its previous fire has ended; ALLOW: no wait), the fire's run
is created with its `backfillId` in one fenced transaction with the backfill's state advanced
(`BackfillStore.launch_ops`: the state written at the version read). The run's id is derived
from the workflow and the fire time, so:
- two leaders racing on the same fire make one run: the second transaction fails as a whole;
- a fire that has a run already (made by the cron, a trigger or an earlier backfill, still kept
  among the workflow's runs) is not run again: the state advances and the outcome counts it as
  `hadRun` (`BackfillStore.record_had_run`).
A run's end is counted in the backfill's outcome (`succeeded` or `failed`) by the transaction
that ends it (`end_ops`, given to `WorkflowStore.apply`), so each run is counted once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime

from scheduler.model.backfill import (
    Backfill,
    BackfillRequest,
    BackfillStatus,
    FireList,
)
from scheduler.model.config.policies import OverlapPolicy
from scheduler.model.errors import Conflict, NotFound, NotLeader, SchedulerError
from scheduler.model.workflow import RunState, WorkflowConfig, WorkflowRun, run_id_of
from scheduler.storage.backfill_store import BackfillStore
from scheduler.storage.transactions import Op
from scheduler.storage.workflow_store import WorkflowStore

__all__ = ["MakeRun", "WorkflowBackfills"]

log = logging.getLogger(__name__)

MakeRun = Callable[[WorkflowConfig, float, list[Op], str], WorkflowRun]
"""The engine's run maker: (workflow, fire time, extra ops, backfill id) -> the run created
with `extra` in its transaction; Conflict when the run exists or an extra op failed."""

_BURST = 50
"""Runs made at most per backfill and pass (ALLOW without a rate: the rest on the next)."""


class WorkflowBackfills:
    """The workflow engine's backfills (its thread steps them; the API's operations run on API
    threads; every write is fenced and versioned)."""

    def __init__(
        self,
        store: BackfillStore,
        workflows: WorkflowStore,
        make_run: MakeRun,
        cancel_run: Callable[[str, str], WorkflowRun],
        wake: Callable[[], None],
        clock: Callable[[], float],
    ) -> None:
        self._store = store
        self._workflows = workflows
        self._make_run = make_run
        self._cancel_run = cancel_run
        self._wake = wake
        self._clock = clock
        self._lock = threading.Lock()
        self._active: set[tuple[str, str]] = set()
        """(workflow, backfill id) of the RUNNING and PAUSED backfills."""
        self.runs_made = 0

    @property
    def store(self) -> BackfillStore:
        return self._store

    def load(self) -> None:
        """Term start: the RUNNING and PAUSED backfills (RegistryError refuses the term)."""
        active = set(self._store.active())
        with self._lock:
            self._active = active
        if active:
            log.info("workflow backfills: %s active (resumed)", len(active))

    # -- the API's operations (API threads) ----------------------------------------------------

    def create(self, config: WorkflowConfig, request: BackfillRequest, fires: FireList) -> Backfill:
        """Record a RUNNING backfill of `fires` for the workflow and wake the engine.
        InvalidRequest (400) when the range holds no fire; QuotaExceeded (409) past
        `max_active_backfills`."""
        name = config.workflow_name
        backfill = self._store.create_new(name, request, fires, self._clock())
        with self._lock:
            self._active.add((name, backfill.backfill_id))
        log.info(
            "workflow backfills: %s of %s created: %s fires from %s to %s",
            backfill.backfill_id,
            name,
            backfill.fires,
            backfill.fire_times[0].isoformat(),
            backfill.fire_times[-1].isoformat(),
        )
        self._wake()
        return backfill

    def pause(self, workflow: str, backfill_id: str) -> Backfill:
        return self._operate(workflow, backfill_id, "paused", lambda b, _now: b.pause())

    def resume(self, workflow: str, backfill_id: str) -> Backfill:
        return self._operate(workflow, backfill_id, "resumed", lambda b, _now: b.resume())

    def cancel(self, workflow: str, backfill_id: str, *, kill_running: bool = False) -> Backfill:
        """No more runs; with `kill_running`, its runs still running are cancelled (their tasks
        killed), else they run to their end (and are counted)."""
        after = self._operate(workflow, backfill_id, "cancelled", lambda b, now: b.cancel(now))
        if kill_running:
            run_ids = [
                run_id_of(workflow, f.timestamp()) for f in after.fire_times[: after.next_index]
            ]
            for run in self._workflows.runs(workflow, run_ids):  # pipelined reads
                if run.ended or run.backfill_id != backfill_id:
                    continue
                try:
                    self._cancel_run(workflow, run.run_id)
                except (NotFound, Conflict) as exc:
                    log.info(
                        "workflow backfills: run %s not cancelled: %s", run.run_id, exc.message
                    )
        return after

    def _operate(
        self,
        workflow: str,
        backfill_id: str,
        what: str,
        decide: Callable[[Backfill, datetime], Backfill],
    ) -> Backfill:
        now = datetime.fromtimestamp(self._clock(), UTC)
        try:
            change = self._store.apply(workflow, backfill_id, lambda b: decide(b, now))
        except Conflict as exc:  # the model names the owner a job
            raise Conflict(
                exc.message.replace(f" of job {workflow}", f" of workflow {workflow}")
            ) from None
        if change is None:
            got = self._store.get(workflow, backfill_id)
            if got is None:
                raise NotFound(f"workflow '{workflow}' has no backfill '{backfill_id}'")
            return got[0]
        self._kept(change.after)
        log.info("workflow backfills: %s of %s %s", backfill_id, workflow, what)
        self._wake()
        return change.after

    # -- the engine's thread ---------------------------------------------------------------------

    def run_pass(self) -> None:
        """Make the runs that are due (the engine's thread; tests call it). NotLeader when the
        term is over."""
        now = self._clock()
        with self._lock:
            active = sorted(self._active)
        for workflow, backfill_id in active:
            try:
                self._advance(workflow, backfill_id, now)
            except NotLeader:
                raise
            except SchedulerError as exc:
                log.error(
                    "workflow backfills: %s of %s not advanced: %s",
                    backfill_id,
                    workflow,
                    exc.message,
                )

    def end_ops(self, run: WorkflowRun) -> list[Op]:
        """The ops counting an ended run of a backfill in its outcome (none for another run),
        for the transaction that ends it."""
        if not run.backfill_id:
            return []
        op = self._store.outcome_op(
            run.workflow_name, run.backfill_id, run.state is RunState.SUCCEEDED
        )
        return [] if op is None else [op]

    def _advance(self, workflow: str, backfill_id: str, now: float) -> None:
        at = datetime.fromtimestamp(now, UTC)
        for _ in range(_BURST):
            got = self._store.get(workflow, backfill_id)
            if got is None or got[0].status.final:
                self._forget(workflow, backfill_id)
                return
            backfill, version = got
            config = self._workflows.get(workflow)
            if config is None:  # a PAUSED one too: it would hold its place in the quota
                change = self._store.apply(workflow, backfill_id, lambda b: b.cancel(at))
                if change is not None:
                    self._kept(change.after)
                    log.warning(
                        "workflow backfills: %s cancelled: its workflow %s was deleted",
                        backfill_id,
                        workflow,
                    )
                return
            if backfill.status is BackfillStatus.PAUSED or self._workflows.is_disabled(workflow):
                return
            due = backfill.due_at(at)
            if due is None or due > at:
                return  # the engine's tick (1 s) comes back for it
            index = backfill.next_index
            policy = backfill.overlap_policy or config.overlap_policy
            if policy is not OverlapPolicy.ALLOW and index > 0:
                previous = run_id_of(workflow, backfill.fire_times[index - 1].timestamp())
                got_run = self._workflows.run(workflow, previous)
                if got_run is not None and not got_run[0].ended:
                    return  # the previous fire's run goes on (FORBID; REPLACE treated so)
            after = backfill.fire_launched(index, at)
            fire = backfill.fire_times[index].timestamp()
            run_id = run_id_of(workflow, fire)
            try:
                self._make_run(
                    config, fire, self._store.launch_ops(backfill, version, after), backfill_id
                )
            except Conflict:
                if self._workflows.run(workflow, run_id) is None:
                    continue  # the backfill moved meanwhile (a pause, a cancel): read again
                if not self._store.record_had_run(backfill, version, after):
                    continue
                self._kept(after)
                log.info(
                    "workflow backfills: %s of %s: fire %s/%s (%s) had a run already; not "
                    "run again",
                    backfill_id,
                    workflow,
                    index + 1,
                    backfill.fires,
                    backfill.fire_times[index].isoformat(),
                )
                continue  # the next fire (FORBID: once that run has ended)
            self.runs_made += 1
            log.info(
                "workflow backfills: %s of %s: fire %s/%s (%s): run %s",
                backfill_id,
                workflow,
                index + 1,
                backfill.fires,
                backfill.fire_times[index].isoformat(),
                run_id,
            )
            self._kept(after)
            if after.status.final or policy is not OverlapPolicy.ALLOW:
                return  # FORBID: the run's end wakes the engine for the next
        self._wake()  # more due: at once on the next pass

    def _kept(self, after: Backfill) -> None:
        pair = (after.job_name, after.backfill_id)
        with self._lock:
            if after.status.final:
                self._active.discard(pair)
            else:
                self._active.add(pair)

    def _forget(self, workflow: str, backfill_id: str) -> None:
        with self._lock:
            self._active.discard((workflow, backfill_id))

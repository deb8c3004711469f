"""The task launcher: matches pending work with held offers, event driven.

It wakes when offers arrive, when the queues change (its view of them, `QueueCache`, is kept by
ZooKeeper watches: cron fires, triggers, failovers, finished tasks) and once a second. A round
goes through five steps, and nothing passes from one round to the next but the offers held,
the starvation guard and what is known of the agents:

1. gather (read only, from the view): failover shards first, then READY runs oldest first; only
   jobs with pending work are looked at, so a round costs nothing per idle job; then the
   concurrency pools' admission (`pool_admission`, issue 28) leaves out the units whose pool
   has no slots for them now (they stay queued and wait their turn);
2. place (pure, `launch_round` and `placement`): a job's failover shards, or its READY run,
   are one unit; failover shards are placed one by one, READY runs all-or-nothing. A READY run
   that does not fit is skipped; once the oldest one has waited `STARVATION_S`, younger READY
   runs stop being placed so that freed resources accumulate for it (no starvation of big jobs
   by small ones). A run that could not be placed even with every known agent's resources free
   (a task bigger than the largest agent, or more tasks than the agents hold together) is
   reported once (a WARNING, and `unplaceable_jobs()` for the metrics) and passed over: it holds
   no younger run back (that would stall them forever) and counts as no work;
3. commit: the round's bookkeeping (running nodes, taken runs, failover entries removed) in as
   few fenced, versioned transactions as ZooKeeper allows (`LaunchBook`), before any task is
   launched, so that no task ever runs unrecorded; a unit whose write fails (changed meanwhile)
   waits for the next round and counts as left over for step 5;
4. accept: one ACCEPT per agent with the units written; when one is refused, only the
   bookkeeping of that agent's tasks is undone (a run whose other tasks Mesos took has its
   missing shards queued for failover, never launched twice); one that went unanswered keeps
   its bookkeeping, since the master may have taken it, and reconciliation decides;
5. decline the offers not used, with a filter (`BUSY_REFUSE_S` when work was left over, else
   `IDLE_REFUSE_S / 6`). With no work the framework suppresses offers and revives when work
   comes back (the original hoarded offers and starved other frameworks); failover shards new
   since the previous round revive once (filters may hide the agents they could run on).

The launcher owns the thread and the round; its parts live beside it: `offers` (the offers held
between rounds, suppress/revive/decline, offers held around a cron fire, and the `OfferDriver`
it asks of the term's Mesos driver), `agent_census` (what the agents could ever offer: the
offers seen and the master's `GET_AGENTS`, read on the short-lived `sched-agents` thread; the
jobs that can never be placed), `pool_admission` (the pools' pick over a round's units, with
its turns) and the pure `launch_round` and `placement`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from scheduler.leader.lifecycle import (
    Listeners,
    TermView,
    ThreadedComponent,
    WakeSignal,
    collector_paused_for,
)
from scheduler.leader.mesos.agent_census import AgentCensus, UnplaceableJobs
from scheduler.leader.mesos.capacity import AgentCapacity, Unplaceable
from scheduler.leader.mesos.launch_round import (
    Gathered,
    PlacedUnit,
    PlacementUnit,
    choose,
    items_of,
    offer_slots,
    overlap_of,
)
from scheduler.leader.mesos.offers import (
    BUSY_REFUSE_S,
    IDLE_REFUSE_S,
    AcceptOutcome,
    FireHold,
    HeldOffers,
    OfferDriver,
    OfferFlow,
)
from scheduler.leader.mesos.placement import OfferSlot, StarvationGuard
from scheduler.leader.mesos.pool_admission import PoolAdmission
from scheduler.leader.mesos.taskinfo import build_task_info
from scheduler.model.config.app import AppConfig
from scheduler.model.config.job import JobConfig, JobExecutionType
from scheduler.model.config.policies import OverlapPolicy
from scheduler.model.errors import NotLeader, SchedulerError
from scheduler.model.task_id import LaunchedTask, TaskId, TaskType
from scheduler.storage.launch_book import Launch, LaunchBook
from scheduler.storage.queue_cache import QueueCache
from scheduler.storage.state import KILLED_BY_REPLACE, RunningTask
from scheduler.storage.term_stores import TermStores
from scheduler.storage.transactions import Op
from scheduler.storage.workflow_store import (
    NodeFire,
    WorkflowQueue,
    fire_of_task,
    launch_ops,
    relaunch_ops,
)

log = logging.getLogger(__name__)


class FireTimeSource(Protocol):
    """The term's fire times (statistics' `FireTimes`): the fire a job's next READY launch
    runs for, and the fire a launched task ran for; None when not known. Any thread."""

    def next_fire(self, job_name: str) -> float | None: ...

    def fire_of(self, task_id: str) -> float | None: ...

    def node_fire_launched(self, task_id: str, fire_time: float, backfill_id: str) -> None: ...


STARVATION_S = 30.0
REPLACE_RESEND_S = 10.0
UNCONFIRMED_GRACE_S = 10.0
"""How long after an unanswered ACCEPT its tasks are taken as on their way (a master slow to
answer may still take it) before reconciliation asks about them."""
ALLOW, REPLACE = OverlapPolicy.ALLOW, OverlapPolicy.REPLACE


class Launcher(ThreadedComponent):
    name = "task-launcher"
    thread_name = "sched-launcher"

    def __init__(
        self,
        stores: TermStores,
        term: TermView,
        driver: OfferDriver,
        queues: QueueCache,
        *,
        wake: WakeSignal | None = None,
        next_fire: Callable[[], float | None] | None = None,
        workflows: WorkflowQueue | None = None,
        fire_times: FireTimeSource | None = None,
    ) -> None:
        """`driver`: the term's Mesos driver, which hands this launcher its offers
        (`add_offers`, `rescind`, `drop_offers`, `on_connected`). `queues`: the term's view of
        the queues, shared with the producer, built with `wake.wake` as its `on_change` (the
        launcher wakes on its changes, and stops it). `wake`: the
        signal the launcher's thread waits on, which the producer and the status handler are
        given to wake it; a signal of its own when None.
        `next_fire`: when the next cron fire is due (epoch seconds; None: none), from the
        producer; any thread may call it and it must not block. None: no fire is known.
        `workflows`: the term's workflow node fires waiting for a launch (issue 27), each
        launched as one run of its job whose shards carry the workflow run; None: none.
        `fire_times`: the fire a READY run or a failover shard runs for, which its shards'
        task data carry as `fireTime` (issue 28); None, or a fire not known: a READY run
        carries its launch time (a trigger's run is for the moment it launches), a failover
        shard none."""
        super().__init__()
        if stores.fence is None:
            raise ValueError("the launcher writes: it needs term stores with the term's fence")
        self._stores = stores
        self._term = term
        self._driver = driver
        self._wake = wake if wake is not None else WakeSignal()
        self._queues = queues
        # The running tasks' comings and goings wake this launcher only for pending work.
        queues.on_running_change = self.wake_for_work
        self._book = LaunchBook(stores.registry, stores.fence, queues)
        self._paused = False
        self._offers = HeldOffers()
        self._flow = OfferFlow(driver)
        self._fire_hold = FireHold(next_fire)
        self._census = AgentCensus(driver, self._wake.wake)
        self._unplaceable = UnplaceableJobs(self._census.capacity)
        self._guard = StarvationGuard(STARVATION_S)
        self._workflows = workflows
        self._fire_times = fire_times
        # The concurrency pools' pick over each round's units, with its turns (issue 28).
        self._pools = PoolAdmission(stores, queues)
        # Failover shards' original task -> the workflow node fire it ran for (None: none),
        # read once per task from its index entry (a shard waiting for its back-off is
        # gathered every round).
        self._fire_of: dict[str, NodeFire | None] = {}
        self.launched = 0
        self.unconfirmed = 0
        """Tasks whose ACCEPT went unanswered, this term (read by /metrics from any thread)."""
        # For /metrics: the queues as the last round read them.
        self.rounds = 0
        """Rounds run this term (read by /metrics from any thread)."""
        self.ready_runs = 0
        self.failover_shards = 0
        self.last_launch_at: float = 0.0
        # Called once a round, after its ACCEPTs, with the tasks Mesos took or may have taken
        # (an answer that never came: the task's bookkeeping stays, and the statistics' launch
        # row with it; should Mesos not have it, reconciliation's TASK_LOST follows), each
        # with its agent and original task id (the failed task a failover launch replaces,
        # else the task itself). Must not block.
        self.launch_listeners: Listeners[[list[LaunchedTask]]] = Listeners(
            log, "launcher: launch listener"
        )
        # Called before a round's bookkeeping is written, with the ids of the tasks it may
        # launch (until its ACCEPT answers, a reconciliation may find them unknown). Must not
        # block.
        self.launching_listeners: Listeners[[list[str]]] = Listeners(
            log, "launcher: launching listener"
        )
        # Called once a round, after its ACCEPTs, with the tasks Mesos took, each as its running
        # node was created (version 0), before the launch listeners. Must not block.
        self.launched_task_listeners: Listeners[[list[RunningTask]]] = Listeners(
            log, "launcher: launched task listener"
        )
        # Called after an ACCEPT that went unanswered (the master may have taken it), with its
        # tasks, whose bookkeeping stays, and how long they are still taken as on their way
        # before reconciliation should ask about them. Must not block.
        self.unconfirmed_listeners: Listeners[[list[RunningTask], float]] = Listeners(
            log, "launcher: unconfirmed launch listener"
        )
        # Tasks killed for a REPLACE run (task id -> monotonic time the kill was sent).
        self._replacing: dict[str, float] = {}
        # The failover shards (job, item) the previous round found pending.
        self._failover_seen: set[tuple[str, int]] = set()

    @property
    def capacity(self) -> AgentCapacity:
        """What the known agents could ever offer (any thread)."""
        return self._census.capacity

    @property
    def declined(self) -> int:
        """Offers declined this term (any thread)."""
        return self._flow.declined

    def held_offers(self) -> int:
        """Offers held now, waiting for the next round (any thread)."""
        return len(self._offers)

    def unplaceable_jobs(self) -> dict[str, Unplaceable]:
        """Jobs whose pending run can never be placed on the known agents (any thread)."""
        return self._unplaceable.current()

    def stop(self) -> None:
        self._stop_thread()
        self._queues.stop()
        self._census.stop()
        self.drop_offers()

    def pause(self) -> None:
        self._paused = True

    def resume(self) -> None:
        self._paused = False
        self._wake.wake()

    # -- inputs (any thread) ----------------------------------------------------------------

    def wake(self) -> None:
        self._wake.wake()

    def wake_for_work(self) -> None:
        """A task ended, or a running node or job folder came or went (any thread, kazoo's
        included; never blocks). What that frees (the job's turn, a pool's slot, an agent's
        resources) only matters to work already pending, so the launcher wakes only when some
        is: work queued later wakes it when it comes. At 100 fires a second, waking for every
        end made 58 rounds a second, nearly all with nothing to place (issue 29)."""
        if self._queues.has_pending() or (self._workflows is not None and len(self._workflows)):
            self._wake.wake()

    def add_offers(self, offers: list[dict[str, Any]]) -> None:
        self._census.observe(self._offers.add(offers))
        self._wake.wake()

    def rescind(self, offer_id: str) -> None:
        self._offers.rescind(offer_id)

    def drop_offers(self) -> None:
        """Forget held offers (disconnected: Mesos discarded them)."""
        self._offers.clear()
        self._flow.reset()

    def agent_lost(self, agent_id: str) -> None:
        """Mesos says `agent_id` is gone (called on `sched-mesos-events`): its offers are void,
        its tasks' shards may come back as failover work, and the other agents' resources may
        be behind refuse filters this launcher's declines installed (up to IDLE_REFUSE_S / 6):
        revive once, so that the relaunch and the next fire do not wait for them (issue 24)."""
        self._offers.drop_agent(agent_id)
        self._flow.revive_later()
        self._census.read_soon()
        self._wake.wake()

    def on_connected(self) -> None:
        self._flow.reset()
        # Refuse filters a previous leader (or connection) declined with outlive it in the
        # master: revive once when there is work, or offers may not come for up to 30 s.
        self._flow.revive_later()
        self._census.read_soon()
        self._wake.wake()

    # -- the launcher thread ----------------------------------------------------------------

    def _interrupt(self) -> None:
        self._wake.wake()

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(self._fire_hold.idle_wait_s())
            self._wake.clear()
            if self._stopping.is_set():
                return
            if self._paused or not self._term.acting:
                continue
            try:
                self._round()
            except NotLeader:
                log.info("launcher: not acting; round abandoned")
            except Exception:
                log.exception("launcher: round failed")

    def _round(self) -> None:
        """One round, in the five steps of the module's docstring."""
        if not self._driver.connected.is_set():
            return
        self.rounds += 1
        clock = _RoundClock()
        self._census.refresh(self._offers.agents())
        work, unplaceable = self._gather()  # 1
        if all(u.kind is TaskType.READY and u.job.job_name in unplaceable for u in work):
            self._no_work()
            return
        self._revive_for_new_failover(work)
        self._flow.revive_for_work()
        slots = self._slots()
        if not slots:
            return
        clock.lap("gather")
        with collector_paused_for(len(work)):
            self._launch(work, unplaceable, slots, clock)

    def _launch(
        self,
        work: list[PlacementUnit],
        unplaceable: set[str],
        slots: dict[str, OfferSlot],
        clock: _RoundClock,
    ) -> None:
        """Steps 2 to 5 of a round that found work and offers."""
        placed, left_over = self._place(work, unplaceable, list(slots.values()))  # 2
        clock.lap("place")
        if placed:
            self.launching_listeners.emit([t.task_id for p in placed for t in p.launch.tasks])
        written = self._commit(placed, slots)  # 3
        clock.lap("commit")
        # A unit whose write was refused (a fire or a status update changed its nodes since
        # the view read them) is still pending: it is left over like a unit that did not fit,
        # or the long filter below would hold its offers back for 5 s (issue 24).
        left_over = left_over or len(written) < len(placed)
        used = self._accept(written, slots)  # 4
        clock.lap("accept")
        self._pools_launched(written, used)
        unused = [o for agent, s in slots.items() if agent not in used for o in s.offer_ids]
        self._flow.decline(unused, BUSY_REFUSE_S if left_over else IDLE_REFUSE_S / 6)  # 5
        clock.report(sum(len(unit.infos) for unit in written))

    def _revive_for_new_failover(self, work: list[PlacementUnit]) -> None:
        """Failover shards not seen in the previous round (a task just failed) revive offers
        once: the rounds before declined the other agents' offers with a filter (up to
        IDLE_REFUSE_S / 6), and the relaunch would wait behind it (issue 24)."""
        seen = {
            (unit.job.job_name, item)
            for unit in work
            if unit.kind is TaskType.FAILOVER
            for item in unit.items
        }
        if seen - self._failover_seen:
            self._flow.revive_later()
        self._failover_seen = seen

    def _no_work(self) -> None:
        """Nothing that can be placed is pending (runs that can never be placed are no work):
        hold what is offered for a coming cron fire, else decline it and suppress offers, to
        revive for the next real work (declining with a short filter instead would make the
        other jobs' runs wait for offers)."""
        if self._fire_hold.holding():
            # Hold what is offered for the coming fire (briefly: declined once it passed).
            self._flow.revive_for_fire()
            return
        self._flow.idle(self._offers.take())

    def _slots(self) -> dict[str, OfferSlot]:
        """The offers held, taken for this round: one slot per agent."""
        slots = offer_slots(self._offers.take())
        for slot in slots.values():
            self._census.capacity.observe_offer(slot.agent_id, slot.cpus, slot.mem_mb)
        return slots

    def _gather(self) -> tuple[list[PlacementUnit], set[str]]:
        """Step 1: the round's units, read from the view (stale work dropped, REPLACE kills
        sent), and the jobs among them whose run can never be placed."""
        self._queues.sync()
        gathered = self._read_view()
        self._tidy(gathered)
        self.ready_runs, self.failover_shards = gathered.ready_runs, gathered.failover_shards
        self._guard.retain(gathered.pending)
        self._unplaceable.retain(gathered.pending)
        unplaceable = {
            unit.job.job_name
            for unit in gathered.units
            if unit.kind is TaskType.READY
            and self._unplaceable.never_fits(unit.job, unit.app) is not None
        }
        # The concurrency pools (issue 28): the units their pools hold stay queued.
        units = self._pools.admit(gathered.units, unplaceable, self._unit_fire)
        return units, unplaceable

    def _unit_fire(self, unit: PlacementUnit) -> float:
        """A unit's logical fire (epoch seconds), which orders the pools' waiting units: a
        node fire's own, a READY run's or a failover shard's when known, else now."""
        if unit.workflow is not None:
            return unit.workflow[0].fire_time
        wall = time.time()
        original = next((e.original for e in unit.failover.values() if e.original), "")
        known = self._fire_time(unit, original, wall)
        return wall if known is None else known

    def _pools_launched(self, written: list[PlacedUnit], used: set[str]) -> None:
        """Tell the pools' admission what was written and which jobs in a pool launched."""
        tasks = [(t.task_id, t.pool, t.pool_slots) for p in written for t in p.launch.tasks]
        jobs = [
            p.launch.job_name
            for p in written
            if any(t.pool is not None and t.agent_id in used for t in p.launch.tasks)
        ]
        self._pools.launched(tasks, jobs)

    def _place(
        self, work: list[PlacementUnit], unplaceable: set[str], slots: list[OfferSlot]
    ) -> tuple[list[PlacedUnit], bool]:
        """Step 2: place the round's units on `slots` (no I/O): failover shards one by one, READY
        runs whole, the starvation guard holding younger runs back. Returns the units placed,
        with their bookkeeping and TaskInfos, and whether some work was left over."""
        placed: list[PlacedUnit] = []
        left_over = False
        now = time.monotonic()
        framework_id = self._framework_id()
        for unit in work:
            if unit.kind is TaskType.READY and unit.job.job_name in unplaceable:
                self._guard.missed(unit.job.job_name, now, can_ever_fit=False)
                continue  # passed over: holding the others back for it would stall them forever
            chosen = choose(unit, slots)
            if chosen is None:
                left_over = True
                if unit.kind is TaskType.READY:
                    waited = self._guard.missed(unit.job.job_name, now, can_ever_fit=True)
                    if waited is not None:
                        log.warning(
                            "launcher: job %s has waited %.0f s for resources; holding back "
                            "younger runs until it fits",
                            unit.job.job_name,
                            waited,
                        )
                        break
                continue
            if unit.kind is TaskType.READY:
                self._guard.placed(unit.job.job_name)
                self._unplaceable.placeable(unit.job.job_name)
            elif len(chosen) < len(unit.items):
                left_over = True
            placed.append(self._unit_placed(unit, chosen, framework_id))
        return placed, left_over

    def _unit_placed(
        self, unit: PlacementUnit, chosen: dict[int, OfferSlot], framework_id: str
    ) -> PlacedUnit:
        job, app = unit.job, unit.app
        wall = time.time()
        tasks: list[RunningTask] = []
        ids: list[TaskId] = []
        infos: list[tuple[str, dict[str, Any]]] = []
        originals: dict[str, str] = {}
        also: list[Op] = []
        for item, slot in sorted(chosen.items()):
            parsed = TaskId.new(job.job_name, item, unit.kind, slot.agent_id)
            ids.append(parsed)
            task_id = str(parsed)
            entry = unit.failover.get(item)
            originals[task_id] = (entry.original if entry is not None else "") or task_id
            fire = unit.workflow[0] if unit.workflow is not None else unit.relaunch.get(item)
            fire_time = self._fire_time(unit, entry.original if entry is not None else "", wall)
            tasks.append(
                RunningTask(
                    task_id,
                    slot.agent_id,
                    hostname=slot.hostname,
                    launched_at=wall,
                    workflow_fire=fire.key if fire is not None else "",
                    pool=job.pool,
                    pool_slots=job.pool_slots if job.pool is not None else 0,
                )
            )
            infos.append(
                (slot.agent_id, build_task_info(job, app, parsed, framework_id, fire, fire_time))
            )
            if fire is not None and unit.workflow is None:
                also.extend(relaunch_ops(fire, originals[task_id], task_id))
        requeue = None
        if unit.workflow is not None:
            fire, version = unit.workflow
            also.extend(launch_ops(fire, version, [t.task_id for t in tasks], len(tasks)))
            requeue = (fire.queue_path, fire.encode())
        launch = Launch(
            job.job_name,
            tuple(tasks),
            ready=unit.ready if unit.kind is TaskType.READY else None,
            requires=unit.requires if unit.kind is TaskType.READY else None,
            failover=tuple(unit.failover[item] for item in sorted(chosen) if item in unit.failover),
            creates_folder=not self._queues.has_running_folder(job.job_name),
            also=tuple(also),
            requeue=requeue,
        )
        relaunched = (
            {str(i): f for i in ids if (f := unit.relaunch.get(i.item))} if unit.relaunch else {}
        )
        return PlacedUnit(
            launch, ids, infos, originals, unit.workflow[0] if unit.workflow else None, relaunched
        )

    def _fire_time(self, unit: PlacementUnit, original: str, wall: float) -> float | None:
        """The fire a unit's shard runs for (epoch seconds; None: not known): a READY run's
        oldest fire queued this term, else its launch time; a failover shard its original
        task's fire, when this term launched it. A node fire carries its own."""
        source = self._fire_times
        if unit.kind is TaskType.READY:
            known = source.next_fire(unit.job.job_name) if source is not None else None
            return wall if known is None else known
        return source.fire_of(original) if source is not None and original else None

    def _commit(self, placed: list[PlacedUnit], slots: dict[str, OfferSlot]) -> list[PlacedUnit]:
        """Step 3: write the placed units' bookkeeping; returns those written (the others wait
        for the next round). Raises NotLeader or another SchedulerError: then nothing is
        launched, and the round's offers are given back rather than left outstanding."""
        if not placed:
            return []
        try:
            written = {id(launch) for launch in self._book.commit([p.launch for p in placed])}
        except SchedulerError:
            self._flow.decline([o for s in slots.values() for o in s.offer_ids], BUSY_REFUSE_S)
            raise
        done = [p for p in placed if id(p.launch) in written]
        if self._workflows is not None:
            self._workflows.drop([p.workflow.key for p in done if p.workflow is not None])
        return done

    def _accept(self, placed: list[PlacedUnit], slots: dict[str, OfferSlot]) -> set[str]:
        """Step 4: one ACCEPT per agent for the units written; the bookkeeping of the tasks of an
        agent whose ACCEPT was refused is undone, and only theirs. That of an agent whose
        ACCEPT went unanswered stays (the master may have taken it: undone, its runs would be
        launched again while Mesos runs them): reconciliation asks about those tasks once
        `UNCONFIRMED_GRACE_S` has passed, and a task Mesos never got comes back unknown and
        is launched again then, without a failure (`status`). Returns the agents whose
        offers were used, or may have been."""
        by_agent: dict[str, list[dict[str, Any]]] = {}
        for unit in placed:
            for agent, info in unit.infos:
                by_agent.setdefault(agent, []).append(info)
        failed: set[str] = set()
        used: set[str] = set()
        unconfirmed: set[str] = set()
        for agent, infos in by_agent.items():
            outcome = self._driver.accept(slots[agent].offer_ids, infos, BUSY_REFUSE_S)
            if outcome is AcceptOutcome.LAUNCHED:
                used.add(agent)
                self.launched += len(infos)
                self.last_launch_at = time.time()
                log.info(
                    "launcher: launched %s tasks on %s", len(infos), slots[agent].hostname or agent
                )
            elif outcome is AcceptOutcome.UNCONFIRMED:
                unconfirmed.add(agent)
                self.unconfirmed += len(infos)
                log.warning(
                    "launcher: launch of %s tasks on %s unconfirmed; their bookkeeping stays "
                    "and reconciliation asks about them in %g s",
                    len(infos),
                    slots[agent].hostname or agent,
                    UNCONFIRMED_GRACE_S,
                )
            else:
                failed.add(agent)
        if unconfirmed:
            self.unconfirmed_listeners.emit(
                [t for p in placed for t in p.launch.tasks if t.agent_id in unconfirmed],
                UNCONFIRMED_GRACE_S,
            )
        reached = used | unconfirmed
        confirmed: list[RunningTask] = []
        launched: list[LaunchedTask] = []
        for unit in placed:
            lost = {t.task_id for t in unit.launch.tasks if t.agent_id in failed}
            for task, parsed in zip(unit.launch.tasks, unit.ids, strict=True):
                if task.agent_id in reached:
                    node_fire = unit.workflow or unit.launch_fires.get(task.task_id)
                    if node_fire is not None and self._fire_times is not None:
                        self._fire_times.node_fire_launched(
                            task.task_id, node_fire.fire_time, node_fire.backfill_id
                        )
                    if task.agent_id in used:
                        confirmed.append(task)
                    launched.append(
                        LaunchedTask(parsed, task.agent_id, unit.originals[task.task_id])
                    )
            if not lost:
                continue
            others_launched = len(lost) < len(unit.launch.tasks)
            try:
                self._book.undo(unit.launch, lost, others_launched=others_launched)
                # `is not None`, not the queue's truth: an empty queue (this fire was its only
                # one, dropped at the commit) is falsy, and the fire would wait in ZooKeeper
                # unseen by this term, its workflow run stuck (a chaos test found it).
                if (
                    unit.workflow is not None
                    and not others_launched
                    and self._workflows is not None
                ):
                    self._workflows.add([unit.workflow])  # its entry is back: launched later
            except SchedulerError as exc:
                log.error(
                    "launcher: job %s: bookkeeping of tasks not launched kept (%s); "
                    "reconciliation will find them",
                    unit.launch.job_name,
                    exc.message,
                )
        if confirmed:
            self.launched_task_listeners.emit(confirmed)
        if launched:
            self.launch_listeners.emit(launched)
        return reached

    def _framework_id(self) -> str:
        info = self._driver.framework_info()
        return str(info.get("id", {}).get("value", ""))

    def _replace(self, job_name: str, task_ids: list[str]) -> None:
        """Kill the running tasks of `job_name` for its pending run (overlapPolicy REPLACE),
        each marked first so that its end is no failure; a kill unanswered is sent again."""
        now = time.monotonic()
        for task_id in task_ids:
            sent = self._replacing.get(task_id)
            if sent is not None and now - sent < REPLACE_RESEND_S:
                continue
            if self._stores.running.mark_killed(task_id, KILLED_BY_REPLACE) and self._driver.kill(
                task_id
            ):
                self._replacing[task_id] = now
                log.info(
                    "launcher: job %s: %s killed for a new run (overlapPolicy REPLACE)",
                    job_name,
                    task_id,
                )

    def _tidy(self, gathered: Gathered) -> None:
        """Drop what gather found stale (queued work of jobs deleted, disabled or shrunk, or
        a failover shard running again) and send the kills of REPLACE runs. The view may be a
        watch behind (a failover entry seen before the removal of the task it replaces), so
        each drop is checked against ZooKeeper first; these are rare."""
        stores = self._stores
        fresh: dict[str, JobConfig | None] = {}

        def job_of(name: str) -> JobConfig | None:
            if name not in fresh:
                try:
                    fresh[name] = stores.config.job(name)
                except SchedulerError:
                    fresh[name] = None  # unreadable: logged by the view
            return fresh[name]

        for job_name, item in gathered.tidy_failover:
            job = job_of(job_name)
            if item is None:
                if job is None:
                    stores.failover.remove_job(job_name)
                continue
            if job is None:
                continue  # dropped whole next round
            running = {t.parsed.item for t in stores.running.tasks(job_name)}
            if item >= job.sharding_total_count or (
                overlap_of(job) is not ALLOW and item in running
            ):
                stores.failover.remove(job_name, item)
        for job_name in gathered.tidy_ready:
            job = job_of(job_name)
            if job is None or stores.is_disabled(job):
                stores.ready.remove(job_name)
        alive = {t for ids in gathered.replace.values() for t in ids}
        self._replacing = {t: sent for t, sent in self._replacing.items() if t in alive}
        for job_name, task_ids in gathered.replace.items():
            self._replace(job_name, task_ids)

    def _read_view(self) -> Gathered:
        """What this round could launch, read from the view only (no ZooKeeper read but the
        configuration of jobs and apps seen for the first time)."""
        queues = self._queues
        pending = queues.ready_entries()
        ready = {job: (count, version) for job, (count, version, _r) in pending.items()}
        entries = queues.failover()
        node_fires = self._workflows.pending() if self._workflows is not None else []
        names = set(ready) | {e.job_name for e in entries} | {f.job for f, _v in node_fires}
        jobs = queues.jobs(sorted(names))
        apps = queues.apps(sorted({j.app_name for j in jobs.values() if j is not None}))
        gathered = Gathered(
            [], set(ready), sum(count for count, _v in ready.values()), len(entries)
        )
        running: dict[str, list[str]] = {}

        def running_of(name: str) -> list[str]:
            if name not in running:
                running[name] = queues.running_tasks(name)
            return running[name]

        failover: dict[str, PlacementUnit] = {}
        held_back: set[str] = set()
        wall = time.time()
        for entry in entries:
            job_name, item = entry.job_name, entry.item
            job = jobs.get(job_name)
            if job is None:
                if (job_name, None) not in gathered.tidy_failover:
                    gathered.tidy_failover.append((job_name, None))
                continue
            relaunched = overlap_of(job) is not ALLOW and item in items_of(running_of(job_name))
            if relaunched or item >= job.sharding_total_count:
                gathered.tidy_failover.append((job_name, item))
                continue
            app = apps.get(job.app_name)
            if app is None or queues.is_disabled(job):
                continue
            if entry.not_before > wall:
                held_back.add(job_name)  # failing again and again: back-off (the 1 s tick)
                continue
            unit = failover.get(job_name)
            if unit is None:
                unit = failover[job_name] = PlacementUnit(TaskType.FAILOVER, job, app, [])
                gathered.units.append(unit)
            unit.items.append(item)
            unit.failover[item] = entry
            if node_fires or self._workflows is not None:
                fire = self._node_fire_of(entry.original)
                if fire is not None:
                    unit.relaunch[item] = fire
        waiting: list[tuple[float, PlacementUnit]] = []
        now = time.monotonic()
        for job_name, counted in ready.items():
            job = jobs.get(job_name)
            if job is None:
                gathered.tidy_ready.append(job_name)
                continue
            if job_name in failover or job_name in held_back:
                continue  # its failover shards go first
            if overlap_of(job) is not ALLOW and running_of(job_name):
                if overlap_of(job) is REPLACE and not queues.is_disabled(job):
                    gathered.replace[job_name] = running_of(job_name)
                continue  # FORBID: a run at a time; REPLACE: once the killed tasks are gone
            if queues.is_disabled(job):
                gathered.tidy_ready.append(job_name)
                continue
            app = apps.get(job.app_name)
            if app is None:
                continue
            items = list(range(job.sharding_total_count))
            unit = PlacementUnit(
                TaskType.READY, job, app, items, ready=counted, requires=pending[job_name][2]
            )
            waiting.append((self._guard.waiting_since(job_name, now), unit))
        waiting.sort(key=lambda pair: pair[0])
        gathered.units.extend(unit for _, unit in waiting)
        self._gather_node_fires(gathered, node_fires, jobs, apps, failover, running_of)
        return gathered

    def _gather_node_fires(
        self,
        gathered: Gathered,
        node_fires: list[tuple[NodeFire, int]],
        jobs: dict[str, JobConfig | None],
        apps: dict[str, AppConfig | None],
        failover: dict[str, PlacementUnit],
        running_of: Callable[[str], list[str]],
    ) -> None:
        """Workflow node fires as READY units of their jobs, oldest fire first, after the
        jobs' own runs. A fire waits while its job's failover shards go first, while the job
        runs or another run of it is placed this round (unless overlapPolicy ALLOW), and while
        the job or its app is disabled or gone (the workflow engine fails such a node)."""
        taken = {u.job.job_name for u in gathered.units if u.kind is TaskType.READY}
        for fire, version in node_fires:
            job = jobs.get(fire.job)
            if job is None or fire.job in failover or self._queues.is_disabled(job):
                continue
            app = apps.get(job.app_name)
            if app is None or job.execution_type is not JobExecutionType.TRANSIENT:
                continue
            exclusive = overlap_of(job) is not ALLOW
            if exclusive and (running_of(fire.job) or fire.job in taken):
                continue
            taken.add(fire.job)
            gathered.units.append(
                PlacementUnit(
                    TaskType.READY,
                    job,
                    app,
                    list(range(job.sharding_total_count)),
                    workflow=(fire, version),
                )
            )

    def _node_fire_of(self, original: str) -> NodeFire | None:
        """The workflow node fire a failed task ran for (its failover relaunch runs for it
        too); None when it ran for none."""
        if original not in self._fire_of:
            if len(self._fire_of) >= 10_000:
                self._fire_of.clear()
            self._fire_of[original] = fire_of_task(self._stores.registry, original)
        return self._fire_of[original]


SLOW_ROUND_S = 0.25


class _RoundClock:
    """A round's steps, timed: a round slower than `SLOW_ROUND_S` is logged with where its
    time went (a burst of thousands of runs, or a slow ZooKeeper or master), each step's wall
    time with the launcher thread's own CPU time in it (the rest: waiting for ZooKeeper, the
    master, or a CPU)."""

    def __init__(self) -> None:
        self._start = self._last = time.monotonic()
        self._start_cpu = self._last_cpu = time.thread_time()
        self._laps: list[tuple[str, float, float]] = []

    def lap(self, step: str) -> None:
        now, cpu = time.monotonic(), time.thread_time()
        self._laps.append((step, now - self._last, cpu - self._last_cpu))
        self._last, self._last_cpu = now, cpu

    def report(self, tasks: int) -> None:
        took = time.monotonic() - self._start
        if took >= SLOW_ROUND_S:
            cpu = time.thread_time() - self._start_cpu
            steps = ", ".join(
                f"{step} {seconds * 1000:.0f} ms (cpu {used * 1000:.0f})"
                for step, seconds, used in self._laps
            )
            log.info(
                "launcher: round of %s tasks took %.0f ms, cpu %.0f ms (%s)",
                tasks,
                took * 1000,
                cpu * 1000,
                steps,
            )

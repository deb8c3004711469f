"""The task launcher: matches pending work with held offers, event driven.

It wakes when offers arrive, when the queues change (its view of them, `QueueCache`, is kept by
ZooKeeper watches: cron fires, triggers, failovers, finished tasks) and once a second. A round
goes through five steps, and nothing passes from one round to the next but the offers held,
the starvation guard and what is known of the agents:

1. gather (read only, from the view): failover shards first, then READY runs oldest first; only
   jobs with pending work are looked at, so a round costs nothing per idle job;
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
   launched, so that no task ever runs unrecorded; a unit whose write fails waits for the next
   round;
4. accept: one ACCEPT per agent with the units written; when one fails, only the bookkeeping
   of that agent's tasks is undone (a run whose other tasks Mesos took has its missing shards
   queued for failover, never launched twice);
5. decline the offers not used, with a filter. With no work the framework suppresses offers
   and revives when work comes back (the original hoarded offers and starved other
   frameworks).

What the agents could ever offer (`capacity`) comes from the offers seen and from the master's
`GET_AGENTS`, read on the short-lived `sched-agents` thread after each (re)connection, when an
unreported agent offers, and every `AGENTS_REFRESH_S`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from http.client import HTTPException
from typing import Any, Protocol

from scheduler.leader.lifecycle import Listeners, TermView, ThreadedComponent, WakeSignal
from scheduler.leader.mesos.capacity import AgentCapacity, Unplaceable
from scheduler.leader.mesos.launch_round import (
    Gathered,
    PlacedUnit,
    PlacementUnit,
    choose,
    items_of,
    offer_slots,
    overlap_of,
    scalar,
)
from scheduler.leader.mesos.placement import OfferSlot, StarvationGuard
from scheduler.leader.mesos.taskinfo import build_task_info
from scheduler.model.config.job import JobConfig
from scheduler.model.config.policies import OverlapPolicy
from scheduler.model.errors import NotLeader, SchedulerError
from scheduler.model.task_id import TaskId, TaskType
from scheduler.storage.launch_book import Launch, LaunchBook
from scheduler.storage.queue_cache import QueueCache
from scheduler.storage.state import KILLED_BY_REPLACE, RunningTask
from scheduler.storage.term_stores import TermStores

log = logging.getLogger(__name__)

STARVATION_S = 30.0
IDLE_REFUSE_S = 30.0
BUSY_REFUSE_S = 1.0
AGENTS_RETRY_S = 30.0
AGENTS_REFRESH_S = 300.0
AGENTS_TIMEOUT_S = 5.0
REPLACE_RESEND_S = 10.0
# Offers are revived this long before the next cron fire and held until this long after it
# (its runs are queued by then), so that they launch at once instead of waiting for a revive
# and an offer.
FIRE_AHEAD_S = 1.0
FIRE_GRACE_S = 1.0
_QUIET_LOG_S = 60.0
ALLOW, REPLACE = OverlapPolicy.ALLOW, OverlapPolicy.REPLACE


class OfferDriver(Protocol):
    """What the launcher asks of the term's Mesos driver (`MesosDriver` is one). Each call
    returns False, having logged why, when it did not reach the master."""

    @property
    def connected(self) -> threading.Event:
        """Set while subscribed to a master."""
        ...

    def accept(self, offer_ids: list[str], tasks: list[dict[str, Any]], refuse_s: float) -> bool:
        """Launch `tasks` on the offers of one agent, declining what they leave."""
        ...

    def decline(self, offer_ids: list[str], refuse_s: float) -> bool:
        """Decline offers, not offered again for `refuse_s`."""
        ...

    def revive(self) -> bool:
        """Ask for offers again after `suppress`."""
        ...

    def suppress(self) -> bool:
        """Ask for no more offers until `revive`."""
        ...

    def kill(self, task_id: str) -> bool:
        """Ask Mesos to kill a task."""
        ...

    def framework_info(self) -> dict[str, Any]:
        """The `FrameworkInfo` the driver subscribes with (its `id` once Mesos assigned one)."""
        ...

    def agent_totals(self, timeout_s: float = 5.0) -> dict[str, tuple[float, float]]:
        """Each agent's total (cpus, mem MB) from the master; raises OSError or ValueError."""
        ...


class Launcher(ThreadedComponent):
    name = "task-launcher"
    thread_name = "sched-launcher"

    def __init__(
        self,
        stores: TermStores,
        term: TermView,
        driver: OfferDriver,
        view: QueueCache | None = None,
        *,
        wake: WakeSignal | None = None,
        next_fire: Callable[[], float | None] | None = None,
    ) -> None:
        """`driver`: the term's Mesos driver, which hands this launcher its offers
        (`add_offers`, `rescind`, `drop_offers`, `on_connected`). `view`: the term's view of the
        queues, shared with the producer, built with `wake.wake` as its `on_change` (the
        launcher wakes on its changes, and stops it); a view of its own when None. `wake`: the
        signal the launcher's thread waits on, which the producer and the status handler are
        given to wake it; a signal of its own when None.
        `next_fire`: when the next cron fire is due (epoch seconds; None: none), from the
        producer; any thread may call it and it must not block. None: no fire is known."""
        super().__init__()
        if stores.fence is None:
            raise ValueError("the launcher writes: it needs term stores with the term's fence")
        self._stores = stores
        self._term = term
        self._driver = driver
        self._wake = wake if wake is not None else WakeSignal()
        # A view given is built to wake the launcher (`on_change`), as this one is.
        self._cache = view or QueueCache(stores.registry, stores.config, self._wake.wake)
        self._book = LaunchBook(stores.registry, stores.fence, self._cache)
        self._lock = threading.Lock()
        self._offers: dict[str, dict[str, Any]] = {}
        self._paused = False
        self._suppressed = False
        self._revive_needed = False
        self._guard = StarvationGuard(STARVATION_S)
        self.launched = 0
        # For /metrics: offers declined, and the queues as the last round read them.
        self.declined = 0
        self.ready_runs = 0
        self.failover_shards = 0
        self.last_launch_at: float = 0.0
        # Called after each successful ACCEPT, per task: (task id, agent id, original task id:
        # the failed task a failover launch replaces, else the task itself). Must not block.
        self.launch_listeners: Listeners[[str, str, str]] = Listeners(
            log, "launcher: launch listener"
        )
        self._fire_source = next_fire
        self._next_fire_at: float | None = None
        self._next_fire_read = -1e18
        self._hold_until = 0.0
        self._quiet_until = -1e18
        self.capacity = AgentCapacity()
        # Jobs with a pending run that can never be placed; replaced, never mutated, so that
        # other threads read it without a lock.
        self._unplaceable: dict[str, Unplaceable] = {}
        self._fit_cache: dict[str, tuple[tuple[object, ...], Unplaceable | None]] = {}
        self._pending: set[str] = set()
        # Tasks killed for a REPLACE run (task id -> monotonic time the kill was sent).
        self._replacing: dict[str, float] = {}
        self._agents_thread: threading.Thread | None = None
        self._agents_due = True
        self._agents_tried_at = -1e18
        self._agents_read_at = -1e18
        self._agents_failing = False

    def held_offers(self) -> int:
        """Offers held now, waiting for the next round (any thread)."""
        with self._lock:
            return len(self._offers)

    def unplaceable_jobs(self) -> dict[str, Unplaceable]:
        """Jobs whose pending run can never be placed on the known agents (any thread)."""
        return self._unplaceable

    def stop(self) -> None:
        self._stop_thread()
        self._cache.stop()
        agents = self._agents_thread
        if agents is not None:
            # It only reads the master and writes `capacity`, so one still waiting on a slow
            # master may finish on its own; the leader hand-over does not wait for it.
            agents.join(0.5)
            if agents.is_alive():
                log.warning("launcher: thread sched-agents still reading the Mesos master")
            self._agents_thread = None
        self.drop_offers()

    def pause(self) -> None:
        self._paused = True

    def resume(self) -> None:
        self._paused = False
        self._wake.wake()

    # -- inputs (any thread) ----------------------------------------------------------------

    def wake(self) -> None:
        self._wake.wake()

    def add_offers(self, offers: list[dict[str, Any]]) -> None:
        offered: dict[str, tuple[float, float]] = {}
        with self._lock:
            for offer in offers:
                self._offers[offer["id"]["value"]] = offer
                cpus, mem = offered.get(offer["agent_id"]["value"], (0.0, 0.0))
                offered[offer["agent_id"]["value"]] = (
                    cpus + scalar(offer, "cpus"),
                    mem + scalar(offer, "mem"),
                )
        for agent, (cpus, mem) in offered.items():
            self.capacity.observe_offer(agent, cpus, mem)
        self._wake.wake()

    def rescind(self, offer_id: str) -> None:
        with self._lock:
            self._offers.pop(offer_id, None)

    def drop_offers(self) -> None:
        """Forget held offers (disconnected: Mesos discarded them)."""
        with self._lock:
            self._offers.clear()
        self._suppressed = False

    def agent_lost(self, agent_id: str) -> None:
        """Mesos says `agent_id` is gone (called on `sched-mesos-events`): its offers are void,
        its tasks' shards may come back as failover work, and the other agents' resources may
        be behind refuse filters this launcher's declines installed (up to IDLE_REFUSE_S / 6):
        revive once, so that the relaunch and the next fire do not wait for them (issue 24)."""
        with self._lock:
            for offer_id in [
                o for o, offer in self._offers.items() if offer["agent_id"]["value"] == agent_id
            ]:
                del self._offers[offer_id]
        self._revive_needed = True
        self._agents_due = True
        self._wake.wake()

    def on_connected(self) -> None:
        self._suppressed = False
        # Refuse filters a previous leader (or connection) declined with outlive it in the
        # master: revive once when there is work, or offers may not come for up to 30 s.
        self._revive_needed = True
        self._agents_due = True
        self._wake.wake()

    # -- the launcher thread ----------------------------------------------------------------

    def _interrupt(self) -> None:
        self._wake.wake()

    def _next_fire(self) -> float | None:
        """The next cron fire (epoch seconds), asked of the producer at most 4 times a
        second."""
        source = self._fire_source
        if source is None:
            return None
        now = time.monotonic()
        due = self._next_fire_at is not None and self._next_fire_at <= time.time()
        if due or now - self._next_fire_read >= 0.25:
            try:
                self._next_fire_at = source()
            except Exception:
                log.exception("launcher: cannot tell when the next fire is")
                self._next_fire_at = None
            self._next_fire_read = now
        return self._next_fire_at

    def _holding(self) -> bool:
        """Whether offers are held now: a cron fire is due within `FIRE_AHEAD_S`, or was due
        less than `FIRE_GRACE_S` ago."""
        now = time.time()
        when = self._next_fire()
        if when is not None and when - now <= FIRE_AHEAD_S:
            self._hold_until = max(self._hold_until, when + FIRE_GRACE_S)
        return now < self._hold_until

    def _idle_wait_s(self) -> float:
        """How long the thread sleeps without a wake: a second, or less to revive in time
        for the next fire or to decline what it held once the fire has passed."""
        now = time.time()
        if now < self._hold_until:
            return min(1.0, max(0.01, self._hold_until - now))
        when = self._next_fire()
        if when is None:
            return 1.0
        return min(1.0, max(0.01, when - FIRE_AHEAD_S - now))

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(self._idle_wait_s())
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

    def _take_offers(self) -> list[dict[str, Any]]:
        with self._lock:
            offers = list(self._offers.values())
            self._offers.clear()
        return offers

    def _round(self) -> None:
        driver = self._driver
        if not driver.connected.is_set():
            return
        self._refresh_agents(driver)
        self._cache.sync()
        gathered = self._gather()
        self._tidy(gathered)
        self.ready_runs, self.failover_shards = gathered.ready_runs, gathered.failover_shards
        work = gathered.units
        self._guard.retain(gathered.pending)
        for name in [n for n in self._fit_cache if n not in gathered.pending]:
            del self._fit_cache[name]
        if any(name not in gathered.pending for name in self._unplaceable):
            self._unplaceable = {
                n: u for n, u in self._unplaceable.items() if n in gathered.pending
            }
        # Runs that can never be placed are no work: with nothing else pending the framework
        # suppresses offers and revives for the next real work, as when idle (declining with a
        # short filter instead would make the other jobs' runs wait for offers).
        unplaceable = {
            unit.job.job_name
            for unit in work
            if unit.kind is TaskType.READY and self._never_fits(unit) is not None
        }
        if all(u.kind is TaskType.READY and u.job.job_name in unplaceable for u in work):
            if self._holding():
                # Hold what is offered for the coming fire (briefly: declined once it passed).
                if (self._suppressed or self._revive_needed) and driver.revive():
                    self._suppressed = self._revive_needed = False
                    log.debug("launcher: offers revived for the next fire")
                return
            offers = self._take_offers()
            if offers:
                if driver.decline([o["id"]["value"] for o in offers], IDLE_REFUSE_S):
                    self.declined += len(offers)
            if not self._suppressed and driver.suppress():
                self._suppressed = True
                # At INFO once a minute at most: with frequent fires this follows each one.
                now = time.monotonic()
                loud = now >= self._quiet_until
                if loud:
                    self._quiet_until = now + _QUIET_LOG_S
                log.log(
                    logging.INFO if loud else logging.DEBUG,
                    "launcher: no pending work that can be placed; offers suppressed",
                )
            return
        if self._suppressed or self._revive_needed:
            if driver.revive():
                self._suppressed = self._revive_needed = False
                log.info("launcher: work pending; offers revived")
        offers = self._take_offers()
        if not offers:
            return
        slots = offer_slots(offers)
        for slot in slots.values():
            self.capacity.observe_offer(slot.agent_id, slot.cpus, slot.mem_mb)
        placed, left_over = self._place(work, unplaceable, list(slots.values()))
        try:
            placed = self._commit(placed)
        except SchedulerError:
            # Nothing launched: give the offers back rather than leave them outstanding.
            if driver.decline([o for s in slots.values() for o in s.offer_ids], BUSY_REFUSE_S):
                self.declined += len(offers)
            raise
        used = self._accept(driver, placed, slots)
        unused = [o for agent, s in slots.items() if agent not in used for o in s.offer_ids]
        if unused:
            if driver.decline(unused, BUSY_REFUSE_S if left_over else IDLE_REFUSE_S / 6):
                self.declined += len(unused)

    def _place(
        self, work: list[PlacementUnit], unplaceable: set[str], slots: list[OfferSlot]
    ) -> tuple[list[PlacedUnit], bool]:
        """Place the round's units on `slots` (no I/O): failover shards one by one, READY
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
                self._placeable(unit.job.job_name)
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
        infos: list[tuple[str, dict[str, Any]]] = []
        originals: dict[str, str] = {}
        for item, slot in sorted(chosen.items()):
            parsed = TaskId.new(job.job_name, item, unit.kind, slot.agent_id)
            task_id = str(parsed)
            tasks.append(
                RunningTask(task_id, slot.agent_id, hostname=slot.hostname, launched_at=wall)
            )
            infos.append((slot.agent_id, build_task_info(job, app, parsed, framework_id)))
            entry = unit.failover.get(item)
            originals[task_id] = (entry.original if entry is not None else "") or task_id
        launch = Launch(
            job.job_name,
            tuple(tasks),
            ready=unit.ready if unit.kind is TaskType.READY else None,
            requires=unit.requires if unit.kind is TaskType.READY else None,
            failover=tuple(unit.failover[item] for item in sorted(chosen) if item in unit.failover),
            creates_folder=not self._cache.has_running_folder(job.job_name),
        )
        return PlacedUnit(launch, infos, originals)

    def _commit(self, placed: list[PlacedUnit]) -> list[PlacedUnit]:
        """Write the placed units' bookkeeping; returns those written (the others wait for
        the next round). Raises NotLeader: then nothing is launched."""
        if not placed:
            return []
        written = {id(launch) for launch in self._book.commit([p.launch for p in placed])}
        return [p for p in placed if id(p.launch) in written]

    def _accept(
        self, driver: OfferDriver, placed: list[PlacedUnit], slots: dict[str, OfferSlot]
    ) -> set[str]:
        """One ACCEPT per agent for the units written; the bookkeeping of the tasks of an
        agent whose ACCEPT failed is undone, and only theirs. Returns the agents whose
        offers were used."""
        by_agent: dict[str, list[dict[str, Any]]] = {}
        for unit in placed:
            for agent, info in unit.infos:
                by_agent.setdefault(agent, []).append(info)
        failed: set[str] = set()
        used: set[str] = set()
        for agent, infos in by_agent.items():
            if driver.accept(slots[agent].offer_ids, infos, BUSY_REFUSE_S):
                used.add(agent)
                self.launched += len(infos)
                self.last_launch_at = time.time()
                log.info(
                    "launcher: launched %s tasks on %s", len(infos), slots[agent].hostname or agent
                )
            else:
                failed.add(agent)
        for unit in placed:
            lost = {t.task_id for t in unit.launch.tasks if t.agent_id in failed}
            for task in unit.launch.tasks:
                if task.agent_id in used:
                    self.launch_listeners.emit(
                        task.task_id, task.agent_id, unit.originals[task.task_id]
                    )
            if not lost:
                continue
            try:
                self._book.undo(
                    unit.launch, lost, others_launched=len(lost) < len(unit.launch.tasks)
                )
            except SchedulerError as exc:
                log.error(
                    "launcher: job %s: bookkeeping of tasks not launched kept (%s); "
                    "reconciliation will find them",
                    unit.launch.job_name,
                    exc.message,
                )
        return used

    # -- runs that can never be placed -------------------------------------------------------

    def _never_fits(self, unit: PlacementUnit) -> Unplaceable | None:
        """Whether `unit`'s run can never be placed on the known agents; reports it once."""
        job, app = unit.job, unit.app
        key = (
            self.capacity.version,
            job.cpu_count,
            job.memory_mb,
            job.sharding_total_count,
            job.job_type,
            job.execution_type,
            app.cpu_count,
            app.memory_mb,
        )
        cached = self._fit_cache.get(job.job_name)
        if cached is not None and cached[0] == key:
            found = cached[1]
        else:
            found = self.capacity.check(job, app)
            self._fit_cache[job.job_name] = (key, found)
        if found is None:
            self._placeable(job.job_name)
            return None
        if self._unplaceable.get(job.job_name) != found:
            log.warning("launcher: %s; its runs wait and do not hold back others", found.reason)
            self._unplaceable = {**self._unplaceable, job.job_name: found}
        return found

    def _placeable(self, job_name: str) -> None:
        if job_name in self._unplaceable:
            log.info("launcher: job %s can be placed again", job_name)
            self._unplaceable = {n: u for n, u in self._unplaceable.items() if n != job_name}

    # -- what the agents could offer ---------------------------------------------------------

    def _refresh_agents(self, driver: OfferDriver) -> None:
        """Start `sched-agents` to read the agents' totals when due (launcher thread)."""
        if self._agents_thread is not None and self._agents_thread.is_alive():
            return
        now = time.monotonic()
        with self._lock:
            held = list({o["agent_id"]["value"] for o in self._offers.values()})
        due = (
            self._agents_due
            or now - self._agents_read_at >= AGENTS_REFRESH_S
            or self.capacity.unreported(held)
        )
        if not due or (not self._agents_due and now - self._agents_tried_at < AGENTS_RETRY_S):
            return
        self._agents_due = False
        self._agents_tried_at = now
        self._agents_thread = threading.Thread(
            target=self._read_agents, args=(driver,), name="sched-agents", daemon=True
        )
        self._agents_thread.start()

    def _read_agents(self, driver: OfferDriver) -> None:
        try:
            totals = driver.agent_totals(AGENTS_TIMEOUT_S)
        except (OSError, ValueError, HTTPException) as exc:
            if not self._agents_failing:
                log.warning(
                    "launcher: cannot read the agents' totals from the Mesos master (%s); "
                    "using the largest offers seen",
                    exc,
                )
            self._agents_failing = True
            self.capacity.offers_only()
            self._wake.wake()
            return
        except Exception:
            log.exception("launcher: reading the agents' totals failed")
            return
        self._agents_failing = False
        before = self.capacity.version
        self.capacity.set_reported(totals)
        self._agents_read_at = time.monotonic()
        if self.capacity.version != before:
            agents = self.capacity.agents()
            log.info(
                "launcher: %s Mesos agents known; at most %s cpus and %s MB on one",
                len(agents),
                max((a.cpus for a in agents), default=0.0),
                max((a.mem_mb for a in agents), default=0.0),
            )
        self._wake.wake()

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

    def _gather(self) -> Gathered:
        """What this round could launch, read from the view only (no ZooKeeper read but the
        configuration of jobs and apps seen for the first time)."""
        cache = self._cache
        pending = cache.ready_entries()
        ready = {job: (count, version) for job, (count, version, _r) in pending.items()}
        entries = cache.failover()
        names = set(ready) | {e.job_name for e in entries}
        jobs = cache.jobs(sorted(names))
        apps = cache.apps(sorted({j.app_name for j in jobs.values() if j is not None}))
        gathered = Gathered(
            [], set(ready), sum(count for count, _v in ready.values()), len(entries)
        )
        running: dict[str, list[str]] = {}

        def running_of(name: str) -> list[str]:
            if name not in running:
                running[name] = cache.running_tasks(name)
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
            if app is None or cache.is_disabled(job):
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
                if overlap_of(job) is REPLACE and not cache.is_disabled(job):
                    gathered.replace[job_name] = running_of(job_name)
                continue  # FORBID: a run at a time; REPLACE: once the killed tasks are gone
            if cache.is_disabled(job):
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
        return gathered

"""The task launcher: matches pending work with held offers, event driven.

It wakes when offers arrive, when work is queued (cron fires, triggers, failovers, finished
tasks) and once a second while it holds offers. Each round: failover shards first (placed one
by one), then READY runs oldest first, each all-or-nothing. A READY run that does not fit is
skipped; once the oldest one has waited `STARVATION_S`, younger READY runs stop being placed
so that freed resources accumulate for it (no starvation of big jobs by small ones). A run that
could not be placed even with every known agent's resources free (a task bigger than the
largest agent, or more tasks than the agents hold together) is reported once (a WARNING, and
`unplaceable_jobs()` for the metrics) and passed over: it holds no younger run back (that would
stall them forever) and counts as no work. Offers not used are declined with a filter; with no
work the framework suppresses offers and revives when work comes back (the original hoarded
offers and starved other frameworks).

What the agents could ever offer (`capacity`) comes from the offers seen and from the master's
`GET_AGENTS`, read on the short-lived `sched-agents` thread after each (re)connection, when an
unreported agent offers, and every `AGENTS_REFRESH_S`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.client import HTTPException
from typing import Any

from executor.taskdata import executor_id
from scheduler.leader.lifecycle import TermView, ThreadedComponent
from scheduler.leader.mesos.capacity import AgentCapacity, Unplaceable, shards_for
from scheduler.leader.mesos.driver import MesosDriver
from scheduler.leader.mesos.placement import OfferSlot, StarvationGuard, place
from scheduler.leader.mesos.taskinfo import build_task_info
from scheduler.model.config.app import AppConfig
from scheduler.model.config.job import JobConfig, JobExecutionType
from scheduler.model.config.policies import OverlapPolicy
from scheduler.model.errors import NotLeader, SchedulerError
from scheduler.model.task_id import TaskId, TaskType
from scheduler.storage.facade import StateFacade
from scheduler.storage.state import KILLED_BY_REPLACE, RunningTask

log = logging.getLogger(__name__)

STARVATION_S = 30.0
IDLE_REFUSE_S = 30.0
BUSY_REFUSE_S = 1.0
AGENTS_RETRY_S = 30.0
AGENTS_REFRESH_S = 300.0
AGENTS_TIMEOUT_S = 5.0
REPLACE_RESEND_S = 10.0
ALLOW, REPLACE = OverlapPolicy.ALLOW, OverlapPolicy.REPLACE


def _overlap(job: JobConfig) -> OverlapPolicy:
    """The job's overlap policy; a daemon job's runs never overlap, whatever was stored."""
    if job.execution_type is not JobExecutionType.TRANSIENT:
        return OverlapPolicy.FORBID
    return job.overlap


@dataclass
class _Unit:
    kind: TaskType
    job: JobConfig
    app: AppConfig
    items: list[int]
    originals: dict[int, str] = field(default_factory=dict)


def _scalar(offer: dict[str, Any], name: str) -> float:
    total = 0.0
    for res in offer.get("resources", []):
        if res.get("name") == name and res.get("type", "SCALAR") == "SCALAR":
            total += float(res.get("scalar", {}).get("value", 0.0))
    return total


def _undo_running(facade: StateFacade, task_id: str) -> Callable[[], None]:
    return lambda: facade.running.remove(task_id)


def _undo_failover(facade: StateFacade, original: str) -> Callable[[], None]:
    def undo() -> None:
        if original:
            facade.failover.add(original)

    return undo


def _undo_ready(facade: StateFacade, job_name: str) -> Callable[[], None]:
    def undo() -> None:
        facade.ready.add_transient(job_name, True)

    return undo


class Launcher(ThreadedComponent):
    name = "task-launcher"
    thread_name = "sched-launcher"

    def __init__(
        self, facade: StateFacade, term: TermView, driver: Callable[[], MesosDriver | None]
    ) -> None:
        super().__init__()
        self._facade = facade
        self._term = term
        self._driver = driver
        self._lock = threading.Lock()
        self._offers: dict[str, dict[str, Any]] = {}
        self._wake = threading.Event()
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
        self.launch_listeners: list[Callable[[str, str, str], None]] = []
        self._originals: dict[str, str] = {}
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
        self._wake.set()

    # -- inputs (any thread) ----------------------------------------------------------------

    def wake(self) -> None:
        self._wake.set()

    def add_offers(self, offers: list[dict[str, Any]]) -> None:
        offered: dict[str, tuple[float, float]] = {}
        with self._lock:
            for offer in offers:
                self._offers[offer["id"]["value"]] = offer
                cpus, mem = offered.get(offer["agent_id"]["value"], (0.0, 0.0))
                offered[offer["agent_id"]["value"]] = (
                    cpus + _scalar(offer, "cpus"),
                    mem + _scalar(offer, "mem"),
                )
        for agent, (cpus, mem) in offered.items():
            self.capacity.observe_offer(agent, cpus, mem)
        self._wake.set()

    def rescind(self, offer_id: str) -> None:
        with self._lock:
            self._offers.pop(offer_id, None)

    def drop_offers(self) -> None:
        """Forget held offers (disconnected: Mesos discarded them)."""
        with self._lock:
            self._offers.clear()
        self._suppressed = False

    def on_connected(self) -> None:
        self._suppressed = False
        # Refuse filters a previous leader (or connection) declined with outlive it in the
        # master: revive once when there is work, or offers may not come for up to 30 s.
        self._revive_needed = True
        self._agents_due = True
        self._wake.set()

    # -- the launcher thread ----------------------------------------------------------------

    def _interrupt(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(1.0)
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
        self._originals.clear()
        driver = self._driver()
        if driver is None or not driver.connected.is_set():
            return
        self._refresh_agents(driver)
        work = self._gather()
        self._guard.retain(self._pending)
        for name in [n for n in self._fit_cache if n not in self._pending]:
            del self._fit_cache[name]
        if any(name not in self._pending for name in self._unplaceable):
            self._unplaceable = {n: u for n, u in self._unplaceable.items() if n in self._pending}
        # Runs that can never be placed are no work: with nothing else pending the framework
        # suppresses offers and revives for the next real work, as when idle (declining with a
        # short filter instead would make the other jobs' runs wait for offers).
        unplaceable = {
            unit.job.job_name
            for unit in work
            if unit.kind is TaskType.READY and self._never_fits(unit) is not None
        }
        if all(u.kind is TaskType.READY and u.job.job_name in unplaceable for u in work):
            offers = self._take_offers()
            if offers:
                if driver.decline([o["id"]["value"] for o in offers], IDLE_REFUSE_S):
                    self.declined += len(offers)
            if not self._suppressed and driver.suppress():
                self._suppressed = True
                log.info("launcher: no pending work that can be placed; offers suppressed")
            return
        if self._suppressed or self._revive_needed:
            if driver.revive():
                self._suppressed = self._revive_needed = False
                log.info("launcher: work pending; offers revived")
        offers = self._take_offers()
        if not offers:
            return
        slots: dict[str, OfferSlot] = {}
        for offer in offers:
            agent = offer["agent_id"]["value"]
            slot = slots.get(agent)
            if slot is None:
                slot = slots[agent] = OfferSlot(agent, offer.get("hostname", ""), [], 0.0, 0.0)
            slot.offer_ids.append(offer["id"]["value"])
            slot.cpus += _scalar(offer, "cpus")
            slot.mem_mb += _scalar(offer, "mem")
            slot.executor_ids.update(e["value"] for e in offer.get("executor_ids", []))
        for slot in slots.values():
            self.capacity.observe_offer(slot.agent_id, slot.cpus, slot.mem_mb)
        launches: dict[str, list[dict[str, Any]]] = {}
        undo: list[Callable[[], None]] = []
        left_over = False
        now = time.monotonic()
        for unit in work:
            if unit.kind is TaskType.READY and unit.job.job_name in unplaceable:
                self._guard.missed(unit.job.job_name, now, can_ever_fit=False)
                continue  # passed over: holding the others back for it would stall them forever
            placed = self._place(unit, list(slots.values()), launches, undo)
            if not placed:
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
        for agent, tasks in launches.items():
            if not driver.accept(slots[agent].offer_ids, tasks, BUSY_REFUSE_S):
                for fn in undo:
                    fn()
                return
            self.launched += len(tasks)
            self.last_launch_at = time.time()
            log.info(
                "launcher: launched %s tasks on %s", len(tasks), slots[agent].hostname or agent
            )
            for task in tasks:
                task_id = str(task["task_id"]["value"])
                original = self._originals.pop(task_id, "") or task_id
                for listener in self.launch_listeners:
                    try:
                        listener(task_id, agent, original)
                    except Exception:
                        log.exception("launcher: launch listener failed on %s", task_id)
        unused = [o for agent, s in slots.items() if agent not in launches for o in s.offer_ids]
        if unused:
            if driver.decline(unused, BUSY_REFUSE_S if left_over else IDLE_REFUSE_S / 6):
                self.declined += len(unused)

    def _place(
        self,
        unit: _Unit,
        slots: list[OfferSlot],
        launches: dict[str, list[dict[str, Any]]],
        undo: list[Callable[[], None]],
    ) -> bool:
        job, app = unit.job, unit.app
        executors = {s.agent_id: executor_id(app.app_name, s.agent_id) for s in slots}
        shards = shards_for(job, app, unit.items)
        if unit.kind is TaskType.READY:
            chosen = place(slots, shards, executors)
            if chosen is None:
                return False
        else:
            chosen = {}
            for shard in shards:
                one = place(slots, [shard], executors)
                if one is not None:
                    chosen.update(one)
            if not chosen:
                return False
        if unit.kind is TaskType.READY:
            self._guard.placed(job.job_name)
            self._placeable(job.job_name)
        framework_id = self._framework_id()
        facade = self._facade
        for item, slot in sorted(chosen.items()):
            tid = TaskId.new(job.job_name, item, unit.kind, slot.agent_id)
            info = build_task_info(job, app, tid, framework_id)
            facade.running.add(
                RunningTask(
                    str(tid), slot.agent_id, hostname=slot.hostname, launched_at=time.time()
                )
            )
            undo.append(_undo_running(facade, str(tid)))
            if unit.kind is TaskType.FAILOVER:
                facade.failover.remove(job.job_name, item)
                undo.append(_undo_failover(facade, unit.originals.get(item, "")))
                self._originals[str(tid)] = unit.originals.get(item, "")
            launches.setdefault(slot.agent_id, []).append(info)
        if unit.kind is TaskType.READY:
            facade.ready.take(job.job_name)
            undo.append(_undo_ready(facade, job.job_name))
        return True

    # -- runs that can never be placed -------------------------------------------------------

    def _never_fits(self, unit: _Unit) -> Unplaceable | None:
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

    def _refresh_agents(self, driver: MesosDriver) -> None:
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

    def _read_agents(self, driver: MesosDriver) -> None:
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
            self._wake.set()
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
        self._wake.set()

    def _framework_id(self) -> str:
        driver = self._driver()
        if driver is None:
            return ""
        info = driver.framework_info()
        return str(info.get("id", {}).get("value", ""))

    def _replace(self, job_name: str, tasks: list[RunningTask]) -> None:
        """Kill the running tasks of `job_name` for its pending run (overlapPolicy REPLACE),
        each marked first so that its end is no failure; a kill unanswered is sent again."""
        driver = self._driver()
        now = time.monotonic()
        for task in tasks:
            sent = self._replacing.get(task.task_id)
            if driver is None or (sent is not None and now - sent < REPLACE_RESEND_S):
                continue
            if self._facade.running.mark_killed(task.task_id, KILLED_BY_REPLACE) and driver.kill(
                task.task_id
            ):
                self._replacing[task.task_id] = now
                log.info(
                    "launcher: job %s: %s killed for a new run (overlapPolicy REPLACE)",
                    job_name,
                    task.task_id,
                )

    def _gather(self) -> list[_Unit]:
        facade = self._facade
        running: dict[str, set[int]] = {}
        tasks_of: dict[str, list[RunningTask]] = {}
        for task in facade.running.tasks():
            try:
                tid = task.parsed
            except ValueError:
                continue
            running.setdefault(tid.job_name, set()).add(tid.item)
            tasks_of.setdefault(tid.job_name, []).append(task)
        alive = {task.task_id for tasks in tasks_of.values() for task in tasks}
        self._replacing = {t: sent for t, sent in self._replacing.items() if t in alive}
        jobs: dict[str, JobConfig | None] = {}
        apps: dict[str, AppConfig | None] = {}

        def job_of(name: str) -> JobConfig | None:
            if name not in jobs:
                try:
                    jobs[name] = facade.config.job(name)
                except SchedulerError as exc:
                    log.error("launcher: %s", exc.message)
                    jobs[name] = None
            return jobs[name]

        def app_of(name: str) -> AppConfig | None:
            if name not in apps:
                apps[name] = facade.config.app(name)
            return apps[name]

        units: list[_Unit] = []
        failover: dict[str, _Unit] = {}
        held_back: set[str] = set()
        wall = time.time()
        entries = facade.failover.entries()
        self.failover_shards = len(entries)
        for job_name, item, original in entries:
            job = job_of(job_name)
            if job is None:
                facade.failover.remove_job(job_name)
                continue
            relaunched = item in running.get(job_name, set()) and _overlap(job) is not ALLOW
            if relaunched or item >= job.sharding_total_count:
                facade.failover.remove(job_name, item)
                continue
            app = app_of(job.app_name)
            if app is None or facade.is_disabled(job):
                continue
            if facade.failover.not_before(job_name, item) > wall:
                held_back.add(job_name)  # failing again and again: back-off (the 1 s tick)
                continue
            unit = failover.get(job_name)
            if unit is None:
                unit = failover[job_name] = _Unit(TaskType.FAILOVER, job, app, [])
                units.append(unit)
            unit.items.append(item)
            unit.originals[item] = original
        ready: list[tuple[float, _Unit]] = []
        now = time.monotonic()
        counts = facade.ready.counts()
        self.ready_runs = sum(counts.values())
        self._pending = set(counts)
        for job_name in counts:
            job = job_of(job_name)
            if job is None:
                facade.ready.remove(job_name)
                continue
            if job_name in failover or job_name in held_back:
                continue  # its failover shards go first
            if job_name in running and _overlap(job) is not ALLOW:
                if _overlap(job) is REPLACE and not facade.is_disabled(job):
                    self._replace(job_name, tasks_of.get(job_name, []))
                continue  # FORBID: a run at a time; REPLACE: once the killed tasks are gone
            if facade.is_disabled(job):
                facade.ready.remove(job_name)
                continue
            app = app_of(job.app_name)
            if app is None:
                continue
            items = list(range(job.sharding_total_count))
            ready.append(
                (self._guard.waiting_since(job_name, now), _Unit(TaskType.READY, job, app, items))
            )
        ready.sort(key=lambda pair: pair[0])
        units.extend(unit for _, unit in ready)
        return units

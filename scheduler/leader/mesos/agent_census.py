"""What the agents could ever offer, as the launcher learns it, and the jobs that can never run
on them.

- `AgentCensus` keeps the term's `AgentCapacity` (`capacity`) from the offers seen and from the
  master's `GET_AGENTS`, read on the short-lived `sched-agents` thread after each
  (re)connection, when an agent lost or not reported yet offers, and every `AGENTS_REFRESH_S`
  (a failed read is tried again after `AGENTS_RETRY_S`).
- `UnplaceableJobs`: the jobs whose pending run could not be placed even with every known
  agent's resources free, each reported once (a WARNING, and `current()` for the metrics and
  the API) until it fits again or has no pending run.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection
from http.client import HTTPException

from scheduler.leader.mesos.capacity import AgentCapacity, Unplaceable
from scheduler.leader.mesos.offers import OfferDriver
from scheduler.model.config.app import AppConfig
from scheduler.model.config.job import JobConfig

log = logging.getLogger(__name__)

AGENTS_RETRY_S = 30.0
AGENTS_REFRESH_S = 300.0
AGENTS_TIMEOUT_S = 5.0
_STOP_WAIT_S = 0.5


class AgentCensus:
    """Reads the agents' totals from the master when due, on its own short-lived thread."""

    def __init__(self, driver: OfferDriver, wake: Callable[[], None]) -> None:
        """`wake`: called when what the agents could offer may have changed."""
        self._driver = driver
        self._wake = wake
        self.capacity = AgentCapacity()
        self._thread: threading.Thread | None = None
        self._due = True
        self._tried_at = -1e18
        self._read_at = -1e18
        self._failing = False

    def observe(self, offered: dict[str, tuple[float, float]]) -> None:
        """What each agent offered at once (cpus, mem MB): a lower bound of its total."""
        for agent, (cpus, mem) in offered.items():
            self.capacity.observe_offer(agent, cpus, mem)

    def read_soon(self) -> None:
        """Read the totals at the next round (a (re)connection, an agent lost; any thread)."""
        self._due = True

    def refresh(self, offering: list[str]) -> None:
        """Start `sched-agents` when a read is due (the launcher's thread); `offering`: the
        agents with offers held, read when the master did not report one of them yet."""
        if self._thread is not None and self._thread.is_alive():
            return
        now = time.monotonic()
        due = (
            self._due
            or now - self._read_at >= AGENTS_REFRESH_S
            or self.capacity.unreported(offering)
        )
        if not due or (not self._due and now - self._tried_at < AGENTS_RETRY_S):
            return
        self._due = False
        self._tried_at = now
        self._thread = threading.Thread(target=self._read, name="sched-agents", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        # It only reads the master and writes `capacity`, so one still waiting on a slow
        # master may finish on its own; the leader hand-over does not wait for it.
        thread.join(_STOP_WAIT_S)
        if thread.is_alive():
            log.warning("launcher: thread sched-agents still reading the Mesos master")

    def _read(self) -> None:
        try:
            totals = self._driver.agent_totals(AGENTS_TIMEOUT_S)
        except (OSError, ValueError, HTTPException) as exc:
            if not self._failing:
                log.warning(
                    "launcher: cannot read the agents' totals from the Mesos master (%s); "
                    "using the largest offers seen",
                    exc,
                )
            self._failing = True
            self.capacity.offers_only()
            self._wake()
            return
        except Exception:
            log.exception("launcher: reading the agents' totals failed")
            return
        self._failing = False
        before = self.capacity.version
        self.capacity.set_reported(totals)
        self._read_at = time.monotonic()
        if self.capacity.version != before:
            agents = self.capacity.agents()
            log.info(
                "launcher: %s Mesos agents known; at most %s cpus and %s MB on one",
                len(agents),
                max((a.cpus for a in agents), default=0.0),
                max((a.mem_mb for a in agents), default=0.0),
            )
        self._wake()


class UnplaceableJobs:
    """The jobs whose pending run can never be placed on the agents `capacity` knows.

    Written by the launcher's thread; `current()` may be read from any thread (the mapping is
    replaced, never changed in place, so no lock is needed).
    """

    def __init__(self, capacity: AgentCapacity) -> None:
        self._capacity = capacity
        self._current: dict[str, Unplaceable] = {}
        self._judged: dict[str, tuple[tuple[object, ...], Unplaceable | None]] = {}
        # The shapes (the keys above) that fit the agents of capacity version `_fitting_at`: a
        # burst of thousands of jobs alike is judged once, not once a job.
        self._fitting: set[tuple[object, ...]] = set()
        self._fitting_at = -1

    def current(self) -> dict[str, Unplaceable]:
        return self._current

    def retain(self, pending: Collection[str]) -> None:
        """Forget the jobs that have no pending run any more."""
        for name in [n for n in self._judged if n not in pending]:
            del self._judged[name]
        if any(name not in pending for name in self._current):
            self._current = {n: u for n, u in self._current.items() if n in pending}

    def never_fits(self, job: JobConfig, app: AppConfig) -> Unplaceable | None:
        """Whether `job`'s run can never be placed on the known agents; reports it once."""
        version = self._capacity.version
        key = (
            version,
            job.cpu_count,
            job.memory_mb,
            job.sharding_total_count,
            job.job_type,
            job.execution_type,
            app.cpu_count,
            app.memory_mb,
        )
        judged = self._judged.get(job.job_name)
        if judged is not None and judged[0] == key:
            found = judged[1]
        elif key in self._fitting:
            found = None  # a job of the same shape fits these agents: so does this one
        else:
            found = self._capacity.check(job, app)
            self._judged[job.job_name] = (key, found)
            if found is None:
                if self._fitting_at != version:  # judged on other agents: forget those
                    self._fitting, self._fitting_at = set(), version
                self._fitting.add(key)
        if found is None:
            self.placeable(job.job_name)
            return None
        if self._current.get(job.job_name) != found:
            log.warning("launcher: %s; its runs wait and do not hold back others", found.reason)
            self._current = {**self._current, job.job_name: found}
        return found

    def placeable(self, job_name: str) -> None:
        """`job_name`'s run was placed or fits the known agents again."""
        if job_name in self._current:
            log.info("launcher: job %s can be placed again", job_name)
            self._current = {n: u for n, u in self._current.items() if n != job_name}

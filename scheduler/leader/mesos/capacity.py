"""What each known Mesos agent could ever offer, and whether a job's run can ever be placed.

The launcher feeds it two sources: the offers it receives (an offer carries the agent's
unreserved, unallocated resources, so the largest seen is a lower bound of its total) and the
totals the master reports through the v1 operator API (`GET_AGENTS`, `total_resources`), which
replace the agent list when they arrive. Until the master has answered once (or could not be
read: then the offers are all there is), nothing is judged, so a run is never called
unplaceable on the partial offers of a term's first second. Bookkeeping only, no I/O; safe to
use from any thread (the launcher writes, the REST API and `/metrics` read).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from scheduler.leader.mesos.placement import AgentTotal, NeverFits, Shard, never_fits
from scheduler.leader.mesos.taskinfo import runs_as_command_task
from scheduler.model.config.app import AppConfig
from scheduler.model.config.job import JobConfig


def shards_for(job: JobConfig, app: AppConfig, items: list[int]) -> list[Shard]:
    """The shards `items` of `job`, with what each task and its app's executor need."""
    uses_executor = not runs_as_command_task(job)
    return [
        Shard(
            job.job_name,
            item,
            app.app_name,
            job.cpu_count,
            job.memory_mb,
            app.cpu_count,
            app.memory_mb,
            uses_executor,
        )
        for item in items
    ]


@dataclass(frozen=True)
class Unplaceable:
    """A job whose runs can never be placed on the known agents; `fields` names the job's
    wire fields that ask too much (`cpuCount`, `memoryMB`, `shardingTotalCount`)."""

    job_name: str
    reason: str
    fields: dict[str, str]


class AgentCapacity:
    """Per agent, the most it can ever offer: its reported total, else its largest offer."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offered: dict[str, tuple[float, float]] = {}
        self._reported: dict[str, tuple[float, float]] = {}
        self._version = 0
        self._settled = False

    @property
    def settled(self) -> bool:
        """Whether the figures are to be judged by: the master's totals, or offers only."""
        return self._settled

    @property
    def version(self) -> int:
        """Grows whenever what the agents could offer changes (for callers that cache)."""
        return self._version

    def observe_offer(self, agent_id: str, cpus: float, mem_mb: float) -> None:
        """Record that `agent_id` offered (at once) `cpus` and `mem_mb`."""
        with self._lock:
            old = self._offered.get(agent_id, (0.0, 0.0))
            new = (max(old[0], cpus), max(old[1], mem_mb))
            if new != old:
                self._offered[agent_id] = new
                self._version += 1

    def set_reported(self, totals: dict[str, tuple[float, float]]) -> None:
        """Replace the agent list with the master's: (cpus, mem_mb) per agent id.

        Agents the master no longer lists are forgotten, with their largest offers.
        """
        with self._lock:
            offered = {a: v for a, v in self._offered.items() if a in totals}
            if not self._settled or totals != self._reported or offered != self._offered:
                self._version += 1
            self._reported = dict(totals)
            self._offered = offered
            self._settled = True

    def offers_only(self) -> None:
        """The master's totals cannot be read: judge by the largest offers seen."""
        with self._lock:
            if not self._settled:
                self._settled = True
                self._version += 1

    def unreported(self, agent_ids: list[str]) -> bool:
        """Whether the master has not reported the total of any of `agent_ids` yet."""
        with self._lock:
            return any(a not in self._reported for a in agent_ids)

    def agents(self) -> list[AgentTotal]:
        """Every known agent with the most it can offer, sorted by agent id."""
        with self._lock:
            ids = sorted(set(self._offered) | set(self._reported))
            out = []
            for agent in ids:
                offered = self._offered.get(agent, (0.0, 0.0))
                reported = self._reported.get(agent, (0.0, 0.0))
                out.append(
                    AgentTotal(agent, max(offered[0], reported[0]), max(offered[1], reported[1]))
                )
            return out

    def check(self, job: JobConfig, app: AppConfig) -> Unplaceable | None:
        """An `Unplaceable` when a run of `job` can never be placed on the known agents; None
        when it can, when no agent is known yet or when the figures are not settled."""
        if not self._settled:
            return None
        found = never_fits(
            shards_for(job, app, list(range(job.sharding_total_count))), self.agents()
        )
        return None if found is None else describe(job, app, found)


def _num(value: float) -> str:
    return f"{value:.6g}"


def describe(job: JobConfig, app: AppConfig, found: NeverFits) -> Unplaceable:
    """Say in words why `job` can never be placed, naming the fields that ask too much."""
    largest = (
        f"the largest of the {found.agents} known Mesos agent(s) has "
        f"{_num(found.largest_cpus)} cpus and {_num(found.largest_mem_mb)} MB"
    )
    if found.whole_run:
        reason = (
            f"job '{job.job_name}' can never run: its {job.sharding_total_count} tasks start "
            f"together (all or nothing) and need {_num(found.task_cpus)} cpus and "
            f"{_num(found.task_mem_mb)} MB each (with the app's executor once per agent), more "
            f"than the {found.agents} known Mesos agent(s) have together"
        )
        return Unplaceable(
            job.job_name, reason, {"shardingTotalCount": "more tasks than the agents can hold"}
        )
    executor = (
        f"cpuCount {_num(job.cpu_count)} and memoryMB {_num(job.memory_mb)}"
        if runs_as_command_task(job)
        else (
            f"cpuCount {_num(job.cpu_count)} and memoryMB {_num(job.memory_mb)} plus app "
            f"'{app.app_name}''s executor {_num(app.cpu_count)} cpus and "
            f"{_num(app.memory_mb)} MB"
        )
    )
    need = f"each task needs {_num(found.task_cpus)} cpus and {_num(found.task_mem_mb)} MB"
    split = found.task_cpus <= found.largest_cpus and found.task_mem_mb <= found.largest_mem_mb
    tail = "; no single agent has both" if split else ""
    reason = f"job '{job.job_name}' can never run: {need} ({executor}); {largest}{tail}"
    fields: dict[str, str] = {}
    if split:
        both = f"{need} on one agent; no known agent has both"
        fields = {"cpuCount": both, "memoryMB": both}
    if found.cpus and not split:
        fields["cpuCount"] = (
            f"{_num(found.task_cpus)} cpus per task; the largest agent has "
            f"{_num(found.largest_cpus)}"
        )
    if found.mem and not split:
        fields["memoryMB"] = (
            f"{_num(found.task_mem_mb)} MB per task; the largest agent has "
            f"{_num(found.largest_mem_mb)}"
        )
    return Unplaceable(job.job_name, reason, fields)

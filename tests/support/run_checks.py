"""What a chaos test checks once the faults are over: every fire ran once, none twice, no shard
twice at once. Shared by the replica chaos test and the infrastructure chaos and fault tests.

The jobs run `tests.e2e.pipeline_support`'s record script, which appends a `start` and an `end`
line per shard run to the app's record file (`Runs`). A job's fires are counted from the
ledger's record of its last accounted fire (`/state/last_fire/{job}`): from its first record,
read as soon as the job is registered, to its last, read once the system has settled.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from itertools import pairwise
from typing import Any, Protocol

from scheduler.model.config import parse_cron
from scheduler.model.fires import due_fires
from scheduler.storage.layout import LAST_FIRE
from scheduler.storage.registry import Registry
from tests.support.waiting import wait_for


class RunRecords(Protocol):
    """A job's record file (`tests.e2e.pipeline_support.Runs`)."""

    def lines(self) -> list[list[str]]: ...
    def starts(self, item: int | None = None) -> list[float]: ...
    def ends(self, item: int | None = None, ok: bool | None = None) -> list[float]: ...
    def intervals(self, item: int) -> list[tuple[float, float]]: ...


class Cluster(Protocol):
    """What the checks ask of the system under test (`pipeline_support.System`)."""

    def api(self, method: str, path: str, body: Any = None) -> tuple[int, Any]: ...
    def running(self) -> list[dict[str, Any]]: ...


def fires_between(cron: str, first: float, last: float) -> int:
    """Cron fire times in (first, last]."""
    trigger = parse_cron(cron, "UTC").trigger()
    return len(due_fires(trigger, first, last, limit=1_000_000).times)


def recorded(registry: Registry, job: str) -> float | None:
    """The job's last accounted fire (its ledger record), or None before the first."""
    data = registry.get(f"{LAST_FIRE}/{job}")
    return float(data) if data else None


def recorded_after(registry: Registry, job: str, when: float) -> bool:
    return (recorded(registry, job) or 0.0) >= when


def counting_from(first_record: float, period_s: int = 2) -> float:
    """Where a job's fires are counted from: its first record is the moment it was scheduled,
    unless a fire was accounted before the test read it (a fire time, a whole multiple of the
    cron's `period_s`): then that fire counts too."""
    if first_record == int(first_record) and int(first_record) % period_s == 0:
        return first_record - 0.001
    return first_record


@dataclass(frozen=True)
class JobOutcome:
    """One job's figures once settled."""

    name: str
    misfire: bool
    fires: int
    starts: list[int]  # runs started, per shard
    relaunched: int  # failover relaunches (task ids with FAILOVER)

    @property
    def skipped(self) -> list[int]:
        return [self.fires - s for s in self.starts]

    def line(self) -> str:
        return (
            f"job {self.name} misfire={'on' if self.misfire else 'off'}: fires {self.fires}, "
            f"runs per shard {self.starts}, skipped {self.skipped}, failover relaunches "
            f"{self.relaunched}"
        )


def settle_and_check(
    system: Cluster,
    registry: Registry,
    cron: str,
    jobs: Mapping[str, bool],
    records: Mapping[str, RunRecords],
    first: Mapping[str, float],
    shards: int,
    timeout_s: float = 60.0,
    also_settled: Callable[[], bool] | None = None,
) -> list[JobOutcome]:
    """Wait for a quiet moment of each job (no run pending or running, every started shard
    ended, no fire accounted meanwhile), then assert:

    - a misfire job (`jobs[name]` True) ran each shard exactly once per fire accounted from
      `first[name]` to its last record: no fire lost, none run twice;
    - a misfire-off job ran each shard at most once per fire;
    - no shard of a job ran twice at once.

    Returns each job's figures. AssertionError names the job, the shard and what was seen.
    """
    seen: dict[str, str] = {}

    def settled(name: str) -> tuple[float, list[int]] | None:
        if also_settled is not None and not also_settled():
            seen[name] = "the system is not settled yet"
            return None
        last = recorded(registry, name)
        if last is None:
            seen[name] = "no fire recorded"
            return None
        pending = [r for r in system.api("GET", "/api/job/tasks/ready")[1] if r["jobName"] == name]
        busy = [t for t in system.running() if t["metaInfo"]["jobName"] == name]
        runs = records[name]
        starts = [len(runs.starts(item)) for item in range(shards)]
        ends = [len(runs.ends(item)) for item in range(shards)]
        seen[name] = (
            f"pending {pending}, running {[t['metaInfo'] for t in busy]}, starts {starts}, "
            f"ends {ends}, last fire {last}"
        )
        if pending or busy or ends != starts or recorded(registry, name) != last:
            return None
        return last, starts

    outcomes = []
    for name, misfire in jobs.items():
        try:
            last, starts = wait_for(partial(settled, name), timeout_s, message=f"{name} settled")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last seen: {seen.get(name)}") from exc
        fires = fires_between(cron, first[name], last)
        runs = records[name]
        relaunched = sum("@-@FAILOVER@-@" in line[3] for line in runs.lines() if line[0] == "start")
        outcomes.append(JobOutcome(name, misfire, fires, starts, relaunched))
        for item in range(shards):
            intervals = sorted(runs.intervals(item))
            overlaps = [(a, b) for a, b in pairwise(intervals) if b[0] < a[1]]
            assert not overlaps, f"{name} shard {item} ran twice at once: {overlaps[:3]}"
            if misfire:
                assert starts[item] == fires, f"{name} shard {item}: {starts[item]} of {fires}"
            else:
                assert starts[item] <= fires, f"{name} shard {item}: {starts[item]} > {fires}"
    return outcomes

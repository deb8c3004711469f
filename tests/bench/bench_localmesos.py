"""Throughput of the local Mesos stand-in through one real pymesos framework.

    .venv/bin/python -m tests.bench.bench_localmesos [--tasks N] [--agents N]

Runs the stand-in as its own process (as in a real deployment) and one in-process pymesos
scheduler that packs each offer with as many tasks as fit (0.1 cpu, 32 MB each), in two phases:
command tasks running `true`, then no-op tasks (RUNNING, FINISHED) on one custom pymesos
executor per agent. Prints tasks launched (ACCEPTed), running and finished per second, and the
ACCEPT-to-FINISHED latency. Stops everything it started, also on failure or Ctrl-C.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pymesos import Scheduler

from tests.support.mesosfw import (
    Framework,
    StandIn,
    command_task,
    executor_info,
    executor_task,
)

Json = dict[str, Any]
TASK_CPUS = 0.1
TASK_MEM_MB = 32.0
EXECUTOR_CPUS = 0.1
EXECUTOR_MEM_MB = 32.0


def _scalar(offer: Json, name: str) -> float:
    return sum(float(r["scalar"]["value"]) for r in offer["resources"] if r["name"] == name)


class PackingScheduler(Scheduler):  # type: ignore[misc]
    """Launches `total` tasks built by `make_task(index)`, packing each offer."""

    def __init__(
        self, total: int, make_task: Callable[[int], Json], executor_id: str | None
    ) -> None:
        self._pending = deque(range(total))
        self._make_task = make_task
        self._executor_id = executor_id
        self._executor_agents: set[str] = set()
        self._lock = threading.Lock()
        self.total = total
        self.accepted_at: dict[str, float] = {}
        self.running_at: dict[str, float] = {}
        self.finished_at: dict[str, float] = {}
        self.failed: list[str] = []
        self.done = threading.Event()

    def resourceOffers(self, driver: Any, offers: list[Json]) -> None:
        for offer in offers:
            agent_id = offer["agent_id"]["value"]
            cpus, mem = _scalar(offer, "cpus"), _scalar(offer, "mem")
            known = {e["value"] for e in offer.get("executor_ids", [])}
            with self._lock:
                if self._executor_id and agent_id not in self._executor_agents:
                    if self._executor_id not in known:
                        cpus, mem = cpus - EXECUTOR_CPUS, mem - EXECUTOR_MEM_MB
                fit = int(min(cpus / TASK_CPUS + 1e-9, mem / TASK_MEM_MB + 1e-9))
                batch = [self._pending.popleft() for _ in range(min(fit, len(self._pending)))]
                if batch and self._executor_id:
                    self._executor_agents.add(agent_id)
                now = time.monotonic()
                tasks = []
                for index in batch:
                    task = self._make_task(index)
                    task["agent_id"] = offer["agent_id"]
                    self.accepted_at[task["task_id"]["value"]] = now
                    tasks.append(task)
            if tasks:
                driver.launchTasks(offer["id"], tasks, {"refuse_seconds": 0.0})
            else:
                driver.declineOffer(offer["id"], {"refuse_seconds": 1.0})

    def statusUpdate(self, driver: Any, status: Json) -> None:
        task_id, state = status["task_id"]["value"], status["state"]
        now = time.monotonic()
        with self._lock:
            if state == "TASK_RUNNING":
                self.running_at.setdefault(task_id, now)
            elif state == "TASK_FINISHED":
                self.finished_at[task_id] = now
            elif state in ("TASK_FAILED", "TASK_LOST", "TASK_ERROR", "TASK_KILLED"):
                self.failed.append(f"{task_id}: {state} {status.get('message', '')}")
            if len(self.finished_at) + len(self.failed) >= self.total:
                self.done.set()


def _rate(count: int, times: list[float], start: float) -> str:
    if not times:
        return "n/a"
    elapsed = max(times) - start
    return f"{count} in {elapsed:6.2f}s = {count / elapsed:7.1f}/s"


def run_phase(name: str, standin: StandIn, scheduler: PackingScheduler, timeout_s: float) -> None:
    framework = Framework(standin.address, scheduler, name=f"bench-{name}")
    started = time.monotonic()
    try:
        framework.start()
        if not scheduler.done.wait(timeout_s):
            print(f"{name}: timed out after {timeout_s:g}s", file=sys.stderr)
    finally:
        framework.stop()
    with scheduler._lock:
        accepted = list(scheduler.accepted_at.values())
        start = min(accepted) if accepted else started
        latencies = [
            scheduler.finished_at[t] - scheduler.accepted_at[t] for t in scheduler.finished_at
        ]
        print(f"{name}:")
        print(f"  launched {_rate(len(accepted), accepted, start)}")
        running = list(scheduler.running_at.values())
        print(f"  running  {_rate(len(running), running, start)}")
        finished = list(scheduler.finished_at.values())
        print(f"  finished {_rate(len(finished), finished, start)}")
        if latencies:
            ordered = sorted(latencies)
            p95 = ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]
            print(
                f"  accept->finished latency: median {statistics.median(ordered) * 1000:.0f} ms,"
                f" p95 {p95 * 1000:.0f} ms"
            )
        if scheduler.failed:
            print(f"  {len(scheduler.failed)} failed, e.g. {scheduler.failed[0]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--agents", type=int, default=1)
    parser.add_argument("--allocation-interval-seconds", type=float, default=1.0)
    parser.add_argument("--timeout-seconds", type=float, default=300.0)
    args = parser.parse_args(argv)
    logging.getLogger("pymesos").setLevel(logging.WARNING)
    resources = "cpus:4;mem:4096;disk:10240;ports:[31000-32000]"

    with tempfile.TemporaryDirectory(prefix="bench-localmesos-") as work:
        standin = StandIn(
            Path(work),
            *("--agents", str(args.agents), "--resources", resources),
            *("--allocation-interval-seconds", str(args.allocation_interval_seconds)),
            *("--log-level", "WARNING"),
        )
        standin.start()
        try:
            print(
                f"localmesos benchmark: {args.tasks} tasks of {TASK_CPUS} cpu/{TASK_MEM_MB:g} MB,"
                f" {args.agents} agent(s) of {resources}, allocation interval"
                f" {args.allocation_interval_seconds:g}s, {os.cpu_count()} CPUs"
            )
            run_phase(
                "command tasks (`true`)",
                standin,
                PackingScheduler(
                    args.tasks,
                    lambda i: command_task(f"cmd-{i}", "true", TASK_CPUS, TASK_MEM_MB),
                    None,
                ),
                args.timeout_seconds,
            )
            executor = executor_info("bench@-@executor", cpus=EXECUTOR_CPUS, mem=EXECUTOR_MEM_MB)
            run_phase(
                "custom executor (no-op tasks)",
                standin,
                PackingScheduler(
                    args.tasks,
                    lambda i: executor_task(
                        f"noop-{i}", executor, TASK_CPUS, TASK_MEM_MB, mode="finish"
                    ),
                    "bench@-@executor",
                ),
                args.timeout_seconds,
            )
        finally:
            code = standin.stop()
            if code != 0:
                print(f"stand-in exited with {code}:\n{standin.log_tail()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

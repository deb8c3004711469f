"""Costs of the executor: a worker process per run, and tasks through the local Mesos stand-in.

    .venv/bin/python -m tests.bench executor [--runs N] [--tasks N]

1. Worker runs: N SIMPLE runs of a no-op job, one after another, straight through
   `WorkerProcess` (spawn, run, reap, read the result): the fixed cost each run pays for its
   isolation.
2. Through Mesos: N SIMPLE tasks of one app launched at once on the stand-in (one executor, the
   app archive fetched and extracted once), with the launch-to-FINISHED latency of each.
Figures only; nothing here is asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from deploy.localmesos import LocalMesos
from executor.package import build_app_archive
from executor.process import WorkerProcess
from executor.supervisor import worker_environment
from tests.integration.executor.helpers import TEST_APP, task_data
from tests.support.mesosfw import App, Framework, RecordingScheduler


def _percentiles(values_ms: list[float]) -> str:
    ordered = sorted(values_ms)
    p50 = statistics.median(ordered)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return f"p50 {p50:.0f} ms, p95 {p95:.0f} ms, max {ordered[-1]:.0f} ms"


def bench_worker_runs(runs: int, out_dir: Path) -> None:
    data = task_data(out_dir, "SIMPLE", "testjobs.simple:count").encode()
    env = worker_environment(os.environ, TEST_APP)
    durations_ms: list[float] = []
    for index in range(runs):
        started = time.perf_counter()
        worker = WorkerProcess.spawn(
            f"bench-{index}", task_data=data, app_dir=TEST_APP, python=sys.executable, env=env
        )
        outcome = worker.wait()
        durations_ms.append((time.perf_counter() - started) * 1000)
        if not outcome.success:
            raise SystemExit(f"worker run failed: {outcome.summary}")
    print(f"worker runs:   {runs} sequential runs, {_percentiles(durations_ms)} each")


def bench_mesos_tasks(tasks: int, work_dir: Path) -> None:
    archive = build_app_archive(TEST_APP, work_dir / "testapp.tar.gz", python=sys.executable)
    app = App("benchapp", archive.path)
    out_dir = work_dir / "out"
    out_dir.mkdir()
    mesos = LocalMesos(port=0, work_dir=work_dir / "mesos", allocation_interval_s=0.2).start()
    scheduler = RecordingScheduler(refuse_s=3600.0, revive_on_launch=True)
    framework = Framework(
        mesos.address, scheduler, user="", name="executor-tests", hostname="localhost"
    )
    try:
        framework.start(timeout_s=15.0)
        launched_at: dict[str, float] = {}
        started = time.perf_counter()
        for item in range(tasks):
            data = task_data(out_dir, "SIMPLE", "testjobs.simple:count", item=item, total=tasks)
            launched_at[scheduler.launch_app(app, data)] = time.perf_counter()
        latencies_ms: list[float] = []
        last_s = started
        for task_id, at in launched_at.items():
            status = scheduler.wait_terminal(task_id, timeout_s=300.0)
            if status.state != "TASK_FINISHED":
                raise SystemExit(f"{task_id}: {status.state} {status.message}")
            latencies_ms.append((status.received_s - at) * 1000)
            last_s = max(last_s, status.received_s)
        elapsed_s = last_s - started
        print(
            f"through Mesos: {tasks} tasks in {elapsed_s:.2f} s "
            f"({tasks / elapsed_s:.1f} tasks/s), launch to FINISHED {_percentiles(latencies_ms)}"
        )
    finally:
        framework.stop()
        mesos.stop(timeout_s=15.0)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench executor")
    parser.add_argument("--runs", type=int, default=20, help="sequential worker runs")
    parser.add_argument("--tasks", type=int, default=30, help="tasks launched through Mesos")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-executor-") as tmp:
        root = Path(tmp)
        (root / "runs").mkdir()
        bench_worker_runs(args.runs, root / "runs")
        (root / "mesos-run").mkdir()
        bench_mesos_tasks(args.tasks, root / "mesos-run")


if __name__ == "__main__":
    main(sys.argv[1:])

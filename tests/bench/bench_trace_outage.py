"""Trace database outage benchmark: what an outage costs the threads that record traces, and how
long the entries held during it take to reach the database once it is back.

Run: `./dev.sh bench trace_outage [--held N] [--beyond N]`.

Method, per database (SQLite in a temporary folder, a real PostgreSQL server it starts itself):
a migrated trace database and a TraceWriter bounded at `--held` entries; the database is taken
away (SQLite: the file's folder renamed, so neither a new connection nor a rollback journal
opens; PostgreSQL: the server stopped) and the writer's first batch fails; one thread then
records `--held` status updates (the cost per record while the buffer fills) and `--beyond`
more (each drops the oldest: the cost per record on the drop path); the database comes back
and the clock runs until the writer holds nothing.
Exits non-zero when the entries written and dropped do not add up to those recorded.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from deploy.postgres import PostgresServer
from scheduler.leader.statistics import TraceWriter, create_trace_engine, upgrade_to_head

_POLL_S = 0.005


@dataclass(frozen=True)
class Result:
    database: str
    filling_us: float
    dropping_us: float
    drain_s: float
    recorded: int
    counters: dict[str, int]

    @property
    def ok(self) -> bool:
        c = self.counters
        return c["written"] + c["dropped"] == self.recorded and c["errors"] == 0


def _record(writer: TraceWriter, count: int, first: int) -> float:
    """Record `count` updates; microseconds per record."""
    started = time.perf_counter()
    for i in range(first, first + count):
        writer.record_status(
            job_name=f"bench-job-{i % 50}",
            task_id=f"bench-job-{i % 50}@-@0@-@READY@-@agent-1@-@{i:08d}",
            state="TASK_RUNNING",
            slave_id="agent-1",
            execution_type="TRANSIENT",
            sharding_item="[0]",
            message="held while the database was down",
        )
    return (time.perf_counter() - started) / count * 1e6


def measure(
    database: str,
    url: str,
    take_away: Callable[[], object],
    bring_back: Callable[[], object],
    held: int,
    beyond: int,
    timeout_s: float,
) -> Result:
    engine = create_trace_engine(url)
    upgrade_to_head(engine)
    writer = TraceWriter(engine, max_records=held)
    writer.start()
    try:
        take_away()
        writer.record_status(job_name="bench-probe", task_id="probe", state="TASK_RUNNING")
        deadline = time.monotonic() + timeout_s
        while not writer.problem:
            if time.monotonic() > deadline:
                raise SystemExit(f"{database}: the writer never saw the database go")
            time.sleep(_POLL_S)
        filling_us = _record(writer, held - 1, 0)
        dropping_us = _record(writer, beyond, held)
        bring_back()
        started = time.monotonic()
        writer.retry_now()
        while writer.pending:
            if time.monotonic() > started + timeout_s:
                break
            time.sleep(_POLL_S)
        drain_s = time.monotonic() - started
    finally:
        writer.stop(timeout_s=30)
        engine.dispose()
    return Result(database, filling_us, dropping_us, drain_s, held + beyond, writer.counters())


def _report(r: Result) -> None:
    c = r.counters
    rate = c["written"] / r.drain_s if r.drain_s > 0 else 0.0
    print(
        f"  {r.database:<10} record while down {r.filling_us:5.1f} us, buffer full (drops the"
        f" oldest) {r.dropping_us:5.1f} us; {c['written']} held written in {r.drain_s:6.2f}s"
        f" after it came back ({rate:.0f}/s); dropped {c['dropped']}, errors {c['errors']}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--held", type=int, default=100_000, help="the buffer's bound")
    parser.add_argument("--beyond", type=int, default=20_000, help="records past the bound")
    parser.add_argument("--timeout-seconds", type=float, default=300.0)
    args = parser.parse_args(argv)
    # The writer's warnings (down, dropped, back) would interleave with the figures.
    logging.basicConfig(level=logging.ERROR)
    print(
        f"trace outage benchmark: {args.held} entries held, {args.beyond} beyond the bound, "
        f"{os.cpu_count()} CPUs",
        flush=True,
    )
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="bench-trace-outage-") as work:
        folder = Path(work) / "sqlite"
        away = Path(work) / "sqlite-away"
        results.append(
            measure(
                "sqlite",
                f"sqlite:///{folder / 'trace.db'}",
                lambda: folder.rename(away),
                lambda: away.rename(folder),
                args.held,
                args.beyond,
                args.timeout_seconds,
            )
        )
        with PostgresServer(Path(work) / "postgres") as server:
            url = server.create_database("trace_outage_bench")
            results.append(
                measure(
                    "postgresql",
                    url,
                    server.stop,
                    server.start,
                    args.held,
                    args.beyond,
                    args.timeout_seconds,
                )
            )
    print("results:")
    for result in results:
        _report(result)
    failed = [r.database for r in results if not r.ok]
    if failed:
        sys.exit(f"trace outage benchmark: entries unaccounted for on {', '.join(failed)}")


if __name__ == "__main__":
    main()

"""Event trace benchmark: the status updates per second that TraceWriter sustains into SQLite
(a file in a temporary folder) and into PostgreSQL (a real server it starts and stops itself).

Run: `./dev.sh bench trace [--updates N] [--batch-size N]`.

Method, per database: a migrated, empty trace database and a writer whose queue holds every
update; one thread offers N status updates through `record_status` as fast as it can, and the
clock runs from the first offer until `counters()` reports all N written. Exits non-zero when
any update was dropped or failed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine, text

from deploy.postgres import PostgresServer
from scheduler.leader.statistics import TraceWriter, create_trace_engine, upgrade_to_head

_STATES = ("TASK_STAGING", "TASK_RUNNING", "TASK_FINISHED")
_POLL_S = 0.002


@dataclass(frozen=True)
class Result:
    database: str
    updates: int
    offered_s: float
    elapsed_s: float
    counters: dict[str, int]

    @property
    def ok(self) -> bool:
        c = self.counters
        return c["written"] == self.updates and c["dropped"] == 0 and c["errors"] == 0


def _settings(engine: Engine) -> str:
    """The durability settings the figure depends on, read from the database itself."""
    with engine.connect() as connection:
        if engine.dialect.name == "sqlite":
            journal = connection.scalar(text("PRAGMA journal_mode"))
            synchronous = connection.scalar(text("PRAGMA synchronous"))
            return f"journal_mode={journal}, synchronous={synchronous} (1=NORMAL, 2=FULL)"
        version = connection.scalar(text("SHOW server_version"))
        fsync = connection.scalar(text("SHOW fsync"))
        commit = connection.scalar(text("SHOW synchronous_commit"))
        return f"{version}, fsync={fsync}, synchronous_commit={commit}"


def measure(database: str, url: str, updates: int, batch_size: int, timeout_s: float) -> Result:
    engine = create_trace_engine(url)
    try:
        upgrade_to_head(engine)
        print(f"{database}: {_settings(engine)}", flush=True)
        writer = TraceWriter(engine, max_records=updates, batch_size=batch_size)
        writer.start()
        try:
            started = time.monotonic()
            for i in range(updates):
                job = f"bench-job-{i % 50}"
                writer.record_status(
                    job_name=job,
                    task_id=f"{job}@-@{i % 10}@-@READY@-@agent-{i % 4}@-@{i // 3}",
                    state=_STATES[i % 3],
                    slave_id=f"agent-{i % 4}",
                    source="CLOUD_SCHEDULER",
                    execution_type="READY",
                    sharding_item=str(i % 10),
                    message="bench status update",
                )
            offered_s = time.monotonic() - started
            deadline = started + timeout_s
            while True:
                counters = writer.counters()
                settled = counters["written"] + counters["dropped"] + counters["errors"]
                if settled >= updates or time.monotonic() >= deadline:
                    break
                time.sleep(_POLL_S)
            elapsed_s = time.monotonic() - started
        finally:
            writer.stop(timeout_s=30)
        return Result(database, updates, offered_s, elapsed_s, writer.counters())
    finally:
        engine.dispose()


def _report(result: Result) -> None:
    c = result.counters
    rate = c["written"] / result.elapsed_s if result.elapsed_s > 0 else 0.0
    print(
        f"  {result.database:<10} {c['written']:>7} written in {result.elapsed_s:6.2f}s"
        f" = {rate:9.0f} updates/s   (offered in {result.offered_s:.2f}s;"
        f" dropped {c['dropped']}, errors {c['errors']}, pending {c['pending']})",
        flush=True,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--updates", type=int, default=20_000)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--timeout-seconds", type=float, default=300.0)
    args = parser.parse_args(argv)
    print(
        f"trace benchmark: {args.updates} status updates per database, batch size"
        f" {args.batch_size}, {os.cpu_count()} CPUs",
        flush=True,
    )
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="bench-trace-") as work:
        sqlite_url = f"sqlite:///{Path(work) / 'sqlite' / 'trace.db'}"
        results.append(
            measure("sqlite", sqlite_url, args.updates, args.batch_size, args.timeout_seconds)
        )
        with PostgresServer(Path(work) / "postgres") as server:
            url = server.create_database("trace_bench")
            results.append(
                measure("postgresql", url, args.updates, args.batch_size, args.timeout_seconds)
            )
    print("results:")
    for result in results:
        _report(result)
    failed = [r.database for r in results if not r.ok]
    if failed:
        sys.exit(f"trace benchmark: updates dropped or failed on {', '.join(failed)}")


if __name__ == "__main__":
    main()

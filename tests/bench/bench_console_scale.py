"""The web console at scale (issue 29): a real Chromium against one replica holding `--jobs`
(100,000) jobs and `--runs` (1,000,000) runs.

Set-up, all straight into the stores (nothing goes through the API):
- ZooKeeper (its JVM given `--zk-heap-mb`, 2048) with the app `bench` and N daily jobs (one
  cron hour twelve hours from now, so none fires during the bench), each with the fire-ledger
  record a leader taking over finds (last fired a day before that hour), as bench_launch's
  start-up does; then one replica (no Mesos master: `127.0.0.1:1`, as there).
- Once its statistics component has made the trace tables (the replica migrates its SQLite
  trace database at start), M runs into `JOB_STATUS_TRACE_LOG` in chunks of `--chunk` (50,000)
  runs, each a TASK_STAGING row (the launch, its message naming the fire) and a terminal row
  (TASK_FINISHED, one in 20 TASK_FAILED) 1-30 s later: 2 x M rows. The runs are spread evenly
  over the last `--days` (7) and round-robin over the jobs, except that the first job gets
  `--hot-runs` (1,000) of them, so its own runs view has more than one page.

Then, as the admin in a headless Chromium (Playwright, Debian's chromium), each `--repeat` (5)
times from a blank tab (a full load of the console, logged in by its session cookie):
- jobs view (`#/jobs`): navigation to the first job row visible, then "More jobs" to its 200th
  row; the API requests the page sent before its first row are counted;
- runs view, all jobs (`#/runs`: the event trace's latest 1,000 status rows, the console's
  `fetchRuns` without a job): navigation to the first run row, then "Older" to page 2;
- runs view of the first job (`#/runs?job=...`: `GET /api/job/{job}/runs?limit=200`): the same.
Each figure: median and max, against a yardstick of 1 s (the issue asks for a console that
"stays responsive" and sets no number). A wait is bounded by `--view-timeout-s` (120 s): a view
that shows nothing by then is counted at that bound and marked.

Direct HTTP with the admin's Basic credentials, one client on one connection (the credential's
one hash spent before measuring), `--requests` (50) each, bounded by `--http-budget-s` (90 s)
each: `GET /api/job/jobs?limit=100` (the first page and pages at cursors spread over the names;
goal p99 < 50 ms), and the API pages the console's views use: the statusTraces page of the
all-jobs runs view, the first job's runs page, a job's `runs?limit=1` (sent once per job row by
the jobs view) and the plain `GET /api/job/jobs` the runs view sends to fill its job filter (at
most `max_list_items`, 10,000, jobs). With 50 requests the p99 is the max.

The replica's VmRSS (and VmHWM) from /proc before the browser starts and after the last
request. The machine has 2 cores and runs other work: every figure is an upper bound. Nothing
asserts: each figure is printed, with `PASS`/`FAIL` against its goal or yardstick; every process
started is stopped at the end.

Run: `./dev.sh bench console_scale [--jobs 100000] [--runs 1000000] [--hot-runs 1000]
[--repeat 5] [--requests 50] [--days 7] [--zk-heap-mb 2048] [--keep-logs DIR]`.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

from playwright.sync_api import Page, Request, sync_playwright
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from sqlalchemy import Engine, create_engine, func, inspect, select

from deploy.zookeeper import ZooKeeperEnsemble
from scheduler.api.paging import encode_cursor
from scheduler.leader.statistics.models import StatusTraceLog
from scheduler.model.runs import launch_message
from tests.bench import bench_launch
from tests.bench.bench_pipeline import _job
from tests.bench.scale_probes import hwm_kib, log_stamp, pct, rss_kib, verdict
from tests.e2e.test_console import CHROMIUM
from tests.support.replicas import ReplicaProcess

USER, PASSWORD = "root", "root"
AUTH = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
YARDSTICK_MS = 1000.0
PAGE_GOAL_MS = 50.0
TRACE_DB = "ejcloud-trace.db"
JOBS_PAGE = 100  # the console's page of jobs (views/jobs.js JOBS_PAGE)
RUNS_SHOWN = 200  # the runs view's runs fetched (views/runs.js RUNS_SHOWN)
TRACE_ROWS = 1000  # data.js traceRows(RUNS_SHOWN): the status rows the all-jobs view asks for


def _wait(predicate: Callable[[], object], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"not reached within {timeout_s:.0f} s: {what}")
        time.sleep(0.2)


# -- set-up ----------------------------------------------------------------------------------


def _job_names(count: int) -> list[str]:
    return [f"job{j:06d}" for j in range(count)]


def _write_jobs(zk: ZooKeeperEnsemble, namespace: str, names: list[str]) -> None:
    """The app and `names` as daily jobs at an hour twelve hours away, each with its last fire
    recorded a day before that hour's next occurrence (so none is due at the leader's start)."""
    bench_launch.write_app(zk, namespace)
    now = datetime.now(UTC)
    hour = (now.hour + 12) % 24
    cron = f"0 0 {hour} * * ?"
    next_fire = now.replace(hour=hour, minute=0, second=0, microsecond=0)
    if next_fire <= now:
        next_fire += timedelta(days=1)
    record = f"{(next_fire - timedelta(days=1)).timestamp():.3f}".encode()
    bench_launch._write_jobs(zk, namespace, [_job(name, cron, 1) for name in names])
    bench_launch._write_nodes(zk, f"/{namespace}/state/last_fire", dict.fromkeys(names, record))


@dataclass(frozen=True)
class RunPlan:
    """Which job each run belongs to and when it launched."""

    names: list[str]
    runs: int
    hot_runs: int
    days: float
    end: datetime = field(default_factory=lambda: datetime.now(UTC).replace(tzinfo=None))

    def job_of(self, n: int) -> str:
        every = max(1, self.runs // max(1, self.hot_runs))
        if n % every == 0 and n // every < self.hot_runs:
            return self.names[0]
        # Round-robin over the other jobs (names[1:], never copied: 1,000,000 copies of a
        # 100,000-name list were most of the set-up's time).
        return self.names[1 + n % (len(self.names) - 1)]

    def launch_of(self, n: int) -> datetime:
        span_s = self.days * 86400
        return self.end - timedelta(seconds=span_s * (1 - (n + 0.5) / self.runs))


_COLUMNS = (
    "id",
    "job_name",
    "original_task_id",
    "task_id",
    "slave_id",
    "source",
    "execution_type",
    "sharding_item",
    "state",
    "message",
    "creation_time",
)
_INSERT = (
    f'INSERT INTO "{StatusTraceLog.__tablename__}" ({", ".join(_COLUMNS)}) '
    f"VALUES ({', '.join('?' for _ in _COLUMNS)})"
)


def _sqlite_time(moment: datetime) -> str:
    # As SQLAlchemy's DateTime writes it to SQLite (the product compares these strings).
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")


def _rows(plan: RunPlan, first: int, last: int) -> Iterator[tuple[str, ...]]:
    """Two rows a run, in `_COLUMNS` order."""
    for n in range(first, last):
        job = plan.job_of(n)
        task_id = f"{job}@-@0@-@READY@-@agent-S0@-@{uuid.UUID(int=n)}"
        launched = plan.launch_of(n)
        failed = n % 20 == 7
        common = (job, task_id, task_id, "agent-S0", "CLOUD_SCHEDULER", "READY", "[0]")
        fire = launched.replace(tzinfo=UTC).timestamp() - 0.05
        yield (
            f"{2 * n:032x}",
            *common,
            "TASK_STAGING",
            launch_message(fire),
            _sqlite_time(launched),
        )
        yield (
            f"{2 * n + 1:032x}",
            *common,
            "TASK_FAILED" if failed else "TASK_FINISHED",
            "Command exited with status 3" if failed else "",
            _sqlite_time(launched + timedelta(seconds=1 + n % 30)),
        )


def _write_runs(engine: Engine, plan: RunPlan, chunk: int) -> None:
    """The plan's runs, `chunk` runs (one transaction, one DB-API executemany) at a time.

    This connection's page cache is raised to 1 GiB, so the growing indexes (job and task ids in
    no order) stay in memory between chunks; the replica's own connections are not touched.
    (1,000,000 runs: 37 s here.)"""
    conn = engine.raw_connection()
    try:
        cursor = conn.cursor()
        cursor.execute("PRAGMA cache_size = -1048576")
        for first in range(0, plan.runs, chunk):
            cursor.executemany(_INSERT, list(_rows(plan, first, min(plan.runs, first + chunk))))
            conn.commit()
        cursor.close()
    finally:
        conn.close()


def _tables_made(engine: Engine) -> bool:
    return "JOB_STATUS_TRACE_LOG" in inspect(engine).get_table_names()


def _start_seconds(replica: ReplicaProcess) -> float | None:
    won = started = None
    for line in replica.log_text().splitlines():
        if won is None and " won term " in line:
            won = log_stamp(line)
        elif won is not None and "started reconcile" in line:
            started = log_stamp(line)
            break
    return None if won is None or started is None else started - won


# -- the browser -----------------------------------------------------------------------------


@dataclass
class Timings:
    """One figure's samples (ms); `timed_out` counts the waits that hit the bound."""

    name: str
    samples: list[float] = field(default_factory=list)
    timed_out: int = 0
    requests: list[int] = field(default_factory=list)

    def report(self) -> None:
        if not self.samples:
            print(f"{self.name}: no sample", flush=True)
            return
        median, worst = statistics.median(self.samples), max(self.samples)
        notes = []
        if self.requests:
            notes.append(
                f"API requests before the first row: {statistics.median(self.requests):.0f}"
            )
        if self.timed_out:
            notes.append(
                f"{self.timed_out} of {len(self.samples)} timed out (counted at the bound)"
            )
        verdict(
            self.name,
            f"median {median:.0f} ms, max {worst:.0f} ms over {len(self.samples)}",
            f"yardstick: max < {YARDSTICK_MS:.0f} ms",
            worst < YARDSTICK_MS and not self.timed_out,
            "; ".join(notes),
        )


class ConsoleDriver:
    """One logged-in tab; each measurement starts from a blank page (a full load)."""

    def __init__(self, page: Page, base: str, timeout_s: float) -> None:
        self.page = page
        self.base = base
        self.timeout_ms = timeout_s * 1000
        self.api_requests = 0
        page.on("request", self._on_request)

    def _on_request(self, request: Request) -> None:
        if "/api/" in request.url:
            self.api_requests += 1

    def login(self) -> None:
        self.page.goto(f"{self.base}/#/")
        self.page.fill("#login-user", USER)
        self.page.fill("#login-password", PASSWORD)
        self.page.click("form#login button[type=submit]")
        self.page.locator("#who [data-role=root]").wait_for(timeout=self.timeout_ms)

    def _timed(
        self, action: Callable[[], object], done: Callable[[], object]
    ) -> tuple[float, bool]:
        started = time.perf_counter()
        action()
        try:
            done()
        except PlaywrightTimeout:
            return self.timeout_ms, True
        return (time.perf_counter() - started) * 1000, False

    def open(self, route: str, first_row: str, into: Timings) -> bool:
        """Blank page, then `route`, timed to the first `first_row` visible; False: timed out."""
        self.page.goto("about:blank")
        self.api_requests = 0
        took, late = self._timed(
            lambda: self.page.goto(f"{self.base}/#/{route}", wait_until="commit"),
            lambda: self.page.locator(first_row).first.wait_for(timeout=self.timeout_ms),
        )
        into.samples.append(took)
        into.timed_out += late
        into.requests.append(self.api_requests)
        return not late

    def next_page(self, button: str, shown: str, into: Timings) -> None:
        """Click `button` (waited for first), timed to the selector `shown` matching."""
        try:
            self.page.locator(button).wait_for(timeout=self.timeout_ms)
        except PlaywrightTimeout:
            print(f"  {into.name}: no {button} on the page", flush=True)
            return
        took, late = self._timed(
            lambda: self.page.click(button),
            lambda: self.page.locator(shown).first.wait_for(timeout=self.timeout_ms),
        )
        into.samples.append(took)
        into.timed_out += late


def browse(replica: ReplicaProcess, hot_job: str, repeat: int, timeout_s: float) -> None:
    """The three views and their next pages, `repeat` times each, printed."""
    jobs, more = Timings("console-jobs-first-rows"), Timings("console-jobs-more")
    runs, older = Timings("console-runs-all-first-rows"), Timings("console-runs-all-older")
    job_runs = Timings(f"console-runs-{hot_job}-first-rows")
    job_older = Timings(f"console-runs-{hot_job}-older")
    manager = sync_playwright().start()
    try:
        browser = manager.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            context = browser.new_context(viewport={"width": 1366, "height": 900})
            driver = ConsoleDriver(context.new_page(), f"http://{replica.identity}", timeout_s)
            driver.login()
            page_two = '[data-pager=runs] [data-page-of="2"]'
            for _ in range(repeat):
                if driver.open("jobs", "[data-table=jobs] tbody tr", jobs):
                    driver.next_page(
                        "[data-more=jobs]",
                        f"[data-table=jobs] tbody tr:nth-child({2 * JOBS_PAGE})",
                        more,
                    )
                if driver.open("runs", "[data-table=runs] tbody tr", runs):
                    driver.next_page("[data-pager=runs] [data-page=older]", page_two, older)
                if driver.open(f"runs?job={hot_job}", "[data-table=runs] tbody tr", job_runs):
                    driver.next_page("[data-pager=runs] [data-page=older]", page_two, job_older)
            context.close()
        finally:
            browser.close()
    finally:
        manager.stop()
    for timings in (jobs, more, runs, older, job_runs, job_older):
        timings.report()


# -- direct HTTP -----------------------------------------------------------------------------


def _latencies(
    replica: ReplicaProcess, paths: Callable[[int], str], count: int, budget_s: float
) -> tuple[list[float], int]:
    """(ms of each of up to `count` GETs of `paths(n)`, bytes of the last answer) on one
    connection, stopped once `budget_s` has passed."""
    host, port = replica.identity.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=max(budget_s, 60))
    out: list[float] = []
    size = 0
    try:
        _get(conn, paths(0))  # the credential's one hash, not measured
        deadline = time.monotonic() + budget_s
        for n in range(count):
            if time.monotonic() > deadline:
                break
            sent = time.perf_counter()
            size = len(_get(conn, paths(n)))
            out.append((time.perf_counter() - sent) * 1000)
    finally:
        conn.close()
    return out, size


def _get(conn: http.client.HTTPConnection, path: str) -> bytes:
    conn.request("GET", path, headers={"Authorization": AUTH})
    resp = conn.getresponse()
    body = resp.read()
    if resp.status != 200:
        raise RuntimeError(f"GET {path}: {resp.status} {body[:200]!r}")
    return body


def http_figures(
    replica: ReplicaProcess, names: list[str], hot_job: str, count: int, budget_s: float
) -> None:
    spread = [encode_cursor("jobs", [names[(n * 7919) % len(names)]]) for n in range(count)]
    traces = (
        "/api/job/events/statusTraces?jobName=&startTime=&endTime=&sort=creationTime"
        f"&order=desc&per_page={TRACE_ROWS}"
    )
    cases: list[tuple[str, Callable[[int], str], float | None]] = [
        ("http-jobs-page", lambda n: f"/api/job/jobs?limit={JOBS_PAGE}", PAGE_GOAL_MS),
        (
            "http-jobs-page-at-cursor",
            lambda n: f"/api/job/jobs?limit={JOBS_PAGE}&cursor={spread[n]}",
            PAGE_GOAL_MS,
        ),
        ("http-runs-all-statusTraces", lambda n: traces, None),
        (
            f"http-runs-{hot_job}",
            lambda n: f"/api/job/{quote(hot_job)}/runs?limit={RUNS_SHOWN}",
            None,
        ),
        (
            "http-job-last-run",
            lambda n: f"/api/job/{quote(names[(n * 7919) % len(names)])}/runs?limit=1",
            None,
        ),
        ("http-jobs-unpaged", lambda n: "/api/job/jobs", None),
    ]
    for name, paths, goal_ms in cases:
        try:
            got, size = _latencies(replica, paths, count, budget_s)
        except (OSError, RuntimeError, http.client.HTTPException) as exc:
            print(f"{name}: ERROR {type(exc).__name__}: {exc}", flush=True)
            continue
        p99, p50 = pct(got, 0.99), statistics.median(got)
        figure = (
            f"p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {max(got):.1f} ms over {len(got)} "
            f"requests ({size / 1024:.0f} KiB an answer)"
        )
        if goal_ms is not None:
            verdict(name, figure, f"p99 < {goal_ms:.0f} ms", p99 < goal_ms)
        else:
            print(f"{name}: {figure} (no goal)", flush=True)


# -- main ------------------------------------------------------------------------------------


def _memory(replica: ReplicaProcess, when: str) -> int:
    rss, peak = rss_kib(replica.pid), hwm_kib(replica.pid)
    print(f"replica memory {when}: VmRSS {rss / 1024:.0f} MiB, VmHWM {peak / 1024:.0f} MiB")
    return rss


def run(args: argparse.Namespace, base: Path) -> None:
    names = _job_names(args.jobs)
    hot_job = names[0]
    zk = ZooKeeperEnsemble(base / "zk", size=1, heap_mb=args.zk_heap_mb)
    replica: ReplicaProcess | None = None
    try:
        zk.start()
        namespace = f"console-{uuid.uuid4().hex[:6]}"
        started = time.monotonic()
        _write_jobs(zk, namespace, names)
        print(f"setup: {args.jobs} jobs into ZooKeeper in {time.monotonic() - started:.1f} s")
        replica = ReplicaProcess(
            zk.hosts, base, zk_namespace=namespace, mesos_url="127.0.0.1:1"
        ).start()
        started = time.monotonic()
        watched = replica
        _wait(lambda: "started reconcile" in watched.log_text(), 900, "the leader's components")
        start_s = _start_seconds(replica)
        shown = "?" if start_s is None else f"{start_s:.1f} s from 'won term'"
        print(f"setup: leader started in {time.monotonic() - started:.1f} s ({shown})")
        trace_db = Path(replica.settings["data_dir"]) / TRACE_DB
        engine = create_engine(f"sqlite:///{trace_db}")
        try:
            _wait(lambda: trace_db.exists() and _tables_made(engine), 120, "the trace tables")
            started = time.monotonic()
            plan = RunPlan(names, args.runs, min(args.hot_runs, args.runs), args.days)
            _write_runs(engine, plan, args.chunk)
            with engine.connect() as conn:
                rows = conn.execute(select(func.count()).select_from(StatusTraceLog)).scalar_one()
        finally:
            engine.dispose()
        print(
            f"setup: {args.runs} runs ({rows} trace rows, {plan.hot_runs} of them {hot_job}'s) "
            f"over the last {args.days:g} days in {time.monotonic() - started:.1f} s; "
            f"{trace_db.name} {trace_db.stat().st_size / 2**20:.0f} MiB",
            flush=True,
        )
        before = _memory(replica, "before the browser")
        browse(replica, hot_job, args.repeat, args.view_timeout_s)
        http_figures(replica, names, hot_job, args.requests, args.http_budget_s)
        after = _memory(replica, "after the browser and the requests")
        print(f"replica memory growth: {(after - before) / 1024:+.0f} MiB (no goal)", flush=True)
    finally:
        if replica is not None:
            replica.stop()
            if args.keep_logs:
                Path(args.keep_logs).mkdir(parents=True, exist_ok=True)
                shutil.copy(replica.log_path, Path(args.keep_logs) / replica.log_path.name)
        zk.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--hot-runs", type=int, default=1000, help="runs of the first job")
    parser.add_argument("--days", type=float, default=7.0, help="the runs span this many days")
    parser.add_argument("--chunk", type=int, default=50_000, help="runs a bulk insert")
    parser.add_argument("--repeat", type=int, default=5, help="each view this many times")
    parser.add_argument("--requests", type=int, default=50, help="direct GETs per endpoint")
    parser.add_argument("--http-budget-s", type=float, default=90.0)
    parser.add_argument("--view-timeout-s", type=float, default=120.0)
    parser.add_argument("--zk-heap-mb", type=int, default=2048)
    parser.add_argument("--keep-logs", default="", help="copy the replica's log there")
    args = parser.parse_args(argv)
    if args.jobs < 2 or args.runs < 1:
        parser.error("--jobs must be at least 2 and --runs at least 1")
    print(
        f"console at scale: {args.jobs} jobs, {args.runs} runs; a 2-core machine shared with "
        "other work, so every figure is an upper bound",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as tmp:
        run(args, Path(tmp))


if __name__ == "__main__":
    main()

"""The replica's Prometheus metrics, built with prometheus_client on a registry of its own (one
per replica: tests run several in one process, so never the global default registry).

- `ReplicaCollector`: what the replica knows at each scrape, standby or leader: its role, terms,
  ZooKeeper and Mesos connection states, and the figures of the term it leads (queues, offers,
  the trace writer), read from `ReplicaFigures` snapshots.
- `SchedulerMetrics`: counted as things happen, kept across terms (a counter of this process):
  per job (label `job_name`, as Prometheus keeps `job` for itself) runs by result, run
  durations and skipped fires; cluster-wide launches and fire-to-launch latency. A job's series
  go when the job is deleted, and those of jobs no longer registered at each term's start; at
  most `MAX_JOBS` jobs have series of their own, the rest share `job_name="_other"`.

Runs are counted from status updates: each update that ends a run (a complete execution record:
a transient task's end, a daemon run's COMPLETE, a daemon run cut short by a kill; or a task's
terminal update without one) counts once, a repeated terminal update of a task never twice. A
daemon task killed while idle ran nothing and counts nothing. Durations come from the execution
records (the executor's, or the command executor's updates for SCRIPT command tasks).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from executor.records import ExecutionRecord, RecordError, decode_status_data
from scheduler.edge.job_series import JobCounter, JobHistogram, MetricsRegistry, TextFamily
from scheduler.model.job_events import JobEvent, JobEventKind
from scheduler.model.runs import NO_RUN_KEY, CommandRuns, run_result
from scheduler.model.task_id import LaunchedTask, TaskId, TaskType
from scheduler.model.task_states import TERMINAL_STATES

__all__ = [
    "MAX_JOBS",
    "OTHER_JOBS",
    "ReplicaCollector",
    "ReplicaFigures",
    "SchedulerMetrics",
    "TermFigures",
    "render_metrics",
]

log = logging.getLogger(__name__)

MAX_JOBS = 5000
OTHER_JOBS = "_other"
JOB_LABEL = "job_name"
WORKFLOW_LABEL = "workflow_name"
_ZK_STATES = ("CONNECTED", "SUSPENDED", "LOST")
_ROLES = ("leader", "standby")
_MESOS_STATES = ("connected", "connecting", "reconnecting", "disconnected")
_RUN_BUCKETS = (0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400)
_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 1800, 3600)
_ENDED_KEPT = 100_000
_JOB_EVENT_FAMILIES = {
    JobEventKind.RUN_FAILED: ("ejc_runs_failed", "Shards that failed for good (not relaunched)."),
    JobEventKind.RUN_TIMED_OUT: (
        "ejc_runs_timed_out",
        "Runs stopped after their job's timeoutSeconds.",
    ),
    JobEventKind.FIRE_SKIPPED: (
        "ejc_fires_skipped",
        "Cron fires skipped (misfire off: missed, running or pending).",
    ),
    JobEventKind.FIRE_CAPPED: (
        "ejc_fires_capped",
        "Cron fires dropped: job_state_queue_size runs already pending.",
    ),
    JobEventKind.FIRE_DELAYED: (
        "ejc_fires_delayed",
        "Cron fires delayed over max_fires_per_second (accounted and run later, not dropped).",
    ),
    JobEventKind.FIRE_EXCLUDED: (
        "ejc_fires_excluded",
        "Cron fires skipped because one of the job's excludeCalendars excludes their time.",
    ),
}
_WEBHOOK_OUTCOMES = ("delivered", "retried", "given_up", "dropped")


@dataclass(frozen=True)
class TermFigures:
    """What the leader's term knows at a scrape (its components keep these up to date)."""

    ready_runs: int = 0
    failover_shards: int = 0
    offers_held: int = 0
    offers_declined: int = 0
    launch_rounds: int = 0
    """Launcher rounds (each gathers the pending work and places what it can)."""
    launches_unconfirmed: int = 0
    """Tasks whose ACCEPT went unanswered (their bookkeeping kept; reconciliation decides)."""
    status_batches: int = 0
    """Transactions that wrote status updates that came together (issue 29)."""
    status_batched: int = 0
    """Status updates written in those transactions."""
    status_batch_fallbacks: int = 0
    """Batches whose transaction ZooKeeper refused: their updates were handled one by one."""
    trace_backlog: int = 0
    trace_dropped: int = 0
    trace_errors: int = 0
    trace_database_down_since: float = 0.0
    """Epoch seconds since when the trace database is down (0: up, or statistics off)."""
    trace_database_outages: int = 0
    results_dropped: int = 0
    """Task results not journaled this term (the journal was full while the database was down)."""
    samples_dropped: int = 0
    job_events: Mapping[JobEventKind, int] = field(default_factory=dict)
    """Run and fire events of the term, by kind (fires counted one by one)."""
    webhook_deliveries: Mapping[str, int] = field(default_factory=dict)
    """Failure webhook deliveries by outcome (delivered, retried, given_up, dropped)."""
    webhook_queue: int = 0
    audit_write_failures: int = 0
    """Audit records whose write to the trace database failed at least once this term."""
    audit_dropped: int = 0
    """Audit records lost this term (the buffer was full, or left at the stop)."""
    audit_backlog: int = 0
    pools: Mapping[str, tuple[int, int, int]] = field(default_factory=dict)
    """Concurrency pools (issue 28): pool -> (size, slots in use, waiting units), as the
    launcher's last round counted them."""


@dataclass(frozen=True)
class ReplicaFigures:
    """A snapshot of the replica for one scrape."""

    acting: bool
    terms: int
    term_failures: int
    leader_changes: int
    zk_clients: int
    zk_state: str
    started_at: float
    term_started_at: float = 0.0
    unplaceable: int = 0
    mesos: str | None = None
    """The Mesos driver's state (leader only): `connected`, `connecting: ...`, ..."""
    term: TermFigures | None = None


class ReplicaCollector:
    """Metrics of the replica's state, read at each scrape from `figures()` (any thread)."""

    def __init__(self, figures: Callable[[], ReplicaFigures]) -> None:
        self._figures = figures

    def collect(self) -> Iterator[Metric]:
        yield from _replica_families(self._figures())


def _replica_families(f: ReplicaFigures) -> Iterator[Metric]:
    yield GaugeMetricFamily(
        "ejc_leader", "1 while this replica is the acting leader.", value=int(f.acting)
    )
    role = GaugeMetricFamily(
        "ejc_replica_role", "This replica's role (1 for the current one).", labels=["role"]
    )
    for name in _ROLES:
        role.add_metric([name], int((name == "leader") == f.acting))
    yield role
    yield CounterMetricFamily(
        "ejc_leader_terms", "Leadership terms this replica started.", value=f.terms
    )
    yield CounterMetricFamily(
        "ejc_leader_term_failures",
        "Terms given up because a component failed.",
        value=f.term_failures,
    )
    yield CounterMetricFamily(
        "ejc_leader_changes", "Leader changes this replica observed.", value=f.leader_changes
    )
    yield GaugeMetricFamily(
        "ejc_leader_term_start_timestamp_seconds",
        "Start of the current term (0: none).",
        value=f.term_started_at,
    )
    zk = GaugeMetricFamily(
        "ejc_zookeeper_state", "ZooKeeper session state of this replica.", labels=["state"]
    )
    for state in _ZK_STATES:
        zk.add_metric([state], int(f.zk_state == state))
    yield zk
    yield CounterMetricFamily(
        "ejc_zookeeper_clients",
        "ZooKeeper clients built (1 + replacements).",
        value=f.zk_clients,
    )
    yield GaugeMetricFamily(
        "ejc_replica_start_timestamp_seconds",
        "When this replica started.",
        value=f.started_at,
    )
    mesos_state = (f.mesos or "").split(":", 1)[0].strip()
    yield GaugeMetricFamily(
        "ejc_mesos_connected",
        "1 while the leader is subscribed to the Mesos master (0 on standbys).",
        value=int(mesos_state == "connected"),
    )
    mesos = GaugeMetricFamily(
        "ejc_mesos_state",
        "The leader's Mesos connection state (none on standbys).",
        labels=["state"],
    )
    if f.mesos is not None:
        for state in _MESOS_STATES:
            mesos.add_metric([state], int(mesos_state == state))
    yield mesos
    yield GaugeMetricFamily(
        "ejc_jobs_unplaceable",
        "Jobs with a pending run that no known Mesos agent could ever hold (passed over by "
        "the launcher; leader only).",
        value=f.unplaceable,
    )
    yield from _term_families(f.term or TermFigures())


def _term_families(t: TermFigures) -> Iterator[Metric]:
    yield GaugeMetricFamily(
        "ejc_ready_runs", "Pending runs in the ready queue (leader only).", value=t.ready_runs
    )
    yield GaugeMetricFamily(
        "ejc_failover_shards",
        "Shards waiting in the failover queue (leader only).",
        value=t.failover_shards,
    )
    yield GaugeMetricFamily(
        "ejc_offers_held", "Mesos offers the launcher holds now.", value=t.offers_held
    )
    yield CounterMetricFamily(
        "ejc_offers_declined",
        "Mesos offers declined this term (unused, or no work to place).",
        value=t.offers_declined,
    )
    yield CounterMetricFamily(
        "ejc_launch_rounds",
        "Launcher rounds this term: each gathers the pending work and places what it can.",
        value=t.launch_rounds,
    )
    yield CounterMetricFamily(
        "ejc_launches_unconfirmed",
        "Tasks this term whose ACCEPT the master did not answer: kept as launched, asked "
        "about by reconciliation after a grace.",
        value=t.launches_unconfirmed,
    )
    yield CounterMetricFamily(
        "ejc_status_batches",
        "Transactions that wrote status updates that came together, this term.",
        value=t.status_batches,
    )
    yield CounterMetricFamily(
        "ejc_status_updates_batched",
        "Status updates written in those transactions, this term.",
        value=t.status_batched,
    )
    yield CounterMetricFamily(
        "ejc_status_batch_fallbacks",
        "Batches of status updates ZooKeeper refused (a node changed meanwhile), handled one "
        "by one, this term.",
        value=t.status_batch_fallbacks,
    )
    yield GaugeMetricFamily(
        "ejc_trace_writer_backlog",
        "Event trace entries waiting to be written.",
        value=t.trace_backlog,
    )
    yield CounterMetricFamily(
        "ejc_trace_writer_dropped",
        "Event trace entries dropped this term (the queue was full, or left at the stop).",
        value=t.trace_dropped,
    )
    yield CounterMetricFamily(
        "ejc_trace_writer_errors",
        "Event trace entries the database refused this term.",
        value=t.trace_errors,
    )
    yield GaugeMetricFamily(
        "ejc_trace_database_down_since_timestamp_seconds",
        "Since when the trace database has been down (0: up; leader only).",
        value=t.trace_database_down_since,
    )
    yield CounterMetricFamily(
        "ejc_trace_database_outages",
        "Trace database outages this term (writes failing for want of reaching it).",
        value=t.trace_database_outages,
    )
    dropped = CounterMetricFamily(
        "ejc_statistics_dropped",
        "Statistics records dropped this term while the trace database was down (results: the "
        "journal in ZooKeeper was full; samples: the sampler's buffer was full).",
        labels=["kind"],
    )
    dropped.add_metric(["results"], t.results_dropped)
    dropped.add_metric(["samples"], t.samples_dropped)
    yield dropped
    for kind, (name, text) in _JOB_EVENT_FAMILIES.items():
        yield CounterMetricFamily(name, text, value=t.job_events.get(kind, 0))
    deliveries = CounterMetricFamily(
        "ejc_webhook_deliveries",
        "Failure webhook deliveries by outcome (retried: failed attempts tried again; dropped: "
        "the queue was full).",
        labels=["outcome"],
    )
    for outcome in _WEBHOOK_OUTCOMES:
        deliveries.add_metric([outcome], t.webhook_deliveries.get(outcome, 0))
    yield deliveries
    yield GaugeMetricFamily(
        "ejc_webhook_queue_length",
        "Failure webhook events waiting to be sent.",
        value=t.webhook_queue,
    )
    yield CounterMetricFamily(
        "ejc_audit_write_failures",
        "Audit records whose write to the trace database failed this term (held and retried).",
        value=t.audit_write_failures,
    )
    yield CounterMetricFamily(
        "ejc_audit_dropped",
        "Audit records lost this term (buffer full while the database was down, or the stop).",
        value=t.audit_dropped,
    )
    yield GaugeMetricFamily(
        "ejc_audit_backlog", "Audit records waiting to be written.", value=t.audit_backlog
    )
    yield from _pool_families(t.pools)


def _pool_families(pools: Mapping[str, tuple[int, int, int]]) -> Iterator[Metric]:
    """The concurrency pools' gauges (issue 28), one series per pool."""
    families = (
        GaugeMetricFamily("ejc_pool_size", "A concurrency pool's size (slots).", labels=["pool"]),
        GaugeMetricFamily(
            "ejc_pool_in_use",
            "Slots of a concurrency pool held by running tasks (the launcher's last round).",
            labels=["pool"],
        ),
        GaugeMetricFamily(
            "ejc_pool_waiting",
            "Runs and failover shards waiting for a concurrency pool's slots (or never "
            "placeable in it).",
            labels=["pool"],
        ),
    )
    for name, figures in sorted(pools.items()):
        for family, value in zip(families, figures, strict=True):
            family.add_metric([name], value)
    yield from families


class SchedulerMetrics:
    """Counters and histograms of scheduling, on the replica's registry; listener methods are
    called from the leader's threads (never blocking)."""

    def __init__(self, registry: CollectorRegistry, max_jobs: int = MAX_JOBS) -> None:
        # Each counter would have a `_created` series beside it: twice the per-job series for
        # what a Prometheus server works out itself (this process's setting, not a registry's).
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self._max_jobs = max_jobs
        self._lock = threading.Lock()
        self._jobs: set[str] = set()
        # Deleted jobs (issue 30): the end of a task their deletion killed comes after
        # `forget_job` and must not bring their series back; a launch of the name again (it
        # was registered anew) takes it off.
        self._gone: OrderedDict[str, None] = OrderedDict()
        self._ended: OrderedDict[str, None] = OrderedDict()
        self._daemon_tasks: OrderedDict[str, None] = OrderedDict()
        self._commands = CommandRuns()
        # Per job: written by themselves, not by generate_latest (`job_series`).
        self.runs = JobCounter(
            "ejc_job_runs",
            "Runs that ended, by job and result (success, failure, timeout, killed).",
            JOB_LABEL,
            "result",
        )
        registry.register(self.runs)
        self.run_duration = JobHistogram(
            "ejc_job_run_duration_seconds",
            "How long runs ran, from start to end, by job.",
            JOB_LABEL,
            _RUN_BUCKETS,
        )
        registry.register(self.run_duration)
        self.fires_skipped = JobCounter(
            "ejc_job_fires_skipped",
            "Cron fires that added no run, by job and outcome (skipped: misfire off; capped: "
            "job_state_queue_size runs pending; excluded: by one of its excludeCalendars).",
            JOB_LABEL,
            "outcome",
        )
        registry.register(self.fires_skipped)
        self.launches = Counter(
            "ejc_task_launches",
            "Tasks launched, by type (READY: a fire or trigger; FAILOVER: a relaunch).",
            ["type"],
            registry=registry,
        )
        self.fire_to_launch = Histogram(
            "ejc_fire_to_launch_seconds",
            "From a cron fire to the launch of the run it queued (this leader's fires).",
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        # Per workflow (issue 27), bounded as the jobs' series are.
        self._workflows: set[str] = set()
        self.workflow_runs = Counter(
            "ejc_workflow_runs",
            "Workflow runs that ended, by workflow and result (succeeded, failed, cancelled, "
            "timed_out).",
            [WORKFLOW_LABEL, "result"],
            registry=registry,
        )
        self.workflow_run_duration = Histogram(
            "ejc_workflow_run_duration_seconds",
            "How long workflow runs ran, from their start to their end, by workflow.",
            [WORKFLOW_LABEL],
            buckets=_RUN_BUCKETS,
            registry=registry,
        )
        for kind in TaskType:
            self.launches.labels(kind.value)

    def on_workflow_run(self, workflow: str, result: str, duration_s: float) -> None:
        """Workflow engine listener: a run ended (its thread or an API thread)."""
        with self._lock:
            if workflow not in self._workflows and len(self._workflows) >= self._max_jobs:
                workflow = OTHER_JOBS
            else:
                self._workflows.add(workflow)
        self.workflow_runs.labels(workflow, result).inc()
        self.workflow_run_duration.labels(workflow).observe(max(0.0, duration_s))

    # -- job label ---------------------------------------------------------------------------

    def _job(self, job_name: str) -> str:
        with self._lock:
            if job_name in self._jobs:
                return job_name
            if len(self._jobs) >= self._max_jobs:
                return OTHER_JOBS
            self._jobs.add(job_name)
            return job_name

    def forget_job(self, job_name: str) -> None:
        """Drop the job's series (it was deleted), and keep them dropped: the ends of its
        tasks still to come are not counted until a task of that name is launched again."""
        with self._lock:
            self._jobs.discard(job_name)
            _remember(self._gone, job_name)
        self.runs.remove(job_name)
        self.fires_skipped.remove(job_name)
        self.run_duration.remove(job_name)

    def retain_jobs(self, names: Iterable[str]) -> None:
        """Drop the series of every job not in `names` (the registered ones)."""
        keep = set(names)
        with self._lock:
            gone = [name for name in self._jobs if name not in keep]
        for name in gone:
            self.forget_job(name)

    def job_names(self) -> set[str]:
        with self._lock:
            return set(self._jobs)

    # -- listeners ---------------------------------------------------------------------------

    def on_launched(self, launched: Sequence[LaunchedTask]) -> None:
        """Launcher listener (sched-launcher): a round's launches, counted by type."""
        counts: dict[str, int] = {}
        with self._lock:
            for task, _agent, _original in launched:
                self._gone.pop(task.job_name, None)  # registered anew
                kind = task.type.value
                counts[kind] = counts.get(kind, 0) + 1
        for kind, count in counts.items():
            self.launches.labels(kind).inc(count)

    def on_fire_launched(self, latency_s: float) -> None:
        self.fire_to_launch.observe(max(0.0, latency_s))

    def on_job_event(self, event: JobEvent) -> None:
        """Producer, workflow engine and status handler listener: skipped, capped and excluded
        fires."""
        if event.kind is JobEventKind.FIRE_SKIPPED:
            outcome = "skipped"
        elif event.kind is JobEventKind.FIRE_CAPPED:
            outcome = "capped"
        elif event.kind is JobEventKind.FIRE_EXCLUDED:
            outcome = "excluded"  # issue 28: a calendar excluded the fire
        else:
            return
        self.fires_skipped.inc(self._job(event.job_name), outcome, max(1, event.fires))

    def on_status(self, status: Mapping[str, Any], parsed: TaskId) -> None:
        """Status handler listener (sched-mesos-events): count the run an update ends (not
        for a deleted job: its killed tasks end after its series were dropped)."""
        with self._lock:
            if parsed.job_name in self._gone:
                return
        task_id = str(parsed)
        state = str(status.get("state", ""))
        message = str(status.get("message", ""))
        try:
            record = decode_status_data(status.get("data"))
        except RecordError:
            record = None
        command_start = self._commands.started_ms(task_id)
        if record is None:
            record = self._commands.record_of(status, parsed)
            if record is not None and record.complete and command_start is None:
                record = None  # its start is unknown here: a result, but no duration
        if (
            state == "TASK_RUNNING"
            and record is None
            and message not in ("BEGIN", "COMPLETE")
            and status.get("source") == "SOURCE_EXECUTOR"
            and status.get("data") is None
            and not _is_command(status, task_id)
        ):
            # Our executor's plain TASK_RUNNING: a transient task's carries its started record,
            # so a task without one is a daemon.
            _remember(self._daemon_tasks, task_id)
        if state in TERMINAL_STATES:
            with self._lock:
                if task_id in self._ended:
                    return  # a repeated terminal update
                _remember(self._ended, task_id)
            if status.get(NO_RUN_KEY):
                self._daemon_tasks.pop(task_id, None)
                return  # an idle daemon task gone with its cluster: no run was going on
            if record is None or not record.complete:
                if state == "TASK_KILLED" and task_id in self._daemon_tasks:
                    self._daemon_tasks.pop(task_id, None)
                    return  # an idle daemon task stopped: no run was going on
                self._daemon_tasks.pop(task_id, None)
                self._count(parsed.job_name, run_result(state, status.get("reason"), None), None)
                return
            self._daemon_tasks.pop(task_id, None)
        elif record is None or not record.complete:
            return
        assert record is not None
        self._count(parsed.job_name, run_result(state, status.get("reason"), record), record)

    def _count(self, job_name: str, result: str, record: ExecutionRecord | None) -> None:
        job = self._job(job_name)
        self.runs.inc(job, result)
        if record is not None and record.complete_time_ms is not None:
            seconds = max(0, record.complete_time_ms - record.start_time_ms) / 1000
            self.run_duration.observe(job, seconds)


def render_metrics(
    registry: CollectorRegistry, visible_jobs: Callable[[set[str]], set[str]] | None = None
) -> bytes:
    """The registry in Prometheus' text format; with `visible_jobs` (job names -> those the
    caller may see, called once per scrape with every job that has a series), the per-job series
    of the other jobs, and the `_other` series that mixes jobs of any app, are left out
    (`metrics_require_auth`, issue 26), and so is every per-workflow series (issue 27: shown
    only to callers who see every app). The families stay, so a dashboard sees no error."""
    if visible_jobs is None:
        if isinstance(registry, MetricsRegistry):
            return registry.latest()  # its per-job families written by themselves
        return generate_latest(registry)
    own: list[TextFamily] = []
    if isinstance(registry, MetricsRegistry):
        families = list(registry.others().collect())
        own = registry.own_text()
    else:
        families = list(registry.collect())
    named = {s.labels[JOB_LABEL] for m in families for s in m.samples if JOB_LABEL in s.labels}
    named.update(*(family.label_values() for family in own))
    shown = visible_jobs(named - {OTHER_JOBS})
    kept: list[Metric] = []
    for family in families:
        samples = [
            s
            for s in family.samples
            if (JOB_LABEL not in s.labels or s.labels[JOB_LABEL] in shown)
            # A workflow's series only for callers who see every app (no filter then).
            and WORKFLOW_LABEL not in s.labels
        ]
        if len(samples) == len(family.samples):
            kept.append(family)
            continue
        copy = Metric(family.name, family.documentation, family.type, family.unit)
        copy.samples = samples
        kept.append(copy)
    text = "".join(family.text(shown.__contains__) for family in own)
    return generate_latest(_Collected(kept)) + text.encode()


class _Collected(CollectorRegistry):
    """Families already collected, rendered as a registry would be."""

    def __init__(self, families: list[Metric]) -> None:
        super().__init__(auto_describe=False)
        self._families = families

    def collect(self) -> Iterator[Metric]:
        yield from self._families


def _is_command(status: Mapping[str, Any], task_id: str) -> bool:
    executor = status.get("executor_id")
    return isinstance(executor, Mapping) and executor.get("value") == task_id


def _remember(kept: OrderedDict[str, None], key: str) -> None:
    kept[key] = None
    kept.move_to_end(key)
    while len(kept) > _ENDED_KEPT:
        kept.popitem(last=False)

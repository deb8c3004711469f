"""The leader's components for one term, in start order (stopped in the reverse order).

term record, framework id, producer, statistics, webhooks, config listener, workflows, backfills,
task launcher, REST API, Mesos driver, reconcile. Components are built fresh for every term.

The Mesos driver is built first, without handlers: the launcher, the status handler, the config
listener and reconciliation are given it (or its `kill`) as they are built, and the driver is
then bound to their handlers in one call, before anything starts. The launcher's wake signal is
built before the producer and the status handler that wake it, and the producer before the
launcher that asks it for the next fire, so that each is given what it needs as it is built.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from scheduler.api.component import RestApi
from scheduler.edge.metrics import SchedulerMetrics, TermFigures
from scheduler.leader.backfill import BackfillEngine
from scheduler.leader.config_listener import ConfigListener
from scheduler.leader.lifecycle import LeaderComponent, WakeSignal
from scheduler.leader.mesos.driver import DriverHandlers, MesosDriver
from scheduler.leader.mesos.framework_id import FrameworkIdStore
from scheduler.leader.mesos.launcher import Launcher
from scheduler.leader.mesos.operator_actions import MesosActions
from scheduler.leader.mesos.reconcile import Reconciler
from scheduler.leader.mesos.status import StatusHandler
from scheduler.leader.producer import Producer
from scheduler.leader.statistics.component import Statistics
from scheduler.leader.statistics.fire_times import FireTimes
from scheduler.leader.webhooks import WebhookNotifier
from scheduler.leader.workflows import WorkflowEngine
from scheduler.model.errors import SchedulerError
from scheduler.model.job_events import JobEvent, JobEventCounts
from scheduler.model.task_id import LaunchedTask
from scheduler.model.workflow import WorkflowRun, ended_event
from scheduler.replica.term import BuiltTerm, LeaderContext, TermReadout
from scheduler.replica.terms_log import TermRecorder
from scheduler.storage.backfill_store import BackfillStore
from scheduler.storage.config_store import resolve_time_zone
from scheduler.storage.queue_cache import QueueCache
from scheduler.storage.term_stores import TermStores
from scheduler.storage.workflow_store import WorkflowQueue, WorkflowStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _TermParts:
    """A term's components as built, before they are tied to each other."""

    stores: TermStores
    fires: FireTimes
    framework_ids: FrameworkIdStore
    driver: MesosDriver
    launcher: Launcher
    producer: Producer
    statistics: Statistics
    webhooks: WebhookNotifier
    listener: ConfigListener
    status: StatusHandler
    reconciler: Reconciler
    workflows: WorkflowEngine
    backfills: BackfillEngine


def build_components(ctx: LeaderContext) -> BuiltTerm:
    """The term's components in start order: built (the driver first, unbound), tied together
    by listeners, then the driver bound to its handlers; nothing has started yet. With them,
    what the replica reads of the term for `/health` and `/metrics`."""
    parts = _build_parts(ctx)
    event_counts = _fan_out_job_events(parts)
    if ctx.metrics is not None:
        _wire_metrics(ctx.metrics, parts)
    parts.launcher.launch_listeners.append(parts.statistics.on_launched)
    parts.launcher.launching_listeners.append(parts.status.note_launching)
    parts.launcher.launched_task_listeners.append(parts.status.note_launched)
    # An unanswered ACCEPT: on its way a while more, then reconciliation asks (status first).
    parts.launcher.unconfirmed_listeners.append(parts.status.note_unconfirmed)
    parts.launcher.unconfirmed_listeners.append(parts.reconciler.ask_later)
    parts.status.listeners.append(parts.workflows.on_status)  # a task's end may end a node
    parts.status.listeners.append(parts.backfills.on_status)  # ... or a backfill's fire
    _bind_driver(parts)
    actions = MesosActions(parts.driver, parts.reconciler, lambda: parts.framework_ids.framework_id)
    readout = TermReadout(
        mesos=lambda: parts.driver.status,
        unplaceable=lambda: len(parts.launcher.unplaceable_jobs()),
        statistics=parts.statistics.info,
        figures=_figures(parts, event_counts),
    )
    components: list[LeaderComponent] = [
        TermRecorder(ctx),
        parts.framework_ids,
        parts.producer,
        parts.statistics,
        parts.webhooks,
        parts.listener,
        parts.workflows,
        parts.backfills,  # after the workflows, which load the node fires' queue it adds to
        parts.launcher,
        RestApi(
            ctx,
            parts.stores,
            actions,
            parts.statistics,
            parts.launcher.capacity,
            workflow_engine=parts.workflows,
            backfill_engine=parts.backfills,
        ),
        parts.driver,
        parts.reconciler,
    ]
    return BuiltTerm(components, readout)


def _build_parts(ctx: LeaderContext) -> _TermParts:
    """Every component of the term, the Mesos driver first and without handlers (they are
    bound once the components that handle its events exist): the others are given it, or its
    `kill`, as they are built. The launcher's wake signal comes before the producer and the
    status handler, which wake it, and the producer before the launcher, which asks it when
    the next fire is."""
    settings = ctx.settings
    stores = TermStores.build(
        ctx.registry,
        ctx.term.fence,
        resolve_time_zone(settings.time_zone),
        settings.job_state_queue_size,
        max_pools=settings.max_pools,
        max_calendars=settings.max_calendars,
    )
    framework_ids = FrameworkIdStore(ctx.registry, ctx.term.fence)
    driver = MesosDriver(settings, framework_ids)
    # The launcher's thread waits on it; the producer (runs queued), the status handler (a
    # task ended, when work is pending) and the view of the queues (a watch fired, a fire
    # noted) wake it, as the launcher's own inputs do.
    wake_launcher = WakeSignal()
    # The queues as watches keep them, shared by the producer's fire ledger and the launcher.
    queues = QueueCache(stores.registry, stores.config, on_change=wake_launcher.wake)
    # A pool created or resized may let waiting runs launch at once (issue 28).
    stores.pools.listeners.append(wake_launcher.wake)
    # The fires this term queued, matched to the launches that run them: the statistics' launch
    # rows name them. Fed by `_wire_metrics`, so known only where the replica has metrics.
    fires = FireTimes()

    def kill_job_tasks(job_name: str) -> None:
        for task in stores.running.tasks(job_name):
            driver.kill(task.task_id)

    producer = Producer(
        stores,
        ctx.term,
        wake_launcher.wake,
        settings.job_state_queue_size,
        queues,
        max_fires_per_second=settings.max_fires_per_second,
        calendars=stores.calendars,  # asked at each fire of a job with excludeCalendars
    )
    # Workflow node fires (issue 27): queued by the engine, launched by the launcher.
    workflow_store = WorkflowStore(
        ctx.registry,
        ctx.term.fence,
        resolve_time_zone(settings.time_zone),
        settings.max_workflow_nodes,
    )
    node_fires = WorkflowQueue(on_change=wake_launcher.wake)
    launcher = Launcher(
        stores,
        ctx.term,
        driver,
        queues,
        wake=wake_launcher,
        next_fire=producer.next_fire_at,
        workflows=node_fires,
        fire_times=fires,
    )
    statistics = Statistics(
        settings, ctx.registry, ctx.term.fence, fires.fire_of, backfill_of=fires.backfill_of
    )
    return _TermParts(
        stores=stores,
        fires=fires,
        framework_ids=framework_ids,
        driver=driver,
        launcher=launcher,
        producer=producer,
        statistics=statistics,
        webhooks=WebhookNotifier.from_settings(settings),
        listener=ConfigListener(stores, producer, kill_job_tasks, ctx.parsed_ahead),
        status=StatusHandler(
            stores,
            driver.kill,
            launcher.wake_for_work,
            statistics.journal,
            workflow_store,
            job_of=lambda name: queues.jobs([name]).get(name),
            running_of=queues.running_tasks,
        ),
        reconciler=Reconciler(stores, driver, settings.reconcile_interval_minutes),
        workflows=WorkflowEngine(
            workflow_store,
            stores,
            ctx.term,
            node_fires,
            driver.kill,
            calendars=stores.calendars,
            max_active_backfills=settings.max_active_backfills,  # workflows' backfills
        ),
        # Backfills (issue 28): their past fires queued as node fires, launched by the launcher.
        backfills=BackfillEngine(
            BackfillStore(ctx.registry, ctx.term.fence, settings.max_active_backfills),
            stores,
            ctx.term,
            node_fires,
            driver.kill,
        ),
    )


def _fan_out_job_events(parts: _TermParts) -> JobEventCounts:
    """Status updates to the statistics; the job events of the producer and the status handler
    (failed, timed out, skipped, capped) counted, traced and POSTed to the webhooks. Returns
    the counts, a figure of `/metrics`."""
    event_counts = JobEventCounts()
    statistics, webhooks = parts.statistics, parts.webhooks

    def on_job_event(event: JobEvent) -> None:
        """Never blocks: each of the three only counts or queues."""
        event_counts.add(event)
        statistics.on_job_event(event)
        if event.kind.is_failure:  # a delayed fire, a run that succeeded: no webhook POST
            webhooks.notify(event)

    parts.status.listeners.append(statistics.on_status)
    parts.status.event_listeners.append(on_job_event)
    parts.producer.event_listeners.append(on_job_event)
    # A workflow's excluded cron fires (issue 28): a trace row and the count.
    parts.workflows.event_listeners.append(on_job_event)
    # Each ended workflow run (issue 27): its trace row, and a POST when it failed or timed out.
    parts.workflows.run_listeners.append(lambda run: on_job_event(ended_event(run)))
    return event_counts


def _wire_metrics(metrics: SchedulerMetrics, parts: _TermParts) -> None:
    """The replica's metrics fed by the term: fires, job events, launches, status updates, the
    time from a fire to its launch, and the series of deleted jobs dropped."""
    fires = parts.fires

    def on_launched(launched: Sequence[LaunchedTask]) -> None:
        """Before the statistics' TASK_STAGING rows, which name the fire."""
        now = time.time()
        for fire, first in fires.launched([task for task, _agent, _original in launched]):
            if first and fire is not None:
                metrics.on_fire_launched(now - fire)

    def on_deleted(job_name: str) -> None:
        fires.forget(job_name)
        metrics.forget_job(job_name)

    parts.producer.fire_listeners.append(fires.fired)
    parts.producer.event_listeners.append(metrics.on_job_event)
    parts.workflows.event_listeners.append(metrics.on_job_event)
    parts.launcher.launch_listeners.insert(0, on_launched)
    parts.launcher.launch_listeners.append(metrics.on_launched)
    parts.status.listeners.append(metrics.on_status)
    parts.listener.deleted_listeners.append(on_deleted)

    def on_workflow_run(run: WorkflowRun) -> None:
        started = run.started_at or run.fire_time
        metrics.on_workflow_run(
            run.workflow_name, run.state.value, (run.ended_at or started) - started
        )

    parts.workflows.run_listeners.append(on_workflow_run)
    try:
        metrics.retain_jobs(parts.stores.config.job_names())
    except SchedulerError as exc:
        log.warning("metrics: series of deleted jobs kept this term: %s", exc.message)


def _bind_driver(parts: _TermParts) -> None:
    """Give the driver, built first, the handlers of the components built over it."""
    launcher, reconciler = parts.launcher, parts.reconciler

    def on_connected() -> None:
        launcher.on_connected()
        reconciler.on_connected()

    def on_agent_lost(agent_id: str) -> None:
        launcher.agent_lost(agent_id)
        reconciler.reconcile_agent(agent_id)

    # Every update answers reconciliation for its task (asked again until answered).
    parts.status.listeners.append(reconciler.on_status)

    parts.driver.bind(
        DriverHandlers(
            on_offers=launcher.add_offers,
            on_rescind=launcher.rescind,
            on_status=parts.status.handle,
            on_statuses=parts.status.handle_many,
            on_connected=on_connected,
            on_disconnected=launcher.drop_offers,
            on_agent_lost=on_agent_lost,
        )
    )


def _figures(parts: _TermParts, event_counts: JobEventCounts) -> Callable[[], TermFigures]:
    """What `/metrics` reads of the term at each scrape."""
    launcher, statistics, webhooks = parts.launcher, parts.statistics, parts.webhooks

    def figures() -> TermFigures:
        trace = (statistics.info().get("trace") or {}) if statistics.engine else {}
        audit = statistics.audit.counters()
        return TermFigures(
            ready_runs=launcher.ready_runs,
            failover_shards=launcher.failover_shards,
            offers_held=launcher.held_offers(),
            offers_declined=launcher.declined,
            launch_rounds=launcher.rounds,
            launches_unconfirmed=launcher.unconfirmed,
            status_batches=parts.status.batches,
            status_batched=parts.status.batched,
            status_batch_fallbacks=parts.status.batch_fallbacks,
            trace_backlog=int(trace.get("pending", 0)),
            trace_dropped=int(trace.get("dropped", 0)),
            trace_errors=int(trace.get("errors", 0)),
            trace_database_down_since=statistics.down_since() or 0.0,
            trace_database_outages=(
                statistics.database.outages if statistics.database is not None else 0
            ),
            results_dropped=statistics.journal.dropped if statistics.journal is not None else 0,
            samples_dropped=statistics.samples_dropped(),
            job_events=event_counts.counts(),
            webhook_deliveries=webhooks.counts(),
            webhook_queue=webhooks.queue_length(),
            audit_write_failures=audit["failures"],
            audit_dropped=audit["dropped"],
            audit_backlog=audit["pending"],
            pools={
                name: (c.size, c.in_use, c.waiting)
                for name, c in parts.stores.pools.all_counts().items()
            },
        )

    return figures

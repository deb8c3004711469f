"""The leader's components for one term, in start order (stopped in the reverse order).

term record, framework id, state, producer, statistics, webhooks, config listener, task
launcher, REST API, Mesos driver, reconcile. Components are built fresh for every term.

The Mesos driver is built first, without handlers: the launcher, the status handler, the config
listener and reconciliation are given it (or its `kill`) as they are built, and the driver is
then bound to their handlers in one call, before anything starts.
"""

from __future__ import annotations

import logging
import time

from scheduler.api import create_app
from scheduler.api.auth import warn_about_defaults
from scheduler.ha.framework_id import FrameworkIdStore
from scheduler.ha.metrics import FireTimes, TermFigures
from scheduler.ha.term import LeaderContext
from scheduler.ha.terms_log import TermRecorder
from scheduler.leader.config_listener import ConfigListener
from scheduler.leader.lifecycle import LeaderComponent
from scheduler.leader.mesos.capacity import AgentCapacity
from scheduler.leader.mesos.driver import DriverHandlers, MesosDriver
from scheduler.leader.mesos.launcher import Launcher
from scheduler.leader.mesos.operator_actions import MesosActions, OperatorActions
from scheduler.leader.mesos.reconcile import Reconciler
from scheduler.leader.mesos.status import StatusHandler
from scheduler.leader.producer import Producer
from scheduler.leader.statistics.component import Statistics
from scheduler.leader.webhooks import WebhookNotifier
from scheduler.model.errors import SchedulerError
from scheduler.model.job_events import JobEvent, JobEventCounts
from scheduler.storage.config_store import resolve_time_zone
from scheduler.storage.queue_cache import QueueCache
from scheduler.storage.term_stores import TermStores

log = logging.getLogger(__name__)


class RestApi(LeaderComponent):
    """Serves the leader's `/api/*` on this replica's HTTP port for the term."""

    name = "rest-api"

    def __init__(
        self,
        ctx: LeaderContext,
        stores: TermStores,
        actions: OperatorActions,
        statistics: Statistics | None = None,
        capacity: AgentCapacity | None = None,
    ) -> None:
        self._ctx = ctx
        self._stores = stores
        self._actions = actions
        self._statistics = statistics
        self._capacity = capacity

    def start(self) -> None:
        warn_about_defaults(self._ctx.settings)
        app = create_app(self._ctx, self._actions, self._stores, self._statistics, self._capacity)
        self._ctx.mount_api(app)

    def stop(self) -> None:
        self._ctx.mount_api(None)


def build_components(ctx: LeaderContext) -> list[LeaderComponent]:
    settings = ctx.settings
    stores = TermStores.build(
        ctx.registry,
        ctx.term.fence,
        resolve_time_zone(settings.time_zone),
        settings.job_state_queue_size,
    )
    framework_ids = FrameworkIdStore(ctx)
    # Its handlers are bound below, once the components that handle its events exist.
    driver = MesosDriver(settings, framework_ids)
    # The queues as watches keep them, shared by the producer's fire ledger and the launcher.
    view = QueueCache(stores.registry, stores.config)
    launcher = Launcher(stores, ctx.term, driver, view)

    def kill_job_tasks(job_name: str) -> None:
        for task in stores.running.tasks(job_name):
            driver.kill(task.task_id)

    producer = Producer(stores, ctx.term, launcher.wake, settings.job_state_queue_size, view)
    launcher.next_fire = producer.next_fire_at
    statistics = Statistics(settings, ctx.registry, ctx.term.fence)
    webhooks = WebhookNotifier(settings.notify_webhook_url)
    event_counts = JobEventCounts()

    def on_job_event(event: JobEvent) -> None:
        """Failed, timed-out, skipped and capped: counted, traced and POSTed (never blocks)."""
        event_counts.add(event)
        statistics.on_job_event(event)
        webhooks.notify(event)

    listener = ConfigListener(stores, producer, kill_job_tasks)
    status = StatusHandler(stores, driver.kill, launcher.wake, statistics.journal)
    status.listeners.append(statistics.on_status)
    status.event_listeners.append(on_job_event)
    producer.event_listeners.append(on_job_event)
    fires = FireTimes()
    metrics = ctx.metrics
    if metrics is not None:

        def on_launched(task_id: str, agent_id: str, original_task_id: str) -> None:
            """Before the statistics' TASK_STAGING row, which names the fire."""
            fire, first = fires.launched(task_id)
            if first and fire is not None:
                metrics.on_fire_launched(time.time() - fire)

        def on_deleted(job_name: str) -> None:
            fires.forget(job_name)
            metrics.forget_job(job_name)

        producer.fire_listeners.append(fires.fired)
        producer.event_listeners.append(metrics.on_job_event)
        launcher.launch_listeners.insert(0, on_launched)
        launcher.launch_listeners.append(metrics.on_launched)
        status.listeners.append(metrics.on_status)
        listener.deleted_listeners.append(on_deleted)
        try:
            metrics.retain_jobs(stores.config.job_names())
        except SchedulerError as exc:
            log.warning("metrics: series of deleted jobs kept this term: %s", exc.message)
    statistics.fire_of = fires.fire_of
    launcher.launch_listeners.append(statistics.on_launched)
    reconciler = Reconciler(stores, driver, settings.reconcile_interval_minutes)

    def on_connected() -> None:
        launcher.on_connected()
        reconciler.on_connected()

    driver.bind(
        DriverHandlers(
            on_offers=launcher.add_offers,
            on_rescind=launcher.rescind,
            on_status=status.handle,
            on_connected=on_connected,
            on_disconnected=launcher.drop_offers,
        )
    )
    actions = MesosActions(driver, reconciler, lambda: framework_ids.framework_id)
    ctx.info["mesos"] = lambda: driver.status
    ctx.info["unplaceable"] = lambda: len(launcher.unplaceable_jobs())
    ctx.info["statistics"] = statistics.info

    def figures() -> TermFigures:
        trace = (statistics.info().get("trace") or {}) if statistics.engine else {}
        return TermFigures(
            ready_runs=launcher.ready_runs,
            failover_shards=launcher.failover_shards,
            offers_held=launcher.held_offers(),
            offers_declined=launcher.declined,
            trace_backlog=int(trace.get("pending", 0)),
            trace_dropped=int(trace.get("dropped", 0)),
            trace_errors=int(trace.get("errors", 0)),
            job_events=event_counts.counts(),
            webhook_deliveries=webhooks.counts(),
            webhook_queue=webhooks.queue_length(),
        )

    ctx.info["figures"] = figures
    return [
        TermRecorder(ctx),
        framework_ids,
        producer,
        statistics,
        webhooks,
        listener,
        launcher,
        RestApi(ctx, stores, actions, statistics, launcher.capacity),
        driver,
        reconciler,
    ]

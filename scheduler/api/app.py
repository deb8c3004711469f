"""Build the leader's Flask app for one term."""

from __future__ import annotations

from flask import Flask

from scheduler.api import (
    access,
    apps,
    backfills,
    calendars,
    fire_times,
    history,
    job_batches,
    jobs,
    kill,
    openapi,
    operate,
    placement,
    pools,
    runs,
    workflow_backfills,
    workflows,
)
from scheduler.api.access_control import install_access_control
from scheduler.api.audit import install_audit
from scheduler.api.audit_list import bp as audit_bp
from scheduler.api.auth import install_auth
from scheduler.api.backfills import backfill_access
from scheduler.api.errors import install_error_handlers
from scheduler.api.inputs import install_input_checks
from scheduler.api.quotas import Quotas
from scheduler.api.term_access import TermAccess, TraceSource
from scheduler.api.workflows import workflow_access
from scheduler.leader.backfill import BackfillEngine
from scheduler.leader.mesos.capacity import AgentCapacity
from scheduler.leader.mesos.operator_actions import OperatorActions
from scheduler.leader.statistics.audit_log import AuditLog
from scheduler.leader.workflows import WorkflowEngine
from scheduler.replica.term import LeaderContext
from scheduler.storage.config_store import resolve_time_zone
from scheduler.storage.term_stores import TermStores
from scheduler.storage.transactions import FencedWriter


def create_app(
    ctx: LeaderContext,
    actions: OperatorActions,
    stores: TermStores | None = None,
    statistics: TraceSource | None = None,
    capacity: AgentCapacity | None = None,
    audit: AuditLog | None = None,
    workflow_engine: WorkflowEngine | None = None,
    backfill_engine: BackfillEngine | None = None,
) -> Flask:
    """The `/api` application of the leader of `ctx.term`; writes are fenced by that term."""
    app = Flask("scheduler.api")
    app.config["PROPAGATE_EXCEPTIONS"] = False
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.url_map.strict_slashes = False
    install_error_handlers(app)
    install_input_checks(app)  # before auth: a refused request costs no password check
    install_auth(
        app, ctx.settings, revocations=(ctx.registry, FencedWriter(ctx.registry, ctx.term.fence))
    )
    install_access_control(app)  # after auth: every route's declared role (api/access_control)
    # After auth and access control: a request id each, a record per change and refusal
    # (`audit`: the term's audit log; None: only the settings' audit_file, as in tests).
    install_audit(app, ctx, audit)
    if stores is None:
        stores = TermStores.build(
            ctx.registry,
            ctx.term.fence,
            resolve_time_zone(ctx.settings.time_zone),
            ctx.settings.job_state_queue_size,
            max_pools=ctx.settings.max_pools,
            max_calendars=ctx.settings.max_calendars,
        )
    app.extensions["ejc_term_access"] = TermAccess.build(stores, actions, statistics, capacity)
    app.extensions["ejc_quotas"] = Quotas.from_settings(ctx.settings)
    # Webhook targets allowed although internal (api/job_views.py).
    app.extensions["ejc_webhook_targets"] = ctx.settings.notify_webhook_allowed_targets
    for module in (apps, jobs, history, operate, openapi, placement, fire_times, kill, runs):
        app.register_blueprint(module.bp)
    access.install(app, ctx)  # /api/access: users, grants, tokens (their store, fenced)
    workflows.install(app, workflow_access(ctx, stores, workflow_engine))  # issue 27
    backfills.install(app, backfill_access(ctx, stores, backfill_engine))  # issue 28
    workflow_backfills.install(app)  # issue 28: a workflow's backfills (after the two above)
    calendars.install(app, stores, ctx.settings.max_list_items)  # issue 28
    pools.install(app, stores.pools, ctx.settings.max_list_items)  # issue 28
    app.register_blueprint(job_batches.bp)  # issue 29: POST /api/job/register-many
    app.register_blueprint(audit_bp)
    return app

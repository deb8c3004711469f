"""`RestApi`: the term's component that serves the leader's `/api/*` on the replica's port."""

from __future__ import annotations

from scheduler.api.app import create_app
from scheduler.api.auth import warn_about_defaults
from scheduler.leader.backfill import BackfillEngine
from scheduler.leader.lifecycle import LeaderComponent
from scheduler.leader.mesos.capacity import AgentCapacity
from scheduler.leader.mesos.operator_actions import OperatorActions
from scheduler.leader.statistics.component import Statistics
from scheduler.leader.workflows import WorkflowEngine
from scheduler.replica.term import LeaderContext
from scheduler.storage.term_stores import TermStores


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
        workflow_engine: WorkflowEngine | None = None,
        backfill_engine: BackfillEngine | None = None,
    ) -> None:
        self._workflow_engine = workflow_engine
        self._backfill_engine = backfill_engine
        self._ctx = ctx
        self._stores = stores
        self._actions = actions
        self._statistics = statistics
        self._capacity = capacity

    def start(self) -> None:
        warn_about_defaults(self._ctx.settings)
        statistics = self._statistics
        app = create_app(
            self._ctx,
            self._actions,
            self._stores,
            statistics,
            self._capacity,
            audit=None if statistics is None else statistics.audit,
            workflow_engine=self._workflow_engine,
            backfill_engine=self._backfill_engine,
        )
        self._ctx.mount_api(app)

    def stop(self) -> None:
        self._ctx.mount_api(None)
        self._stores.job_apps.stop()  # its only reader is this API: keep nothing past the term

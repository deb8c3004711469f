"""The leader's components for one term, in start order (DESIGN section 3).

facade/state reload, producer, statistics, config listener, task launcher, REST API, Mesos
driver, reconcile. Components appear here as they are built.
"""

from __future__ import annotations

from scheduler.api import create_app
from scheduler.api.auth import warn_about_defaults
from scheduler.ha.framework_id import FrameworkIdStore
from scheduler.ha.term import LeaderContext
from scheduler.ha.terms_log import TermRecorder
from scheduler.service import LeaderComponent


class RestApi(LeaderComponent):
    """Serves the leader's `/api/*` on this replica's HTTP port for the term."""

    name = "rest-api"

    def __init__(self, ctx: LeaderContext) -> None:
        self._ctx = ctx

    def start(self) -> None:
        warn_about_defaults(self._ctx.settings)
        self._ctx.mount_api(create_app(self._ctx))

    def stop(self) -> None:
        self._ctx.mount_api(None)


def build_components(ctx: LeaderContext) -> list[LeaderComponent]:
    framework_ids = FrameworkIdStore(ctx)
    return [
        TermRecorder(ctx),
        framework_ids,
        RestApi(ctx),
    ]

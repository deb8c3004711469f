"""A replica composed in one place: the replica with the HTTP server and the authentication it
serves with (the term's components are composed in `wiring/term.py`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scheduler.edge.authenticator import authenticator_for
from scheduler.edge.http import (
    ReplicaHttp,
    StandbyRefusal,
    http_edge,
    http_limits,
    metrics_access_for,
)
from scheduler.model.errors import SchedulerError
from scheduler.model.settings import Settings
from scheduler.replica.replica import ComponentFactory, Replica
from scheduler.storage.registry import Registry


def build_replica(settings: Settings, component_factory: ComponentFactory) -> Replica:
    """A replica, not started, serving HTTP on `settings.http_port` once it starts.

    The authenticator is the process's one for `settings` (`authenticator_for`, found at each
    use): every term's API and `/health` share its cache, hash semaphore and limiter, and its
    `access` (the users, grants and tokens this replica follows) and `sessions`.
    """

    def authorized(environ: Any) -> bool:
        """Whether a `/health` request carries credentials the API would accept (any role):
        Basic credentials, an API token, or a console session's cookie."""
        return authenticator_for(settings).check_request(environ).identify is not None

    def follow_records(registry: Registry, wake: Callable[[], None]) -> bool:
        """Follow the revoked console sessions and the access records (the leader-watch
        thread); both are tried, then the first error is raised."""
        auth = authenticator_for(settings)
        read = False
        failure: SchedulerError | None = None
        for follow in (auth.sessions.follow, auth.access.follow):
            try:
                read = follow(registry, wake) or read
            except SchedulerError as exc:
                failure = failure or exc
        if failure is not None:
            raise failure
        return read

    def standby_refusal(environ: Any) -> StandbyRefusal | None:
        """A standby's own 401 (or 429) for an API token it refuses: revoked, expired or wrong
        tokens stop here at once rather than at the leader. A token check costs no hash; Basic
        credentials and cookies are redirected as before (the leader checks them)."""
        header = str(environ.get("HTTP_AUTHORIZATION") or "")
        if header.split(" ", 1)[0].lower() != "bearer":
            return None
        result = authenticator_for(settings).check_request(environ)
        if result.status == 200:
            return None
        headers = [("Retry-After", str(result.retry_after_s))] if result.retry_after_s else []
        return result.status, {"error": result.message, "type": result.kind}, headers

    def server_for(replica: Replica) -> ReplicaHttp:
        return ReplicaHttp(
            settings.http_bind_address,
            settings.http_port,
            health=replica.health,
            metrics=replica.metrics,
            leader_address=replica.leader,
            is_acting_leader=replica.is_acting_leader,
            limits=http_limits(settings),
            edge=http_edge(settings),
            authorized=authorized,
            replicas=replica.vouched_replicas,
            prove=replica.vouching.answer,
            standby_refusal=standby_refusal,
            # metrics_require_auth: /metrics for accepted credentials, per-job series filtered
            metrics_access=metrics_access_for(settings, lambda: replica.registry),
        )

    return Replica(
        settings, component_factory, server_for=server_for, follow_sessions=follow_records
    )

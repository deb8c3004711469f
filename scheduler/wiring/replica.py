"""A replica composed in one place: the replica with the HTTP server and the authentication it
serves with (the term's components are composed in `wiring/term.py`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scheduler.edge.authenticator import authenticator_for
from scheduler.edge.http import ReplicaHttp, http_edge, http_limits
from scheduler.model.settings import Settings
from scheduler.replica.replica import ComponentFactory, Replica
from scheduler.storage.registry import Registry


def build_replica(settings: Settings, component_factory: ComponentFactory) -> Replica:
    """A replica, not started, serving HTTP on `settings.http_port` once it starts.

    The authenticator is the process's one for `settings` (`authenticator_for`, found at each
    use): every term's API and `/health` share its cache, hash semaphore and limiter.
    """

    def authorized(environ: Any) -> bool:
        """Whether a `/health` request carries credentials the API would accept (either role):
        Basic credentials, or a console session's cookie."""
        return authenticator_for(settings).check_request(environ).identify is not None

    def follow_sessions(registry: Registry, wake: Callable[[], None]) -> bool:
        return authenticator_for(settings).sessions.follow(registry, wake)

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
        )

    return Replica(
        settings, component_factory, server_for=server_for, follow_sessions=follow_sessions
    )

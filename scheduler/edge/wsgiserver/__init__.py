"""The production HTTP server under every replica: waitress, hardened for hostile clients
(`server.EdgeServer`)."""

from __future__ import annotations

from scheduler.edge.wsgiserver.server import (
    EdgeServer,
    HttpLimits,
    TlsSetupError,
    connection_limit_for,
    fd_soft_limit,
    server_tls_context,
)

__all__ = [
    "EdgeServer",
    "HttpLimits",
    "TlsSetupError",
    "connection_limit_for",
    "fd_soft_limit",
    "server_tls_context",
]

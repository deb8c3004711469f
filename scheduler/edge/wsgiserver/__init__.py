"""The production HTTP server under every replica: waitress, hardened for hostile clients.

`server` (`EdgeServer`: the I/O loop, the two worker pools, connection limits and eviction,
its Prometheus figures), `channel` (one connection: bounded chunked framing, JSON errors,
request deadlines), `tls_channel` (a connection on the TLS port), `tls` (the server's TLS
context) and `limits` (what a client may cost, the connection limit a process can afford).
"""

from __future__ import annotations

from scheduler.edge.wsgiserver.limits import HttpLimits, connection_limit_for, fd_soft_limit
from scheduler.edge.wsgiserver.server import EdgeServer
from scheduler.edge.wsgiserver.tls import TlsSetupError, server_tls_context

__all__ = [
    "EdgeServer",
    "HttpLimits",
    "TlsSetupError",
    "connection_limit_for",
    "fd_soft_limit",
    "server_tls_context",
]

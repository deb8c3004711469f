"""What one client may cost the HTTP server, and how many connections a process can afford."""

from __future__ import annotations

import resource
from dataclasses import dataclass

# Descriptors kept out of the connection budget: ZooKeeper, Mesos, the trace database, logs,
# spill files of the server's own buffers, the executors' pipes.
_FD_RESERVE = 512
# Below this descriptor number select() works; accepted sockets are placed above it.
_SELECT_LIMIT = 1024
# Default connection cap however high the descriptor limit: every connection may buffer a
# request, and the I/O loop visits every connection on each pass.
_DEFAULT_CONNECTION_CAP = 4096


@dataclass(frozen=True)
class HttpLimits:
    """What one client may cost the server. `connection_limit` 0: derived from the fd limit."""

    threads: int = 8
    connection_limit: int = 0
    channel_timeout_s: float = 15.0
    header_timeout_s: float = 5.0
    body_timeout_s: float = 20.0
    max_header_bytes: int = 32768
    max_body_bytes: int = 1048576


def fd_soft_limit() -> int:
    """This process's soft RLIMIT_NOFILE (a large number when unlimited)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 1 << 20 if soft == resource.RLIM_INFINITY else int(soft)


def connection_limit_for(fd_limit: int, configured: int) -> int:
    """The connection limit for a process allowed `fd_limit` descriptors.

    Every connection may hold two descriptors (its socket and a spill file for a large body), and
    `_FD_RESERVE` stay free for everything else. `configured` (0: not configured) is lowered to
    that bound; unconfigured, the limit is also capped at 4096.
    """
    safe = max(16, (fd_limit - _FD_RESERVE) // 2)
    if configured > 0:
        return min(configured, safe)
    return min(_DEFAULT_CONNECTION_CAP, safe)


def fd_floor(fd_limit: int, connection_limit: int) -> int:
    """Lowest descriptor number for accepted sockets: 1024 when the limit leaves room, else 0."""
    if fd_limit >= _SELECT_LIMIT + 2 * connection_limit + _FD_RESERVE:
        return _SELECT_LIMIT
    return 0

"""Which web origins are the replicas' own, and the CORS answers the console needs from them.

The console is served by every replica, but only the leader serves `/api/*`, and a browser drops
the `Authorization` header when it follows a redirect to another origin. So a console page
loaded from a standby calls the leader's `/api` (and each replica's `/health`) directly, across
origins. A replica grants such calls only to the origins of the replicas it vouches for
(`scheduler.replica.vouching`: an address merely written into the election is not enough): an
identity `host:port` is the origin `http://host:port`, or `https://host:port` when the replicas
serve TLS (they share their settings, so all do or none). Nothing else is granted, and no
wildcard.

The grant carries no cookies or browser-stored credentials (`Access-Control-Allow-Credentials`
is never sent): the console adds the `Authorization` header itself, so a page of another origin
gains nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urlsplit

__all__ = [
    "REPLICA_ORIGIN_KEY",
    "cors_headers",
    "origin_of",
    "preflight_headers",
    "replica_origin",
]

# Set in the WSGI environ of a request whose `Origin` is a replica's: the API's write guard
# accepts that origin as it accepts the server's own.
REPLICA_ORIGIN_KEY = "ejcloud.replica_origin"

# What an identity from the election may look like before it becomes an origin in a header.
_IDENTITY = re.compile(r"^[A-Za-z0-9._-]+:[0-9]{1,5}$|^\[[0-9A-Fa-f:.]+\]:[0-9]{1,5}$")
_ALLOWED_METHODS = "GET, HEAD, POST, PUT, DELETE"
_ALLOWED_HEADERS = "Authorization, Content-Type"
_EXPOSED_HEADERS = "identify, Retry-After"
_PREFLIGHT_MAX_AGE_S = 600
_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})
_ORIGIN_MAX_LENGTH = 300


_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin_of(identity: str, scheme: str = "http") -> str | None:
    """`scheme://host:port` for a replica identity `host:port`, or None if it is not one."""
    # fullmatch: `$` in the pattern would let a trailing newline into a header.
    if not _IDENTITY.fullmatch(identity) or scheme not in _DEFAULT_PORTS:
        return None
    return f"{scheme}://{identity}"


def _key(origin: str) -> tuple[str, str, int] | None:
    """(scheme, lower-case host, port) of an `http://` or `https://` origin; None for anything
    else."""
    if len(origin) > _ORIGIN_MAX_LENGTH:
        return None
    try:
        parts = urlsplit(origin)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme
    if scheme not in _DEFAULT_PORTS or not parts.hostname or parts.username or parts.password:
        return None
    if parts.path or parts.query or parts.fragment:
        return None
    host = parts.hostname.lower()
    # One server answers all three on a given port of this machine: a console opened at
    # http://localhost:8899 is the same replica's as http://127.0.0.1:8899 (issue 30).
    host = "127.0.0.1" if host in _LOOPBACK_NAMES else host
    return scheme, host, port if port is not None else _DEFAULT_PORTS[scheme]


def replica_origin(
    origin: str | None, identities: Iterable[str], scheme: str = "http"
) -> str | None:
    """`origin` (the request's `Origin` header) if it is the origin of one of `identities`
    served over `scheme` (`https` when the replicas serve TLS)."""
    if not origin:
        return None
    wanted = _key(origin)
    if wanted is None:
        return None
    for identity in identities:
        own = origin_of(identity, scheme)
        if own is not None and _key(own) == wanted:
            return origin
    return None


def cors_headers(origin: str) -> list[tuple[str, str]]:
    """Headers that let a page of the replica origin `origin` read this answer."""
    return [
        ("Access-Control-Allow-Origin", origin),
        ("Access-Control-Expose-Headers", _EXPOSED_HEADERS),
        ("Vary", "Origin"),
    ]


def preflight_headers(origin: str) -> list[tuple[str, str]]:
    """The answer to a CORS preflight from the replica origin `origin`."""
    return [
        ("Access-Control-Allow-Origin", origin),
        ("Access-Control-Allow-Methods", _ALLOWED_METHODS),
        ("Access-Control-Allow-Headers", _ALLOWED_HEADERS),
        ("Access-Control-Max-Age", str(_PREFLIGHT_MAX_AGE_S)),
        ("Vary", "Origin"),
    ]

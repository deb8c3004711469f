"""The web console: static pages that every replica serves at `/` and `/console/...`.

The files under `static/` are read once, when the replica starts, and only those files are
served (no path is ever joined to a directory at request time). Each answer carries its content
type, an `ETag` with `Cache-Control: no-cache` (the browser revalidates and gets 304 while the
file is unchanged, so a replica upgrade is picked up at once), and headers that keep the page
from being framed, sniffed or given inline script: the Content-Security-Policy allows scripts
and styles from this replica only, and connections to this replica and to the replicas it
vouches for (`replicas`, never an address merely written in the election): the console calls
only its own origin's `/api`, with its session cookie, and reads the others' public `/health`
without credentials.

The console itself is plain JavaScript modules that call the public REST API, drawing only the
controls the session's rights allow (`static/js/rights.js`; the API stays the authority). The
charting library (uPlot) is vendored under `static/vendor/`, pinned by
`console-vendor/package-lock.json` at the repository root.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import TYPE_CHECKING

from scheduler.edge.console.origins import origin_of

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

__all__ = ["Console"]

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).resolve().parent / "static"
ASSET_PREFIX = "/console/"
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".json": "application/json",
    ".txt": "text/plain; charset=utf-8",
}
_READ_METHODS = frozenset({"GET", "HEAD"})


@dataclass(frozen=True)
class _Asset:
    body: bytes
    content_type: str
    etag: str


class Console:
    """Serves the console's files (thread-safe: everything is read at construction)."""

    def __init__(self, static_dir: Path = STATIC_DIR) -> None:
        self._assets: dict[str, _Asset] = {}
        if static_dir.is_dir():
            for path in sorted(static_dir.rglob("*")):
                content_type = _TYPES.get(path.suffix)
                if not path.is_file() or content_type is None:
                    continue
                body = path.read_bytes()
                etag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
                name = path.relative_to(static_dir).as_posix()
                self._assets[name] = _Asset(body, content_type, etag)
        if "index.html" not in self._assets:
            log.warning("console: no index.html in %s; / answers 404", static_dir)

    @staticmethod
    def handles(path: str) -> bool:
        """Whether `path` is the console's: `/` or under `/console/`."""
        return path == "/" or path.startswith(ASSET_PREFIX)

    def serve(
        self,
        environ: WSGIEnvironment,
        start_response: StartResponse,
        replicas: Iterable[str],
    ) -> list[bytes]:
        """Answer a request for a console path; `replicas` are the identities (`host:port`) of
        the replicas this one vouches for, which the page may connect to (over the request's
        scheme)."""
        path = environ.get("PATH_INFO", "")
        name = "index.html" if path == "/" else path[len(ASSET_PREFIX) :]
        asset = self._assets.get(name)
        if asset is None:
            # The path is echoed as JSON (escaped), never into a header.
            return _error(start_response, 404, f"no such console file {path[:200]}", "NotFound")
        method = environ.get("REQUEST_METHOD", "GET")
        if method not in _READ_METHODS:
            return _error(
                start_response,
                405,
                f"the console's files can only be read (GET, HEAD), not {method[:20]}",
                "MethodNotAllowed",
                [("Allow", "GET, HEAD")],
            )
        # The replicas' own scheme (scheduler.edge.http's DIRECT_SCHEME_KEY), not the one a trusted
        # proxy says the page came over: the page connects to the replicas themselves.
        scheme = str(environ.get("ejcloud.direct_scheme") or environ.get("wsgi.url_scheme", "http"))
        headers = [
            ("ETag", asset.etag),
            ("Cache-Control", "no-cache"),
            *security_headers(replicas, scheme),
        ]
        if asset.etag in _etags(environ.get("HTTP_IF_NONE_MATCH", "")):
            start_response("304 Not Modified", headers)
            return []
        start_response(
            "200 OK",
            [
                ("Content-Type", asset.content_type),
                ("Content-Length", str(len(asset.body))),
                *headers,
            ],
        )
        return [] if method == "HEAD" else [asset.body]


def security_headers(replicas: Iterable[str], scheme: str = "http") -> list[tuple[str, str]]:
    """Headers of every console answer: no sniffing, no framing, no inline or foreign code, and
    connections only to this origin and to `replicas` (vouched identities) over `scheme`."""
    origins = sorted({o for o in (origin_of(r, scheme) for r in replicas) if o is not None})
    connect = " ".join(["'self'", *origins])
    policy = "; ".join(
        [
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
            "img-src 'self'",
            f"connect-src {connect}",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        ]
    )
    return [
        ("Content-Security-Policy", policy),
        ("X-Content-Type-Options", "nosniff"),
        ("X-Frame-Options", "DENY"),
        ("Referrer-Policy", "no-referrer"),
        ("Cross-Origin-Opener-Policy", "same-origin"),
    ]


def _etags(header: str) -> set[str]:
    return {tag.strip().removeprefix("W/") for tag in header.split(",") if tag.strip()}


def _error(
    start_response: StartResponse,
    status: int,
    message: str,
    kind: str,
    headers: Iterable[tuple[str, str]] = (),
) -> list[bytes]:
    """A JSON error like the API's: `{"error": message, "type": kind}`."""
    body = (json.dumps({"error": message, "type": kind}) + "\n").encode()
    start_response(
        f"{status} {HTTPStatus(status).phrase}",
        [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(body))),
            ("X-Content-Type-Options", "nosniff"),
            *headers,
        ],
    )
    return [body]

"""The HTTP server every replica runs: `/health`, `/metrics`, and `/api/*` (leader only).

A standby answers `/api/*` with 307 to the same URL on the leader, or 503 (JSON) while no leader
is known; the leader hands `/api/*` to the Flask app its REST API component mounted.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from werkzeug.serving import BaseWSGIServer, make_server
from werkzeug.wrappers import Request, Response

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

log = logging.getLogger(__name__)


def _json(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Response:
    return Response(
        json.dumps(body) + "\n", status=status, mimetype="application/json", headers=headers
    )


class ReplicaHttp:
    """WSGI front of a replica, and the thread that serves it.

    `health` returns the /health body, `metrics` the Prometheus text, `leader_address` the
    current leader's `host:port` (or None), `is_acting_leader` whether this replica may serve
    `/api/*` now.
    """

    def __init__(
        self,
        bind_address: str,
        port: int,
        health: Callable[[], dict[str, Any]],
        metrics: Callable[[], str],
        leader_address: Callable[[], str | None],
        is_acting_leader: Callable[[], bool],
    ) -> None:
        self._bind = (bind_address, port)
        self._health = health
        self._metrics = metrics
        self._leader_address = leader_address
        self._is_acting_leader = is_acting_leader
        self._api: WSGIApplication | None = None
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None

    def mount_api(self, app: WSGIApplication | None) -> None:
        """Serve `/api/*` from `app` (None: this replica no longer serves the API)."""
        self._api = app

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/api" or path.startswith("/api/"):
            api = self._api
            if api is not None and self._is_acting_leader():
                return api(environ, start_response)
            return self._not_leader(Request(environ))(environ, start_response)
        if path == "/health":
            response = _json(200, self._health())
        elif path == "/metrics":
            response = Response(self._metrics(), mimetype="text/plain; version=0.0.4")
        else:
            response = _json(404, {"error": f"no such path {path}", "type": "NotFound"})
        return response(environ, start_response)

    def _not_leader(self, request: Request) -> Response:
        leader = self._leader_address()
        own = self._health().get("identity")
        if leader is None or leader == own:
            # No leader known, or it is this replica while it is not acting (suspended).
            return _json(
                503,
                {"error": "no acting leader is known; retry shortly", "type": "NotLeader"},
                {"Retry-After": "1"},
            )
        query = request.query_string.decode("latin-1")
        location = f"http://{leader}{request.path}" + (f"?{query}" if query else "")
        return _json(
            307,
            {"error": f"this replica is a standby; the leader is {leader}", "type": "NotLeader"},
            {"Location": location},
        )

    def start(self) -> None:
        """Bind and serve in thread `sched-http`. Raises OSError when the port is taken."""
        self._server = make_server(self._bind[0], self._bind[1], self, threaded=True)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="sched-http", daemon=True
        )
        self._thread.start()
        log.info("http: serving on %s:%s", *self._bind)

    def stop(self, timeout_s: float = 5.0) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.error("http: thread sched-http did not stop in %ss", timeout_s)
        self._server = None
        self._thread = None

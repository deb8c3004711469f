"""The HTTP face of every replica: `/health`, `/metrics`, the web console at `/`, and `/api/*`
(leader only).

A standby answers `/api/*` with 307 to the same URL on the leader, or 503 (JSON) while no leader
is known; the leader hands `/api/*` to the Flask app its REST API component mounted. Requests
arrive through the production server in `scheduler.edge.wsgiserver` (bounded workers and
connections, read deadlines, body limits), where `/health` and `/metrics` have worker threads
of their own.

Before anything else every request passes the edge (`EdgePolicy`, from the `http_*` settings):
a `Host` (or absolute-form target) this replica does not answer for gets 421 on every path,
before any credential is looked at (`scheduler.model.http_trust`: DNS rebinding goes nowhere);
a trusted proxy's `Forwarded`/`X-Forwarded-*` set the request's scheme and client address. With
TLS the server speaks https only, and a standby's redirect keeps https.

The console's pages may be loaded from any replica; they call the leader's `/api` and every
replica's `/health` across origins, so those two answer CORS for the origins of the replicas in
the election and for no other origin (`scheduler.edge.console.origins`).

`/metrics` is public (a scraper needs no credentials) unless `metrics_require_auth` is true
(`metrics_access_for`): then it needs credentials the API would accept (401 otherwise, 429 or
503 as the API would answer), and its per-job series name only the jobs of the apps the
caller sees (every job for a role on every app, such as the settings' admin and guest).
"""

from __future__ import annotations

import json
import logging
import re
import ssl
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry

from scheduler.edge.authenticator import GUEST, ROOT, authenticator_for
from scheduler.edge.console import Console
from scheduler.edge.console.origins import (
    REPLICA_ORIGIN_KEY,
    cors_headers,
    preflight_headers,
    replica_origin,
)
from scheduler.edge.metrics import render_metrics
from scheduler.edge.wsgiserver import EdgeServer, HttpLimits, TlsSetupError, server_tls_context
from scheduler.model.access.roles import Rights
from scheduler.model.errors import SchedulerError, SettingsError
from scheduler.model.http_trust import HostAllowList, TrustedProxies, absolute_form_authority
from scheduler.model.settings import Settings
from scheduler.storage.config_store import ConfigStore, resolve_time_zone
from scheduler.storage.registry import Registry

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

log = logging.getLogger(__name__)

__all__ = [
    "DIRECT_SCHEME_KEY",
    "EdgePolicy",
    "HttpLimits",
    "ReplicaHttp",
    "http_edge",
    "http_limits",
    "metrics_access_for",
]

# What a leader address from the election may look like before it goes into a Location header.
_ADDRESS = re.compile(r"^[A-Za-z0-9._-]+:[0-9]{1,5}$|^\[[0-9A-Fa-f:.]+\]:[0-9]{1,5}$")
# Characters left as they are when a decoded path or a raw query is put back into a URL.
_PATH_SAFE = "/:@!$&'()*+,;=-._~"
_QUERY_SAFE = _PATH_SAFE + "?%"
# A standby that refuses to redirect to an unverified leader says so in its log at most this often.
_UNVOUCHED_WARNING_S = 30.0
# What a standby answers itself instead of a redirect: status, JSON body, extra headers.
StandbyRefusal = tuple[int, dict[str, Any], list[tuple[str, str]]]


@dataclass(frozen=True)
class MetricsAccess:
    """What one `/metrics` request may see: `refusal` (the answer instead), or the series of
    the jobs `visible_jobs` keeps (None: every series)."""

    refusal: StandbyRefusal | None = None
    visible_jobs: Callable[[set[str]], set[str]] | None = None


def metrics_access_for(
    settings: Settings, registry: Callable[[], Registry]
) -> Callable[[WSGIEnvironment], MetricsAccess] | None:
    """The gate of `/metrics` when `metrics_require_auth` is true (None: public, the default).

    Credentials are checked as the API checks them (the process's authenticator: its caches,
    failure budget and hash slots). A caller without a role on every app sees the series of the
    jobs whose app it sees: their apps are read from ZooKeeper through `registry()` (the
    replica's current one) in one bulk read per scrape. Called on the server's ops threads.
    """
    if not settings.metrics_require_auth:
        return None

    def access(environ: WSGIEnvironment) -> MetricsAccess:
        result = authenticator_for(settings).check_request(environ)
        if result.identify is None:
            headers = [("Retry-After", str(result.retry_after_s))] if result.retry_after_s else []
            body = {"error": result.message, "type": result.kind}
            return MetricsAccess(refusal=(result.status, body, headers))
        rights = result.rights
        if rights is None:  # the settings' accounts, as the API reads them (access_control)
            rights = {ROOT: Rights.cluster_admin(), GUEST: Rights.viewer_everywhere()}.get(
                result.identify, Rights.none()
            )
        if rights.everywhere is not None:
            return MetricsAccess()
        seen = rights

        def visible_jobs(names: set[str]) -> set[str]:
            if not names or not seen.per_app:
                return set()
            # The zone only fills in a job stored without one; the app is all that is read.
            zone = resolve_time_zone(settings.time_zone)
            jobs = ConfigStore(registry(), None, zone).jobs_named(sorted(names))
            return {job.job_name for job in jobs if seen.sees(job.app_name)}

        return MetricsAccess(visible_jobs=visible_jobs)

    return access


def http_limits(settings: Settings) -> HttpLimits:
    """The server limits the `http_*` settings ask for."""
    return HttpLimits(
        threads=settings.http_threads,
        connection_limit=settings.http_connection_limit,
        channel_timeout_s=settings.http_channel_timeout_seconds,
        header_timeout_s=settings.http_header_timeout_seconds,
        body_timeout_s=settings.http_body_timeout_seconds,
        max_header_bytes=settings.http_max_header_bytes,
        max_body_bytes=settings.http_max_body_bytes,
    )


# Set in the WSGI environ of every request: the scheme this replica itself serves (`http`, or
# `https` with TLS), whatever a trusted proxy said the client used (`wsgi.url_scheme` then).
DIRECT_SCHEME_KEY = "ejcloud.direct_scheme"
# The TCP peer's address, kept when a trusted proxy's client address replaces `REMOTE_ADDR`.
PEER_ADDRESS_KEY = "ejcloud.peer_address"


@dataclass(frozen=True)
class EdgePolicy:
    """Who may address this replica and how: the Host allow-list, the proxies whose forwarding
    headers are believed, and the TLS context (None: plain http)."""

    hosts: HostAllowList
    proxies: TrustedProxies
    tls: ssl.SSLContext | None = None

    @classmethod
    def default(cls, port: int) -> EdgePolicy:
        """Loopback names and the replicas' identities only; no proxies; plain http."""
        return cls(HostAllowList.build("", "localhost", port, "http"), TrustedProxies())


def http_edge(settings: Settings) -> EdgePolicy:
    """The edge policy the `http_*` settings ask for.

    Raises SettingsError naming `http_tls_cert_file` when the certificate and key cannot be
    used (unreadable, not PEM, encrypted, not a pair); `python -m scheduler` exits 2 then.
    """
    tls = None
    if settings.http_tls_cert_file or settings.http_tls_key_file:
        try:
            tls = server_tls_context(settings.http_tls_cert_file, settings.http_tls_key_file)
        except TlsSetupError as exc:
            raise SettingsError({"http_tls_cert_file": exc.message}) from exc
    scheme = "https" if tls is not None else "http"
    try:
        hosts = HostAllowList.build(
            settings.http_allowed_hosts, settings.hostname, settings.http_port, scheme
        )
        proxies = TrustedProxies.parse(settings.http_trusted_proxies)
    except ValueError as exc:  # load_settings checked both already
        raise SettingsError({"http_allowed_hosts/http_trusted_proxies": str(exc)}) from exc
    return EdgePolicy(hosts, proxies, tls)


def _reply(
    start_response: StartResponse,
    status: int,
    body: bytes,
    content_type: str,
    headers: Iterable[tuple[str, str]] = (),
) -> list[bytes]:
    if status == 204:
        # No content: no Content-Type or Content-Length that would describe one.
        start_response(f"204 {HTTPStatus(204).phrase}", list(headers))
        return []
    start_response(
        f"{status} {HTTPStatus(status).phrase}",
        [("Content-Type", content_type), ("Content-Length", str(len(body))), *headers],
    )
    return [body]


def _json(
    start_response: StartResponse,
    status: int,
    body: dict[str, Any],
    headers: Iterable[tuple[str, str]] = (),
) -> list[bytes]:
    data = (json.dumps(body) + "\n").encode()
    return _reply(start_response, status, data, "application/json", headers)


def redirect_location(leader: str, environ: WSGIEnvironment) -> str:
    """The leader's URL for this request, safe for a header whatever the client sent.

    The path arrives decoded (PEP 3333: latin-1 code points for the raw bytes) and is encoded
    again; the query arrives raw and only what may not stand in a URL is encoded.
    """
    path = quote(
        (environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", "")).encode("latin-1"),
        safe=_PATH_SAFE,
    )
    query = quote(environ.get("QUERY_STRING", "").encode("latin-1"), safe=_QUERY_SAFE)
    scheme = "https" if environ.get(DIRECT_SCHEME_KEY) == "https" else "http"
    return f"{scheme}://{leader}{path}" + (f"?{query}" if query else "")


_PUBLIC_HEALTH_FIELDS = ("role", "leader", "leaderVouched", "zookeeper", "identity")


def public_health(body: dict[str, Any]) -> dict[str, Any]:
    """What `/health` shows without credentials: role, leader and connection states only.

    The process id, term details, the trace database's user, host and errors, and the text of
    exceptions stay behind credentials; the reason keeps its kind (`ZooKeeper session lost`) but
    loses the parenthesised detail, and the Mesos state loses the error after its colon.
    """
    public = {key: body.get(key) for key in _PUBLIC_HEALTH_FIELDS}
    mesos = body.get("mesos")
    public["mesos"] = mesos.split(":", 1)[0] if isinstance(mesos, str) else None
    reason = body.get("reason")
    public["reason"] = _DETAIL.sub("", reason) if isinstance(reason, str) else None
    return public


_DETAIL = re.compile(r"\s*\([^)]*\)")
_COMMENT_UNSAFE = re.compile(r"[^\w.:\[\]-]")


def _adding(start_response: StartResponse, extra: list[tuple[str, str]]) -> StartResponse:
    """`start_response` that also sends the headers `extra`."""

    def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        return start_response(status, [*headers, *extra], exc_info)

    return start


class ReplicaHttp:
    """WSGI front of a replica, and the server that serves it.

    `health` returns the /health body, answered with 503 when its `reason` is set (the replica
    cannot reach ZooKeeper or cannot act) and 200 otherwise; without credentials that
    `authorized` accepts, only its `public_health` part is shown; `metrics` is the replica's
    prometheus_client registry, which `/metrics` renders (the HTTP server adds its own metrics
    to it);
    `leader_address` the current leader's `host:port` (or None); `is_acting_leader` whether this
    replica may serve `/api/*` now; `replicas` the identities (`host:port`) of the replicas in
    the election that this replica vouches for (`scheduler.replica.vouching`), whose web origins may
    call `/api` and `/health` across origins; `prove` this replica's proof for a `/health`
    challenge (None for a malformed one); `standby_refusal` a standby's answer to an `/api`
    request it refuses itself instead of redirecting it (a revoked, expired or wrong API token:
    401 here, so a revoked token stops on every replica at once; None: redirect as usual). They
    are called from the server's worker threads and must not block. `edge` (default: loopback
    names, no proxies, plain http) is checked before anything else: a request for a `Host` it
    does not allow gets 421 on every path, before any credential is looked at.
    """

    def __init__(
        self,
        bind_address: str,
        port: int,
        health: Callable[[], dict[str, Any]],
        metrics: CollectorRegistry,
        leader_address: Callable[[], str | None],
        is_acting_leader: Callable[[], bool],
        limits: HttpLimits | None = None,
        authorized: Callable[[WSGIEnvironment], bool] | None = None,
        replicas: Callable[[], Sequence[str]] | None = None,
        edge: EdgePolicy | None = None,
        prove: Callable[[str], str | None] | None = None,
        standby_refusal: Callable[[WSGIEnvironment], StandbyRefusal | None] | None = None,
        metrics_access: Callable[[WSGIEnvironment], MetricsAccess] | None = None,
    ) -> None:
        self._health = health
        self._metrics_access = metrics_access
        self._standby_refusal = standby_refusal
        self._prove = prove
        self._unvouched_warned_at = 0.0
        self._replicas = replicas or tuple
        self._console = Console()
        self._authorized = authorized
        self._metrics = metrics
        self._leader_address = leader_address
        self._is_acting_leader = is_acting_leader
        self._api: WSGIApplication | None = None
        self._edge = edge or EdgePolicy.default(port)
        self._server = EdgeServer(
            self, bind_address, port, limits or HttpLimits(), tls=self._edge.tls
        )
        metrics.register(self._server)

    def mount_api(self, app: WSGIApplication | None) -> None:
        """Serve `/api/*` from `app` (None: this replica no longer serves the API)."""
        self._api = app

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        try:
            refusal = self._admit(environ)
            if refusal is not None:
                return _json(start_response, 421, {"error": refusal, "type": "MisdirectedRequest"})
            if environ.get("PATH_INFO") == "/health":
                # A probe must never see a cached answer, and the full body (with credentials)
                # must never be stored by a cache.
                start_response = _adding(start_response, [("Cache-Control", "no-store")])
            return self._route(environ, start_response)
        except Exception:
            log.exception("http: unexpected error serving %s", environ.get("PATH_INFO", "")[:200])
            return _json(
                start_response,
                500,
                {"error": "internal error; see the scheduler log", "type": "InternalError"},
            )

    def _admit(self, environ: WSGIEnvironment) -> str | None:
        """Why the request is not for this replica (its `Host`, or an absolute-form target's
        host, is not allowed), or None; a trusted proxy's scheme and client address are put in
        `wsgi.url_scheme` and `REMOTE_ADDR` (the direct ones in DIRECT_SCHEME_KEY and
        PEER_ADDRESS_KEY). Runs before routing and authentication."""
        edge = self._edge
        direct = "https" if edge.tls is not None else "http"
        environ[DIRECT_SCHEME_KEY] = direct
        environ["wsgi.url_scheme"] = direct
        names: list[str | None] = []
        if environ.get("SERVER_PROTOCOL") != "HTTP/1.0" or "HTTP_HOST" in environ:
            names.append(environ.get("HTTP_HOST"))
        target = absolute_form_authority(environ.get("REQUEST_URI", ""))
        if target is not None:
            names.append(target)
        if names and not edge.hosts.any_host:
            identities = self._replicas()
            for name in names:
                if not edge.hosts.allows(name, identities):
                    shown = "no Host" if name is None else f"the host {name[:100]!r}"
                    return (
                        f"this replica does not answer for {shown}; it answers for its own "
                        "names and those in http_allowed_hosts"
                    )
        peer = str(environ.get("REMOTE_ADDR", ""))
        forwarding = edge.proxies.forwarding(peer, environ)
        if forwarding is not None:
            if forwarding.scheme is not None:
                environ["wsgi.url_scheme"] = forwarding.scheme
            if forwarding.client is not None:
                environ[PEER_ADDRESS_KEY] = peer
                environ["REMOTE_ADDR"] = forwarding.client
        return None

    def _route(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if Console.handles(path):
            return self._console.serve(environ, start_response, self._replicas())
        if path in ("/api", "/health") or path.startswith("/api/"):
            scheme = "https" if self._edge.tls is not None else "http"
            origin = replica_origin(environ.get("HTTP_ORIGIN"), self._replicas(), scheme)
            if origin is not None:
                if environ.get("REQUEST_METHOD") == "OPTIONS" and environ.get(
                    "HTTP_ACCESS_CONTROL_REQUEST_METHOD"
                ):
                    return _reply(start_response, 204, b"", "text/plain", preflight_headers(origin))
                environ[REPLICA_ORIGIN_KEY] = origin
                start_response = _adding(start_response, cors_headers(origin))
        if path == "/api" or path.startswith("/api/"):
            api = self._api
            if api is not None and self._is_acting_leader():
                return api(environ, start_response)
            return self._not_leader(environ, start_response)
        if path == "/health":
            body = self._health()
            status = 503 if body.get("reason") else 200
            if self._authorized is not None and not self._authorized(environ):
                body = public_health(body)
            proof = self._proof(environ)
            if proof is not None:
                body["proof"] = proof
            return _json(start_response, status, body)
        if path == "/metrics":
            return self._serve_metrics(environ, start_response)
        # The path is echoed as JSON (escaped), never into a header.
        return _json(
            start_response, 404, {"error": f"no such path {path[:200]}", "type": "NotFound"}
        )

    def _serve_metrics(
        self, environ: WSGIEnvironment, start_response: StartResponse
    ) -> Iterable[bytes]:
        """`/metrics`: every series, or (`metrics_access`) what the caller may see; a standby's
        answer starts by saying so (issue 30)."""
        if self._metrics_access is None:
            text = self._standby_note() + render_metrics(self._metrics)
            return _reply(start_response, 200, text, CONTENT_TYPE_LATEST)
        access = self._metrics_access(environ)
        if access.refusal is not None:
            status, body, headers = access.refusal
            return _json(start_response, status, body, headers)
        try:
            text = render_metrics(self._metrics, access.visible_jobs)
        except SchedulerError as exc:  # the jobs' apps could not be read
            log.warning("http: /metrics: %s", exc.message)
            return _json(start_response, 503, {"error": exc.message, "type": "RegistryError"})
        # Per-caller content: no shared cache may keep it.
        start_response = _adding(start_response, [("Cache-Control", "no-store")])
        return _reply(start_response, 200, self._standby_note() + text, CONTENT_TYPE_LATEST)

    def _standby_note(self) -> bytes:
        """On a standby, a comment line (Prometheus ignores it) saying that the job, fire and
        launch series are the leader's, and which replica leads (public in `/health` too)."""
        health = self._health()
        if health.get("role") != "standby":
            return b""
        leader = health.get("leader")
        where = _COMMENT_UNSAFE.sub("?", str(leader)[:80]) if leader else "unknown"
        return (
            f"# ejcloud: this replica is a standby: the job, fire and launch series are "
            f"the leader's; the leader is {where}\n"
        ).encode()

    def _proof(self, environ: WSGIEnvironment) -> str | None:
        """This replica's proof for a `/health?challenge=` (see `scheduler.replica.vouching`), or
        None when there is no well-formed challenge (64 lower-case hex; anything else is
        ignored). It needs no credentials: it is the HMAC of a value the asker chose."""
        query = environ.get("QUERY_STRING", "")
        if self._prove is None or "challenge=" not in query:
            return None
        try:
            fields = parse_qsl(query, max_num_fields=10)
        except ValueError:
            return None
        challenges = [value for name, value in fields if name == "challenge"]
        return self._prove(challenges[0]) if len(challenges) == 1 else None

    def _not_leader(self, environ: WSGIEnvironment, start_response: StartResponse) -> list[bytes]:
        if self._standby_refusal is not None:
            refused = self._standby_refusal(environ)
            if refused is not None:
                return _json(start_response, refused[0], refused[1], refused[2])
        leader = self._leader_address()
        health = self._health()
        own = health.get("identity")
        if leader is None or leader == own or not _ADDRESS.fullmatch(leader):
            # No usable leader known, or it is this replica while it is not acting (suspended).
            return _json(
                start_response,
                503,
                {"error": "no acting leader is known; retry shortly", "type": "NotLeader"},
                [("Retry-After", "1")],
            )
        if health.get("leader") != leader or health.get("leaderVouched") is not True:
            # Credentials follow a 307: only to a leader this replica vouches for (issue 23).
            now = time.monotonic()
            if now - self._unvouched_warned_at >= _UNVOUCHED_WARNING_S:
                self._unvouched_warned_at = now
                log.warning(
                    "http: the election's leader %r could not be verified (it did not prove it "
                    "belongs to this cluster); /api requests get 503, not a redirect to it",
                    leader,
                )
            return _json(
                start_response,
                503,
                {
                    "error": f"the leader {leader} could not be verified; this replica does not "
                    "redirect to it (see this replica's log); retry shortly or ask the leader "
                    "directly",
                    "type": "NotLeader",
                },
                [("Retry-After", "2")],
            )
        return _json(
            start_response,
            307,
            {"error": f"this replica is a standby; the leader is {leader}", "type": "NotLeader"},
            [("Location", redirect_location(leader, environ))],
        )

    def start(self) -> None:
        """Bind and serve (thread `sched-http` and its workers). Raises OSError when the port
        is taken."""
        self._server.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Close all connections and join the server's threads within about `timeout_s`."""
        self._server.stop(timeout_s)

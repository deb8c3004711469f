"""The REST API over HTTP: finds the acting leader among the servers and follows redirects.

A standby replica answers `/api/*` with 307 and the leader's URL; this client sends the request
again there itself, with the same method, body and credentials (standard-library clients drop
the body or the credentials on a redirect), but only to a server it may trust with them: one of
the configured servers, or a leader that a configured server names as its vouched leader when
asked over an authenticated call (`/health` with the credentials: `leader` is that host and
`leaderVouched` is true). A redirect to any other host is refused, naming the host and how to
add it; so is one from https to http. The election data a standby redirects by could have been
written by anyone who reaches ZooKeeper: a redirect alone is never a reason to send a password.
The credentials are the user's (HTTP Basic) or an API token (`Authorization: Bearer`), under the
same rule.

A 503 `NotLeader` (no leader known yet, as during a hand-over) moves on to the next server; when no
server gave an answer and one of them said so, or redirected to a leader that cannot be reached
(one that just died, until its session expires), the round is tried again every 0.5 s until the
timeout. A request that could not be sent to one server (connection refused, unknown host) goes to
the next one; a request that was sent but got no answer is retried elsewhere only if it was a read,
since a write may already have been applied. Every connection has the timeout, and a whole answer
must arrive within it. Proxy variables are not used: the servers are reached directly.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urljoin, urlsplit

from ejcloud_cli.errors import EXIT_ERROR, ApiError, ConnectFailed, UsageProblem
from ejcloud_cli.settings import ConnectionSettings

USER_AGENT = "ejcloud-cli/0.1"
MAX_ANSWER_BYTES = 32 * 1024 * 1024
MAX_REDIRECTS = 3
NOT_LEADER_RETRY_S = 0.5
_READ_CHUNK = 64 * 1024
_REPLAYABLE = frozenset({"GET", "HEAD"})
# How the server's web framework describes a path it has no route for (an unknown app or job
# is described by name instead).
_NO_ROUTE = "The requested URL was not found on the server"


@dataclass(frozen=True)
class Answer:
    """A complete HTTP answer; header names are lower case."""

    status: int
    headers: Mapping[str, str]
    body: bytes
    url: str

    def json(self) -> Any:
        """The decoded JSON body, None when there is none; ApiError when it is not JSON."""
        if not self.body.strip():
            return None
        try:
            return json.loads(self.body)
        except ValueError as exc:
            raise ApiError(
                self.status, f"{self.url} answered {self.status} with a body that is not JSON"
            ) from exc


class _NotSent(Exception):
    """The request never reached a server (it may be sent elsewhere). `leader_gone`: a standby
    named a leader that cannot be reached (one that just died, until the standbys notice)."""

    def __init__(self, message: str, leader_gone: bool = False) -> None:
        super().__init__(message)
        self.leader_gone = leader_gone


class _NoAnswer(Exception):
    """The request was sent but no complete answer came back."""


def error_of(answer: Answer) -> ApiError:
    """The ApiError an error answer stands for: the server's `error` (or `message`), `type` and
    `fields` when the body is the API's JSON error, else the status and the start of the body."""
    try:
        body = json.loads(answer.body) if answer.body.strip() else None
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error") or body.get("message"), str):
        fields = body.get("fields")
        return ApiError(
            answer.status,
            str(body.get("error") or body.get("message")),
            str(body.get("type") or ""),
            {str(k): str(v) for k, v in fields.items()} if isinstance(fields, dict) else None,
        )
    reason = http.client.responses.get(answer.status, "error")
    snippet = answer.body[:200].decode("utf-8", "replace").strip()
    message = f"HTTP {answer.status} {reason}" + (f": {snippet}" if snippet else "")
    return ApiError(answer.status, message, "")


class ApiClient:
    """Requests to the acting leader of the replicas in `settings.servers`.

    Blocking; one instance per command invocation (it remembers the leader it found and asks
    it first).
    """

    def __init__(self, settings: ConnectionSettings) -> None:
        self.settings = settings
        self._leader: str | None = None
        # Origins (scheme://host:port, lower case) credentials may go to: the configured
        # servers, and leaders one of them vouched for during this invocation.
        self._trusted = {_origin(base) for base in settings.servers}
        self._tls: ssl.SSLContext | None = None

    def _tls_context(self) -> ssl.SSLContext:
        """The context https servers are verified with: `--cacert`'s certificates, else the
        system's (built once; UsageProblem when the file holds no PEM certificate)."""
        if self._tls is None:
            cacert = self.settings.cacert
            try:
                self._tls = ssl.create_default_context(cafile=cacert)
            except (ssl.SSLError, OSError) as exc:
                raise UsageProblem(f"--cacert {cacert}: no usable PEM certificate ({exc})") from exc
        return self._tls

    # ------------------------------------------------------------------ requests to the API

    def call(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int] | None = None,
        body: Any = None,
    ) -> Any:
        """Send `method path?query` with `body` as JSON (None: no body) and return the decoded
        JSON answer (None for 204).

        Raises ApiError for an error answer (its message is the server's) and ConnectFailed
        when no server answers or none knows an acting leader within the timeout.
        """
        data = None if body is None else json.dumps(body).encode("utf-8")
        answer = self.send(method, path, query=query, data=data)
        if answer.status >= 400:
            error = error_of(answer)
            if answer.status == 404 and error.message.startswith(_NO_ROUTE):
                # Not an unknown app or job: the server has no such endpoint (it is older).
                error = ApiError(
                    404,
                    f"{method} {path}: this server has no such endpoint (is it older than "
                    "this client?)",
                    "NoSuchEndpoint",
                )
                error.exit_code = EXIT_ERROR
            raise error
        if answer.status >= 300:
            raise ApiError(
                answer.status, f"{answer.url} answered an unexpected redirect ({answer.status})"
            )
        return answer.json()

    def send(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int] | None = None,
        data: bytes | None = None,
    ) -> Answer:
        """The first answer of the acting leader (any status but 503 NotLeader and redirects
        it followed). Raises ConnectFailed as `call` does."""
        target = path + (f"?{urlencode(query)}" if query else "")
        deadline = time.monotonic() + self.settings.timeout_s
        while True:
            problems: list[str] = []
            leaderless = False
            for base in self._candidates():
                try:
                    answer = self._follow(method, base, target, data)
                except _NotSent as exc:
                    leaderless = leaderless or exc.leader_gone
                    problems.append(str(exc))
                    continue
                except _NoAnswer as exc:
                    if method in _REPLAYABLE:
                        problems.append(str(exc))
                        continue
                    raise ConnectFailed(
                        f"{exc}; the {method} may or may not have been applied"
                    ) from exc
                if answer.status == 503 and _says_not_leader(answer):
                    leaderless = True
                    problems.append(f"{base}: {error_of(answer).message}")
                    continue
                return answer
            remaining = deadline - time.monotonic()
            if not leaderless or remaining <= 0:
                what = "no acting leader could be reached" if leaderless else "cannot connect"
                raise ConnectFailed(f"{what}: " + "; ".join(problems))
            time.sleep(min(NOT_LEADER_RETRY_S, remaining))

    def _candidates(self) -> list[str]:
        found = list(self.settings.servers)
        if self._leader is not None:
            found = [self._leader] + [b for b in found if b != self._leader]
        return found

    def _follow(self, method: str, base: str, target: str, data: bytes | None) -> Answer:
        url = base + target
        for hop in range(MAX_REDIRECTS + 1):
            try:
                answer = self._once(method, url, data)
            except _NotSent as exc:
                if hop == 0:
                    raise
                raise _NotSent(f"{base} redirected to {url}, and {exc}", True) from exc
            except _NoAnswer as exc:
                if hop == 0:
                    raise
                raise _NoAnswer(f"{base} redirected to {url}, and {exc}") from exc
            if answer.status not in (307, 308):
                if answer.status != 503 and url.endswith(target):
                    self._leader = url[: len(url) - len(target)]
                return answer
            location = answer.headers.get("location", "")
            next_url = urljoin(url, location)
            scheme = urlsplit(next_url).scheme
            if not location or scheme not in ("http", "https"):
                raise _NotSent(f"{url}: redirect without a usable Location ({location[:100]!r})")
            if urlsplit(url).scheme == "https" and scheme == "http":
                raise _NotSent(f"{url}: refused to follow a redirect from https to {next_url}")
            if not self._may_follow(base, next_url):
                target = _origin(next_url)
                raise _NotSent(
                    f"{base} redirected to {target}, which is not a configured server, and "
                    f"{base} does not vouch for it as its leader; refused to send it the "
                    f"credentials (if you trust {target}, add it with --server or "
                    "EJCLOUD_SERVER)"
                )
            url = next_url
        raise _NotSent(f"{base}: more than {MAX_REDIRECTS} redirects")

    def _may_follow(self, base: str, next_url: str) -> bool:
        """Whether a redirect from the configured server `base` to `next_url` may be followed
        with the credentials and the body: a trusted origin, or the leader `base` vouches for
        over an authenticated `/health` (remembered for this invocation). Without credentials
        configured the same holds (the body may matter too), asked without them."""
        target = _origin(next_url)
        if target in self._trusted:
            return True
        try:
            answer = self._once("GET", base + "/health", None)
        except (_NotSent, _NoAnswer):
            return False
        try:
            body = json.loads(answer.body)
        except ValueError:
            return False
        if answer.status not in (200, 503) or not isinstance(body, dict):
            return False
        leader = body.get("leader")
        netloc = urlsplit(next_url).netloc.lower()
        if body.get("leaderVouched") is not True or not isinstance(leader, str):
            return False
        if leader.lower() != netloc:
            return False
        self._trusted.add(target)
        return True

    # ------------------------------------------------------------------ one HTTP exchange

    def get_direct(self, url: str) -> Answer:
        """GET `url` on that server only: no redirects, no credentials (for `/health`).

        Raises ConnectFailed when it does not answer.
        """
        try:
            return self._once("GET", url, None, credentials=False)
        except (_NotSent, _NoAnswer) as exc:
            raise ConnectFailed(str(exc)) from exc

    def health(self, base: str, named_by: str | None = None) -> Answer:
        """GET `base/health` on that server only (no redirects), with the credentials when it
        may have them: a configured server, or the leader that the configured server
        `named_by` vouches for over an authenticated `/health` (the rule of redirects). An
        authenticated caller gets the full body (its `term` among others); without
        credentials, or for a server they may not go to, the public part.

        Raises ConnectFailed when it does not answer.
        """
        url = f"{base}/health"
        trusted = _origin(url) in self._trusted or (
            named_by is not None and self._may_follow(named_by, url)
        )
        has_credentials = self.settings.token is not None or self.settings.user is not None
        try:
            return self._once("GET", url, None, credentials=trusted and has_credentials)
        except (_NotSent, _NoAnswer) as exc:
            raise ConnectFailed(str(exc)) from exc

    def _once(
        self, method: str, url: str, data: bytes | None, *, credentials: bool = True
    ) -> Answer:
        parts = urlsplit(url)
        timeout_s = self.settings.timeout_s
        connection: http.client.HTTPConnection
        if parts.scheme == "https":
            connection = http.client.HTTPSConnection(
                parts.hostname or "",
                parts.port,
                timeout=timeout_s,
                context=self._tls_context(),
            )
        else:
            connection = http.client.HTTPConnection(
                parts.hostname or "", parts.port, timeout=timeout_s
            )
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        if credentials and self.settings.token is not None:
            headers["Authorization"] = f"Bearer {self.settings.token}"
        elif credentials and self.settings.user is not None:
            pair = f"{self.settings.user}:{self.settings.password or ''}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
        if data is not None:
            headers["Content-Type"] = "application/json"
        request_target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        origin = f"{parts.scheme}://{parts.netloc}"
        try:
            try:
                connection.connect()
            except (OSError, ssl.SSLError) as exc:
                raise _NotSent(f"{origin}: {_describe(exc, timeout_s)}") from exc
            deadline = time.monotonic() + timeout_s
            try:
                connection.request(method, request_target, body=data, headers=headers)
                response = connection.getresponse()
                body = self._read_all(response, deadline, origin)
            except (OSError, http.client.HTTPException) as exc:
                raise _NoAnswer(f"{origin}: {_describe(exc, timeout_s)}") from exc
            return Answer(
                response.status,
                {k.lower(): v for k, v in response.getheaders()},
                body,
                url,
            )
        finally:
            connection.close()

    def _read_all(self, response: http.client.HTTPResponse, deadline: float, origin: str) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = response.read(_READ_CHUNK)
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > MAX_ANSWER_BYTES:
                raise _NoAnswer(f"{origin}: answer larger than {MAX_ANSWER_BYTES} bytes")
            chunks.append(chunk)
            if time.monotonic() > deadline:
                raise _NoAnswer(f"{origin}: answer not complete within the timeout")


def _origin(url: str) -> str:
    """`scheme://host:port` of `url`, lower case, with the scheme's default port filled in."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        port = 443 if scheme == "https" else 80
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}"


def _says_not_leader(answer: Answer) -> bool:
    try:
        body = json.loads(answer.body)
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("type") == "NotLeader"


def _describe(exc: BaseException, timeout_s: float) -> str:
    if isinstance(exc, socket.timeout | TimeoutError):
        return f"no answer within {timeout_s:g} s"
    if isinstance(exc, socket.gaierror):
        return f"unknown host ({exc.strerror or exc})"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, ssl.SSLError):
        return f"TLS error ({exc.reason or exc})"
    if isinstance(exc, http.client.HTTPException):
        return f"bad HTTP answer ({type(exc).__name__})"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc) or type(exc).__name__

"""The leader's outbound HTTP requests: one deadline for the whole request, no redirects.

Shared by the rooms that call out (webhooks; the Mesos agents' `/state` and `/files/read`). A
timeout given to urllib bounds each socket operation, so a peer that answers one byte every few
seconds holds the caller for ever; here every connect, send and read is given what is left of one
deadline, so `request` returns or raises within `deadline_s` (plus the name resolution of a host
given by name: see `resolve`). Redirects are answers like any other (http.client never follows
them), and at most `max_answer_bytes` of the body are read.

`request` may be pinned: `connect_to` lists the addresses to connect to (the ones that were
checked), while the URL's host still goes in the `Host` header and, for https, in SNI and the
certificate check. `resolve_target` resolves a webhook target and judges every address it
resolved to (`scheduler/model/net_targets.py`), so a name that re-resolves to an internal
address (DNS rebinding) is refused at the moment of the request.

Runs on the caller's thread and blocks it; raises OSError (TimeoutError when the deadline
passed) for anything that is not a complete HTTP answer.
"""

from __future__ import annotations

import http.client
import ipaddress
import math
import re
import socket
import ssl
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from scheduler.model.net_targets import (
    AllowList,
    IPAddress,
    Target,
    TargetRefused,
    parse_target,
    resolved_problem,
    target_problem,
)

__all__ = ["Answer", "OutboundError", "request", "resolve", "resolve_target"]

DEFAULT_MAX_ANSWER_BYTES = 65536
_NOT_ASCII = re.compile(r"[^\x00-\x7f]+")


class OutboundError(OSError):
    """The peer did not give a complete HTTP answer (bad status line, cut short, ...)."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    headers: Mapping[str, str]


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the request's deadline passed")
    return left


class _DeadlineSocket(socket.socket):
    """A socket whose every blocking call waits at most until its `deadline` (monotonic)."""

    deadline = math.inf

    def _arm(self) -> None:
        self.settimeout(_remaining(self.deadline))

    def connect(self, address: Any) -> None:
        self._arm()
        super().connect(address)

    def sendall(self, data: Any, flags: int = 0) -> None:
        self._arm()
        super().sendall(data, flags)  # one deadline for all of it (Python >= 3.5)

    def send(self, data: Any, flags: int = 0) -> int:
        self._arm()
        return super().send(data, flags)

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        self._arm()
        return super().recv(bufsize, flags)

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        self._arm()
        return super().recv_into(buffer, nbytes, flags)


class _DeadlineSSLSocket(ssl.SSLSocket):
    """The TLS counterpart: every read and write waits at most until `deadline`."""

    deadline = math.inf

    def _arm(self) -> None:
        self.settimeout(_remaining(self.deadline))

    def do_handshake(self, block: bool = False) -> None:
        self._arm()
        super().do_handshake(block)

    def send(self, data: Any, flags: int = 0) -> int:
        self._arm()
        return super().send(data, flags)

    def sendall(self, data: Any, flags: int = 0) -> None:
        self._arm()
        super().sendall(data, flags)

    def recv(self, buflen: int = 1024, flags: int = 0) -> bytes:
        self._arm()
        return super().recv(buflen, flags)

    def recv_into(self, buffer: Any, nbytes: int | None = None, flags: int = 0) -> int:
        self._arm()
        return super().recv_into(buffer, nbytes, flags)


_default_tls: ssl.SSLContext | None = None


def _tls_context(given: ssl.SSLContext | None) -> ssl.SSLContext:
    global _default_tls
    context = given
    if context is None:
        if _default_tls is None:
            _default_tls = ssl.create_default_context()
        context = _default_tls
    context.sslsocket_class = _DeadlineSSLSocket
    return context


class _Connection(http.client.HTTPConnection):
    """An HTTP(S) connection to fixed addresses with one deadline for everything it does."""

    def __init__(
        self,
        host: str,
        port: int,
        addresses: Sequence[str],
        deadline: float,
        tls: ssl.SSLContext | None,
    ) -> None:
        super().__init__(host, port)
        self._addresses = list(addresses)
        self._deadline = deadline
        self._tls = tls
        self._server_name = host

    def connect(self) -> None:
        problem: OSError = OSError(f"no address to connect to for {self._server_name}")
        for address in self._addresses:
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            raw = _DeadlineSocket(family, socket.SOCK_STREAM)
            raw.deadline = self._deadline
            try:
                raw.connect((address, self.port))
                break
            except OSError as exc:
                raw.close()
                problem = exc
                if isinstance(exc, TimeoutError):
                    raise
        else:
            raise problem
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._tls is None:
            self.sock = raw
            return
        try:
            raw.settimeout(_remaining(self._deadline))
            wrapped = self._tls.wrap_socket(
                raw, server_hostname=self._server_name, do_handshake_on_connect=False
            )
        except BaseException:
            raw.close()
            raise
        assert isinstance(wrapped, _DeadlineSSLSocket)
        wrapped.deadline = self._deadline
        try:
            wrapped.do_handshake()
        except BaseException:
            wrapped.close()
            raise
        self.sock = wrapped


def request(
    method: str,
    url: str,
    *,
    deadline_s: float,
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    connect_to: Sequence[str] | None = None,
    host_header: str | None = None,
    max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
    tls: ssl.SSLContext | None = None,
    server_name: str | None = None,
) -> Answer:
    """Send one request to `url` and read its answer, all within `deadline_s` seconds.

    `connect_to`: the addresses to connect to, in order (default: the URL's host resolved now).
    `host_header`: the `Host` header (default: the URL's host and port as written);
    `server_name`: the name TLS sends (SNI) and checks the certificate against (default: the
    URL's host). `tls` defaults to the system's trusted CAs (it is given the deadline's socket
    class). A 3xx is returned, not followed. Raises OSError (TimeoutError at the deadline).
    """
    deadline = time.monotonic() + deadline_s
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise OutboundError(f"not a URL: {exc}") from None
    host = parts.hostname or ""
    if parts.scheme not in ("http", "https") or not host:
        raise OutboundError("only http:// and https:// URLs with a host")
    addresses = list(connect_to) if connect_to is not None else resolve(host, port)
    _remaining(deadline)  # the resolution counts against the deadline
    connection = _Connection(
        server_name or host,
        port,
        addresses,
        deadline,
        _tls_context(tls) if parts.scheme == "https" else None,
    )
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    # The request line is ASCII: anything else in a URL is sent percent-encoded (UTF-8).
    path = _NOT_ASCII.sub(lambda found: quote(found.group(), safe=""), path)
    sent = {"User-Agent": "ejcloud-scheduler", "Connection": "close", **(headers or {})}
    sent["Host"] = host_header or parts.netloc.rpartition("@")[2]
    try:
        connection.request(method, path, body=body, headers=sent)
        response = connection.getresponse()
        data = response.read(max_answer_bytes)
        return Answer(response.status, data, dict(response.headers.items()))
    except (http.client.HTTPException, UnicodeError) as exc:
        raise OutboundError(f"{type(exc).__name__}: {exc}") from exc
    except ssl.SSLError as exc:
        raise OutboundError(f"TLS: {exc}") from exc
    finally:
        connection.close()


def resolve(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to now (TCP), each once, in the resolver's order.

    Blocks for the system resolver (its own timeouts, not the request's deadline); raises
    OSError (socket.gaierror) when the name does not resolve.
    """
    found: list[str] = []
    for _family, _type, _proto, _name, sockaddr in socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM
    ):
        address = str(sockaddr[0])
        if address not in found:
            found.append(address)
    return found


def resolve_target(url: str, allowed: AllowList) -> tuple[Target, list[str]]:
    """The webhook target of `url` and the addresses to connect to, each judged now.

    Raises TargetRefused (an internal address or name not allowed by `allowed`, or a host no
    resolver reads alike) and OSError (the name does not resolve).
    """
    target = parse_target(url)
    problem = target_problem(target, allowed)
    if problem is not None:
        raise TargetRefused(problem)
    if target.address is not None:
        return target, [str(target.address)]
    addresses = resolve(target.name, target.port)
    problem = resolved_problem(target, [_address(a) for a in addresses], allowed)
    if problem is not None:
        raise TargetRefused(problem)
    return target, addresses


def _address(text: str) -> IPAddress:
    return ipaddress.ip_address(text.partition("%")[0])  # an IPv6 zone is not the address

"""What TLS costs the hardened server: new connections, kept-alive requests, a large answer.

`python -m tests.bench tls [--connections N]`: an in-process EdgeServer on 127.0.0.1, plain and
with self-signed ECDSA P-256 and RSA-2048 certificates made by `openssl`; figures per scheme:
p50/p99 of a request on a new connection (TCP + handshake + request), p50 of a request on a
kept-alive connection, MB/s of a 16 MB answer, and a new connection's p50 while 200 clients hold
silent connections (handshakes not started).
"""

from __future__ import annotations

import argparse
import http.client
import socket
import ssl
import statistics
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from deploy.zookeeper import free_port
from scheduler.edge.wsgiserver import EdgeServer, HttpLimits, server_tls_context
from tests.support.certificates import self_signed

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

_BLOCK = b"x" * 65536


def _app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
    size = int(environ.get("QUERY_STRING") or "2")
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(size))])
    return (_BLOCK[: min(65536, size - i)] for i in range(0, size, 65536))


def _certificate(folder: Path, kind: str) -> tuple[str, str]:
    cert, key = self_signed(folder, ips=(), kind=kind, stem=f"{kind}-")
    return str(cert), str(key)


def _connection(port: int, client: ssl.SSLContext | None) -> http.client.HTTPConnection:
    if client is None:
        return http.client.HTTPConnection("localhost", port, timeout=10)
    return http.client.HTTPSConnection("localhost", port, timeout=10, context=client)


def _get(conn: http.client.HTTPConnection, query: str = "") -> int:
    conn.request("GET", "/?" + query if query else "/")
    return len(conn.getresponse().read())


def _ms(values: Sequence[float], q: float) -> str:
    ordered = sorted(values)
    return f"{1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]:.2f}"


def _measure(name: str, port: int, client: ssl.SSLContext | None, count: int) -> None:
    fresh: list[float] = []
    for _ in range(count):
        started = time.perf_counter()
        conn = _connection(port, client)
        _get(conn)
        fresh.append(time.perf_counter() - started)
        conn.close()
    conn = _connection(port, client)
    kept: list[float] = []
    for _ in range(count):
        started = time.perf_counter()
        _get(conn)
        kept.append(time.perf_counter() - started)
    started = time.perf_counter()
    size = _get(conn, str(16 * 1024 * 1024))
    mb_s = size / (time.perf_counter() - started) / 1e6
    conn.close()
    silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(200)]
    try:
        crowded: list[float] = []
        for _ in range(count // 4 or 1):
            started = time.perf_counter()
            conn = _connection(port, client)
            _get(conn)
            crowded.append(time.perf_counter() - started)
            conn.close()
    finally:
        for sock in silent:
            sock.close()
    print(
        f"{name:6}  new connection p50 {_ms(fresh, 0.5)} ms p99 {_ms(fresh, 0.99)} ms  "
        f"kept-alive p50 {_ms(kept, 0.5)} ms  16 MB answer {mb_s:.0f} MB/s  "
        f"new connection beside 200 silent ones p50 {statistics.median(crowded) * 1000:.2f} ms",
        flush=True,
    )


def main(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.bench tls")
    parser.add_argument("--connections", type=int, default=300)
    args = parser.parse_args(list(argv))
    with tempfile.TemporaryDirectory(prefix="bench-tls-") as folder:
        for name in ("plain", "ecdsa", "rsa"):
            tls = None
            client = None
            if name != "plain":
                cert, key = _certificate(Path(folder), name)
                tls = server_tls_context(cert, key)
                client = ssl.create_default_context(cafile=cert)
            port = free_port()
            server = EdgeServer(_app, "127.0.0.1", port, HttpLimits(), tls=tls)
            server.start()
            try:
                _measure(name, port, client, args.connections)
            finally:
                server.stop(5)

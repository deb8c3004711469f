"""A small threaded HTTP/1.1 server with exact-path routes and streaming responses.

Each connection runs on its own named thread, which the server tracks: `stop()` shuts down the
listener, then the connection sockets (so keep-alive readers and event streams end), then joins
the threads with a deadline. Idle keep-alive connections are never closed by the server: pymesos
reuses its call connection and dies if it finds it silently closed.
"""

from __future__ import annotations

import itertools
import logging
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from .streams import EventStream

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: Message
    body: bytes
    query: str = ""  # the raw query string, without "?"


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: Mapping[str, str] = field(default_factory=dict)
    then: Callable[[], None] | None = None
    """Run once the answer is written, before the connection's next request is read."""


@dataclass(frozen=True)
class StreamResponse:
    """Answer 200 with a chunked RecordIO body fed by `stream`."""

    stream: EventStream


Route = Callable[[Request], "Response | StreamResponse"]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()

    def _handle(self) -> None:
        url = urlsplit(self.path)
        path = url.path
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length > 0 else b""
        route = self.server.routes.get(path)
        if route is None:
            self._send(Response(404, f"No route for {path}\n".encode()))
            return
        try:
            result = route(Request(self.command, path, self.headers, body, url.query))
        except Exception:
            log.exception("%s %s failed", self.command, path)
            result = Response(500, b"Internal error\n")
        if isinstance(result, Response):
            self._send(result)
            if result.then is not None:
                try:
                    result.then()
                except Exception:
                    log.exception("%s %s failed after its answer", self.command, path)
            return
        stream = result.stream
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            if stream.stream_id is not None:
                self.send_header("Mesos-Stream-Id", stream.stream_id)
            self.end_headers()
            self.wfile.flush()
            stream.serve(self.connection, self.wfile)
        finally:
            stream.finish()
            self.close_connection = True

    def _send(self, response: Response) -> None:
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        for name, value in response.headers.items():
            self.send_header(name, value)
        self.end_headers()
        if response.body:
            self.wfile.write(response.body)
        self.wfile.flush()

    def log_message(self, format: str, *args: Any) -> None:
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s: %s", self.server.name, format % args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, name: str, address: tuple[str, int], routes: Mapping[str, Route]) -> None:
        self.name = name
        self.routes = routes
        self._seq = itertools.count(1)
        self._lock = threading.Lock()
        self.connections: dict[threading.Thread, socket.socket] = {}
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self._serve_connection,
            args=(request, client_address),
            name=f"{self.name}-conn-{next(self._seq)}",
            daemon=True,
        )
        with self._lock:
            self.connections[thread] = request
        thread.start()

    def _serve_connection(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except OSError as exc:
            log.debug("%s: connection from %s ended: %s", self.name, client_address, exc)
        except Exception:
            log.exception("%s: connection from %s failed", self.name, client_address)
        finally:
            self.shutdown_request(request)
            with self._lock:
                self.connections.pop(threading.current_thread(), None)


class HttpServer:
    """Serves `routes` on `host:port` (port 0 picks a free one) on a thread named `name`."""

    def __init__(self, name: str, host: str, port: int, routes: Mapping[str, Route]) -> None:
        self.name = name
        self._server = _Server(name, (host, port), routes)
        self.host = host
        self.port = int(self._server.server_address[1])
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name=self.name,
            daemon=True,
        )
        self._thread.start()

    def stop(self, timeout_s: float) -> None:
        """Stop accepting, end open connections, join every thread with `timeout_s`."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout_s)
        self._server.server_close()
        with self._server._lock:
            connections = dict(self._server.connections)
        for sock in connections.values():
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for thread in connections:
            thread.join(timeout_s)
            if thread.is_alive():
                log.error("thread %s did not stop within %.1fs", thread.name, timeout_s)

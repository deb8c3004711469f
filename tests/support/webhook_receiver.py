"""A small HTTP server on 127.0.0.1 that receives webhook POSTs (JSON bodies) for tests."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver:
    """Answers each POST with the next status of `statuses` (then 204) and keeps what came."""

    def __init__(self) -> None:
        self.bodies: list[Any] = []
        self.times: list[float] = []
        self.paths: list[str] = []
        self.hosts: list[str] = []  # each POST's Host header
        self.statuses: list[int] = []
        self.location = ""
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                receiver.bodies.append(json.loads(self.rfile.read(length)))
                receiver.times.append(time.monotonic())
                receiver.paths.append(self.path)
                receiver.hosts.append(self.headers.get("Host", ""))
                status = receiver.statuses.pop(0) if receiver.statuses else 204
                self.send_response(status)
                if receiver.location:
                    self.send_header("Location", receiver.location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook?token=s3cret"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def of(self, event: str) -> list[Any]:
        """The bodies received for `event` (run_failed, fire_skipped, ...), in order."""
        return [b for b in list(self.bodies) if isinstance(b, dict) and b.get("event") == event]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)


class Trickler:
    """A server on 127.0.0.1 that reads each request, then answers `answer` one byte every
    `every_s` seconds (a slow receiver or a slow-loris agent); `accepted` counts connections
    and `finished` those it answered whole. `close` ends every connection at once."""

    def __init__(
        self,
        every_s: float = 4.0,
        answer: bytes = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    ) -> None:
        self.every_s = every_s
        self.answer = answer
        self.accepted = 0
        self.finished = 0
        self._stop = threading.Event()
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.2)
        self.port = self._server.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/slow?token=s3cret"
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            thread = threading.Thread(target=self._answer, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            try:
                conn.recv(65536)
                for byte in self.answer:
                    conn.sendall(bytes([byte]))
                    if self._stop.wait(self.every_s):
                        return
                self.finished += 1
            except OSError:
                return  # the client gave up (its deadline) and closed

    def close(self) -> None:
        self._stop.set()
        self._server.close()
        for thread in self._threads:
            thread.join(5)

"""A small HTTP server on a loopback address that records every request (method, path, headers,
body) and answers each with what a test's `answer` function returns: for trust tests, where the
question is who received which credentials."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]  # names in lower case
    body: bytes

    @property
    def credentials(self) -> str | None:
        """The Authorization header or a Cookie header, whichever it carried (None: neither)."""
        return self.headers.get("authorization") or self.headers.get("cookie")


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: Any = None  # JSON-encoded unless bytes
    headers: tuple[tuple[str, str], ...] = ()


Answer = Callable[[Recorded], Reply]


class RecordingServer:
    """Serves on `host` (a loopback address, any port) until `close`; thread-safe `requests`."""

    def __init__(self, answer: Answer | None = None, host: str = "127.0.0.1") -> None:
        self.requests: list[Recorded] = []
        self.answer: Answer = answer or (lambda _r: Reply(404, {"error": "nothing here"}))
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                recorded = Recorded(
                    self.command,
                    self.path,
                    {k.lower(): v for k, v in self.headers.items()},
                    self.rfile.read(length) if length else b"",
                )
                server.requests.append(recorded)
                reply = server.answer(recorded)
                data = (
                    reply.body
                    if isinstance(reply.body, bytes)
                    else b""
                    if reply.body is None
                    else json.dumps(reply.body).encode()
                )
                self.send_response(reply.status)
                sent = {name.lower() for name, _ in reply.headers}
                for name, value in reply.headers:
                    self.send_header(name, value)
                if "content-type" not in sent:
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_OPTIONS = _any

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.host = host
        self.port = int(self.server.server_address[1])
        self.identity = f"{host}:{self.port}"
        self.url = f"http://{self.identity}"
        self._thread = threading.Thread(
            target=self.server.serve_forever, name=f"recording-{self.port}", daemon=True
        )
        self._thread.start()

    def with_credentials(self) -> list[Recorded]:
        return [r for r in list(self.requests) if r.credentials]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)


@contextmanager
def recording_server(
    answer: Answer | None = None, host: str = "127.0.0.1"
) -> Iterator[RecordingServer]:
    server = RecordingServer(answer, host)
    try:
        yield server
    finally:
        server.close()

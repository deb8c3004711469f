"""A small HTTP server on 127.0.0.1 that receives webhook POSTs (JSON bodies) for tests."""

from __future__ import annotations

import json
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
        self.statuses: list[int] = []
        self.location = ""
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                receiver.bodies.append(json.loads(self.rfile.read(length)))
                receiver.times.append(time.monotonic())
                receiver.paths.append(self.path)
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

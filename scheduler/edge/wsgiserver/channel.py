"""One client connection of the HTTP server (waitress's channel, parser and tasks, hardened):
chunked framing bounded, waitress's own errors as JSON, a 204 or 304 keeps the connection, and
the request being received knows when it is overdue (answered 408)."""

from __future__ import annotations

import json
import time
from typing import Any

# waitress ships no type information: its classes are Any here, and stay inside this package.
from waitress.channel import HTTPChannel  # type: ignore[import-untyped]
from waitress.parser import HTTPRequestParser  # type: ignore[import-untyped]
from waitress.receiver import ChunkedReceiver  # type: ignore[import-untyped]
from waitress.task import ErrorTask, WSGITask  # type: ignore[import-untyped]
from waitress.utilities import BadRequest  # type: ignore[import-untyped]

from scheduler.edge.wsgiserver.limits import HttpLimits

_MAX_CHUNK_LINE_BYTES = 1024
_MAX_TRAILER_BYTES = 8192


class BoundedChunks(ChunkedReceiver):  # type: ignore[misc]
    """Chunked body receiver that refuses absurd framing as soon as it is seen."""

    error: Any
    chunk_remainder: int

    def __init__(self, buf: Any, max_body_bytes: int) -> None:
        super().__init__(buf)
        self._max_body_bytes = max_body_bytes

    def received(self, s: bytes) -> int:
        consumed: int = super().received(s)
        if self.error is None:
            # One read (at most recv_bytes) is processed before these checks: bounded.
            if self.chunk_remainder > self._max_body_bytes:
                self.error = BadRequest(
                    f"chunk size larger than the body limit of {self._max_body_bytes} bytes"
                )
            elif len(self.control_line) > _MAX_CHUNK_LINE_BYTES:
                self.error = BadRequest("chunk size line too long")
            elif len(self.trailer) > _MAX_TRAILER_BYTES:
                self.error = BadRequest("chunked trailer too long")
            if self.error is not None:
                self.all_chunks_received = True
                self.chunk_remainder = 0
        return consumed


class Parser(HTTPRequestParser):  # type: ignore[misc]
    body_rcv: Any

    def parse_header(self, header_plus: bytes) -> None:
        super().parse_header(header_plus)
        if self.chunked:
            # Nothing of the body has been received yet: swap in the bounded receiver.
            self.body_rcv = BoundedChunks(self.body_rcv.getbuf(), self.adj.ejc_max_body_bytes)


def error_body(message: str, kind: str) -> bytes:
    return (json.dumps({"error": message, "type": kind}) + "\n").encode()


class JsonErrorTask(ErrorTask):  # type: ignore[misc]
    """waitress's own error answers (bad framing, limits) as JSON."""

    def execute(self) -> None:
        error = self.request.error
        code = int(error.code)
        kind = str(error.reason).replace(" ", "")
        if code == 413:
            message = f"request body larger than {self.channel.adj.ejc_max_body_bytes} bytes"
        elif code == 431:
            message = (
                f"request line and headers larger than "
                f"{self.channel.adj.max_request_header_size} bytes"
            )
        else:
            message = f"{error.reason}: {error.body}"
        body = error_body(message, kind)
        self.status = f"{code} {error.reason}"
        self.response_headers.extend(
            [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        )
        self.set_close_on_finish()
        self.content_length = len(body)
        self.write(body)
        self.channel.server.edge.count_refused(code)


class Task(WSGITask):  # type: ignore[misc]
    """waitress's request task, but a 204 or 304 keeps the connection open.

    waitress closes an HTTP/1.1 connection after any answer without a Content-Length, and it
    never gives one to an answer that has no body: every 204 cost the client a new connection
    (and with TLS a new handshake). Such an answer needs no length to be delimited.
    """

    _building = False

    def build_response_header(self) -> bytes:
        self._building = True
        try:
            return bytes(super().build_response_header())
        finally:
            self._building = False

    def set_close_on_finish(self) -> None:
        keep_alive = (
            self._building
            and not self.has_body
            and self.version == "1.1"
            and self.request.headers.get("CONNECTION", "").lower() != "close"
        )
        if not keep_alive:
            super().set_close_on_finish()


class Channel(HTTPChannel):  # type: ignore[misc]
    """One client connection; knows when the request it is receiving is overdue.

    All methods run in the I/O thread (`sched-http`).
    """

    parser_class = Parser
    task_class = Task
    error_task_class = JsonErrorTask
    request: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._tracked: Any = None  # the partly received request being timed
        self._request_started = 0.0
        self._body_started: float | None = None
        super().__init__(*args, **kwargs)

    def received(self, data: bytes) -> bool:
        handled: bool = super().received(data)
        now = time.monotonic()
        pending = self.request
        if pending is None:
            self._tracked = None
        elif pending is not self._tracked:
            self._tracked = pending
            self._request_started = now
            self._body_started = now if pending.headers_finished else None
        elif pending.headers_finished and self._body_started is None:
            self._body_started = now
        return handled

    def overdue(self, now: float, limits: HttpLimits) -> str | None:
        """'headers' or 'body' when the request being received has missed its deadline."""
        if self.requests or self._tracked is None or self._tracked is not self.request:
            return None
        if self._body_started is not None:
            return "body" if now - self._body_started > limits.body_timeout_s else None
        return "headers" if now - self._request_started > limits.header_timeout_s else None

    def answer_timeout(self, part: str, seconds: float) -> None:
        """Answer 408 to the half-received request and close once that is sent."""
        body = error_body(f"request {part} not received within {seconds:g} s", "RequestTimeout")
        head = (
            f"HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        with self.requests_lock:
            if self.request is not None:
                self.request.close()
                self.request = None
            self._tracked = None
            self.close_when_flushed = True
        with self.outbuf_lock:
            self.outbufs[-1].append(head + body)
            self.current_outbuf_count += len(head) + len(body)
            self.total_outbufs_len += len(head) + len(body)

"""Streaming HTTP responses: the scheduler's and the executors' event streams.

The master and agents `send()` events while holding the state lock, so sending only queues the
encoded chunk and wakes the connection's own handler thread, which does the (possibly slow)
socket writes in `serve()`. `serve()` also watches the socket, so a peer that goes away is seen
at once (EOF), not at the next heartbeat.
"""

from __future__ import annotations

import logging
import os
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from io import BufferedIOBase

from .protocol import LAST_CHUNK, Json, encode_chunk, event

log = logging.getLogger(__name__)

_HEARTBEAT_CHUNK = encode_chunk(event("HEARTBEAT"))


class EventStream:
    """One open RecordIO event stream. `send`/`close` are thread-safe and never block."""

    def __init__(
        self,
        name: str,
        heartbeat_interval_s: float | None = None,
        on_closed: Callable[[EventStream], None] | None = None,
    ) -> None:
        self.name = name
        self.stream_id: str | None = None
        self._heartbeat_interval_s = heartbeat_interval_s
        self._on_closed = on_closed
        self._lock = threading.Lock()
        self._queue: deque[bytes] = deque()
        self._closing = False
        self._finished = False
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)

    @property
    def open(self) -> bool:
        """True until `close()` was asked for or the peer went away."""
        with self._lock:
            return not (self._closing or self._finished)

    def send(self, message: Json) -> None:
        """Queue an event; dropped if the stream is closing or gone."""
        chunk = encode_chunk(message)
        with self._lock:
            if self._closing or self._finished:
                return
            self._queue.append(chunk)
            self._wake_locked()

    def close(self) -> None:
        """Flush what is queued, then end the response with the last chunk."""
        with self._lock:
            if self._closing or self._finished:
                return
            self._closing = True
            self._wake_locked()

    def _wake_locked(self) -> None:
        try:
            os.write(self._wake_w, b"\0")
        except BlockingIOError:  # pipe full: the writer is already awake
            pass

    def serve(self, sock: socket.socket, wfile: BufferedIOBase) -> None:
        """Write events until closed or the peer leaves. Runs in the connection's thread."""
        next_heartbeat = self._next_heartbeat()
        try:
            while True:
                with self._lock:
                    chunks = list(self._queue)
                    self._queue.clear()
                    closing = self._closing
                if chunks:
                    wfile.write(b"".join(chunks))
                if closing:
                    wfile.write(LAST_CHUNK)
                    wfile.flush()
                    return
                if next_heartbeat is not None and time.monotonic() >= next_heartbeat:
                    wfile.write(_HEARTBEAT_CHUNK)
                    next_heartbeat = self._next_heartbeat()
                wfile.flush()
                timeout_s = None
                if next_heartbeat is not None:
                    timeout_s = max(0.0, next_heartbeat - time.monotonic())
                ready, _, _ = select.select([sock.fileno(), self._wake_r], [], [], timeout_s)
                if self._wake_r in ready:
                    os.read(self._wake_r, 4096)
                if sock.fileno() in ready and not sock.recv(4096):
                    log.info("stream %s: peer closed the connection", self.name)
                    return
        except OSError as exc:
            log.info("stream %s: connection lost: %s", self.name, exc)
        finally:
            self.finish()

    def finish(self) -> None:
        """Release the stream and report it closed (once). Safe to call more than once."""
        with self._lock:
            if self._finished:
                return
            self._finished = True
            self._queue.clear()
            os.close(self._wake_r)
            os.close(self._wake_w)
        if self._on_closed is not None:
            try:
                self._on_closed(self)
            except Exception:
                log.exception("stream %s: close callback failed", self.name)

    def _next_heartbeat(self) -> float | None:
        if self._heartbeat_interval_s is None:
            return None
        return time.monotonic() + self._heartbeat_interval_s

"""kazoo's threading handler with a cheaper `select`, and its connection reading in chunks.

kazoo's connection thread calls its handler's `select` about three times per reply it reads
(once in its loop, once per length prefix and once per body) and once per request it sends.
kazoo's own `select` builds an epoll selector for each call (create, register, wait, close:
four system calls and their Python objects); with thousands of requests a second that was
most of the leader's CPU (issue 29's profile: about 80% of the GIL holder's time was kazoo's
connection thread). `poll` needs no file descriptor of its own and no limit on descriptor
numbers, so one `poll` system call serves each `select`.

kazoo's connection also reads each frame (a reply or a watch notification) with two receives,
its 4-byte length and then its body, each after a `select`: three system calls per frame, and
a launched task brings about five frames (the replies to its writes and the notifications of
the leader's recursive watch on the running tasks). `BufferedConnection` receives up to 64 KiB
at a time into a buffer and cuts frames from it; its loop's `select` reports the socket
readable at once while a whole frame is buffered, so the frames that arrived together cost one
`poll` and one receive between them. It sends a request at once, and waits for room on the
socket only when there is none. `use_buffered_reads` puts it in a client before it starts.
"""

from __future__ import annotations

import select
import ssl
from collections.abc import Sequence
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionDropped
from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.handlers.utils import selector_select
from kazoo.protocol.connection import ConnectionHandler
from kazoo.protocol.serialization import int_struct

__all__ = ["BufferedConnection", "PollingHandler", "poll_select", "use_buffered_reads"]

_CHUNK_BYTES = 64 * 1024

_READ = select.POLLIN | select.POLLPRI
_WRITE = select.POLLOUT
# Ready for kazoo too: a hung-up or failed socket is readable (its read fails and kazoo
# reconnects), as select() reports it.
_READ_READY = _READ | select.POLLHUP | select.POLLERR | select.POLLNVAL
_WRITE_READY = _WRITE | select.POLLHUP | select.POLLERR | select.POLLNVAL


def _fd(obj: Any) -> int:
    if isinstance(obj, int):
        return obj
    fd = obj.fileno()
    if not isinstance(fd, int) or fd < 0:
        raise ValueError(f"invalid file descriptor {fd!r}")
    return fd


def poll_select(
    rlist: Sequence[Any], wlist: Sequence[Any], xlist: Sequence[Any], timeout: float | None = None
) -> tuple[list[Any], list[Any], list[Any]]:
    """`select.select`'s contract (the objects ready to read, to write; never exceptional
    ones, as kazoo's own `select` does) on one `poll` call."""
    if timeout is not None:
        if not isinstance(timeout, int | float):
            raise TypeError("timeout must be a number")
        if timeout < 0:
            raise ValueError("timeout must be non-negative")
    poller = select.poll()
    wanted: dict[int, int] = {}
    for obj in rlist:
        wanted[_fd(obj)] = wanted.get(_fd(obj), 0) | _READ
    for obj in wlist:
        wanted[_fd(obj)] = wanted.get(_fd(obj), 0) | _WRITE
    for fd, mask in wanted.items():
        poller.register(fd, mask)
    ms = None if timeout is None else int(timeout * 1000 + 0.999)  # round up, never spin
    ready = dict(poller.poll(ms))
    readable = [obj for obj in rlist if ready.get(_fd(obj), 0) & _READ_READY]
    writable = [obj for obj in wlist if ready.get(_fd(obj), 0) & _WRITE_READY]
    return readable, writable, []


class PollingHandler(SequentialThreadingHandler):  # type: ignore[misc]
    """kazoo's `SequentialThreadingHandler` whose `select` is `poll_select` (where the platform
    has `poll`; kazoo's own otherwise)."""

    def select(self, *args: Any, **kwargs: Any) -> Any:
        if hasattr(select, "poll"):
            return poll_select(*args, **kwargs)
        return selector_select(*args, **kwargs)


class BufferedConnection(ConnectionHandler):  # type: ignore[misc]
    """kazoo's `ConnectionHandler` whose reads come from a buffer filled in large chunks (the
    module's docstring says why). Everything else is kazoo's: the buffer belongs to the socket
    it was filled from and is dropped with it on a reconnect."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._plain: Any = self.handler  # type: ignore[has-type]
        self.handler = _FrameAwareHandler(self._plain, self)
        self._buffer = bytearray()
        self._buffer_of: Any = None

    def _buffered(self) -> bytearray:
        if self._buffer_of is not self._socket:
            self._buffer_of = self._socket
            self._buffer.clear()
        return self._buffer

    def frame_ready(self) -> bool:
        """A whole frame is buffered (or a TLS socket holds decrypted bytes no `poll` sees)."""
        sock = self._socket
        if sock is None:
            return False
        buffer = self._buffered()
        if len(buffer) >= 4 and len(buffer) >= 4 + int_struct.unpack_from(buffer, 0)[0]:
            return True
        pending = getattr(sock, "pending", None)
        return pending is not None and pending() > 0

    def _read(self, length: int, timeout: float) -> bytes:
        buffer = self._buffered()
        with self._socket_error_handling():
            while len(buffer) < length:
                sock = self._socket
                pending = getattr(sock, "pending", None)
                if pending is None or pending() <= 0:
                    if not self._plain.select([sock], [], [], timeout)[0]:
                        raise self._plain.timeout_exception("socket time-out during read")
                try:
                    chunk = sock.recv(max(_CHUNK_BYTES, length - len(buffer)))
                except ssl.SSLError as exc:
                    if exc.errno in (ssl.SSL_ERROR_WANT_READ, ssl.SSL_ERROR_WANT_WRITE):
                        continue
                    raise
                if not chunk:
                    raise ConnectionDropped("socket connection broken")
                buffer += chunk
            frame = bytes(buffer[:length])
            del buffer[:length]
            return frame

    def _write(self, msg: bytes, timeout: float) -> None:
        """Send `msg`, waiting for room only when the socket has none (kazoo's own `_write`
        waits on a `select` before every send, an extra system call per request)."""
        sent = 0
        view = memoryview(msg)
        with self._socket_error_handling():
            while sent < len(view):
                sock = self._socket
                try:
                    count = sock.send(view[sent:])
                except BlockingIOError:
                    count = None
                except ssl.SSLError as exc:
                    if exc.errno not in (ssl.SSL_ERROR_WANT_READ, ssl.SSL_ERROR_WANT_WRITE):
                        raise
                    count = None
                if count is None:
                    if not self._plain.select([], [sock], [], timeout)[1]:
                        raise self._plain.timeout_exception("socket time-out during write")
                    continue
                if not count:
                    raise ConnectionDropped("socket connection broken")
                sent += count


class _FrameAwareHandler:
    """The client's handler as a `BufferedConnection` sees it: a `select` on its socket
    answers at once while a whole frame is buffered (kazoo's loop would otherwise wait for
    bytes that already arrived); everything else is the handler's own."""

    def __init__(self, handler: Any, connection: BufferedConnection) -> None:
        self._handler = handler
        self._connection = connection

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handler, name)

    def select(
        self,
        rlist: Sequence[Any],
        wlist: Sequence[Any],
        xlist: Sequence[Any],
        timeout: float | None = None,
    ) -> Any:
        sock = self._connection._socket
        if sock is not None and not wlist and sock in rlist and self._connection.frame_ready():
            return [sock], [], []
        return self._handler.select(rlist, wlist, xlist, timeout)


def use_buffered_reads(client: KazooClient) -> KazooClient:
    """Give `client` (not started) a `BufferedConnection` in place of kazoo's own."""
    if not client._stopped.is_set():
        raise RuntimeError("use_buffered_reads needs a client that has not started")
    old = client._connection
    client._connection = BufferedConnection(
        client, old.retry_sleeper, logger=old.logger, sasl_options=old.sasl_options
    )
    return client

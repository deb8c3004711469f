"""A client connection on the TLS port: sniffed, wrapped, handshaken by the I/O loop without
blocking, then HTTP as usual; plain HTTP sent to it is answered 400 and closed."""

from __future__ import annotations

import socket
import ssl
import time
from typing import Any

from scheduler.edge.wsgiserver.channel import Channel, error_body

# The first byte of a TLS connection: a handshake record.
_TLS_HANDSHAKE_RECORD = 0x16
# What a plain-HTTP request to the TLS port may send before it is answered (then discarded).
_PLAIN_DISCARD_BYTES = 65536
# The most one TLS write is given: one record. A larger write that would block reports nothing
# written until all of it is (OpenSSL without partial writes), so a slow reader would look idle
# for its whole duration, and waitress copies the chunk it offers on every try.
_TLS_WRITE_BYTES = 16384


class TlsChannel(Channel):
    """A client connection on the TLS port: sniffed, wrapped, handshaken, then HTTP as usual.

    States: `sniff` (nothing received yet; plain socket), `handshake` (wrapped, the handshake
    under way), `open` (HTTP over TLS), `plain` (the client spoke plain HTTP; it is being
    answered and closed). All methods but `send` run in the I/O thread; `send` also runs in
    worker threads, under the channel's outbuf lock (as waitress does).
    """

    socket: Any  # the accepted socket, then the SSLSocket wrapping it

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._tls_state = "sniff"
        self._handshake_wants_write = False
        self._accepted_at = time.monotonic()
        super().__init__(*args, **kwargs)
        self.sendbuf_len = _TLS_WRITE_BYTES  # waitress offers send() chunks of this size

    def handshake_overdue(self, now: float, limit_s: float) -> bool:
        """Whether the connection has not finished its handshake within `limit_s` of its
        accept (a client that sends nothing, or trickles the handshake)."""
        return self._tls_state in ("sniff", "handshake") and now - self._accepted_at > limit_s

    def readable(self) -> bool:
        if self._tls_state == "sniff":
            return True
        if self._tls_state == "handshake":
            return not self._handshake_wants_write
        return bool(super().readable())

    def writable(self) -> bool:
        if self._tls_state == "handshake":
            return self._handshake_wants_write
        return bool(super().writable())

    def handle_read(self) -> None:
        if self._tls_state == "sniff":
            self._sniff()
        elif self._tls_state == "handshake":
            self._handshake()
        elif self._tls_state == "plain":
            self._discard()
        else:
            self._read_open()

    def handle_write(self) -> None:
        if self._tls_state == "handshake":
            self._handshake()
        else:
            super().handle_write()

    def _sniff(self) -> None:
        try:
            first = self.socket.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            return
        except OSError:
            self.handle_close()
            return
        if not first:
            self.handle_close()
        elif first[0] == _TLS_HANDSHAKE_RECORD:
            tls = self.server.edge.tls
            try:
                self.socket = tls.wrap_socket(
                    self.socket, server_side=True, do_handshake_on_connect=False
                )
            except OSError:  # the peer is already gone
                self.handle_close()
                return
            self._tls_state = "handshake"
            self._handshake()
        else:
            self._tls_state = "plain"
            self._discard()
            self._answer_plain()

    def _handshake(self) -> None:
        try:
            self.socket.do_handshake()
        except ssl.SSLWantReadError:
            self._handshake_wants_write = False
            return
        except ssl.SSLWantWriteError:
            self._handshake_wants_write = True
            return
        except OSError:  # ssl.SSLError included: a bad hello, an alert, a reset
            self.server.edge.tls_failed += 1
            self.handle_close()
            return
        self._tls_state = "open"
        self._handshake_wants_write = False
        self.last_activity = time.time()
        if self.socket.pending():
            self._read_open()

    def _read_open(self) -> None:
        try:
            data = self.socket.recv(self.adj.recv_bytes)
            # Bytes OpenSSL already decrypted are invisible to poll(): take them all now.
            while data and self.socket.pending():
                data += self.socket.recv(self.socket.pending())
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return
        except OSError:
            self.handle_close()
            return
        if not data:
            self.handle_close()  # the client closed (close_notify or EOF)
            return
        self.last_activity = time.time()
        self.received(data)

    def _discard(self) -> None:
        try:
            if not self.socket.recv(_PLAIN_DISCARD_BYTES):
                self.handle_close()
        except BlockingIOError:
            pass
        except OSError:
            self.handle_close()

    def _answer_plain(self) -> None:
        body = error_body(
            "this port serves https; send the request as https://", "PlainHttpToTlsPort"
        )
        head = (
            f"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        with self.outbuf_lock:
            self.outbufs[-1].append(head + body)
            self.current_outbuf_count += len(head) + len(body)
            self.total_outbufs_len += len(head) + len(body)
        self.close_when_flushed = True
        self.server.edge.count_refused(400)

    def send(self, data: bytes, do_close: bool = True) -> int:
        if self._tls_state != "open":
            return int(super().send(data, do_close))
        try:
            return int(self.socket.send(data))
        except (ssl.SSLWantWriteError, ssl.SSLWantReadError):
            return 0  # waitress retries with the same bytes first, as OpenSSL requires
        except ssl.SSLError:
            if do_close:
                self.handle_close()
                return 0
            raise

"""`poll_select`, the `select` of the kazoo handler the replicas use: select.select's answers on
sockets in each state kazoo meets (data waiting, nothing waiting, room to write, peer gone).
`BufferedConnection`, the replicas' kazoo connection: frames cut from chunks however the bytes
arrive, and its loop's select told of a frame already buffered. (Every integration test on the
`zk_client` fixture runs it against a real ZooKeeper.)"""

from __future__ import annotations

import itertools
import socket
import struct
import threading
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionDropped
from kazoo.handlers.utils import selector_select

from scheduler.model.settings import Settings
from scheduler.storage.acl import make_client
from scheduler.storage.zk_handler import (
    BufferedConnection,
    PollingHandler,
    poll_select,
    use_buffered_reads,
)


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


@pytest.mark.parametrize("impl", [poll_select, selector_select], ids=["poll", "kazoo"])
def test_answers_as_kazoo_s_own_select(impl, pair) -> None:
    a, b = pair
    # Nothing to read yet: the timeout passes with nothing ready.
    assert impl([a], [], [], 0.01) == ([], [], [])
    b.send(b"x")
    assert impl([a, b], [], [], 1.0)[0] == [a]
    # Both may write (kazoo asks one socket to read or to write, never both at once).
    assert impl([], [a, b], [], 1.0) == ([], [a, b], [])
    # File descriptor numbers work as well as objects.
    assert impl([a.fileno()], [], [], 1.0)[0] == [a.fileno()]
    # A peer that went away makes the socket readable (kazoo's read then fails and it
    # reconnects), never a silent wait.
    b.close()
    assert impl([a], [], [], 1.0)[0] == [a]


def test_bad_arguments_are_refused_like_kazoo_s(pair) -> None:
    a, _b = pair
    with pytest.raises(ValueError):
        poll_select([a], [], [], -1)
    with pytest.raises(TypeError):
        poll_select([a], [], [], "1")  # type: ignore[arg-type]
    closed = socket.socket()
    closed.close()
    with pytest.raises(ValueError):
        poll_select([closed], [], [], 0)


def test_the_replicas_client_uses_the_polling_handler_and_buffered_reads() -> None:
    client = make_client(Settings(zk_servers="127.0.0.1:1"))
    try:
        assert isinstance(client.handler, PollingHandler)
        assert isinstance(client._connection, BufferedConnection)
    finally:
        client.close()


def _frame(body: bytes) -> bytes:
    return struct.pack("!i", len(body)) + body


@pytest.fixture
def connection(pair) -> Iterator[tuple[BufferedConnection, socket.socket]]:
    """A BufferedConnection reading socket `a` of the pair; the test writes into `b`."""
    client = use_buffered_reads(KazooClient(hosts="127.0.0.1:1", handler=PollingHandler()))
    conn = client._connection
    a, b = pair
    a.setblocking(False)  # as kazoo's connect leaves it
    conn._socket = a
    yield conn, b
    client.close()


def _read_frame(conn: BufferedConnection) -> bytes:
    # What kazoo's `_read_header` does: the length, then the body.
    (length,) = struct.unpack("!i", conn._read(4, 2.0))
    return conn._read(length, 2.0)


def test_frames_are_cut_from_chunks_however_the_bytes_arrive(connection) -> None:
    conn, peer = connection
    bodies = [b"a" * 10, b"", b"b" * 70_000, b"c" * 3]
    stream = b"".join(_frame(body) for body in bodies)
    # Written in odd pieces from another thread: a frame split across receives (in its length
    # too), several frames in one, one larger than a receive.
    cuts = [0, 2, 3, 17, 18, 40_000, 70_020, len(stream)]

    def write() -> None:
        for start, end in itertools.pairwise(cuts):
            peer.sendall(stream[start:end])

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert [_read_frame(conn) for _ in bodies] == bodies
    finally:
        writer.join(5)
    assert not conn.frame_ready()


def test_the_loop_s_select_is_answered_at_once_while_a_whole_frame_is_buffered(
    connection,
) -> None:
    conn, peer = connection
    sock = conn._socket
    peer.sendall(_frame(b"one") + _frame(b"two") + _frame(b"three")[:5])
    assert _read_frame(conn) == b"one"  # one receive brought all three
    # Nothing more on the socket, yet the next frame is here: the loop is told so at once.
    assert conn.handler.select([sock], [], [], 5.0) == ([sock], [], [])
    assert _read_frame(conn) == b"two"
    # Only part of the third is here: the loop waits on the socket itself.
    assert not conn.frame_ready()
    assert conn.handler.select([sock], [], [], 0.01) == ([], [], [])
    peer.sendall(_frame(b"three")[5:])
    assert conn.handler.select([sock], [], [], 5.0)[0] == [sock]
    assert _read_frame(conn) == b"three"


def test_a_closed_peer_drops_the_connection_and_a_new_socket_starts_empty(connection, pair) -> None:
    conn, peer = connection
    peer.sendall(_frame(b"whole") + b"\x00\x00")
    assert _read_frame(conn) == b"whole"
    peer.close()
    with pytest.raises(ConnectionDropped):
        _read_frame(conn)
    # A reconnect brings a new socket: what the old one left is not read from it.
    fresh, other = socket.socketpair()
    try:
        fresh.setblocking(False)
        conn._socket = fresh
        assert not conn.frame_ready()
        other.sendall(_frame(b"new"))
        assert _read_frame(conn) == b"new"
    finally:
        fresh.close()
        other.close()


def test_buffered_reads_are_put_only_in_a_client_not_started() -> None:
    client = KazooClient(hosts="127.0.0.1:1")
    client._stopped.clear()  # as `start` leaves it
    try:
        with pytest.raises(RuntimeError, match="not started"):
            use_buffered_reads(client)
    finally:
        client._stopped.set()
        client.close()


def test_a_request_larger_than_the_socket_s_room_is_sent_whole(connection) -> None:
    # The socket takes a part, then has no room until the peer reads: the send waits for room
    # (instead of a select before every send) and goes on where it stopped.
    conn, peer = connection
    message = bytes(range(256)) * 40_000  # 10 MiB, far beyond a socket buffer
    received = bytearray()

    def read() -> None:
        while len(received) < len(message):
            chunk = peer.recv(1 << 20)
            if not chunk:
                return
            received.extend(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        conn._write(message, 10.0)
    finally:
        reader.join(10)
    assert bytes(received) == message

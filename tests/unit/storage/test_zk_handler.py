"""`poll_select`, the `select` of the kazoo handler the replicas use: select.select's answers on
sockets in each state kazoo meets (data waiting, nothing waiting, room to write, peer gone)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from kazoo.handlers.utils import selector_select

from scheduler.model.settings import Settings
from scheduler.storage.acl import make_client
from scheduler.storage.zk_handler import PollingHandler, poll_select


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


def test_the_replicas_client_uses_the_polling_handler() -> None:
    client = make_client(Settings(zk_servers="127.0.0.1:1"))
    try:
        assert isinstance(client.handler, PollingHandler)
    finally:
        client.close()

"""kazoo's threading handler with a cheaper `select`.

kazoo's connection thread calls its handler's `select` about three times per reply it reads
(once in its loop, once per length prefix and once per body) and once per request it sends.
kazoo's own `select` builds an epoll selector for each call (create, register, wait, close:
four system calls and their Python objects); with thousands of requests a second that was
most of the leader's CPU (issue 29's profile: about 80% of the GIL holder's time was kazoo's
connection thread). `poll` needs no file descriptor of its own and no limit on descriptor
numbers, so one `poll` system call serves each `select`.
"""

from __future__ import annotations

import select
from collections.abc import Sequence
from typing import Any

from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.handlers.utils import selector_select

__all__ = ["PollingHandler", "poll_select"]

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

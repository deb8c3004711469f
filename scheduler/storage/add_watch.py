"""ZooKeeper's addWatch and removeWatches requests for a persistent recursive watch (3.6+).

Why (issue 29): a leader follows every job's node for changes. One-shot watches cost a request
per job at every term start (100,000 `exists` requests: seconds of the leader's CPU in its
first minute, a watch per job in kazoo's tables and in the server's), and each is set again
after it fires. One persistent recursive watch on the jobs' folder reports every later change
below it, created, changed or deleted, and stays set until removed or until the connection
drops. kazoo 2.11 has neither request, so this module is their wire format, written to the
shape kazoo gives every request (`type`, `serialize()`, `deserialize(buffer, offset)`), as
`multi_read` is; `Registry` sends them through kazoo's queue and delivers the events.

The protocol (ZooKeeper's `AddWatchRequest` and `RemoveWatchesRequest`): addWatch (opcode 106)
is the path as a length-prefixed UTF-8 string and the mode (int: 0 persistent, 1 persistent
recursive); removeWatches (opcode 18) is the path and the watcher type (int: 1 children, 2
data, 3 any; 3.9 added 4 persistent and 5 persistent recursive, which 3.6-3.8 refuse with
MarshallingError, measured on 3.8: such a removal removed nothing). Type 3 removes every watch
of the session on that exact path, persistent ones included, on 3.6 and later: what is sent,
and why `Registry` sends it only when kazoo holds no one-shot watch on the path. Neither
answer has a body. The events are ordinary watch notifications (node
created, data changed, node deleted; no child events in recursive mode) for each node below
the path, and for the path itself. Standard library only.
"""

from __future__ import annotations

import struct

ADD_WATCH = 106
REMOVE_WATCHES = 18
PERSISTENT_RECURSIVE = 1
"""addWatch's mode of a persistent recursive watch."""
WATCHER_ANY = 3
"""removeWatches' watcher type "any": every watch of the session on the path (3.6+)."""

_INT = struct.Struct("!i")


class _PathRequest:
    """A request that is a path and one int, whose answer has no body."""

    type = 0
    value = 0

    def __init__(self, path: str) -> None:
        self.path = path  # absolute, chroot included

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r})"

    def serialize(self) -> bytes:
        encoded = self.path.encode("utf-8")
        return _INT.pack(len(encoded)) + encoded + _INT.pack(self.value)

    def deserialize(self, _buffer: bytes, _offset: int) -> bool:
        return True  # no body: the header's error code (0) is the answer


class AddWatch(_PathRequest):
    """addWatch of a persistent recursive watch on `path`."""

    type = ADD_WATCH
    value = PERSISTENT_RECURSIVE


class RemoveRecursiveWatch(_PathRequest):
    """removeWatches of the session's watches on `path`, its persistent recursive one with
    them (type "any": the one that servers from 3.6 on all know)."""

    type = REMOVE_WATCHES
    value = WATCHER_ANY

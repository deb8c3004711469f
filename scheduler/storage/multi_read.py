"""ZooKeeper's multiRead request (3.6+): many getData reads in one request and one answer.

Why: a leader taking over reads every job's config and last fire, thousands of nodes. kazoo
sends one request per turn of its connection loop, about 0.25 ms each here (10,000 nodes in
2.5-3 s); a multiRead of 100 nodes costs about what one read does (10,000 in under 0.1 s).
kazoo 2.11 has no multiRead, so this module is its wire format, written to the shape kazoo
gives every request (`type`, `serialize()`, `deserialize(buffer, offset)`); `Registry` sends it
through kazoo's request queue.

The protocol (ZooKeeper's `MultiOperationRecord` and `MultiResponse`): the request is, per
path, a multi header (op 4 = getData, done false, err -1), the path as a length-prefixed UTF-8
string and a watch flag, then a closing header (op -1, done true, err -1). The answer is, per
path in order, a header and either getData's answer (data as a length-prefixed buffer, -1 for
none, then the node's stat) or, for a read that failed alone (a missing node), header op -1
followed by the error code; then a closing header. Each read stands alone: a missing node
fails its own entry, not the others. The server sets no watch for a read inside a multiRead
(it rebuilds each op without its watch flag), so the flag is always false.

An answer that does not decode (cut short, an unknown op, a length past its end, more or fewer
entries than paths) raises `MalformedMultiRead`, a `RegistryError`, never `struct.error` or
`ValueError` (issue 23): callers of the registry handle one error type for ZooKeeper's failures.
Otherwise standard library only: it knows nothing of kazoo or of the registry.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from scheduler.model.errors import RegistryError

MULTI_READ = 22
"""ZooKeeper's opcode of multiRead; a server before 3.6 answers it as unimplemented."""
_GET_DATA = 4
_ERROR = -1
_HEADER = struct.Struct("!iBi")  # op, done, err
_INT = struct.Struct("!i")
# czxid, mzxid, ctime, mtime, version, cversion, aversion, ephemeralOwner, dataLength,
# numChildren, pzxid
_STAT = struct.Struct("!qqqqiiiqiiq")
_VERSION_OFFSET = struct.calcsize("!qqqq")  # the version's place in the stat

Answer = tuple[bytes, int] | int
"""One path's answer: (data, version), or the ZooKeeper error code its read failed with."""


class MalformedMultiRead(RegistryError):
    """A multiRead answer that does not decode; the message names where and why."""


class MultiRead:
    """One multiRead of the getData of `paths` (absolute, chroot included)."""

    type = MULTI_READ

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = tuple(paths)

    def __repr__(self) -> str:
        return f"MultiRead({len(self.paths)} paths)"

    def serialize(self) -> bytes:
        out = bytearray()
        header = _HEADER.pack(_GET_DATA, 0, -1)
        for path in self.paths:
            encoded = path.encode("utf-8")
            out += header
            out += _INT.pack(len(encoded))
            out += encoded
            out.append(0)  # no watch (the server would drop it anyway)
        out += _HEADER.pack(-1, 1, -1)
        return bytes(out)

    def deserialize(self, buffer: bytes, offset: int) -> list[Answer]:
        """The answers in the order of the paths (kazoo's connection thread calls it). Never
        raises for a failed read: its entry is the error code (raising would leave kazoo's
        connection thread to log it). Raises MalformedMultiRead for an answer that does not
        decode, which kazoo hands to the caller waiting on the request."""
        start = offset
        try:
            answers = _decode(buffer, offset)
        except (struct.error, ValueError) as exc:
            raise MalformedMultiRead(
                f"multiRead of {len(self.paths)} paths: malformed answer of "
                f"{len(buffer) - start} bytes ({exc})"
            ) from exc
        if len(answers) != len(self.paths):
            raise MalformedMultiRead(
                f"multiRead of {len(self.paths)} paths: the answer has {len(answers)} entries"
            )
        return answers


def _decode(buffer: bytes, offset: int) -> list[Answer]:
    """Raises struct.error for an answer cut short, ValueError for one that is not multiRead's."""
    answers: list[Answer] = []
    while True:
        op, done, err = _HEADER.unpack_from(buffer, offset)
        offset += _HEADER.size
        if done:
            return answers
        if op == _GET_DATA:
            (length,) = _INT.unpack_from(buffer, offset)
            offset += _INT.size
            if length < -1 or offset + length > len(buffer):
                raise ValueError(f"data length {length} at byte {offset - _INT.size}")
            data = b"" if length < 0 else bytes(buffer[offset : offset + length])
            offset += max(length, 0)
            if offset + _STAT.size > len(buffer):
                raise struct.error(f"stat cut short at byte {offset}")
            (version,) = _INT.unpack_from(buffer, offset + _VERSION_OFFSET)
            offset += _STAT.size
            answers.append((data, version))
        elif op == _ERROR:
            (code,) = _INT.unpack_from(buffer, offset)
            offset += _INT.size
            answers.append(int(code))
        else:
            raise ValueError(f"an entry of op {op} (err {err}) at byte {offset - _HEADER.size}")

"""The hot calls to the master on kept connections of their own: acknowledgements, many per
write (`sched-mesos-acks`), and the launcher's ACCEPT.

Mesos' v1 API takes one ACKNOWLEDGE per HTTP call. Sent one at a time through pymesos's call
connection (http.client), each cost the leader about 0.3 ms of CPU, half of it parsing the
answer's headers with the email package, and each round trip held the driver's call lock, so a
launch waited behind acknowledgements. The master's HTTP server (libprocess's `HttpProxy`)
answers pipelined requests in the order they came, as HTTP/1.1 asks, so `PipelinedCalls` writes
every acknowledgement queued at that moment on a kept connection of its own in one write, then
reads their answers in order: 202 with an empty body each, or an error that names the problem.
An ACCEPT goes the same way, alone, its body encoded by orjson (pymesos's `json.dumps` of a
500-task launch took 30 ms of the launcher's round).

An acknowledgement not sent is no loss: the agent sends its update again, and the status
handler takes a repeated update as it takes the first. Acknowledging one twice is harmless too
(the agent ignores an acknowledgement of an update it no longer holds), which is why a batch
whose connection broke is written once more, whole or its unanswered rest, on a new connection.
An ACCEPT is never written twice: when its connection breaks, the caller cannot know whether
the master took it, and the launcher's bookkeeping of unconfirmed launches (reconciliation)
decides, as with any lost answer.
"""

from __future__ import annotations

import base64
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from scheduler.storage.zk_handler import poll_select

__all__ = [
    "CallEndpoint",
    "CallFailed",
    "CallOutcome",
    "PipelinedCalls",
    "accept_body",
    "basic_credential",
]

PATH = "/api/v1/scheduler"
# An answer to an acknowledgement is a status line and a few headers; anything larger is not
# the master's answer.
_HEAD_MAX_BYTES = 64 * 1024
# A refusal's body names the problem in a line; the rest is read and dropped up to this.
_BODY_MAX_BYTES = 1024 * 1024
_REFUSAL_CHARS = 200


class CallFailed(Exception):
    """Calls could not be written or their answers not read (unreachable master, closed or
    broken connection, an answer that is not HTTP/1.1 with a length). `written`: some of the
    unanswered ones were written, whole or in part, so whether they reached the master is not
    known; False: none left this process (the connection could not be made)."""

    def __init__(self, message: str, *, written: bool) -> None:
        super().__init__(message)
        self.written = written


@dataclass(frozen=True)
class CallEndpoint:
    """Where and as whom to call: the leading master (`host:port`) the driver is
    subscribed to, the stream id of that subscription, the framework id, and the
    `Authorization` value when the framework authenticates (None otherwise)."""

    master: str
    stream_id: str
    framework_id: str
    credential: str | None = None

    def __post_init__(self) -> None:
        # The stream id comes from the master's answer header: never let a value break out of
        # its header line.
        for name in ("master", "stream_id", "framework_id", "credential"):
            value = getattr(self, name)
            if value is not None and any(c in value for c in "\r\n\0"):
                raise ValueError(f"the master call endpoint's {name} holds a line break")


@dataclass(frozen=True)
class CallOutcome:
    """Of one batch of calls: how many the master accepted, and its refusals (`HTTP 403:
    Framework is not subscribed`), one short line each, in the batch's order."""

    accepted: int
    refused: list[str]


def basic_credential(principal: str | None, secret: str | None) -> str | None:
    """The `Authorization` value of a framework that authenticates (as pymesos sends it)."""
    if not principal or secret is None:
        return None
    return "Basic " + base64.b64encode(f"{principal}:{secret}".encode()).decode("ascii")


def accept_body(
    framework_id: str, offer_ids: Sequence[str], tasks: Sequence[dict[str, Any]], refuse_s: float
) -> bytes:
    """An ACCEPT launching `tasks` on the offers `offer_ids` (as pymesos's `launchTasks`
    writes it)."""
    return orjson.dumps(
        {
            "type": "ACCEPT",
            "framework_id": {"value": framework_id},
            "accept": {
                "offer_ids": [{"value": offer_id} for offer_id in offer_ids],
                "operations": [{"type": "LAUNCH", "launch": {"task_infos": list(tasks)}}],
                "filters": {"refuse_seconds": refuse_s},
            },
        }
    )


def _ack_body(framework_id: str, status: dict[str, Any]) -> bytes:
    return orjson.dumps(
        {
            "type": "ACKNOWLEDGE",
            "framework_id": {"value": framework_id},
            "acknowledge": {
                "agent_id": status["agent_id"],
                "task_id": status["task_id"],
                "uuid": status["uuid"],
            },
        }
    )


def _open(sock: socket.socket) -> bool:
    """The kept connection is still open: nothing to read on it (a connection the master
    closed reads as its end, and an answer never asked for makes it unusable too)."""
    try:
        readable, _writable, _ = poll_select([sock], [], [], 0)
    except (OSError, ValueError):
        return False
    return not readable


class _Broken(Exception):
    """The connection cannot carry on (closed, timed out, an answer we cannot frame)."""


class PipelinedCalls:
    """A kept connection to the leading master for the hot calls (the acknowledgements', the
    ACCEPTs'), used by one thread at a time."""

    def __init__(self, timeout_s: float) -> None:
        self._timeout_s = timeout_s
        self._sock: socket.socket | None = None
        self._master: str | None = None
        self._buffer = bytearray()
        # Whether the current call wrote anything (read when it fails).
        self._written = False

    def close(self) -> None:
        sock, self._sock, self._master = self._sock, None, None
        self._buffer.clear()
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    def acknowledge(
        self, endpoint: CallEndpoint, statuses: Sequence[dict[str, Any]]
    ) -> CallOutcome:
        """Acknowledge `statuses` (each an update with its `uuid`, `task_id` and `agent_id`,
        as the master sent it) in one write, and read the master's answer to each. A batch the
        connection broke under is written again, its unanswered rest, once on a new
        connection. Raises CallFailed when that breaks too; never raises for a refusal."""
        bodies = [_ack_body(endpoint.framework_id, status) for status in statuses]
        return self.call(endpoint, bodies, retry=True)

    def call(
        self, endpoint: CallEndpoint, bodies: Sequence[bytes], *, retry: bool = False
    ) -> CallOutcome:
        """POST each of `bodies` (JSON calls) in one write and read the answer to each. With
        `retry` (calls that may be made twice), the unanswered rest of a batch whose
        connection broke is written once more on a new connection. A kept connection the
        master closed meanwhile is found before anything is written to it, and replaced.
        Raises CallFailed."""
        head = (
            f"POST {PATH} HTTP/1.1\r\nHost: {endpoint.master}\r\n"
            "Content-Type: application/json\r\nAccept: application/json\r\n"
            f"Mesos-Stream-Id: {endpoint.stream_id}\r\n"
            + (f"Authorization: {endpoint.credential}\r\n" if endpoint.credential else "")
        ).encode("ascii")
        requests = [b"%sContent-Length: %d\r\n\r\n%s" % (head, len(body), body) for body in bodies]
        refusals: list[str | None] = []  # per answered request: None, or the refusal
        reason = ""
        self._written = False
        for _attempt in range(2 if retry else 1):
            try:
                self._exchange(endpoint.master, requests[len(refusals) :], refusals)
                break
            except (_Broken, OSError) as exc:
                self.close()
                reason = str(exc) or type(exc).__name__
        if len(refusals) < len(requests):
            unsent = len(requests) - len(refusals)
            raise CallFailed(
                f"{unsent} of {len(requests)} unanswered: {reason}", written=self._written
            )
        refused = [r for r in refusals if r is not None]
        return CallOutcome(len(refusals) - len(refused), refused)

    # -- the connection -------------------------------------------------------------------

    def _exchange(self, master: str, requests: list[bytes], refusals: list[str | None]) -> None:
        """Write `requests` and read one answer each into `refusals`. Raises `_Broken` or
        OSError when the connection cannot carry on."""
        deadline = time.monotonic() + self._timeout_s
        sock = self._connect(master)
        self._written = True  # from here on, the master may get them
        sock.sendall(b"".join(requests))
        for i in range(len(requests)):
            status, body, close = self._answer(sock, deadline)
            if 200 <= status < 300:
                refusals.append(None)
            else:
                text = body.decode("utf-8", "replace").strip().splitlines()
                line = f"HTTP {status}" + (f": {text[0]}" if text else "")
                refusals.append(line[:_REFUSAL_CHARS])
            if close:
                self.close()
                if i + 1 < len(requests):
                    raise _Broken("the master closed the connection")

    def _connect(self, master: str) -> socket.socket:
        sock = self._sock
        if sock is not None and self._master == master and _open(sock):
            return sock
        self.close()
        host, _, port = master.rpartition(":")
        sock = socket.create_connection((host.strip("[]"), int(port)), timeout=self._timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock, self._master = sock, master
        return sock

    def _fill(self, sock: socket.socket, deadline: float) -> None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise _Broken(f"no answer within {self._timeout_s:g} s")
        sock.settimeout(left)
        chunk = sock.recv(65536)
        if not chunk:
            raise _Broken("the master closed the connection")
        self._buffer += chunk

    def _answer(self, sock: socket.socket, deadline: float) -> tuple[int, bytes, bool]:
        """The next answer: (status, body, whether the master closes the connection after)."""
        buffer = self._buffer
        while (end := buffer.find(b"\r\n\r\n")) < 0:
            if len(buffer) > _HEAD_MAX_BYTES:
                raise _Broken("an answer's head exceeds 64 KiB")
            self._fill(sock, deadline)
        head = bytes(buffer[:end]).decode("latin-1")
        del buffer[: end + 4]
        lines = head.split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise _Broken(f"not an HTTP/1.1 answer: {lines[0][:80]!r}")
        status = int(parts[1])
        length = 0
        close = parts[0] == "HTTP/1.0"
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            value = value.strip()
            if name == "content-length":
                if not value.isdigit() or int(value) > _BODY_MAX_BYTES:
                    raise _Broken(f"an answer's length {value[:20]!r} is not taken")
                length = int(value)
            elif name == "transfer-encoding":
                raise _Broken(f"an answer in transfer encoding {value[:20]!r}")
            elif name == "connection":
                close = value.lower() == "close"
        while len(buffer) < length:
            self._fill(sock, deadline)
        body = bytes(buffer[:length])
        del buffer[:length]
        return status, body, close

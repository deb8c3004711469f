"""The hot calls to the master on kept connections of their own (issue 29). Acknowledgements go
pipelined: every one of a batch in one write, then their answers in order; a master played by
a raw socket server that answers only once it has read all of a batch's requests proves that
nothing waited for an answer before writing the next. The launcher's ACCEPT goes alone and is
never written twice."""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from scheduler.leader.mesos.calls import (
    CallEndpoint,
    CallFailed,
    PipelinedCalls,
    accept_body,
    basic_credential,
)
from scheduler.leader.mesos.driver import DriverHandlers, MesosDriver
from scheduler.leader.mesos.driver_events import StatusUpdate
from scheduler.leader.mesos.offers import AcceptOutcome
from scheduler.model.settings import load_settings
from tests.support.waiting import wait_for

ACCEPTED = (
    b"HTTP/1.1 202 Accepted\r\nDate: Fri, 27 Nov 2026 10:00:00 GMT\r\nContent-Length: 0\r\n\r\n"
)


@dataclass
class _Request:
    connection: int
    head: str
    body: bytes

    def header(self, name: str) -> str | None:
        for line in self.head.split("\r\n")[1:]:
            key, _, value = line.partition(":")
            if key.strip().lower() == name.lower():
                return value.strip()
        return None


@dataclass
class _Master:
    """A raw HTTP/1.1 peer: reads `batch` requests of a connection, then writes `answer(i)` of
    each (i counts every request it read); `after(conn)` may then close it."""

    batch: int
    answer: Callable[[int], bytes] = lambda _i: ACCEPTED
    close_after_first_batch: bool = False
    requests: list[_Request] = field(default_factory=list)
    port: int = 0

    def serve(self, listener: socket.socket, stop: threading.Event) -> None:
        listener.settimeout(0.1)
        connection = 0
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            connection += 1
            threading.Thread(target=self._connection, args=(conn, connection), daemon=True).start()

    def _connection(self, conn: socket.socket, number: int) -> None:
        buffer = b""
        with conn:
            while True:
                read: list[_Request] = []
                while len(read) < self.batch:
                    end = buffer.find(b"\r\n\r\n")
                    if end >= 0:
                        head = buffer[:end].decode("latin-1")
                        length = int(_Request(0, head, b"").header("Content-Length") or 0)
                        if len(buffer) >= end + 4 + length:
                            body = buffer[end + 4 : end + 4 + length]
                            buffer = buffer[end + 4 + length :]
                            read.append(_Request(number, head, body))
                            continue
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                answers = []
                for request in read:
                    self.requests.append(request)
                    answers.append(self.answer(len(self.requests) - 1))
                conn.sendall(b"".join(answers))
                if self.close_after_first_batch:
                    return


@contextmanager
def _master(master: _Master) -> Iterator[str]:
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()
    thread = threading.Thread(target=master.serve, args=(listener, stop), daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        listener.close()


@contextmanager
def _talking_to(master: _Master, timeout_s: float = 5.0) -> Iterator[tuple[str, PipelinedCalls]]:
    """`master` serving, and a sender to it: (the master's address, the sender); both closed
    after."""
    with _master(master) as address:
        sender = PipelinedCalls(timeout_s)
        try:
            yield address, sender
        finally:
            sender.close()


def _status(n: int) -> dict[str, object]:
    return {
        "uuid": f"dXVpZC{n}",
        "task_id": {"value": f"job@-@0@-@READY@-@{n}"},
        "agent_id": {"value": "agent-1"},
        "state": "TASK_RUNNING",
    }


def test_a_batch_is_written_whole_before_any_answer_and_each_is_one_acknowledge() -> None:
    master = _Master(batch=3)
    with _talking_to(master) as (address, sender):
        endpoint = CallEndpoint(address, "stream-1", "fw-1", basic_credential("p", "s"))
        outcome = sender.acknowledge(endpoint, [_status(n) for n in range(3)])
    assert (outcome.accepted, outcome.refused) == (3, [])
    assert [r.connection for r in master.requests] == [1, 1, 1]
    for n, request in enumerate(master.requests):
        assert request.head.startswith("POST /api/v1/scheduler HTTP/1.1\r\n")
        assert request.header("Mesos-Stream-Id") == "stream-1"
        assert request.header("Content-Type") == "application/json"
        assert request.header("Authorization") == "Basic cDpz"  # p:s
        assert json.loads(request.body) == {
            "type": "ACKNOWLEDGE",
            "framework_id": {"value": "fw-1"},
            "acknowledge": {
                "agent_id": {"value": "agent-1"},
                "task_id": {"value": f"job@-@0@-@READY@-@{n}"},
                "uuid": f"dXVpZC{n}",
            },
        }


def test_the_connection_is_kept_and_a_framework_without_credentials_sends_none() -> None:
    master = _Master(batch=1)
    with _talking_to(master) as (address, sender):
        for n in range(3):
            outcome = sender.acknowledge(CallEndpoint(address, "s", "fw"), [_status(n)])
            assert outcome.accepted == 1
    assert [r.connection for r in master.requests] == [1, 1, 1]
    assert all(r.header("Authorization") is None for r in master.requests)


def test_a_refusal_is_one_short_line_and_the_rest_of_the_batch_still_counts() -> None:
    refused = b"HTTP/1.1 403 Forbidden\r\nContent-Length: 28\r\n\r\nFramework is not subscribed\n"
    master = _Master(batch=3, answer=lambda i: refused if i == 1 else ACCEPTED)
    with _talking_to(master) as (address, sender):
        outcome = sender.acknowledge(
            CallEndpoint(address, "s", "fw"), [_status(n) for n in range(3)]
        )
    assert outcome.accepted == 2
    assert outcome.refused == ["HTTP 403: Framework is not subscribed"]


def test_a_kept_connection_the_master_closed_is_replaced_and_the_batch_written_again() -> None:
    master = _Master(batch=2, close_after_first_batch=True)
    with _talking_to(master) as (address, sender):
        endpoint = CallEndpoint(address, "s", "fw")
        assert sender.acknowledge(endpoint, [_status(0), _status(1)]).accepted == 2
        # The master closed that connection after answering: the next batch finds it closed
        # (or writes into it and reads nothing) and goes again on a new one.
        assert sender.acknowledge(endpoint, [_status(2), _status(3)]).accepted == 2
    assert [r.connection for r in master.requests] == [1, 1, 2, 2]


@pytest.mark.parametrize(
    ("answer", "named"),
    [
        (b"HTTP/1.1 202 Accepted\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "chunked"),
        (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP/1.1 answer"),
        (b"HTTP/1.1 202 Accepted\r\nContent-Length: 99999999999\r\n\r\n", "is not taken"),
    ],
)
def test_an_answer_that_cannot_be_framed_fails_the_batch_after_a_second_try(
    answer: bytes, named: str
) -> None:
    master = _Master(batch=1, answer=lambda _i: answer)
    with _talking_to(master) as (address, sender):
        with pytest.raises(CallFailed, match=named) as failed:
            sender.acknowledge(CallEndpoint(address, "s", "fw"), [_status(0)])
    assert "1 of 1 unanswered" in str(failed.value)
    assert [r.connection for r in master.requests] == [1, 2]


def test_a_master_that_never_answers_fails_the_batch_within_the_timeout() -> None:
    master = _Master(batch=2)  # waits for a second request that never comes
    with _talking_to(master, 0.3) as (address, sender):
        with pytest.raises(CallFailed, match="1 of 1 unanswered") as failed:
            sender.acknowledge(CallEndpoint(address, "s", "fw"), [_status(0)])
    assert failed.value.written  # the master may have it


def test_an_unreachable_master_fails_the_batch() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        address = f"127.0.0.1:{taken.getsockname()[1]}"
    sender = PipelinedCalls(1.0)
    with pytest.raises(CallFailed, match="2 of 2 unanswered") as failed:
        sender.acknowledge(CallEndpoint(address, "s", "fw"), [_status(0), _status(1)])
    assert not failed.value.written  # nothing left this process


@pytest.mark.parametrize("field_name", ["master", "stream_id", "framework_id", "credential"])
def test_an_endpoint_value_with_a_line_break_is_refused(field_name: str) -> None:
    values = {"master": "127.0.0.1:1", "stream_id": "s", "framework_id": "fw", "credential": "c"}
    values[field_name] = "x\r\nX-Injected: 1"
    with pytest.raises(ValueError, match=field_name):
        CallEndpoint(**values)


def test_a_framework_authenticates_only_with_a_principal_and_a_secret() -> None:
    assert basic_credential(None, "s") is None
    assert basic_credential("", "s") is None
    assert basic_credential("p", None) is None
    assert basic_credential("principal", "secret") == "Basic cHJpbmNpcGFsOnNlY3JldA=="


# -- the driver's acknowledgement thread ------------------------------------------------------


class _Subscribed:
    """What the driver reads of a subscribed pymesos driver to acknowledge."""

    def __init__(self, master: str) -> None:
        self.master = master
        self.stream_id = "stream-7"
        self.framework_id = "fw-7"


def _driver() -> MesosDriver:
    return MesosDriver(
        load_settings({}, {}, {"mesos_url": "http://127.0.0.1:5050"}),
        framework_ids=None,  # type: ignore[arg-type]
    )


def test_updates_are_acknowledged_after_processing_in_order_off_the_event_thread() -> None:
    # The event thread hands each processed update on and takes the next; the acknowledgement
    # thread writes them to the master in the order they were processed. An update the handler
    # did not record is not acknowledged (the agent sends it again).
    driver = _driver()
    processed: list[str] = []

    def on_status(status: dict[str, Any]) -> bool:
        processed.append(str(status["uuid"]))
        return bool(status["uuid"] != "not-recorded")

    driver.bind(
        DriverHandlers(
            on_offers=lambda _o: None,
            on_rescind=lambda _o: None,
            on_status=on_status,
            on_connected=lambda: None,
            on_disconnected=lambda: None,
        )
    )
    master = _Master(batch=1)
    with _master(master) as address:
        driver._driver = _Subscribed(address)  # type: ignore[assignment]
        driver.connected.set()
        driver._start_thread()
        driver._ack_thread = threading.Thread(target=driver._send_acks, name="sched-mesos-acks")
        driver._ack_thread.start()
        try:
            for uuid in ("u1", "not-recorded", "u2", "u3"):
                status = {**_status(0), "uuid": uuid}
                driver.post(StatusUpdate(status))
            wait_for(lambda: len(master.requests) >= 3, 10, message="three acknowledgements")
        finally:
            driver._driver = None
            driver.stop()
    assert processed == ["u1", "not-recorded", "u2", "u3"]
    uuids = [json.loads(r.body)["acknowledge"]["uuid"] for r in master.requests]
    assert uuids == ["u1", "u2", "u3"]
    assert {r.header("Mesos-Stream-Id") for r in master.requests} == {"stream-7"}
    assert driver._ack_thread is None


def test_a_refused_acknowledgement_is_one_warning_line(caplog: pytest.LogCaptureFixture) -> None:
    refused = b"HTTP/1.1 403 Forbidden\r\nContent-Length: 28\r\n\r\nFramework is not subscribed\n"
    master = _Master(batch=2, answer=lambda i: refused)
    driver = _driver()
    with _talking_to(master) as (address, sender):
        driver._driver = _Subscribed(address)  # type: ignore[assignment]
        driver.connected.set()
        with caplog.at_level(logging.WARNING, logger="scheduler.leader.mesos.driver"):
            driver._acknowledge(sender, [_status(0), _status(1)])
    [record] = caplog.records
    assert record.levelno == logging.WARNING and record.exc_info is None
    message = record.getMessage()
    assert "2 of 2 acknowledgement(s) not accepted" in message and "403" in message


def test_acknowledgements_while_not_subscribed_are_skipped_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    driver = _driver()
    sender = PipelinedCalls(5.0)
    with caplog.at_level(logging.WARNING, logger="scheduler.leader.mesos.driver"):
        driver._acknowledge(sender, [_status(0)])
    [record] = caplog.records
    assert "1 acknowledgement(s) skipped, not connected" in record.getMessage()


# -- the ACCEPT -----------------------------------------------------------------------------


def test_an_accept_body_is_pymesos_s_launch() -> None:
    task = {"task_id": {"value": "t1"}, "agent_id": {"value": "a1"}, "resources": []}
    assert json.loads(accept_body("fw-1", ["o1", "o2"], [task], 5.0)) == {
        "type": "ACCEPT",
        "framework_id": {"value": "fw-1"},
        "accept": {
            "offer_ids": [{"value": "o1"}, {"value": "o2"}],
            "operations": [{"type": "LAUNCH", "launch": {"task_infos": [task]}}],
            "filters": {"refuse_seconds": 5.0},
        },
    }


def test_a_call_without_retry_is_never_written_twice() -> None:
    # Its answer is lost (the master closed the connection after reading it): whether it was
    # taken is unknown, so it is not sent again.
    master = _Master(batch=1, answer=lambda _i: b"", close_after_first_batch=True)
    with _talking_to(master) as (address, sender):
        with pytest.raises(CallFailed, match="1 of 1 unanswered"):
            sender.call(CallEndpoint(address, "s", "fw"), [b"{}"])
    assert len(master.requests) == 1


def test_a_kept_connection_closed_by_the_master_is_replaced_before_a_call_is_written() -> None:
    master = _Master(batch=1, close_after_first_batch=True)
    with _talking_to(master) as (address, sender):
        endpoint = CallEndpoint(address, "s", "fw")
        assert sender.call(endpoint, [b"{}"]).accepted == 1
        wait_for(lambda: not _open_peer(sender), 5, message="the master's close seen")
        assert sender.call(endpoint, [b"{}"]).accepted == 1  # no retry needed
    assert [r.connection for r in master.requests] == [1, 2]


def _open_peer(sender: PipelinedCalls) -> bool:
    sock = sender._sock
    if sock is None:
        return False
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b""
    except BlockingIOError:
        return True


class _Declining(_Subscribed):
    def __init__(self, master: str) -> None:
        super().__init__(master)
        self.declined: list[list[dict[str, str]]] = []

    def declineOffer(self, offer_ids: list[dict[str, str]], filters: dict[str, Any]) -> None:
        self.declined.append(offer_ids)


def test_the_driver_s_accept_goes_on_its_own_connection_and_a_refusal_is_false(
    caplog: pytest.LogCaptureFixture,
) -> None:
    refused = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 21\r\n\r\nOffer o2 is no longer"
    master = _Master(batch=1, answer=lambda i: refused if i == 1 else ACCEPTED)
    driver = _driver()
    task = {"task_id": {"value": "t1"}, "agent_id": {"value": "a1"}}
    with _master(master) as address:
        fake = _Declining(address)
        driver._driver = fake  # type: ignore[assignment]
        driver.connected.set()
        try:
            assert driver.accept(["o1"], [task], 5.0) is AcceptOutcome.LAUNCHED
            with caplog.at_level(logging.WARNING, logger="scheduler.leader.mesos.driver"):
                assert driver.accept(["o2"], [task], 5.0) is AcceptOutcome.REFUSED
            # No task: the offers are declined (as pymesos's launchTasks does).
            assert driver.accept(["o3"], [], 5.0) is AcceptOutcome.LAUNCHED
        finally:
            driver._driver = None
            driver.stop()
    first = json.loads(master.requests[0].body)
    assert first["type"] == "ACCEPT" and first["framework_id"] == {"value": "fw-7"}
    assert master.requests[0].header("Mesos-Stream-Id") == "stream-7"
    assert len(master.requests) == 2 and fake.declined == [[{"value": "o3"}]]
    [record] = caplog.records
    assert "launch of 1 tasks not accepted by the master: HTTP 400: Offer o2" in record.message


def test_an_unanswered_accept_is_unconfirmed_and_one_never_sent_is_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The launcher keeps the bookkeeping of an ACCEPT the master may have taken (it must not
    launch those runs again) and undoes only one that never left: the driver tells them apart."""
    master = _Master(batch=2)  # reads the ACCEPT, then waits for a request that never comes
    driver = MesosDriver(
        load_settings({}, {}, {"mesos_url": "http://127.0.0.1:5050"}),
        framework_ids=None,  # type: ignore[arg-type]
    )
    driver._accepts = PipelinedCalls(0.3)
    task = {"task_id": {"value": "t1"}, "agent_id": {"value": "a1"}}
    with _master(master) as address:
        driver._driver = _Subscribed(address)  # type: ignore[assignment]
        driver.connected.set()
        try:
            with caplog.at_level(logging.ERROR, logger="scheduler.leader.mesos.driver"):
                assert driver.accept(["o1"], [task], 5.0) is AcceptOutcome.UNCONFIRMED
            assert len(master.requests) == 0  # read, never answered
            with socket.create_server(("127.0.0.1", 0)) as taken:
                gone = f"127.0.0.1:{taken.getsockname()[1]}"
            driver._driver = _Subscribed(gone)  # type: ignore[assignment]
            with caplog.at_level(logging.ERROR, logger="scheduler.leader.mesos.driver"):
                assert driver.accept(["o2"], [task], 5.0) is AcceptOutcome.REFUSED
        finally:
            driver._driver = None
            driver.stop()
    first, second = (r.message for r in caplog.records)
    assert "launch of 1 tasks unconfirmed (the master may have it)" in first
    assert "launch of 1 tasks failed, not sent" in second

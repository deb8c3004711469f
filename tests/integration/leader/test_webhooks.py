"""Failure webhooks against real HTTP servers on 127.0.0.1 (allowed, as an operator would with
`notify_webhook_allowed_targets=127.0.0.1/32`): body, retries with back-off, giving up, no
redirects, a bounded queue that never blocks the caller; internal targets refused at send time
in every spelling (a name that resolves or re-resolves to loopback too); one trickling receiver
delays no other destination; the connection pinned to the address judged."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from scheduler.leader.outbound import resolve_target
from scheduler.leader.webhooks import WebhookNotifier
from scheduler.model.job_events import JobEvent, JobEventKind
from scheduler.model.net_targets import AllowList
from tests.support.waiting import wait_for
from tests.support.webhook_receiver import Receiver, Trickler

LOOPBACK = AllowList.parse("127.0.0.1/32")


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    got = Receiver()
    yield got
    got.close()


@pytest.fixture
def notifier(receiver: Receiver) -> Iterator[WebhookNotifier]:
    started = WebhookNotifier(
        receiver.url, allowed=LOOPBACK, first_retry_s=0.2, attempts=3, timeout_s=2
    )
    started.start()
    yield started
    started.stop()


def event(kind: JobEventKind = JobEventKind.RUN_FAILED, url: str | None = None) -> JobEvent:
    return JobEvent(
        kind,
        "job1",
        1767225602.0,
        "script exited with status 3",
        sharding_item=1,
        task_id="job1@-@1@-@READY@-@a1@-@u1",
        webhook_url=url,
    )


def test_event_is_posted_as_json(receiver: Receiver, notifier: WebhookNotifier) -> None:
    assert notifier.notify(event())
    wait_for(lambda: receiver.bodies, 10, message="the POST")
    assert receiver.bodies == [
        {
            "event": "run_failed",
            "jobName": "job1",
            "shardingItem": 1,
            "taskId": "job1@-@1@-@READY@-@a1@-@u1",
            "time": "2026-01-01T00:00:02.000+00:00",
            "reason": "script exited with status 3",
        }
    ]
    assert receiver.paths == ["/hook?token=s3cret"]
    wait_for(lambda: notifier.counts()["delivered"] == 1, 5, message="counted")


def test_failed_attempts_are_retried_with_growing_delays_then_given_up(
    receiver: Receiver, notifier: WebhookNotifier, caplog: pytest.LogCaptureFixture
) -> None:
    receiver.statuses = [500, 503]
    notifier.notify(event())
    wait_for(lambda: len(receiver.bodies) == 3, 10, message="three attempts")
    gaps = [b - a for a, b in zip(receiver.times, receiver.times[1:], strict=False)]
    assert gaps[0] >= 0.2 and gaps[1] >= 0.4, gaps
    wait_for(lambda: notifier.counts()["delivered"] == 1, 5, message="delivered at last")
    assert notifier.counts()["retried"] == 2
    receiver.statuses = [500, 500, 500]
    notifier.notify(event(JobEventKind.RUN_TIMED_OUT))
    wait_for(lambda: notifier.counts()["given_up"] == 1, 10, message="given up")
    assert len(receiver.bodies) == 6
    # The notifier's thread counts the give-up, then logs it: wait for the line itself (read
    # at once, it was missing once in a fresh-clone run).
    warning = wait_for(
        lambda: [r.getMessage() for r in caplog.records if "not delivered" in r.getMessage()],
        5,
        message="the given-up warning",
    )
    assert "after 3 attempts: answered 500" in warning[0]
    assert "s3cret" not in caplog.text  # the URL's query is never logged


def test_redirects_are_not_followed(receiver: Receiver) -> None:
    other = Receiver()
    try:
        receiver.statuses = [307] * 3
        receiver.location = other.url
        notifier = WebhookNotifier(
            receiver.url, allowed=LOOPBACK, first_retry_s=0.05, attempts=3, timeout_s=2
        )
        notifier.start()
        try:
            notifier.notify(event())
            wait_for(lambda: notifier.counts()["given_up"] == 1, 10, message="given up")
        finally:
            notifier.stop()
        assert other.bodies == [] and len(receiver.bodies) == 3
    finally:
        other.close()


def test_unreachable_receiver_costs_the_caller_nothing_and_the_queue_is_bounded() -> None:
    gate = threading.Event()

    def hanging_post(url: str, body: bytes, timeout_s: float) -> int:
        gate.wait(10)
        raise OSError("connection refused")

    notifier = WebhookNotifier(
        "http://127.0.0.1:9/hook", post=hanging_post, queue_size=5, attempts=1
    )
    notifier.start()
    try:
        began = time.monotonic()
        accepted = [notifier.notify(event()) for _ in range(50)]
        assert time.monotonic() - began < 0.5
        # One is being sent, five wait, the rest are dropped and counted.
        assert 5 <= accepted.count(True) <= 6 and not accepted[-1]
        assert notifier.counts()["dropped"] == accepted.count(False)
        assert 4 <= notifier.queue_length() <= 5  # waiting (the one being sent is not)
    finally:
        gate.set()
        notifier.stop()


def test_no_url_means_no_delivery_and_the_jobs_own_url_wins(receiver: Receiver) -> None:
    silent = WebhookNotifier("")
    assert not silent.notify(event())
    notifier = WebhookNotifier(
        "http://127.0.0.1:9/never", allowed=LOOPBACK, first_retry_s=0.05, attempts=1
    )
    notifier.start()
    try:
        assert notifier.notify(event(url=receiver.url))
        wait_for(lambda: receiver.bodies, 10, message="the job's own webhook")
    finally:
        notifier.stop()


# -- internal targets ------------------------------------------------------------------------


def loopback_spellings(port: int) -> list[str]:
    """Every spelling of this host's loopback that a resolver or a kernel would reach."""
    return [
        f"http://127.0.0.1:{port}/hook",
        f"http://2130706433:{port}/hook",
        f"http://0x7f000001:{port}/hook",
        f"http://0177.0.0.1:{port}/hook",
        f"http://127.1:{port}/hook",
        f"http://0.0.0.0:{port}/hook",
        f"http://[::1]:{port}/hook",
        f"http://[::ffff:127.0.0.1]:{port}/hook",
        f"http://localhost:{port}/hook",
        f"http://localhost.:{port}/hook",
        f"http://LOCALHOST:{port}/hook",
        f"http://\u24dbocalhost:{port}/hook",  # a circled l: IDNA maps it to localhost
    ]


METADATA = [
    "http://169.254.169.254/latest/meta-data/",
    "http://[fd00:ec2::254]/latest/meta-data/",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://metadata/computeMetadata/v1/",
    "http://100.100.100.200/latest/meta-data/",
]


@pytest.fixture
def resolver(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[list[str]]]:
    """Names mapped in this process (no /etc/hosts edit): name -> the answers it gives, one
    per resolution (the last one repeats); other names resolve as usual."""
    mapped: dict[str, list[list[str]]] = {}
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        answers = mapped.get(str(host))
        if answers is None:
            return real(host, port, *args, **kwargs)
        addresses = answers.pop(0) if len(answers) > 1 else answers[0]
        return [
            (socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
            for a in addresses
        ]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return mapped


def refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "not sent to" in r.getMessage()]


def test_every_spelling_of_loopback_and_metadata_is_refused_at_send_time(
    receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    port = int(receiver.url.split(":")[2].split("/")[0])
    urls = loopback_spellings(port) + METADATA
    notifier = WebhookNotifier("", attempts=3, first_retry_s=0.05, timeout_s=2)
    notifier.start()
    try:
        for url in urls:
            assert notifier.notify(event(url=url))
        wait_for(lambda: notifier.counts()["given_up"] == len(urls), 10, message="all refused")
        wait_for(lambda: len(refusals(caplog)) == len(urls), 5, message="the warnings")
    finally:
        notifier.stop()
    assert receiver.bodies == []
    lines = refusals(caplog)
    counts = notifier.counts()
    assert counts["retried"] == 0 and counts["delivered"] == 0  # a refusal is not retried
    assert all("refused:" in line and "notify_webhook_allowed_targets" in line for line in lines)
    assert any("is a loopback name" in line for line in lines)
    assert any("IPv4-mapped form of 127.0.0.1, a loopback address" in line for line in lines)
    assert any("is a cloud metadata address" in line for line in lines)
    assert any("metadata.google.internal is a cloud metadata name" in line for line in lines)
    assert "s3cret" not in caplog.text and "/hook" not in "".join(lines)


def test_a_name_that_resolves_to_loopback_is_refused_and_so_is_one_that_rebinds(
    receiver: Receiver,
    resolver: dict[str, list[list[str]]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = int(receiver.url.split(":")[2].split("/")[0])
    resolver["inside.test"] = [["127.0.0.1"]]
    # Public when the job is registered, loopback when the leader sends (DNS rebinding).
    resolver["rebind.test"] = [["93.184.215.14"], ["127.0.0.1"]]
    assert resolve_target(f"http://rebind.test:{port}/hook", AllowList())[1] == ["93.184.215.14"]
    notifier = WebhookNotifier("", attempts=3, first_retry_s=0.05, timeout_s=2)
    notifier.start()
    try:
        notifier.notify(event(url=f"http://inside.test:{port}/hook"))
        notifier.notify(event(url=f"http://rebind.test:{port}/hook"))
        wait_for(lambda: len(refusals(caplog)) == 2, 10, message="the warnings")
    finally:
        notifier.stop()
    assert receiver.bodies == []
    assert sorted(refusals(caplog)) == sorted(
        f"webhooks: run_failed of job job1 not sent to http://{name}:{port}: refused: {name} "
        "resolves to 127.0.0.1, a loopback address; allow it with notify_webhook_allowed_targets"
        for name in ("inside.test", "rebind.test")
    )


def test_an_allowed_name_is_sent_to_the_address_judged_with_its_own_host_header(
    receiver: Receiver, resolver: dict[str, list[list[str]]]
) -> None:
    port = int(receiver.url.split(":")[2].split("/")[0])
    calls: list[str] = []
    resolver["hooks.test"] = [["127.0.0.1"]]
    counted = socket.getaddrinfo

    def counting(host: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(str(host))
        return counted(host, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket, "getaddrinfo", counting)
        notifier = WebhookNotifier(
            "", allowed=AllowList.parse("hooks.test"), attempts=1, timeout_s=2
        )
        notifier.start()
        try:
            notifier.notify(event(url=f"http://HOOKS.test.:{port}/hook?token=s3cret"))
            wait_for(lambda: receiver.hosts, 10, message="the POST")
        finally:
            notifier.stop()
    assert receiver.hosts == [f"hooks.test:{port}"] and receiver.paths == ["/hook?token=s3cret"]
    assert calls == ["hooks.test"]  # resolved once, and the connection went where it said


def test_a_trickling_receiver_delays_no_other_destination(receiver: Receiver) -> None:
    slow = Trickler(every_s=4.0)
    notifier = WebhookNotifier("", allowed=LOOPBACK, attempts=1, timeout_s=3, senders=2)
    notifier.start()
    try:
        began = time.monotonic()
        notifier.notify(event(url=slow.url))
        notifier.notify(event(url=slow.url))  # waits behind the first: same destination
        wait_for(lambda: slow.accepted == 1, 5, message="the slow receiver's connection")
        sent = time.monotonic()
        notifier.notify(event(url=receiver.url))
        wait_for(lambda: receiver.times, 5, message="the other job's webhook")
        delay_s = receiver.times[0] - sent
        wait_for(lambda: notifier.counts()["given_up"] == 2, 15, message="both slow ones")
        ended_s = time.monotonic() - began
    finally:
        notifier.stop()
        slow.close()
    assert delay_s < 1.0, f"another destination's webhook waited {delay_s:.2f} s"
    # Each slow attempt ends at its whole-request deadline (3 s), though a byte came every 4 s
    # at most: with a timeout per read it would have lasted the whole answer (40 bytes, 160 s).
    assert slow.finished == 0 and ended_s < 2 * 3 + 3, ended_s
    assert notifier.counts()["delivered"] == 1


def test_each_destination_has_its_own_bounded_queue() -> None:
    gate = threading.Event()
    posted: list[str] = []

    def hanging_post(url: str, body: bytes, timeout_s: float) -> int:
        posted.append(url)
        if "stuck" in url:
            gate.wait(10)
        return 204

    notifier = WebhookNotifier("", post=hanging_post, destination_queue_size=2, senders=2)
    notifier.start()
    try:
        stuck = [notifier.notify(event(url="http://stuck.example/h")) for _ in range(6)]
        wait_for(lambda: posted, 5, message="the first POST under way")
        more = [notifier.notify(event(url="http://stuck.example/h")) for _ in range(3)]
        assert notifier.notify(event(url="http://fine.example/h"))
        wait_for(lambda: "http://fine.example/h" in posted, 5, message="the other destination")
        # One under way and two waiting: the rest of the stuck destination's events dropped.
        assert stuck.count(True) + more.count(True) == 3
        assert notifier.counts()["dropped"] == 9 - 3
    finally:
        gate.set()
        notifier.stop()


def test_a_url_with_unicode_in_its_path_is_sent_percent_encoded(receiver: Receiver) -> None:
    notifier = WebhookNotifier("", allowed=LOOPBACK, attempts=1, timeout_s=2)
    notifier.start()
    try:
        notifier.notify(event(url=receiver.url.replace("/hook", "/h\u00e9/\u2603")))
        wait_for(lambda: receiver.hosts, 10, message="the POST")
    finally:
        notifier.stop()
    assert receiver.paths == ["/h%C3%A9/%E2%98%83?token=s3cret"]

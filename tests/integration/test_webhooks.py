"""Failure webhooks against a real HTTP server on 127.0.0.1: body, retries with back-off, giving
up, no redirects, a bounded queue that never blocks the caller."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from scheduler.leader.webhooks import WebhookNotifier
from scheduler.model.job_events import JobEvent, JobEventKind
from tests.support.waiting import wait_for
from tests.support.webhook_receiver import Receiver


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    got = Receiver()
    yield got
    got.close()


@pytest.fixture
def notifier(receiver: Receiver) -> Iterator[WebhookNotifier]:
    started = WebhookNotifier(receiver.url, first_retry_s=0.2, attempts=3, timeout_s=2)
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
        notifier = WebhookNotifier(receiver.url, first_retry_s=0.05, attempts=3, timeout_s=2)
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
    notifier = WebhookNotifier("http://127.0.0.1:9/never", first_retry_s=0.05, attempts=1)
    notifier.start()
    try:
        assert notifier.notify(event(url=receiver.url))
        wait_for(lambda: receiver.bodies, 10, message="the job's own webhook")
    finally:
        notifier.stop()

"""Failure webhooks: the leader POSTs a JSON event for runs that failed for good or timed out and
for fires that were skipped or capped, to the job's `notifyWebhookUrl` or else the
`notify_webhook_url` setting.

`notify` only puts the event in a bounded queue (QUEUE_SIZE; when full the event is dropped,
logged and counted), so scheduling never waits for a slow or dead receiver. The `sched-webhooks`
thread sends each with a timeout and, when the receiver does not answer 2xx, tries again after
1, 2, 4 and 8 s (ATTEMPTS in all) before giving up with a WARNING. Redirects are not followed
(a 3xx is a failed attempt), so the events go where the URL says and nowhere else. Deliveries
still waiting when the term ends are dropped (counted); a webhook is a notification, not a log:
the event trace keeps every event.

The leader sends these from its own network: whoever may set `notifyWebhookUrl` (the admin
role) can make it POST to any address it reaches. Log lines name only the URL's scheme, host
and port, since a path or query often holds a token.
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import queue
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from scheduler.leader.lifecycle import ThreadedComponent
from scheduler.model.job_events import JobEvent

__all__ = ["WebhookNotifier", "post_json"]

log = logging.getLogger(__name__)

QUEUE_SIZE = 1000
ATTEMPTS = 5
FIRST_RETRY_S = 1.0
TIMEOUT_S = 5.0
_DROP_LOG_EVERY_S = 60.0
_OUTCOMES = ("delivered", "retried", "given_up", "dropped")

Poster = Callable[[str, bytes, float], int]
"""(url, JSON body, timeout) -> HTTP status; raises OSError when nothing was answered."""


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # urllib then raises HTTPError with the 3xx status


_OPENER = urllib.request.build_opener(_NoRedirects)


def post_json(url: str, body: bytes, timeout_s: float) -> int:
    """POST `body` as JSON to `url` without following redirects; the answer's status."""
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "User-Agent": "ejcloud-scheduler"},
    )
    try:
        with _OPENER.open(request, timeout=timeout_s) as response:
            response.read(65536)
            return int(response.status)
    except urllib.error.HTTPError as exc:
        exc.close()
        return int(exc.code)


def _where(url: str) -> str:
    """`https://host:port` of `url`, for logs (its path and query may hold a secret)."""
    try:
        parts = urlsplit(url)
        return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"
    except ValueError:
        return "(unreadable URL)"


@dataclass(order=True)
class _Delivery:
    due: float
    seq: int
    url: str = field(compare=False)
    body: bytes = field(compare=False)
    what: str = field(compare=False)
    attempt: int = field(default=1, compare=False)


class WebhookNotifier(ThreadedComponent):
    """Owns the `sched-webhooks` thread for one term; `notify` may be called from any thread."""

    name = "webhooks"
    thread_name = "sched-webhooks"

    def __init__(
        self,
        default_url: str,
        *,
        post: Poster = post_json,
        queue_size: int = QUEUE_SIZE,
        attempts: int = ATTEMPTS,
        first_retry_s: float = FIRST_RETRY_S,
        timeout_s: float = TIMEOUT_S,
    ) -> None:
        super().__init__()
        # A delivery under way ends within its timeout: wait that long for the thread.
        self.join_timeout_s = timeout_s + 1.0
        self._default_url = default_url
        self._post = post
        self._queue: queue.Queue[_Delivery | None] = queue.Queue(maxsize=queue_size)
        self._attempts = attempts
        self._first_retry_s = first_retry_s
        self._timeout_s = timeout_s
        self._seq = itertools.count()
        self._retries: list[_Delivery] = []
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(_OUTCOMES, 0)
        self._dropped_logged_at = -1e18

    # -- any thread ---------------------------------------------------------------------------

    def notify(self, event: JobEvent) -> bool:
        """Queue `event` for its webhook; never blocks. False when it has no webhook or was
        dropped (queue full, or the term is over)."""
        url = event.webhook_url or self._default_url
        if not url:
            return False
        what = f"{event.kind.value} of job {event.job_name}"
        delivery = _Delivery(
            0.0, next(self._seq), url, json.dumps(event.webhook_body()).encode(), what
        )
        if self._stopping.is_set():
            return False
        try:
            self._queue.put_nowait(delivery)
        except queue.Full:
            self._count("dropped")
            now = time.monotonic()
            if now - self._dropped_logged_at >= _DROP_LOG_EVERY_S:
                self._dropped_logged_at = now
                log.warning(
                    "webhooks: %s not sent: %s events wait already (%s dropped in this term)",
                    what,
                    self._queue.maxsize,
                    self.counts()["dropped"],
                )
            return False
        return True

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def queue_length(self) -> int:
        """Events waiting to be sent (queued, or waiting for a retry)."""
        return self._queue.qsize() + len(self._retries)

    def _count(self, outcome: str) -> None:
        with self._lock:
            self._counts[outcome] += 1

    # -- lifecycle ----------------------------------------------------------------------------

    def stop(self) -> None:
        self._stop_thread()
        left = len(self._retries) + sum(1 for d in self._drain() if d is not None)
        self._retries.clear()
        if left:
            log.info("webhooks: %s events not sent at the end of the term", left)

    def _drain(self) -> list[_Delivery | None]:
        out: list[_Delivery | None] = []
        while True:
            try:
                out.append(self._queue.get_nowait())
            except queue.Empty:
                return out

    # -- the sched-webhooks thread ------------------------------------------------------------

    def _interrupt(self) -> None:
        try:
            self._queue.put_nowait(None)  # wakes the thread
        except queue.Full:
            pass  # it sees `_stopping` after its current delivery

    def _run(self) -> None:
        while not self._stopping.is_set():
            delivery = self._next()
            if delivery is None:
                continue
            try:
                self._deliver(delivery)
            except Exception:  # thread top: one bad delivery must not end the notifier
                log.exception("webhooks: delivering %s failed", delivery.what)

    def _next(self) -> _Delivery | None:
        """A retry that is due, else a new event (waiting at most until the next retry)."""
        now = time.monotonic()
        if self._retries and self._retries[0].due <= now:
            return heapq.heappop(self._retries)
        wait_s = (self._retries[0].due - now) if self._retries else 1.0
        try:
            return self._queue.get(timeout=max(0.0, wait_s))
        except queue.Empty:
            return None

    def _deliver(self, delivery: _Delivery) -> None:
        where = _where(delivery.url)
        try:
            status = self._post(delivery.url, delivery.body, self._timeout_s)
            problem = "" if 200 <= status < 300 else f"answered {status}"
        except (OSError, ValueError) as exc:  # refused, unreachable, timed out, bad URL
            problem = f"{type(exc).__name__}: {exc}"
        if not problem:
            self._count("delivered")
            log.info("webhooks: %s sent to %s", delivery.what, where)
            return
        if delivery.attempt >= self._attempts or self._stopping.is_set():
            self._count("given_up")
            log.warning(
                "webhooks: %s not delivered to %s after %s attempts: %s",
                delivery.what,
                where,
                delivery.attempt,
                problem,
            )
            return
        self._count("retried")
        delay_s = self._first_retry_s * 2 ** (delivery.attempt - 1)
        log.info(
            "webhooks: %s to %s failed (%s); attempt %s in %.0f s",
            delivery.what,
            where,
            problem,
            delivery.attempt + 1,
            delay_s,
        )
        delivery.attempt += 1
        delivery.due = time.monotonic() + delay_s
        heapq.heappush(self._retries, delivery)

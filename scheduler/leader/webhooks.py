"""Failure webhooks: the leader POSTs a JSON event for runs that failed for good or timed out and
for fires that were skipped or capped, to the job's `notifyWebhookUrl` or else the
`notify_webhook_url` setting.

`notify` only queues the event, never blocks: one queue per destination (`scheme://host:port`),
each bounded (DESTINATION_QUEUE_SIZE), and all together bounded (QUEUE_SIZE); an event over
either bound is dropped, logged and counted. A small pool of sender threads (`sched-webhooks-N`,
`notify_webhook_senders`) serves the queues, one destination by one sender at a time, so a slow
or dead receiver delays only its own events. Each POST has one deadline for the whole request
(connect, send, the whole answer: `notify_webhook_timeout_seconds`), not a timeout per read.
When the receiver does not answer 2xx the event is tried again after 1, 2, 4 and 8 s (ATTEMPTS
in all) before giving up with a WARNING. Redirects are not followed (a 3xx is a failed attempt).
Deliveries still waiting when the term ends are dropped; a webhook is a notification, not a log:
the event trace keeps every event.

The leader sends these from inside the cluster's network, so before every attempt the target is
resolved and judged (`scheduler/model/net_targets.py`): loopback, private, link-local,
unique-local, multicast, shared, reserved and cloud-metadata addresses and names are refused
unless `notify_webhook_allowed_targets` allows them, and the connection goes to the very
address that was judged (a name that re-resolves elsewhere, DNS rebinding, gains nothing). A
refused target is not tried again (WARNING, counted as given up). Log lines name only the URL's
scheme, host and port, since a path or query often holds a token.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from scheduler.leader.lifecycle import LeaderComponent, join_thread
from scheduler.leader.outbound import request, resolve_target
from scheduler.model.job_events import JobEvent
from scheduler.model.net_targets import AllowList, TargetRefused
from scheduler.model.settings import Settings

__all__ = ["WebhookNotifier", "post_json"]

log = logging.getLogger(__name__)

QUEUE_SIZE = 1000
DESTINATION_QUEUE_SIZE = 100
ATTEMPTS = 5
FIRST_RETRY_S = 1.0
TIMEOUT_S = 10.0
SENDERS = 4
_ANSWER_BYTES = 65536
_DROP_LOG_EVERY_S = 60.0
_OUTCOMES = ("delivered", "retried", "given_up", "dropped")

Poster = Callable[[str, bytes, float], int]
"""(url, JSON body, deadline) -> HTTP status; raises OSError when nothing was answered and
TargetRefused when the target may not be sent to."""


def post_json(url: str, body: bytes, timeout_s: float, allowed: AllowList | None = None) -> int:
    """POST `body` as JSON to `url`, all within `timeout_s`, without following redirects; the
    answer's status. The target is resolved and judged first and the connection pinned to the
    addresses judged. Raises TargetRefused, OSError (TimeoutError at the deadline)."""
    began = time.monotonic()
    target, addresses = resolve_target(url, allowed or AllowList())
    answer = request(
        "POST",
        url,
        deadline_s=timeout_s - (time.monotonic() - began),
        body=body,
        headers={"Content-Type": "application/json"},
        connect_to=addresses,
        host_header=target.host_header,
        server_name=target.name,
        max_answer_bytes=_ANSWER_BYTES,
    )
    return answer.status


def _where(url: str) -> str:
    """`https://host:port` of `url`, for logs (its path and query may hold a secret)."""
    try:
        parts = urlsplit(url)
        return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"
    except ValueError:
        return "(unreadable URL)"


def _destination(url: str) -> str:
    """The queue an event to `url` waits in: one per `scheme://host:port`."""
    try:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        port = parts.port or (443 if scheme == "https" else 80)
        return f"{scheme}://{(parts.hostname or '').lower()}:{port}"
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


class WebhookNotifier(LeaderComponent):
    """Owns the `sched-webhooks-N` threads for one term; `notify` may be called from any
    thread."""

    name = "webhooks"
    thread_name = "sched-webhooks"

    def __init__(
        self,
        default_url: str,
        *,
        post: Poster | None = None,
        allowed: AllowList | None = None,
        queue_size: int = QUEUE_SIZE,
        destination_queue_size: int = DESTINATION_QUEUE_SIZE,
        attempts: int = ATTEMPTS,
        first_retry_s: float = FIRST_RETRY_S,
        timeout_s: float = TIMEOUT_S,
        senders: int = SENDERS,
    ) -> None:
        self._default_url = default_url
        self._post: Poster = post or functools.partial(post_json, allowed=allowed or AllowList())
        self._queue_size = queue_size
        self._destination_queue_size = destination_queue_size
        self._attempts = attempts
        self._first_retry_s = first_retry_s
        self._timeout_s = timeout_s
        self._senders = max(1, senders)
        # A delivery under way ends within its deadline: wait that long for the threads.
        self.join_timeout_s = timeout_s + 1.0
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopping = False
        self._threads: list[threading.Thread] = []
        # Destination -> its waiting deliveries (a heap by due time, then arrival); a
        # destination being sent to is in `_busy` and no other sender takes it meanwhile.
        self._waiting: dict[str, list[_Delivery]] = {}
        self._busy: set[str] = set()
        self._waiting_count = 0
        self._counts = dict.fromkeys(_OUTCOMES, 0)
        self._dropped_logged_at = -1e18

    @classmethod
    def from_settings(cls, settings: Settings) -> WebhookNotifier:
        """A notifier as the settings ask (default URL, allowed targets, deadline, senders)."""
        return cls(
            settings.notify_webhook_url,
            allowed=AllowList.parse(settings.notify_webhook_allowed_targets),
            timeout_s=settings.notify_webhook_timeout_seconds,
            senders=settings.notify_webhook_senders,
        )

    # -- any thread ---------------------------------------------------------------------------

    def notify(self, event: JobEvent) -> bool:
        """Queue `event` for its webhook; never blocks. False when it has no webhook or was
        dropped (its queue full, or the term is over)."""
        url = event.webhook_url or self._default_url
        if not url:
            return False
        what = f"{event.kind.value} of job {event.job_name}"
        body = json.dumps(event.webhook_body()).encode()
        destination = _destination(url)
        with self._cond:
            if self._stopping:
                return False
            waiting = self._waiting.setdefault(destination, [])
            full = self._waiting_count >= self._queue_size
            if full or len(waiting) >= self._destination_queue_size:
                if not waiting:
                    del self._waiting[destination]
                self._counts["dropped"] += 1
                dropped = self._counts["dropped"]
                limit = self._queue_size if full else self._destination_queue_size
                log_it = time.monotonic() - self._dropped_logged_at >= _DROP_LOG_EVERY_S
                if log_it:
                    self._dropped_logged_at = time.monotonic()
            else:
                heapq.heappush(waiting, _Delivery(0.0, next(self._seq), url, body, what))
                self._waiting_count += 1
                self._cond.notify()
                return True
        if log_it:
            log.warning(
                "webhooks: %s to %s not sent: %s events wait already%s (%s dropped in this term)",
                what,
                _where(url),
                limit,
                "" if full else " for it",
                dropped,
            )
        return False

    def counts(self) -> dict[str, int]:
        with self._cond:
            return dict(self._counts)

    def queue_length(self) -> int:
        """Events waiting to be sent (queued, or waiting for a retry; not those being sent)."""
        with self._cond:
            return self._waiting_count

    def _count(self, outcome: str) -> None:
        with self._cond:
            self._counts[outcome] += 1

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        with self._cond:
            self._stopping = False
        for n in range(1, self._senders + 1):
            thread = threading.Thread(target=self._run, name=f"{self.thread_name}-{n}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        # One deadline for all the senders: each ends within its delivery's deadline.
        deadline = time.monotonic() + self.join_timeout_s
        for thread in self._threads:
            join_thread(thread, max(0.0, deadline - time.monotonic()), self.name)
        self._threads.clear()
        with self._cond:
            left = self._waiting_count
            self._waiting.clear()
            self._waiting_count = 0
        if left:
            log.info("webhooks: %s events not sent at the end of the term", left)

    # -- the sched-webhooks-N threads ---------------------------------------------------------

    def _run(self) -> None:
        while True:
            taken = self._take()
            if taken is None:
                return
            destination, delivery = taken
            try:
                self._deliver(delivery)
            except Exception:  # thread top: one bad delivery must not end the sender
                log.exception("webhooks: delivering %s failed", delivery.what)
            finally:
                with self._cond:
                    self._busy.discard(destination)
                    if not self._waiting.get(destination, True):
                        del self._waiting[destination]
                    self._cond.notify_all()

    def _take(self) -> tuple[str, _Delivery] | None:
        """The next due delivery of a destination no other sender serves (marked busy),
        waiting for one; None once the notifier stops."""
        with self._cond:
            while not self._stopping:
                now = time.monotonic()
                wait_s = 1.0
                for destination, waiting in self._waiting.items():
                    if destination in self._busy or not waiting:
                        continue
                    if waiting[0].due <= now:
                        self._busy.add(destination)
                        self._waiting_count -= 1
                        return destination, heapq.heappop(waiting)
                    wait_s = min(wait_s, waiting[0].due - now)
                self._cond.wait(max(0.0, wait_s))
            return None

    def _deliver(self, delivery: _Delivery) -> None:
        where = _where(delivery.url)
        try:
            status = self._post(delivery.url, delivery.body, self._timeout_s)
            problem = "" if 200 <= status < 300 else f"answered {status}"
        except TargetRefused as exc:
            self._count("given_up")
            log.warning("webhooks: %s not sent to %s: %s", delivery.what, where, exc.message)
            return
        except (OSError, ValueError) as exc:  # refused, unreachable, timed out, bad URL
            problem = f"{type(exc).__name__}: {exc}"
        if not problem:
            self._count("delivered")
            log.info("webhooks: %s sent to %s", delivery.what, where)
            return
        with self._cond:
            stopping = self._stopping
        if delivery.attempt >= self._attempts or stopping:
            self._count("given_up")
            log.warning(
                "webhooks: %s not delivered to %s after %s attempts: %s",
                delivery.what,
                where,
                delivery.attempt,
                problem,
            )
            return
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
        with self._cond:
            self._counts["retried"] += 1
            heapq.heappush(self._waiting.setdefault(_destination(delivery.url), []), delivery)
            self._waiting_count += 1

"""Whether ZooKeeper has gone silent on a connection kazoo still calls open (the watchdog's
probe; thread `sched-zk-watchdog`, answers on kazoo's callback thread)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient, KazooState

# The replica's own logger: these lines are the replica's (operators and tests follow that name).
log = logging.getLogger("scheduler.replica.replica")

# ZooKeeper unanswered for this share of the session timeout, on a connection kazoo still calls
# CONNECTED, counts as SUSPENDED. kazoo's own read timeout is the same share, but it runs out only
# while nothing is sent: a leader that keeps writing never lets it, so a partition that drops
# packets went unnoticed until the server had expired the session and another replica led.
_SILENCE_SHARE = 2 / 3


class SilenceProbe:
    """Probes ZooKeeper; treats a silent server on an open connection as a suspended session.

    One `exists` request is kept in flight (a stream of them would keep kazoo's own read timeout
    from running out, as the leader's writes do). When no answer has come for `_SILENCE_SHARE`
    of the session timeout while kazoo still says CONNECTED, `on_state(SUSPENDED)` is called,
    as kazoo would on a real suspension: the replica fences and pauses the term at once, and
    ends it once that has lasted a session timeout. The server expires the session one session
    timeout after it last heard from the client, so this leader stops before another can start.
    An answer on the same session calls `on_state(CONNECTED)`, as a real reconnection would.
    """

    def __init__(
        self,
        identity: str,
        session_timeout_s: float,
        current_client: Callable[[], KazooClient],
        on_state: Callable[[str], None],
    ) -> None:
        self._identity = identity
        self._limit_s = session_timeout_s * _SILENCE_SHARE
        self._current_client = current_client
        self._on_state = on_state
        # The request in flight, when ZooKeeper last answered one, and whether it is silent.
        self._probe: Any = None
        self._answered_at = time.monotonic()
        self._silent = False

    def answered_handshake(self) -> None:
        """The server answered a (re)connection's handshake (kazoo's listener: flags only)."""
        self._answered_at = time.monotonic()
        self._silent = False

    def check(self, client: KazooClient, connected: bool) -> None:
        """One watchdog pass: probe `client` (the replica's, alive and CONNECTED when
        `connected`), and report a silence that has lasted too long."""
        if not connected:
            self._probe = None
            return
        probe = self._probe
        if probe is None or probe.ready():
            sent = client.exists_async("/")
            sent.rawlink(lambda result: self._on_answer(client, result))
            self._probe = sent
        silent_s = time.monotonic() - self._answered_at
        if not self._silent and silent_s >= self._limit_s:
            self._silent = True
            log.warning(
                "replica %s: ZooKeeper has not answered for %.1fs on an open connection; acting "
                "as if the session were suspended",
                self._identity,
                silent_s,
            )
            self._on_state(KazooState.SUSPENDED)

    def _on_answer(self, client: KazooClient, result: Any) -> None:
        """A probe's result (kazoo's callback thread): flags only."""
        if client is not self._current_client() or result.exception is not None:
            return  # not an answer (connection lost), or an old client's
        self._answered_at = time.monotonic()
        if self._silent and client.state == KazooState.CONNECTED:
            self._silent = False
            log.info("replica %s: ZooKeeper answers again", self._identity)
            self._on_state(KazooState.CONNECTED)

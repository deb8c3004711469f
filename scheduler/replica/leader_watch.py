"""Who leads the election, as this replica follows it (thread `sched-leader-watch`)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.recipe.watchers import ChildrenWatch

from scheduler.replica.election_nodes import read_contenders
from scheduler.replica.vouching import Vouching

# The replica's own logger: these lines are the replica's (operators and tests follow that name).
log = logging.getLogger("scheduler.replica.replica")

_LEADER_REFRESH_S = 2.0


class LeaderWatch:
    """Follows the election's first contender, for `/health` and redirects, and vouches for the
    election's members (a check may take up to 2 s for a member that does not answer).

    `run` is the body of the replica's `sched-leader-watch` thread, until `stopping` is set: it
    keeps a children watch on the election path (set again on each new client), follows the
    revoked console sessions while connected, and reads the election again when the watch
    fires, `changed` is set, or `_LEADER_REFRESH_S` passed. `counters["leader_changes"]` counts
    each new leader seen.
    """

    def __init__(
        self,
        election_path: str,
        vouching: Vouching,
        *,
        client: Callable[[], KazooClient],
        connected: Callable[[], bool],
        stopping: threading.Event,
        changed: threading.Event,
        follow_sessions: Callable[[], None],
        counters: dict[str, int],
    ) -> None:
        self._election_path = election_path
        self._vouching = vouching
        self._client = client
        self._connected = connected
        self._stopping = stopping
        self._changed = changed
        self._follow_sessions = follow_sessions
        self._counters = counters
        # Identities of the replicas in the election, leader first (for /health and the console).
        self._contenders: tuple[str, ...] = ()
        self._leader: str | None = None

    def leader(self) -> str | None:
        """The identity of the replica the election names leader (None: none known)."""
        return self._leader

    def contenders(self) -> tuple[str, ...]:
        """The election's members, leader first."""
        return self._contenders

    def run(self) -> None:
        def on_children(_children: list[str]) -> bool:
            self._changed.set()
            return not self._stopping.is_set()

        watched: KazooClient | None = None  # the client the watch is set on (a new one needs one)
        while not self._stopping.is_set():
            try:
                client = self._client()
                if watched is not client and self._connected():
                    try:
                        ChildrenWatch(client, self._election_path, on_children)
                        watched = client
                    except KazooException:
                        log.warning("leader-watch: could not watch %s yet", self._election_path)
                if self._connected():
                    self._follow_sessions()
                self.refresh()
            except Exception:
                # A dying client fails the requests in flight with whatever killed its connection
                # (kazoo passes on a RuntimeError "xids do not match" from a stray reply, say).
                # The watchdog replaces the client; this thread must live on to follow the next
                # one, or the replica fails as a whole ("thread sched-leader-watch ended").
                log.exception("leader-watch: a pass failed; the next pass tries again")
            self._changed.wait(_LEADER_REFRESH_S)
            self._changed.clear()

    def refresh(self) -> None:
        """Read the election, vouch for its members, publish the leader (leader-watch thread).

        The leader is checked first and published with its verdict (`publish`, which
        `Vouching.update` calls), before the other members are checked.
        """
        if not self._connected():
            return
        try:
            contenders, (acls, stat) = read_contenders(self._client(), self._election_path)
        except KazooException:
            return
        leader = contenders[0] if contenders else None

        def publish() -> None:
            self._contenders = tuple(dict.fromkeys(contenders))
            if leader == self._leader:
                return
            if leader is not None:
                self._counters["leader_changes"] += 1
            vouched = leader is None or self._vouching.is_vouched(leader)
            log.info(
                "leader-watch: leader is now %s%s",
                repr(leader[:80]) if leader is not None else "unknown",
                "" if vouched else " (NOT vouched for)",
            )
            self._leader = leader

        self._vouching.update(contenders, acls, stat.aversion, leader_decided=publish)

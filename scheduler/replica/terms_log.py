"""A fenced record of every leadership term, for operators and for proving terms never overlap.

Each term writes `/ha/terms/{number}` = `{"identity", "number", "startedAt", "lastActingAt"}` at
its start and refreshes `lastActingAt` while it acts. Every write is fenced, so a record's
`lastActingAt` is always earlier than the next term's `startedAt` (the next leader can only win
after this leader's election node is gone, and no fenced write passes after that).
"""

from __future__ import annotations

import json
import logging
import time

from scheduler.leader.lifecycle import ThreadedComponent
from scheduler.model.errors import NotLeader, SchedulerError
from scheduler.replica.term import LeaderContext
from scheduler.storage.layout import TERMS, term_path
from scheduler.storage.transactions import FencedWriter

log = logging.getLogger(__name__)

_KEEP_TERMS = 100
# Each refresh is a fenced ZooKeeper write (a quorum write, logged to disk by every server):
# once a second says when the leader last acted closely enough, at a quarter of the writes that
# 0.25 s cost (issue 29: most of an idle leader's requests).
HEARTBEAT_INTERVAL_S = 1.0


class TermRecorder(ThreadedComponent):
    """Writes the term's record at start, then refreshes it on `sched-term-record` every
    `HEARTBEAT_INTERVAL_S` while the term acts."""

    name = "term-record"
    thread_name = "sched-term-record"

    def __init__(self, ctx: LeaderContext) -> None:
        super().__init__()
        self._ctx = ctx
        self._path = term_path(ctx.term.number)

    def _record(self) -> bytes:
        term = self._ctx.term
        return json.dumps(
            {
                "identity": self._ctx.settings.identity,
                "number": term.number,
                "startedAt": term.started_at,
                "lastActingAt": time.time(),
            }
        ).encode()

    def start(self) -> None:
        fenced = FencedWriter(self._ctx.registry, self._ctx.term.fence)
        fenced.create(self._path, self._record())
        self._trim()
        self._start_thread()

    def _trim(self) -> None:
        names = self._ctx.registry.children(TERMS)
        fenced = FencedWriter(self._ctx.registry, self._ctx.term.fence)
        for old in names[:-_KEEP_TERMS]:
            fenced.delete(f"{TERMS}/{old}")

    def _run(self) -> None:
        fenced = FencedWriter(self._ctx.registry, self._ctx.term.fence)
        while not self._stopping.wait(HEARTBEAT_INTERVAL_S):
            if not self._ctx.term.acting:
                continue
            try:
                fenced.set(self._path, self._record())
            except NotLeader:
                log.info("term %s: record not refreshed, no longer acting", self._ctx.term.number)
            except SchedulerError as exc:
                log.warning("term %s: record not refreshed: %s", self._ctx.term.number, exc)

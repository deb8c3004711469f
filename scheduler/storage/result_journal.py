"""The task result journal: results are counted in ZooKeeper first, atomically with the state
change that makes them final, and moved into the TASK_RESULT_STATISTICS_* tables afterwards.

Why: the original counted in leader memory, so every leader change lost what the old leader had
not written yet. Here a result is one empty znode

    /statistics/results/{yyyyMMddHHmm}/{uuid}-{s|f}

(the UTC minute the leader processed the update; `s` success, `f` failure), created in the same
fenced ZooKeeper transaction that removes the task's running node (a terminal update) or marks
a daemon task idle (a `COMPLETE` run). So:

- a result is journaled exactly when the state change is recorded: an update Mesos resends
  after a crash finds the state already changed and journals nothing;
- the journal survives any leader crash; the next leader's `ResultCounters.roll` moves it into
  the database (see `leader.statistics.counters` for the exactly-once move);
- the database may be down for a while: results wait in ZooKeeper (up to `MAX_PENDING`, then
  new results are not journaled: counted in `dropped`, which /health and /metrics show, and
  logged at WARNING at most every 10 s with how many).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from datetime import UTC, datetime

from scheduler.storage.layout import result_bucket_path, result_path
from scheduler.storage.registry import Registry
from scheduler.storage.transactions import Op

__all__ = ["MAX_PENDING", "ResultJournal", "bucket_minute", "bucket_name"]

log = logging.getLogger(__name__)

_DROP_LOG_INTERVAL_S = 10.0
# ZooKeeper answers getChildren in one packet (jute.maxbuffer, 1 MiB by default): a bucket of
# 36-character names stays well below that at this size, and so does the whole journal.
MAX_PENDING = 20_000
_BUCKET_FORMAT = "%Y%m%d%H%M"


def bucket_name(moment: float) -> str:
    """The journal bucket (UTC minute) of epoch seconds `moment`."""
    return datetime.fromtimestamp(moment, UTC).strftime(_BUCKET_FORMAT)


def bucket_minute(name: str) -> datetime | None:
    """The naive UTC minute of bucket `name`; None when it is not a bucket name."""
    try:
        return datetime.strptime(name, _BUCKET_FORMAT)
    except ValueError:
        return None


class ResultJournal:
    """Builds the journal op for one result; used from the Mesos event thread."""

    def __init__(self, registry: Registry) -> None:
        self._registry = registry
        self._lock = threading.Lock()
        self._bucket = ""
        self._named = (-1, "")  # the last UTC minute (epoch minutes) named, and its name
        self.pending = 0  # as last seen by the roller, plus what was journaled since
        self.dropped = 0
        self._unlogged = 0  # dropped and not logged yet
        self._logged_at: float | None = None

    def ops(self, success: bool, now: float | None = None) -> list[Op]:
        """The op that journals one result (to commit with the state change); [] when the
        journal is full. Raises SchedulerError when ZooKeeper fails creating the bucket."""
        with self._lock:
            full = self.pending >= MAX_PENDING
            if full:
                self.dropped += 1
                self._unlogged += 1
            else:
                self.pending += 1
        if full:
            self.log_drops(due_only=True)
            return []
        moment = time.time() if now is None else now
        minute, named = int(moment // 60), self._named
        if minute == named[0]:
            bucket = named[1]  # each minute's bucket is named once, not once a result (issue 29)
        else:
            bucket = bucket_name(moment)
            self._named = (minute, bucket)
        if bucket != self._bucket:
            try:
                self._registry.ensure(result_bucket_path(bucket))
            except BaseException:
                self.not_committed()
                raise
            self._bucket = bucket
        return [Op.create(result_path(bucket, success, uuid.uuid4().hex))]

    def log_drops(self, due_only: bool = False) -> None:
        """Log the results dropped and not logged yet (any thread); with `due_only`, only when
        no line was logged for 10 s: a flood of drops is a line every 10 s, never silence."""
        now = time.monotonic()
        with self._lock:
            last = self._logged_at
            if not self._unlogged or (
                due_only and last is not None and now - last < _DROP_LOG_INTERVAL_S
            ):
                return
            unlogged, self._unlogged = self._unlogged, 0
            dropped = self.dropped
            self._logged_at = now
        log.warning(
            "statistics: result journal full (%d entries waiting for the database): %d results "
            "not counted (%d in all)",
            MAX_PENDING,
            unlogged,
            dropped,
        )

    def not_committed(self) -> None:
        """The transaction carrying the op failed: forget the cached bucket, uncount it."""
        with self._lock:
            self.pending = max(0, self.pending - 1)
        self._bucket = ""

    def seen(self, pending: int) -> None:
        """The roller's count of entries still in ZooKeeper after a roll."""
        with self._lock:
            self.pending = pending

"""`JobApps`: which app each job belongs to, read once and kept by watches (issue 26).

A caller who sees only some apps gets lists filtered by each job's app, which is in the job's
stored config: reading every listed job's config per request made such a caller's page of 50
jobs cost ten times an admin's (`tests/bench/bench_access_lists.py`). This index reads a job's
config the first time it is asked for, with a data watch, and keeps only its app name until the
watch fires; a request then costs a dictionary look-up per job.

Why not the term's other copies of the configs: the config listener's follows every job, but on
its own thread, after the watch has fired (a moved job would keep its old app until the thread
gets to it), and the queue view's prefers what the producer noted and is synced on the
launcher's thread. Here an entry counts only while its watch is set, so the index is never
staler than a read of ZooKeeper on the same session would be.

Correctness, not speed, decides each rule:
- A job is answered from the index only while its watch is still set (`Registry.
  data_watch_set`): kazoo takes a watch off as soon as its event arrives, before any later
  answer on the session, so a change that a read now would see is never answered stale, even
  while kazoo's thread has not run the callback yet.
- A job whose watch fired (changed, deleted, or the session lost: kazoo calls every watch
  then) is dropped on kazoo's thread and read again when next asked for.
- This process's own writes (`ConfigStore`'s job writes call `forget`) drop the entry when the
  write returns, whatever its outcome (so that they hold without the watch check too: the
  write's callback may run a moment after the writer has answered its client).
- A read that was in flight when its job was dropped is not kept (a drop counter), so an answer
  read before a change never lands after it.
- A job that does not exist is not kept (no watch can be left on a missing node): it is read
  again each time it is asked for. One whose config cannot be read is kept as belonging to no
  app, as the API's listing skips it.

Thread-safe: API request threads ask, kazoo's thread drops; ZooKeeper is read outside the lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

from scheduler.model.errors import RegistryError
from scheduler.storage.config_store import ConfigStore
from scheduler.storage.layout import JOBS, job_path
from scheduler.storage.registry import Registry

__all__ = ["JobApps"]

log = logging.getLogger(__name__)


class JobApps:
    """Job name -> app name, for the jobs asked about, kept current by data watches."""

    def __init__(self, registry: Registry, config: ConfigStore) -> None:
        self._registry = registry
        self._config = config
        self._prefix = registry.abs(JOBS) + "/"
        self._lock = threading.Lock()
        # Job -> its app; None: its config cannot be read (no app sees it).
        self._apps: dict[str, str | None] = {}
        # Drops counted, and the count at each job's last drop while a read was in flight:
        # a read started at count c keeps a job only if the job was not dropped after c.
        self._drops = 0
        self._dropped_at: dict[str, int] = {}
        self._all_dropped_at = 0
        self._reading = 0
        self._stopped = False
        self.reads = 0
        """Job configs read so far: what keeping the index costs (tests and benchmarks)."""

    def apps_of(self, names: Iterable[str]) -> dict[str, str]:
        """The app of each of `names` that exists and whose config can be read; the others are
        left out. Jobs not known yet (or dropped since) are read in one batch of pipelined
        requests, each leaving a watch. Blocks for those reads; RegistryError when ZooKeeper
        fails or does not answer (nothing is kept from that batch)."""
        wanted = {name for name in names if name and "/" not in name and name not in (".", "..")}
        armed = self._registry.data_watch_set
        with self._lock:
            known = {
                name: self._apps[name]
                for name in wanted
                if name in self._apps and armed(job_path(name), self._on_event)
            }
            unknown = sorted(wanted - known.keys())
            if unknown:
                started = self._drops
                self._reading += 1
        if unknown:
            known.update(self._read(unknown, started))
        return {name: app for name, app in known.items() if app is not None}

    def forget(self, job_name: str) -> None:
        """This process wrote (or tried to write) `job_name`'s config: read it again when next
        asked for. Any thread."""
        self._drop(job_name)

    def stop(self) -> None:
        """The term is over: forget everything and keep nothing from now on (kazoo keeps the
        watch callbacks until each fires once)."""
        with self._lock:
            self._stopped = True
            self._apps.clear()

    def _read(self, names: list[str], started: int) -> dict[str, str | None]:
        """Read `names` with watches; keep those not dropped since `started`. Every name read
        is answered (from this read) even when not kept."""
        got: dict[str, str | None] = {}
        try:
            found = self._registry.get_many([job_path(n) for n in names], self._watch)
            for path, answer in found.items():
                if answer is not None:
                    got[path.rsplit("/", 1)[1]] = self._app_in(path, answer[0])
        finally:
            with self._lock:
                self._reading -= 1
                self.reads += len(names)
                if not self._stopped and self._all_dropped_at <= started:
                    for name, app in got.items():
                        if self._dropped_at.get(name, 0) <= started:
                            self._apps[name] = app
                if not self._reading:
                    self._dropped_at.clear()  # no read in flight can be older than a drop
        return got

    def _app_in(self, path: str, data: bytes) -> str | None:
        name = path.rsplit("/", 1)[1]
        try:
            return self._config.parse_stored_job(name, data).app_name
        except RegistryError as exc:
            log.warning("job apps: %s", exc.message)
            return None

    def _watch(self, _path: str) -> Any:
        # One bound method for every path: kazoo keeps a set of watchers per path, so a job
        # read again while its watch is still set adds none.
        return self._on_event

    def _on_event(self, event: Any) -> None:
        """kazoo's thread: a watched job changed or was deleted, or the session's watches
        were reset (no path: every entry is dropped)."""
        path = getattr(event, "path", None)
        if isinstance(path, str) and path.startswith(self._prefix):
            self._drop(path[len(self._prefix) :])
            return
        with self._lock:
            self._drops += 1
            self._all_dropped_at = self._drops
            self._apps.clear()

    def _drop(self, name: str) -> None:
        with self._lock:
            self._drops += 1
            self._apps.pop(name, None)
            if self._reading:
                self._dropped_at[name] = self._drops

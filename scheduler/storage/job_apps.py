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
  while kazoo's thread has not run the callback yet (the callback then only drops the entry,
  so that jobs that are gone are not held).
- Reads are numbered as they are sent; an answer never replaces a later read's, so a slow
  reader's old answer cannot land on a newer one whose read set the watch again.
- This process's own writes (`ConfigStore`'s job writes call `forget`) drop the entry when the
  write returns, whatever its outcome (the watch check alone would do; this does not lean on
  how kazoo keeps its watches).
- A job that does not exist is not kept (no watch can be left on a missing node): it is read
  again each time it is asked for. One whose config cannot be read is kept as belonging to no
  app, as the API's listing skips it.

Thread-safe: API request threads ask, kazoo's thread drops; reads are sent under the lock (which
does not block) and waited for outside it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

from scheduler.model.errors import RegistryError
from scheduler.storage.config_store import ConfigStore
from scheduler.storage.layout import JOBS, job_path
from scheduler.storage.registry import PendingReads, Registry

__all__ = ["JobApps"]

log = logging.getLogger(__name__)


class JobApps:
    """Job name -> app name, for the jobs asked about, kept current by data watches."""

    def __init__(self, registry: Registry, config: ConfigStore) -> None:
        self._registry = registry
        self._config = config
        self._prefix = registry.abs(JOBS) + "/"
        self._lock = threading.Lock()
        # Job -> (its app, the number of the read it came from); app None: its config cannot
        # be read (no app sees it). Reads are numbered as they are sent, under the lock: on
        # one connection ZooKeeper answers them in that order, so a greater number is a later
        # state and an answer never replaces a later one's.
        self._apps: dict[str, tuple[str | None, int]] = {}
        self._sent = 0
        self._stopped = False
        self.reads = 0
        """Job configs read so far: what keeping the index costs (tests and benchmarks)."""

    def apps_of(self, names: Iterable[str]) -> dict[str, str]:
        """The app of each of `names` that exists and whose config can be read; the others are
        left out. Jobs not known yet (or whose watch has fired since) are read in one batch of
        pipelined requests, each leaving a watch. Blocks for those reads; RegistryError when
        ZooKeeper fails or does not answer (nothing is kept from that batch)."""
        wanted = {name for name in names if name and "/" not in name and name not in (".", "..")}
        armed = self._registry.data_watch_set
        with self._lock:
            known = {
                name: entry[0]
                for name in wanted
                if (entry := self._apps.get(name)) is not None
                and armed(job_path(name), self._on_event)
            }
            unknown = sorted(wanted - known.keys())
            if unknown:
                self._sent += 1
                number = self._sent
                pending = self._registry.send_reads([job_path(n) for n in unknown], self._watch)
        if unknown:
            known.update(self._collect(pending, number))
        return {name: app for name, app in known.items() if app is not None}

    def forget(self, job_name: str) -> None:
        """This process wrote (or tried to write) `job_name`'s config: read it again when next
        asked for. Any thread."""
        with self._lock:
            self._apps.pop(job_name, None)

    def stop(self) -> None:
        """The term is over: forget everything and keep nothing from now on (kazoo keeps the
        watch callbacks until each fires once)."""
        with self._lock:
            self._stopped = True
            self._apps.clear()

    def _collect(self, pending: PendingReads, number: int) -> dict[str, str | None]:
        """The answers of read `number`: each job's app (None: unreadable), kept unless a later
        read's answer is; a job found missing is dropped unless a later read found it."""
        found = pending.wait()
        if any(answer is not None for answer in found.values()):
            # kazoo sets a read's watch just after handing its answer over: once a later
            # answer on the session is in, every watch of this read is set, and its entries
            # count (`data_watch_set`) from their first look-up on.
            self._registry.exists(JOBS)
        got: dict[str, str | None] = {}
        missing: list[str] = []
        for path, answer in found.items():
            name = path.rsplit("/", 1)[1]
            if answer is None:
                missing.append(name)
            else:
                got[name] = self._app_in(name, answer[0])
        with self._lock:
            self.reads += len(found)
            if not self._stopped:
                for name, app in got.items():
                    if self._apps.get(name, (None, 0))[1] < number:
                        self._apps[name] = (app, number)
                for name in missing:
                    if self._apps.get(name, (None, 0))[1] < number:
                        self._apps.pop(name, None)
        return got

    def _app_in(self, name: str, data: bytes) -> str | None:
        try:
            return self._config.parse_stored_job(name, data).app_name
        except RegistryError as exc:
            log.warning("job apps: %s", exc.message)
            return None

    def _watch(self, _path: str) -> Any:
        # One bound method for every path: kazoo keeps a set of watchers per path, so a job
        # read again while its watch is still set adds none, and `data_watch_set` finds it.
        return self._on_event

    def _on_event(self, event: Any) -> None:
        """kazoo's thread: a watched job changed or was deleted (its entry is dropped unless a
        read since has set the watch again), or the session's watches were reset (no path:
        every entry is dropped). Entries are answered only while their watch is set, so this
        only keeps the index from holding jobs that are gone."""
        path = getattr(event, "path", None)
        with self._lock:
            if not (isinstance(path, str) and path.startswith(self._prefix)):
                self._apps.clear()
                return
            name = path[len(self._prefix) :]
            if name in self._apps and not self._registry.data_watch_set(
                job_path(name), self._on_event
            ):
                del self._apps[name]

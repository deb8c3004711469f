"""Stored jobs parsed ahead of a term, by a standby (issue 29).

A new leader reads every job and parses each stored document before its term has started: at
100,000 jobs the parsing alone is about half of the start. A standby has the time to do it
before it is needed: the replica's standby thread reads every job now and then (`warm`, by
multiRead where the server has it) and keeps each one parsed, with a digest of the document it
came from. The term's config listener still reads every job at its start, as before, and takes
a job parsed ahead only when the digest of the document it has just read is the same
(`parsed`): a job changed since (or added) is parsed then, so nothing the standby read can be
stale. The listener empties the cache (`clear`) once its start is done: the term keeps its own
configs and follows the changes with its watches.

The digest is BLAKE2b of 16 bytes: two documents with the same digest are the same document.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable

from scheduler.model.config.job import JobConfig
from scheduler.model.errors import InvalidRequest
from scheduler.storage.layout import JOBS, job_path
from scheduler.storage.registry import Registry

log = logging.getLogger(__name__)

# Jobs read and parsed at a time; the standby thread yields the processor between chunks (it
# shares the machine with a leader in a local cluster).
_CHUNK = 1000
_PAUSE_S = 0.02


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


class ParsedJobs:
    """Job name -> (digest of its stored document, the job parsed), for one time zone default.
    Thread-safe: the standby thread fills it, the config listener reads and empties it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[str, tuple[bytes, JobConfig]] = {}
        self._time_zone = ""
        # Bumped by `clear`: a pass that began before it does not put back what it read.
        self._generation = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._jobs)

    def parsed(self, name: str, data: bytes, default_time_zone: str) -> JobConfig | None:
        """The job parsed ahead from exactly `data` in that zone default, else None."""
        with self._lock:
            if default_time_zone != self._time_zone:
                return None
            known = self._jobs.get(name)
        if known is None or known[0] != _digest(data):
            return None
        return known[1]

    def clear(self) -> None:
        with self._lock:
            self._jobs = {}
            self._generation += 1

    def warm(
        self, registry: Registry, default_time_zone: str, stopping: Callable[[], bool]
    ) -> tuple[int, int] | None:
        """Read every job and parse those new or changed since the last pass; returns (jobs
        kept, jobs parsed by this pass), or None when `stopping()` said so midway (nothing of
        the pass is kept then). RegistryError from the reads."""
        began = time.monotonic()
        with self._lock:
            generation = self._generation
            known = self._jobs if self._time_zone == default_time_zone else {}
        names = registry.children(JOBS)
        fresh: dict[str, tuple[bytes, JobConfig]] = {}
        parsed = 0
        for start in range(0, len(names), _CHUNK):
            if stopping():
                return None
            chunk = names[start : start + _CHUNK]
            for path, got in registry.get_many([job_path(name) for name in chunk]).items():
                if got is None:
                    continue  # deleted since the listing
                name = path.rsplit("/", 1)[1]
                digest = _digest(got[0])
                before = known.get(name)
                if before is not None and before[0] == digest:
                    fresh[name] = before
                    continue
                try:
                    job = JobConfig.from_bytes(
                        got[0], default_time_zone=default_time_zone, strict=False
                    )
                except InvalidRequest:
                    continue  # the listener reports it when it reads it
                fresh[name] = (digest, job)
                parsed += 1
            time.sleep(_PAUSE_S)
        with self._lock:
            if generation != self._generation or stopping():
                return None
            self._jobs = fresh
            self._time_zone = default_time_zone
        log.info(
            "standby: %s jobs parsed ahead (%s new or changed) in %.2f s",
            len(fresh),
            parsed,
            time.monotonic() - began,
        )
        return len(fresh), parsed

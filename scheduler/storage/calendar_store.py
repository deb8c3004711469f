"""The term's named calendars (issue 28) at `layout.CALENDARS/{name}` (`Calendar.to_json`).

Only the leader writes calendars and a store belongs to one term, so it reads every calendar
once on first use (one pipelined read of the folder's nodes) and then keeps its copy by its own
writes: no watch, no re-read. The producer asks `calendars(names)` at every fire of a job with
`excludeCalendars`, so that answer costs no ZooKeeper request after the first. Writes are
fenced (a deposed leader cannot write).

`users(name)` says which jobs list a calendar in their `excludeCalendars` (read in bulk from
the configuration): the API refuses to delete a calendar still in use.

Thread-safe: the API's threads and the producer's share one store.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from scheduler.model.calendar import Calendar
from scheduler.model.config._wire import STORED_MAX_BYTES
from scheduler.model.errors import Conflict, InvalidRequest, NotFound, QuotaExceeded, TooLarge
from scheduler.storage.config_store import ConfigStore
from scheduler.storage.layout import CALENDARS, WORKFLOWS, calendar_path, workflow_path
from scheduler.storage.registry import Registry
from scheduler.storage.transactions import Fence, FencedWriter

__all__ = ["CalendarStore", "CalendarUsers"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CalendarUsers:
    """Who lists a calendar in `excludeCalendars`, each sorted by name."""

    jobs: tuple[str, ...] = ()
    workflows: tuple[str, ...] = ()

    def labels(self) -> list[str]:
        """`job 'a'`, ..., `workflow 'w'`, ...: how a refusal names them."""
        return [f"job '{j}'" for j in self.jobs] + [f"workflow '{w}'" for w in self.workflows]

    def __bool__(self) -> bool:
        return bool(self.jobs or self.workflows)


class CalendarStore:
    """The calendars of one term: read once, kept by this store's own (fenced) writes."""

    def __init__(
        self,
        registry: Registry,
        fence: Fence | None,
        default_time_zone: str,
        max_calendars: int,
        config: ConfigStore | None = None,
    ) -> None:
        self._registry = registry
        self._fence = fence
        self.default_time_zone = default_time_zone
        """The zone of a calendar body without `timeZone` (the API reads bodies with it)."""
        self.max_calendars = max_calendars
        self._config = config
        self._lock = threading.RLock()
        self._calendars: dict[str, Calendar] | None = None  # None: not read yet
        self.references = threading.Lock()
        """Held by the API while it checks a job's `excludeCalendars` and writes the job, and
        while it checks a calendar's users and deletes it: within a term (whose writes all go
        through this store) no job is written naming a calendar deleted meanwhile."""
        self.listeners: list[Callable[[], None]] = []
        """Called after each change of a calendar here (save, delete), on the writer's thread,
        outside the store's lock; must not block."""

    # -- reads -------------------------------------------------------------------------------

    def _loaded(self) -> dict[str, Calendar]:
        """The calendars, read on first use (under the lock). RegistryError when ZooKeeper
        fails (the next call reads again)."""
        with self._lock:
            if self._calendars is None:
                names = self._registry.children(CALENDARS)
                got = self._registry.get_many([calendar_path(name) for name in names])
                calendars: dict[str, Calendar] = {}
                for name in names:
                    found = got.get(calendar_path(name))
                    if found is None:
                        continue  # deleted between the list and the read
                    calendar = self._decode(name, found[0])
                    if calendar is not None:
                        calendars[name] = calendar
                self._calendars = calendars
                log.info("calendars: %d read", len(calendars))
            return self._calendars

    def get(self, name: str) -> Calendar | None:
        """The calendar `name`, or None when there is none."""
        with self._lock:
            return self._loaded().get(name)

    def names(self) -> list[str]:
        """The calendars' names, sorted."""
        with self._lock:
            return sorted(self._loaded())

    def all(self) -> list[Calendar]:
        """Every calendar, by name."""
        with self._lock:
            calendars = self._loaded()
            return [calendars[name] for name in sorted(calendars)]

    def calendars(self, names: Iterable[str]) -> list[Calendar]:
        """Those of `names` that exist, in the order given (each once). No ZooKeeper request
        after the first read: the producer asks it at every fire."""
        with self._lock:
            calendars = self._loaded()
            out: list[Calendar] = []
            seen: set[str] = set()
            for name in names:
                found = calendars.get(name)
                if found is not None and name not in seen:
                    seen.add(name)
                    out.append(found)
            return out

    def users(self, name: str) -> CalendarUsers:
        """The jobs and workflows that list calendar `name` in `excludeCalendars`. Every job's
        config and every workflow's definition is read in bulk (100 to a multiRead): for the
        API's delete and read, not for a hot path. Jobs are not looked at when the store was
        built without the configuration. RegistryError when ZooKeeper fails."""
        jobs: list[str] = []
        if self._config is not None:
            config = self._config
            found = config.jobs_named(sorted(config.job_names()))
            jobs = [job.job_name for job in found if name in job.exclude_calendars]
        names = sorted(self._registry.children(WORKFLOWS))
        got = self._registry.get_many([workflow_path(n) for n in names])
        workflows = [
            workflow
            for workflow in names
            if (data := got.get(workflow_path(workflow))) is not None
            and name in _listed_calendars(data[0])
        ]
        return CalendarUsers(tuple(jobs), tuple(workflows))

    # -- writes (fenced) ---------------------------------------------------------------------

    def _writer(self) -> FencedWriter:
        if self._fence is None:
            raise RuntimeError("read-only calendar store")
        return FencedWriter(self._registry, self._fence)

    def save(self, calendar: Calendar, *, create: bool) -> None:
        """Create (`create`) or update the calendar. Raises Conflict (it exists, on a create),
        NotFound (it does not, on an update), QuotaExceeded (`max_calendars` calendars exist
        already, on a create), TooLarge (its JSON over the stored size), NotLeader /
        RegistryError from the write."""
        name = calendar.calendar_name
        data = json.dumps(calendar.to_json(), separators=(",", ":")).encode()
        if len(data) > STORED_MAX_BYTES:
            raise TooLarge(
                "max_job_bytes",
                f"calendar '{name}' is {len(data)} bytes as JSON; at most {STORED_MAX_BYTES}",
            )
        with self._lock:
            calendars = self._loaded()
            path = calendar_path(name)
            if create:
                if name in calendars:
                    raise Conflict(f"calendar '{name}' already exists")
                if len(calendars) >= self.max_calendars:
                    raise QuotaExceeded(
                        "max_calendars",
                        f"at most {self.max_calendars} calendars may exist (max_calendars)",
                    )
                try:
                    self._writer().create(path, data)
                except Conflict as exc:
                    raise Conflict(f"calendar '{name}' already exists") from exc
            else:
                if name not in calendars:
                    raise NotFound(f"calendar '{name}' does not exist")
                try:
                    self._writer().set(path, data)
                except NotFound as exc:
                    calendars.pop(name, None)
                    raise NotFound(f"calendar '{name}' does not exist") from exc
            calendars[name] = calendar
        log.info("calendars: %s %s", name, "created" if create else "updated")
        self._changed()

    def delete(self, name: str) -> bool:
        """Delete the calendar (whoever uses it: the API asks `users` first); False when there
        was none. NotLeader / RegistryError from the write."""
        with self._lock:
            calendars = self._loaded()
            if name not in calendars:
                return False
            self._writer().delete(calendar_path(name), recursive=False)
            del calendars[name]
        log.info("calendars: %s deleted", name)
        self._changed()
        return True

    def _changed(self) -> None:
        for listener in list(self.listeners):
            try:
                listener()
            except Exception:
                log.exception("calendars: a change listener failed")

    def _decode(self, name: str, data: bytes) -> Calendar | None:
        """A stored calendar; None (logged) when it cannot be read, so that one bad node does
        not hide the others."""
        try:
            calendar = Calendar.from_json(
                json.loads(data.decode("utf-8")), default_time_zone=self.default_time_zone
            )
        except (UnicodeDecodeError, ValueError, AttributeError, TypeError, InvalidRequest) as exc:
            log.warning("calendars: skipping stored calendar %s: cannot be read (%s)", name, exc)
            return None
        if calendar.calendar_name != name:
            log.warning(
                "calendars: skipping stored calendar %s: it names %s", name, calendar.calendar_name
            )
            return None
        return calendar


def _listed_calendars(data: bytes) -> list[str]:
    """The `excludeCalendars` names of a stored workflow's JSON (read alone: the whole
    definition's checks are the workflow store's, and a delete must not depend on them); empty
    for what cannot be read."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return []
    listed = doc.get("excludeCalendars") if isinstance(doc, dict) else None
    if not isinstance(listed, list):
        return []
    return [item for item in listed if isinstance(item, str)]

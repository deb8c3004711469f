"""The term's named calendars (issue 28) at `layout.CALENDARS/{name}` (`Calendar.to_json`): a
`NamedRecords` store (read once per term, kept by its own fenced writes; `max_calendars`). The
producer asks `calendars(names)` at every fire of a job with `excludeCalendars`, so that answer
costs no ZooKeeper request after the first.

`users(name)` says which jobs list a calendar in their `excludeCalendars` (read in bulk from
the configuration): the API refuses to delete a calendar still in use.

Thread-safe: the API's threads and the producer's share one store.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from scheduler.model.calendar import Calendar
from scheduler.storage.config_store import ConfigStore
from scheduler.storage.layout import CALENDARS, WORKFLOWS, workflow_path
from scheduler.storage.named_records import NamedRecords
from scheduler.storage.registry import Registry
from scheduler.storage.transactions import Fence

__all__ = ["CalendarStore", "CalendarUsers"]


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


class CalendarStore(NamedRecords[Calendar]):
    """The calendars of one term: read once, kept by this store's own (fenced) writes."""

    def __init__(
        self,
        registry: Registry,
        fence: Fence | None,
        default_time_zone: str,
        max_calendars: int,
        config: ConfigStore | None = None,
    ) -> None:
        super().__init__(
            registry,
            fence,
            kind="calendar",
            folder=CALENDARS,
            quota=("max_calendars", max_calendars),
            name_of=lambda calendar: calendar.calendar_name,
            to_json=lambda calendar: calendar.to_json(),
            from_json=self._read,
        )
        self.default_time_zone = default_time_zone
        """The zone of a calendar body without `timeZone` (the API reads bodies with it)."""
        self._config = config
        self.references = threading.Lock()
        """Held by the API while it checks a job's `excludeCalendars` and writes the job, and
        while it checks a calendar's users and deletes it: within a term (whose writes all go
        through this store) no job is written naming a calendar deleted meanwhile."""

    def _read(self, data: object) -> Calendar:
        if not isinstance(data, Mapping):
            raise ValueError("not a JSON object")
        return Calendar.from_json(data, default_time_zone=self.default_time_zone)

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

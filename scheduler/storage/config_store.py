"""Apps and jobs in ZooKeeper (`layout.APPS/{app}`, `layout.JOBS/{job}`).

Reads tolerate what Elastic-Job-Cloud 2.1.5 wrote (`strict=False`); a node that cannot be read
at all is logged and skipped in listings, and named in the error when asked for by name. Writes
are fenced: only the acting leader changes configuration.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from scheduler.model.config.app import AppConfig
from scheduler.model.config.cron import system_time_zone
from scheduler.model.config.job import JobConfig
from scheduler.model.errors import Conflict, InvalidRequest, NotFound, RegistryError
from scheduler.storage.layout import APPS, DISABLE_JOB, JOBS, app_path, disable_path, job_path
from scheduler.storage.registry import Registry
from scheduler.storage.transactions import Fence, FencedWriter, Op
from scheduler.storage.watched_children import WatchedChildren

log = logging.getLogger(__name__)

JOBS_TXN_BUDGET_BYTES = 896 * 1024
"""The most one `add_jobs` transaction may take on the wire as `jobs_txn_bytes` estimates it (an
upper bound): under ZooKeeper's default request limit (`jute.maxbuffer`, 1 MiB - 1) with 128 KiB
to spare, since a server drops the connection of a larger request (the leader's session would
be suspended). 1,000 jobs of about 600 bytes stored fit one."""
_OP_OVERHEAD_BYTES = 48
"""Per step of a transaction, besides its path, data and ACL: headers, lengths, flags (about 30
on the wire; rounded up)."""


def resolve_time_zone(setting: str) -> str:
    """The `time_zone` setting, or the system's zone when it is empty."""
    return setting or system_time_zone()


class ConfigStore:
    """Reads and (fenced) writes of app and job configuration."""

    def __init__(self, registry: Registry, fence: Fence | None, default_time_zone: str) -> None:
        self._registry = registry
        self._fence = fence
        self.default_time_zone = default_time_zone
        # Called with the job's name after each write of a job here, whatever its outcome (so
        # that a copy of the configs kept by watches, `JobApps`, is not staler than a read:
        # the write's own watch may fire a moment after the writer has answered).
        self.job_write_listeners: list[Callable[[str], None]] = []
        # The job names, kept by a child watch (listing a page of 100,000 jobs read them all).
        self._job_names = WatchedChildren(registry, JOBS)

    def _writer(self) -> FencedWriter:
        if self._fence is None:
            raise RuntimeError("read-only config store")
        return FencedWriter(self._registry, self._fence)

    # -- apps -------------------------------------------------------------------------------

    def app(self, name: str) -> AppConfig | None:
        data = self._registry.get(app_path(name)) if _plain(name) else None
        if data is None:
            return None
        try:
            return AppConfig.from_bytes(data, strict=False)
        except InvalidRequest as exc:
            raise RegistryError(f"stored app {name!r} cannot be read: {exc.message}") from exc

    def require_app(self, name: str) -> AppConfig:
        app = self.app(name)
        if app is None:
            raise NotFound(f"app '{name}' does not exist")
        return app

    def app_exists(self, name: str) -> bool:
        return _plain(name) and self._registry.exists(app_path(name))

    def apps(self) -> list[AppConfig]:
        out = []
        for name in self._registry.children(APPS):
            try:
                app = self.app(name)
            except RegistryError as exc:
                log.warning("config: skipping app %s: %s", name, exc.message)
                continue
            if app is not None:
                out.append(app)
        return out

    def app_count(self) -> int:
        """How many apps are stored (one stat request, no listing)."""
        return self._registry.child_count(APPS)

    def app_names(self) -> list[str]:
        """Names of the stored apps, sorted."""
        return self._registry.children(APPS)

    def apps_named(self, names: Sequence[str]) -> list[AppConfig]:
        """The apps of `names` that still exist, in that order, read in bulk (multiRead where
        the server has it); one that cannot be read is logged and left out."""
        out = []
        for name, data in self._read_many(APPS, names):
            try:
                out.append(AppConfig.from_bytes(data, strict=False))
            except InvalidRequest as exc:
                log.warning("config: skipping app %s: cannot be read: %s", name, exc.message)
        return out

    def _read_many(self, parent: str, names: Sequence[str]) -> list[tuple[str, bytes]]:
        """(name, data) of the nodes `parent/name` that exist, in the order of `names`."""
        plain = [name for name in names if _plain(name)]
        got = self._registry.get_many([f"{parent}/{name}" for name in plain])
        out = []
        for name in plain:
            found = got.get(f"{parent}/{name}")
            if found is not None:
                out.append((name, found[0]))
        return out

    def add_app(self, app: AppConfig) -> None:
        try:
            self._writer().create(app_path(app.app_name), app.to_bytes())
        except Conflict as exc:
            raise Conflict(f"app '{app.app_name}' already exists") from exc

    def update_app(self, app: AppConfig) -> None:
        try:
            self._writer().set(app_path(app.app_name), app.to_bytes())
        except NotFound as exc:
            raise NotFound(f"app '{app.app_name}' does not exist") from exc

    def delete_app(self, name: str) -> None:
        self._writer().delete(app_path(name))

    # -- jobs -------------------------------------------------------------------------------

    def job(self, name: str) -> JobConfig | None:
        data = self._registry.get(job_path(name)) if _plain(name) else None
        if data is None:
            return None
        return self.parse_stored_job(name, data)

    def parse_stored_job(self, name: str, data: bytes) -> JobConfig:
        """A stored job; RegistryError naming the job when it cannot be read."""
        try:
            return JobConfig.from_bytes(
                data, default_time_zone=self.default_time_zone, strict=False
            )
        except InvalidRequest as exc:
            raise RegistryError(f"stored job {name!r} cannot be read: {exc.message}") from exc

    def require_job(self, name: str) -> JobConfig:
        job = self.job(name)
        if job is None:
            raise NotFound(f"job '{name}' does not exist")
        return job

    def jobs(self, app_name: str | None = None) -> list[JobConfig]:
        out = []
        for name in self._registry.children(JOBS):
            try:
                job = self.job(name)
            except RegistryError as exc:
                log.warning("config: skipping job %s: %s", name, exc.message)
                continue
            if job is not None and (app_name is None or job.app_name == app_name):
                out.append(job)
        return out

    def job_names(self) -> Sequence[str]:
        """Every job's name, sorted; from memory while the names' child watch is set."""
        return self._job_names.names()

    def job_count(self) -> int:
        """How many jobs are stored (one stat request, no listing)."""
        return self._registry.child_count(JOBS)

    def jobs_named(self, names: Sequence[str]) -> list[JobConfig]:
        """The jobs of `names` that still exist, in that order, read in bulk (multiRead where
        the server has it); one that cannot be read is logged and left out."""
        out = []
        for name, data in self._read_many(JOBS, names):
            try:
                out.append(self.parse_stored_job(name, data))
            except RegistryError as exc:
                log.warning("config: skipping job %s: %s", name, exc.message)
        return out

    def add_job(self, job: JobConfig) -> None:
        try:
            self._writer().create(job_path(job.job_name), job.to_bytes())
        except Conflict as exc:
            raise Conflict(f"job '{job.job_name}' already exists") from exc
        finally:
            self._job_written(job.job_name)

    def jobs_txn_bytes(self, jobs: Sequence[tuple[str, bytes]]) -> int:
        """An upper estimate of the bytes `add_jobs(jobs)` sends as one transaction (paths with
        the namespace, stored JSON, the client's ACL and each step's headers; the deletes of
        stale disable nodes included) for `jobs` as (name, stored JSON)."""
        registry = self._registry
        acls = getattr(registry.client, "default_acl", None) or ()
        acl = sum(16 + len(a.id.scheme) + len(a.id.id) for a in acls) or 32
        per_op = _OP_OVERHEAD_BYTES + acl
        total = per_op + len(registry.abs("/ha"))  # the fence's check
        job_folder = len(registry.abs(JOBS)) + 1
        disable_folder = len(registry.abs(DISABLE_JOB)) + 1
        for name, data in jobs:
            total += 2 * per_op + job_folder + disable_folder + 2 * len(name.encode()) + len(data)
        return total

    def add_jobs(self, jobs: Sequence[tuple[str, bytes]]) -> None:
        """Create every job of `jobs`, given as (name, stored JSON: `JobConfig.to_bytes()`), in
        one fenced transaction (all or none), with the deletes of stale disable nodes of their
        names (a disable node left from a job of the same name must not hide the new one).
        Raises Conflict naming the jobs that exist (read after the refusal), NotLeader,
        RegistryError; ValueError when the transaction would be larger than
        `JOBS_TXN_BUDGET_BYTES` (the caller checks `jobs_txn_bytes` first)."""
        if not jobs:
            return
        size = self.jobs_txn_bytes(jobs)
        if size > JOBS_TXN_BUDGET_BYTES:
            raise ValueError(f"{len(jobs)} jobs take {size} bytes, over {JOBS_TXN_BUDGET_BYTES}")
        names = [name for name, _data in jobs]
        stale = self._registry.get_many([disable_path(DISABLE_JOB, name) for name in names])
        ops = [Op.delete(path, found[1]) for path, found in stale.items() if found is not None]
        ops.extend(Op.create(job_path(name), data) for name, data in jobs)
        self._registry.ensure(JOBS)
        try:
            self._writer().commit(f"create {len(jobs)} jobs", ops)
        except (Conflict, NotFound) as exc:
            present = self.existing_jobs(names)
            if not present:
                raise Conflict(
                    f"a disable node of one of the {len(jobs)} jobs changed while they were "
                    "written; nothing was written, retry"
                ) from exc
            named = ", ".join(f"'{name}'" for name in present[:20])
            more = f" and {len(present) - 20} more" if len(present) > 20 else ""
            raise Conflict(f"jobs exist already: {named}{more}; nothing was written") from exc
        finally:
            for name in names:
                self._job_written(name)

    def existing_jobs(self, names: Sequence[str]) -> list[str]:
        """Those of `names` that are stored jobs, in that order (read in bulk)."""
        return [name for name, _data in self._read_many(JOBS, names)]

    def update_job(self, job: JobConfig) -> None:
        try:
            self._writer().set(job_path(job.job_name), job.to_bytes())
        except NotFound as exc:
            raise NotFound(f"job '{job.job_name}' does not exist") from exc
        finally:
            self._job_written(job.job_name)

    def delete_job(self, name: str) -> None:
        try:
            self._writer().delete(job_path(name))
        finally:
            self._job_written(name)

    def _job_written(self, name: str) -> None:
        self._job_names.forget()
        for listener in self.job_write_listeners:
            listener(name)


def _plain(name: str) -> bool:
    """A name that is a single znode name (guards reads against `../` and `/`)."""
    return bool(name) and "/" not in name and name not in (".", "..")

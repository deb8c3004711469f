"""The leader's view of the queues, kept current by ZooKeeper watches instead of re-read.

One view per term, shared by the producer (through the fire ledger) and the launcher. What it
holds (namespace-relative paths, the layout of `state`):
- pending runs: which jobs have a `/state/ready/{job}` node (a child watch on `/state/ready`),
  and each node's count and version. A count this process wrote (the ledger's fires, the
  launcher's takes) is known from the write itself (`note_ready`, `launched`); one written by
  another (a trigger through the API) is read, with a watch. Every write built from a count is
  versioned, so a count that is stale (changed by another writer since) fails its write and is
  read again: it is never overwritten;
- failover shards: `/state/failover/{job}/{job@-@item}` (original task id) with the shard's
  back-off (`/state/failover_backoff/{job}/{item}`, read with it);
- running tasks: the task ids under `/state/running/{job}` (node names; the node's data is read
  only for the original's daemon nodes named `{job}@-@{item}`). With ZooKeeper 3.6+ (the
  registry answers multiRead) one persistent recursive watch on `/state/running`, placed before
  the first listing and again at every full reload, brings every task node and job folder
  created or deleted: the view applies them in the order ZooKeeper made them and never lists
  again (issue 29: two listings per launched task before). A task this process's launch noted
  stays in the view until its own creation event is applied, whatever older event (its job's
  folder deleted with the previous task) is applied meanwhile. With an older server: child
  watches; a folder the launcher's own launch created is listed (and watched) only when it is
  asked about: most end with their one task, and the child watch on `/state/running` sees them
  go;
- disabled jobs and apps (`/state/disable/job|app` children);
- jobs' and apps' configuration: the producer's (`note_job`, from the config listener that
  follows ZooKeeper), else read on first use with a watch (`queue_configs.ConfigMirror`).

kazoo calls a watch on its own thread (the recursive watch's callback on its connection
thread itself, as it reads each notification: `Registry.add_recursive_watch(inline=True)`, a
launch's thousand notifications at the cost of reading them): the callback only records the
path as dirty in the view's inbox (`queue_inbox`, which also holds the writers' notes until the
next sync) and calls `on_change`, which must not block. `sync()` re-reads the dirty paths with
pipelined requests and new watches, so it costs what changed since the last call, not what is
stored; the view is current within a watch's latency. kazoo drops every watch when the
connection is lost (it calls each with an event of type NONE) and on a new session: the next
`sync()` then reads everything
again. Thread-safe: every method holds the view's lock (reads of ZooKeeper included).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from scheduler.model.config.app import AppConfig
from scheduler.model.config.job import JobConfig
from scheduler.model.task_id import TaskId
from scheduler.storage.config_store import ConfigStore
from scheduler.storage.layout import (
    DISABLE_APP,
    DISABLE_JOB,
    FAILOVER,
    FAILOVER_BACKOFF,
    QUEUE_ROOTS,
    READY,
    RUNNING,
    backoff_path,
    decode_backoff,
    decode_count,
    failover_item,
    failover_path,
)
from scheduler.storage.queue_configs import ConfigMirror
from scheduler.storage.queue_inbox import QueueInbox
from scheduler.storage.registry import Registry

__all__ = ["FailoverEntry", "QueueCache"]

log = logging.getLogger(__name__)

_ROOTS = QUEUE_ROOTS


@dataclass(frozen=True)
class FailoverEntry:
    """One queued failover shard."""

    job_name: str
    item: int
    original: str
    """The failed task this relaunch replaces ("" when unknown)."""
    version: int
    not_before: float
    """Epoch seconds before which the shard is not relaunched (its back-off; 0: now)."""

    @property
    def path(self) -> str:
        return failover_path(self.job_name, self.item)


class QueueCache:
    """Pending runs, failover shards, running tasks and disabled names, from watches."""

    def __init__(
        self,
        registry: Registry,
        config: ConfigStore,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self._registry = registry
        self._config = config
        self.on_change = on_change
        """Called (on kazoo's thread) after each watch fires; must not block."""
        self.on_running_change: Callable[[], None] | None = None
        """Called instead of `on_change` (on kazoo's thread) when the recursive watch brings
        a running task or job folder created or deleted, which only changes what pending
        work may do (`has_pending`); must not block. None: `on_change`."""
        # Written by watch callbacks and writers' notes (any thread), taken by `sync`.
        self._inbox = QueueInbox(registry.abs("/"), self._changed, self._running_changed)
        # The view, under `_view`.
        self._view = threading.RLock()
        self._session: object = None
        self._ready: dict[str, tuple[int, int]] = {}
        # Job -> (path, version) its pending count depends on: noted from a write whose answer
        # had not come yet. Gone once the count is confirmed, read, or replaced.
        self._requires: dict[str, tuple[str, int]] = {}
        self._failover_jobs: dict[str, set[str]] = {}
        self._failover: dict[str, FailoverEntry] = {}  # by node path
        self._backoff: dict[str, tuple[int, float]] = {}  # by back-off node path
        self._running: dict[str, dict[str, str]] = {}  # job -> node name -> task id
        self._unlisted: set[str] = set()  # running folders known from own launches only
        # With ZooKeeper 3.6+ (the registry answers multiRead): one persistent recursive watch
        # on the running root gives every task node created and deleted, applied in order; no
        # listing after the first (issue 29: two listings per launched task before).
        self._recursive = False
        # Task nodes this process's launches created whose creation event has not been applied
        # yet (recursive watch only): an older event (the job's folder deleted with its last
        # task) applied after the launch's note must not take them out of the view.
        self._created: dict[str, set[str]] = {}
        self._disabled_jobs: set[str] = set()
        self._disabled_apps: set[str] = set()
        self._configs = ConfigMirror(config)
        self.reads = 0
        """Nodes read so far (lists and data): what keeping the view current costs."""

    def _changed(self) -> None:
        on_change = self.on_change
        if on_change is not None:
            on_change()

    def _running_changed(self) -> None:
        on_change = self.on_running_change or self.on_change
        if on_change is not None:
            on_change()

    def has_pending(self) -> bool:
        """Whether the view holds pending runs or failover shards (possibly stale, and
        possibly some with a count of 0 left). Takes no lock (kazoo's thread asks it, while a
        `sync()` may hold the view's lock waiting for kazoo); what the next sync will add
        woke the launcher when it came."""
        return bool(self._ready) or bool(self._failover)

    def _children_watch(self, _path: str) -> Callable[[Any], None]:
        return self._inbox.on_children

    def _data_watch(self, _path: str) -> Callable[[Any], None]:
        return self._inbox.on_data

    # -- lifecycle ------------------------------------------------------------------------------

    def stop(self) -> None:
        """Ignore every watch from now on (kazoo keeps the callbacks until each fires once)."""
        self._inbox.stop()
        # Not under the view's lock: a sync may hold it, waiting on a dead connection, and the
        # term's end must not wait for that. Removing a watch never placed does nothing.
        self._registry.remove_recursive_watch(RUNNING, self._inbox.on_node)

    def invalidate(self, paths: Iterable[str] = ()) -> None:
        """Read `paths` (namespace-relative; none given: everything) again at the next
        `sync()`: a write built from them failed, or its outcome is unknown."""
        self._inbox.invalidate(paths)

    def sync(self) -> None:
        """Bring the view up to date: what changed since the last call (everything after a
        lost connection or a new session), read with pipelined requests. Blocks for those
        reads; raises RegistryError when ZooKeeper fails or does not answer (the next call
        then reads everything)."""
        with self._view:
            session = self._session_id()
            news = self._inbox.take()
            try:
                if news.stale or session != self._session:
                    # The nodes' events taken are older than the listings the load makes.
                    self._session = session
                    self._load(news.notes, news.requires)
                elif news.children or news.data or news.notes or news.nodes:
                    self._refresh(
                        news.children,
                        news.data,
                        news.notes,
                        expected=news.expected,
                        requires=news.requires,
                        nodes=news.nodes,
                    )
            except BaseException:
                self._inbox.make_stale()
                raise

    def _session_id(self) -> object:
        try:
            return self._registry.client.client_id
        except Exception:  # noqa: BLE001 - no session: the next sync reads everything
            return None

    # -- reads into the view (under `_view`) -----------------------------------------------------

    def _list(self, paths: Iterable[str]) -> dict[str, list[str] | None]:
        """Child names of `paths`, each with a child watch; the running root and folders
        without one when the recursive watch follows them."""
        wanted = list(paths)
        if not wanted:
            return {}
        self.reads += len(wanted)
        if not self._recursive:
            return self._registry.children_many(wanted, self._children_watch)
        followed = [p for p in wanted if p == RUNNING or p.startswith(RUNNING + "/")]
        others = [p for p in wanted if p not in followed]
        out = self._registry.children_many(others, self._children_watch) if others else {}
        if followed:
            out.update(self._registry.children_many(followed))
        return out

    def _get(self, paths: Iterable[str]) -> dict[str, tuple[bytes, int] | None]:
        wanted = list(paths)
        if not wanted:
            return {}
        self.reads += len(wanted)
        return self._registry.get_many(wanted, self._data_watch)

    def _load(
        self, notes: dict[str, tuple[int, int]], requires: dict[str, tuple[str, int]]
    ) -> None:
        for root in _ROOTS:
            self._registry.ensure(root)  # a child watch needs the node
        if self._registry.multi_read is True:
            # Before the listings: no change falls between them and the watch. Placed again at
            # every load: the server forgets it with the connection (the one-shot watches'
            # NONE events make the view stale then).
            self._registry.add_recursive_watch(
                RUNNING, self._inbox.on_node, changes=False, inline=True
            )
            self._recursive = True
        self._ready.clear()
        self._requires.clear()
        self._failover_jobs.clear()
        self._failover.clear()
        self._backoff.clear()
        self._running.clear()
        self._unlisted.clear()
        self._created.clear()
        self._configs.clear()
        self._refresh(set(_ROOTS), set(), notes, fresh=True, requires=requires)

    def _refresh(
        self,
        children: set[str],
        data: set[str],
        notes: dict[str, tuple[int, int]],
        fresh: bool = False,
        expected: set[str] | None = None,
        requires: dict[str, tuple[str, int]] | None = None,
        nodes: list[tuple[bool, str]] | None = None,
    ) -> None:
        """Re-read the dirty paths; `fresh`: the view is empty and every root is listed;
        `expected`: ready nodes being written here, whose counts the writer will note (not
        read: they are taken up at the sync after the note); `nodes`: running nodes created
        and deleted (the recursive watch's), applied in order before any listing, which is
        newer than all of them."""
        if nodes:
            data = data | self._apply_nodes(nodes)
        lists = self._list(sorted(p for p in children if p in _ROOTS))
        job_folders: set[str] = {
            p
            for p in children
            if p.startswith((FAILOVER + "/", RUNNING + "/")) and p.count("/") == 3
        }
        reads: set[str] = {p for p in data if not p.startswith(READY + "/")}
        ready_reads = {p for p in data if p.startswith(READY + "/")}
        if READY in lists:
            names = set(lists[READY] or [])
            for gone in [j for j in self._ready if j not in names]:
                self._set_ready(gone, None)
            # What this process wrote is known; a node that is gone since is not brought back.
            notes = {j: n for j, n in notes.items() if j in names}
            waiting = expected or set()
            ready_reads |= {
                f"{READY}/{j}"
                for j in names
                if (fresh or j not in self._ready)
                and (j not in notes or notes[j][0] <= 0)
                and j not in waiting
            }
        for job, (count, version) in notes.items():
            known = self._ready.get(job)
            needs = (requires or {}).get(job)
            if count <= 0:
                self._set_ready(job, None)
            elif known is None or version > known[1]:
                self._set_ready(job, (count, version), needs)
            elif version == known[1] and needs is None:
                self._requires.pop(job, None)  # the write it was noted from is applied
            ready_reads.discard(f"{READY}/{job}")
        reads |= ready_reads
        for root, folders in ((FAILOVER, self._failover_jobs), (RUNNING, self._running)):
            if root not in lists:
                continue
            names = set(lists[root] or [])
            for gone in [j for j in folders if j not in names]:
                self._drop_folder(root, gone)
            job_folders |= {f"{root}/{j}" for j in names if fresh or j not in folders}
        if DISABLE_JOB in lists:
            self._disabled_jobs = set(lists[DISABLE_JOB] or [])
        if DISABLE_APP in lists:
            self._disabled_apps = set(lists[DISABLE_APP] or [])
        reads |= self._list_folders(job_folders)
        self._read_data(reads)

    def _apply_nodes(self, nodes: list[tuple[bool, str]]) -> set[str]:
        """Apply the running nodes created (True) and deleted, in the order they changed;
        returns the original's daemon nodes (not named by a task id) to read. Replaying an
        event older than the view is harmless: every later change of the same node follows it.
        """
        reads: set[str] = set()
        for created, path in nodes:
            parts = path.split("/")  # "", "state", "running", job[, node]
            if len(parts) == 4:
                if created:
                    self._running.setdefault(parts[3], {})
                else:
                    self._drop_folder(RUNNING, parts[3])
                    # A launch noted since created the folder again: its tasks stay.
                    for task_id in self._created.get(parts[3], ()):
                        self._running.setdefault(parts[3], {})[task_id] = task_id
            elif len(parts) == 5:
                job, name = parts[3], parts[4]
                own = self._created.get(job)
                if own is not None:
                    own.discard(name)  # its own event from now on
                    if not own:
                        del self._created[job]
                if not created:
                    self._running.get(job, {}).pop(name, None)
                    continue
                tasks = self._running.setdefault(job, {})
                try:
                    TaskId.parse(name)
                except ValueError:
                    reads.add(path)
                    continue
                tasks[name] = name
        return reads

    def _list_folders(self, folders: set[str]) -> set[str]:
        """List job folders (with watches); returns the data paths to read for them."""
        reads: set[str] = set()
        for folder, listed in self._list(sorted(folders)).items():
            root, job = folder.rsplit("/", 1)
            if root == RUNNING:
                self._unlisted.discard(job)
            if listed is None:
                self._drop_folder(root, job)
            elif root == FAILOVER:
                reads |= self._failover_listed(job, listed)
            else:
                reads |= self._running_listed(job, listed)
        return reads

    def _drop_folder(self, root: str, job: str) -> None:
        if root == RUNNING:
            self._running.pop(job, None)
            self._unlisted.discard(job)
            return
        for key in self._failover_jobs.pop(job, set()):
            self._failover.pop(f"{FAILOVER}/{job}/{key}", None)

    def _failover_listed(self, job: str, names: list[str]) -> set[str]:
        """New failover entries of `job` to read (entry and back-off); gone ones dropped."""
        known = self._failover_jobs.setdefault(job, set())
        items = {k: item for k in names if (item := failover_item(k)) is not None}
        keys = set(items)
        for gone in known - keys:
            self._failover.pop(f"{FAILOVER}/{job}/{gone}", None)
        new = keys - known
        self._failover_jobs[job] = keys
        out = set()
        for key in new:
            out.add(f"{FAILOVER}/{job}/{key}")
            out.add(backoff_path(job, items[key]))
        return out

    def _running_listed(self, job: str, names: list[str]) -> set[str]:
        """Running nodes of `job`; the original's daemon nodes (not named by a task id) are
        read for the task id they hold."""
        old = self._running.get(job, {})
        tasks: dict[str, str] = {}
        unread: set[str] = set()
        for name in names:
            if name in old:
                tasks[name] = old[name]
                continue
            try:
                TaskId.parse(name)
            except ValueError:
                unread.add(f"{RUNNING}/{job}/{name}")
                continue
            tasks[name] = name
        self._running[job] = tasks
        return unread

    def _read_data(self, paths: set[str]) -> None:
        for path in [p for p in paths if self._configs.drop(p)]:
            paths.discard(path)  # configuration: dropped, read again when next asked for
        for path, got in self._get(sorted(paths)).items():
            parts = path.split("/")
            if path.startswith(READY + "/"):
                self._set_ready(parts[-1], None if got is None else (decode_count(got[0]), got[1]))
            elif path.startswith(FAILOVER_BACKOFF + "/"):
                self._backoff[path] = decode_backoff(None if got is None else got[0])
                self._restamp(parts[-2], int(parts[-1]))
            elif path.startswith(FAILOVER + "/"):
                self._failover_read(path, parts[-2], parts[-1], got)
            elif path.startswith(RUNNING + "/") and len(parts) == 5:
                self._legacy_running(parts[-2], parts[-1], got)

    def _failover_read(self, path: str, job: str, key: str, got: tuple[bytes, int] | None) -> None:
        item = failover_item(key)
        if got is None or item is None:
            self._failover.pop(path, None)
            self._failover_jobs.get(job, set()).discard(key)
            return
        self._failover_jobs.setdefault(job, set()).add(key)
        not_before = self._backoff.get(backoff_path(job, item), (0, 0.0))[1]
        original = got[0].decode(errors="replace").strip()
        self._failover[path] = FailoverEntry(job, item, original, got[1], not_before)

    def _restamp(self, job: str, item: int) -> None:
        path = failover_path(job, item)
        entry = self._failover.get(path)
        if entry is not None:
            not_before = self._backoff.get(backoff_path(job, item), (0, 0.0))[1]
            self._failover[path] = FailoverEntry(
                job, item, entry.original, entry.version, not_before
            )

    def _legacy_running(self, job: str, name: str, got: tuple[bytes, int] | None) -> None:
        tasks = self._running.get(job)
        if tasks is None:
            return
        text = "" if got is None else got[0].decode(errors="replace").strip()
        try:
            TaskId.parse(text)
        except ValueError:
            if got is not None:
                log.warning("queue cache: ignoring running node %s/%s: no task id", job, name)
            tasks.pop(name, None)
            return
        tasks[name] = text

    def _set_ready(
        self, job: str, got: tuple[int, int] | None, requires: tuple[str, int] | None = None
    ) -> None:
        """Set (None: drop) `job`'s pending count, with what it requires (None: nothing)."""
        if got is None:
            self._ready.pop(job, None)
        else:
            self._ready[job] = got
        if requires is None or got is None:
            self._requires.pop(job, None)
        else:
            self._requires[job] = requires

    # -- the view ----------------------------------------------------------------------------

    def ready(self) -> dict[str, tuple[int, int]]:
        """Job -> (pending runs, node version) of every job with pending runs."""
        with self._view:
            return {job: got for job, got in self._ready.items() if got[0] > 0}

    def ready_entries(self) -> dict[str, tuple[int, int, tuple[str, int] | None]]:
        """Job -> (pending runs, node version, what taking one requires) of every job with
        pending runs: the last is None, or the (path, version) a node must be at for the
        count to be true (a fire's write not yet answered); read together."""
        with self._view:
            return {
                job: (count, version, self._requires.get(job))
                for job, (count, version) in self._ready.items()
                if count > 0
            }

    def ready_of(self, job: str) -> tuple[int, int] | None:
        """(pending runs, node version) of `job`'s ready node; None: it has none."""
        with self._view:
            return self._ready.get(job)

    def queued(self) -> int:
        """How many jobs have a ready node."""
        with self._view:
            return len(self._ready)

    def failover(self) -> list[FailoverEntry]:
        """Every queued failover shard, by job and item."""
        with self._view:
            return sorted(self._failover.values(), key=lambda e: (e.job_name, e.item))

    def running(self) -> dict[str, list[str]]:
        """Job -> task ids of its running tasks (jobs with at least one)."""
        with self._view:
            self._list_unlisted(list(self._unlisted))
            return {job: list(tasks.values()) for job, tasks in self._running.items() if tasks}

    def running_tasks(self, job: str) -> list[str]:
        """Task ids of `job`'s running tasks. Reads the job's folder when the view only knows
        it from its own launch (once; watched from then on)."""
        with self._view:
            self._list_unlisted([job])
            return list(self._running.get(job, {}).values())

    def _list_unlisted(self, jobs: list[str]) -> None:
        wanted = [j for j in jobs if j in self._unlisted]
        if wanted:
            self._read_data(self._list_folders({f"{RUNNING}/{j}" for j in wanted}))

    def has_running_folder(self, job: str) -> bool:
        """Whether `/state/running/{job}` exists, as far as the view knows."""
        with self._view:
            return job in self._running

    def is_disabled(self, job: JobConfig) -> bool:
        """The job or its app is disabled."""
        with self._view:
            return job.job_name in self._disabled_jobs or job.app_name in self._disabled_apps

    def jobs(self, names: Iterable[str]) -> dict[str, JobConfig | None]:
        """The configuration of each job (None: missing or unreadable, logged once per change
        of its node): the producer's when it has noted one, else the view's, else read with
        pipelined requests and watched. Raises RegistryError when ZooKeeper fails."""
        with self._view:
            return self._configs.jobs(names, self._get)

    def apps(self, names: Iterable[str]) -> dict[str, AppConfig | None]:
        """As `jobs`, for apps (always from the view or ZooKeeper)."""
        with self._view:
            return self._configs.apps(names, self._get)

    # -- what this process wrote or knows, applied without reading -----------------------------

    def note_job(self, job: JobConfig) -> None:
        """The producer scheduled `job` as the config listener read it (any thread)."""
        with self._view:
            self._configs.note_job(job)

    def forget_job(self, job_name: str) -> None:
        """The producer no longer schedules `job_name` (any thread)."""
        with self._view:
            self._configs.forget_job(job_name)

    def expect_ready(self, jobs: Iterable[str]) -> None:
        """A writer here is writing the ready nodes of `jobs` and will note each (or
        invalidate it): until then they are not read (any thread)."""
        self._inbox.expect_ready(jobs)

    def note_ready(self, job: str, count: int, version: int) -> None:
        """This process wrote `job`'s ready node: `count` runs at `version` (count 0: deleted).
        Applied at the next `sync()` (any thread)."""
        self._inbox.note_ready(job, count, version)

    def note_pending(self, job: str, count: int, version: int, requires: tuple[str, int]) -> None:
        """A write of `job`'s ready node to `count` runs at `version` was sent and its answer
        has not come: the launcher may take a run at once, in a transaction that also
        requires `requires` (a node the same write sets, at the version it gives it), so that
        the take is applied only if the write was. Confirmed by `note_ready`, withdrawn by
        `invalidate`; wakes the launcher (`on_change`). Any thread."""
        self._inbox.note_pending(job, count, version, requires)

    def confirm(self, job: str, requires: tuple[str, int]) -> None:
        """The write `note_pending` noted with `requires` was applied: the count no longer
        requires anything (a run the launcher took meanwhile stays taken). Any thread."""
        self._inbox.drop_requires(job, requires)
        with self._view:
            if self._requires.get(job) == requires:
                del self._requires[job]

    def launched(
        self,
        job: str,
        task_ids: Iterable[str],
        ready: tuple[int, int] | None,
        failover_paths: Iterable[str],
    ) -> None:
        """Record a committed launch: its running tasks, the job's pending runs after the
        take (count and new version; None when untouched) and the failover entries it
        consumed."""
        with self._view:
            if job not in self._running and not self._recursive:
                self._unlisted.add(job)  # created by this launch: listed when asked about
            tasks = self._running.setdefault(job, {})
            for task_id in task_ids:
                tasks[task_id] = task_id
                if self._recursive:
                    self._created.setdefault(job, set()).add(task_id)
            if ready is not None:
                self._set_ready(job, ready if ready[0] > 0 else None)
            for path in failover_paths:
                entry = self._failover.pop(path, None)
                if entry is not None:
                    self._failover_jobs.get(job, set()).discard(path.rsplit("/", 1)[1])

"""`AccessFollower`: a replica's watched copy of the access records (issue 26).

Every replica (leader and standbys) checks users and API tokens itself, without a ZooKeeper round
trip on the request path: it keeps an `AccessDirectory` (model/access/directory.py) built from
`/access/users`, `/access/grants` and `/access/tokens`, and swaps a new snapshot in after each
read. A request reads whichever snapshot is current (`directory`: one attribute read, no lock).

How it follows, as `Sessions.follow` follows revoked console sessions: children watches on the
three folders (and on `/access/tokens_used`) only set a flag and wake the replica's
`sched-leader-watch` thread, which calls `follow` and re-reads. Records are immutable once
written (a change is a delete and a create), so a re-read lists the folders whose watch fired
and fetches only the names it has not read yet, in bulk (the registry's multiRead, 100 nodes to
a request), and drops the names that are gone: with 10,000 tokens, one new token costs a listing
of the tokens and one read; a new grant, a listing of the grants and one read. Grant and
token ids are random, so a name is never reused; a user's name is, when the user is deleted and
created again between two listings, so each user node also carries a data watch whose firing
(deleted or changed) makes the next read fetch that name again. A new ZooKeeper client or
session loses the watches: everything is listed again with new ones, the users read again.

A node that does not decode (another writer's bad data) is ignored and logged once; the rest are
followed as usual. The leader's API calls `refresh(registry)` right after its own write so that
a token made by a request works on the next one, before the watch has fired.

Last use of a token: `note_used` in memory; on the leader, `persist_used` writes
`/access/tokens_used/{id}` with the term's fenced writer at most once a minute per token.
`last_used_ms` answers the latest of what this replica noted and what it read (the stored times
are read for new names as they appear, and all again after `reload_used`, which a new term asks
for: the previous leader may have updated them since).

Thread-safety: reads (`follow`, `refresh`) are serialised by a lock and run on the
leader-watch thread or an API worker; `directory`, `note_used` and `last_used_ms` never block on
ZooKeeper.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from scheduler.model.access.directory import AccessDirectory
from scheduler.model.access.records import (
    TokenRecord,
    UserRecord,
    decode_grant,
    decode_token,
    decode_user,
)
from scheduler.model.access.roles import Grant, Rights
from scheduler.storage.layout import (
    ACCESS_GRANTS,
    ACCESS_TOKENS,
    ACCESS_TOKENS_USED,
    ACCESS_USERS,
    access_token_used_path,
    decode_count,
    encode_count,
)
from scheduler.storage.registry import Registry
from scheduler.storage.transactions import FencedWriter

log = logging.getLogger(__name__)

__all__ = ["PERSIST_INTERVAL_S", "REREAD_S", "AccessFollower", "settings_rights"]

REREAD_S = 60.0  # the folders are listed again at least this often, watch or not
PERSIST_INTERVAL_S = 60.0  # a token's last use is written at most this often
_LOGGED_NAME_CHARS = 100


def settings_rights(admin_username: str, guest_username: str) -> dict[str, Rights]:
    """The settings' accounts' fixed rights: the admin is cluster-admin, the guest a viewer of
    every app (the Elastic-Job-Cloud console's root and guest)."""
    rights = {f"user:{guest_username}": Rights.viewer_everywhere()}
    rights[f"user:{admin_username}"] = Rights.cluster_admin()  # wins if both names are the same
    return rights


class _Folder:
    """What was read of one folder: name -> decoded record, or None for a node that did not
    decode (remembered, so it is neither read again nor logged again)."""

    def __init__(
        self,
        path: str,
        decode: Callable[[bytes], Any],
        key: Callable[[Any], str] | None = None,
    ) -> None:
        self.path = path
        self.decode = decode
        self.key = key  # the name a record must have (its node's), if any
        self.records: dict[str, Any] = {}


class AccessFollower:
    """The replica's copy of the access records; see the module docstring.

    `settings_rights` maps the settings' accounts (`user:NAME`) to their fixed rights.
    `clock` gives epoch seconds (token expiry and last-use times).
    """

    def __init__(
        self,
        settings_rights: Mapping[str, Rights],
        *,
        clock: Callable[[], float] = time.time,
        persist_interval_s: float = PERSIST_INTERVAL_S,
    ) -> None:
        self._settings_rights = dict(settings_rights)
        self._clock = clock
        self._persist_interval_s = persist_interval_s
        self._directory = AccessDirectory.build((), (), (), self._settings_rights)
        self._read_lock = threading.Lock()  # one read at a time (leader-watch thread, API)
        self._users = _Folder(ACCESS_USERS, decode_user, lambda user: user.name)
        self._grants = _Folder(ACCESS_GRANTS, decode_grant, lambda grant: grant.id)
        self._tokens = _Folder(ACCESS_TOKENS, decode_token, lambda token: token.id)
        self._used = _Folder(ACCESS_TOKENS_USED, _decode_used)
        self._dirty = threading.Event()  # a watch fired since the last read (kazoo's thread)
        self._state_lock = threading.Lock()  # guards the small sets below (kazoo's thread too)
        self._stale_users: set[str] = set()  # user nodes whose data watch fired
        self._dirty_paths: set[str] = set()  # folders whose children watch fired
        self._reload_used = False
        self._wake: Callable[[], None] | None = None
        self._read_on: tuple[int, Any] | None = None
        self._read_at = 0.0
        # Last use noted here, and when each token's last use was last written (leader).
        self._used_lock = threading.Lock()
        self._noted: dict[str, int] = {}
        self._persisted_at: dict[str, float] = {}
        self.reads = 0  # nodes read (data), for tests and the benchmark
        self.listings = 0  # folder listings

    # -- the request path ---------------------------------------------------------------------

    @property
    def directory(self) -> AccessDirectory:
        """The current snapshot (swapped whole after each read; never mutated)."""
        return self._directory

    def install(self, directory: AccessDirectory) -> None:
        """Swap in a directory built elsewhere (unit tests and benchmarks, without ZooKeeper);
        the next read replaces it with what ZooKeeper holds."""
        self._directory = directory

    def note_used(self, token_id: str) -> None:
        """Remember that `token_id` was just used (in memory; never blocks)."""
        when = int(self._clock() * 1000)
        with self._used_lock:
            self._noted[token_id] = when

    def last_used_ms(self, token_id: str) -> int | None:
        """When the token was last used (epoch ms), as far as this replica knows; None: never."""
        noted = self._noted.get(token_id)
        stored = self._used.records.get(token_id)
        if noted is None:
            return stored if isinstance(stored, int) else None
        return max(noted, stored) if isinstance(stored, int) else noted

    def persist_used(self, token_id: str, writer: FencedWriter) -> bool:
        """On the leader: write the token's last use if it was not written within the persist
        interval. True when written. Raises the writer's errors (NotLeader, RegistryError); the
        caller decides (a lost last-use time is no reason to fail a request)."""
        now = time.monotonic()
        with self._used_lock:
            when = self._noted.get(token_id)
            last = self._persisted_at.get(token_id)
            if when is None or (last is not None and now - last < self._persist_interval_s):
                return False
            self._persisted_at[token_id] = now  # before the write: one attempt per interval
            if len(self._persisted_at) > 2 * max(len(self._directory.tokens), 1000):
                live = self._directory.tokens  # forget revoked tokens' times (bounded memory)
                for gone in [t for t in self._persisted_at if t not in live and t != token_id]:
                    self._persisted_at.pop(gone, None)
                    self._noted.pop(gone, None)
        writer.put(access_token_used_path(token_id), encode_count(when))
        return True

    # -- following ------------------------------------------------------------------------------

    def follow(self, registry: Registry, wake: Callable[[], None]) -> bool:
        """Read again, with watches, what a watch said changed (only its folders); everything
        when the ZooKeeper client or session is new or `REREAD_S` passed; else nothing. True
        when it read.

        Called by the replica's `sched-leader-watch` thread on each pass; a watch calls `wake`
        (which wakes that thread) and notes its folder, nothing else. Raises the registry's
        errors (the next pass tries again)."""
        self._wake = wake
        client = registry.client
        on = (id(client), client.client_id)
        if on != self._read_on or time.monotonic() - self._read_at >= REREAD_S:
            self._read(registry, every_folder=True)
            return True
        if not self._dirty.is_set():
            return False
        self._read(registry, every_folder=False)
        return True

    def refresh(self, registry: Registry) -> None:
        """Read every folder now (the leader's API after its own write, whatever it wrote).
        Blocks for a listing of each folder and the reads of new names. Raises the registry's
        errors."""
        self._read(registry, every_folder=True)

    def _read(self, registry: Registry, *, every_folder: bool) -> None:
        """List the folders (those a watch named, unless `every_folder`), read their new names
        and swap a new directory in."""
        folders = (self._users, self._grants, self._tokens, self._used)
        with self._read_lock:
            self._dirty.clear()
            client = registry.client
            on = (id(client), client.client_id)
            with self._state_lock:
                stale_users, self._stale_users = self._stale_users, set()
                reload_used, self._reload_used = self._reload_used, False
                named, self._dirty_paths = self._dirty_paths, set()
            if on != self._read_on:
                # A new session has none of the watches: list everything, read every user again.
                every_folder = True
                self._users.records.clear()
            for name in stale_users:
                self._users.records.pop(name, None)  # read again below, as a new name
            if stale_users:
                named.add(self._users.path)
            if reload_used:
                self._used.records.clear()
                named.add(self._used.path)
            chosen = folders if every_folder else tuple(f for f in folders if f.path in named)
            read = False
            try:
                for folder in chosen:
                    self._read_folder(registry, folder, node_watch=folder is self._users)
                read = True
            finally:
                if not read:
                    # The next pass tries again (the snapshot stays meanwhile).
                    with self._state_lock:
                        self._dirty_paths.update(f.path for f in chosen)
                    self._dirty.set()
            if any(folder is not self._used for folder in chosen):
                users: list[UserRecord] = [u for u in self._users.records.values() if u is not None]
                tokens: list[TokenRecord] = [
                    t for t in self._tokens.records.values() if t is not None
                ]
                grants: list[Grant] = [g for g in self._grants.records.values() if g is not None]
                self._directory = AccessDirectory.build(
                    users, tokens, grants, self._settings_rights
                )
            if every_folder:
                self._read_on = on
                self._read_at = time.monotonic()

    def reload_used(self) -> None:
        """Read every token's stored last use again on the next read (a new term on this
        replica: the previous leader may have written newer times). Wakes the follower."""
        with self._state_lock:
            self._reload_used = True
        self._wake_up()

    def _read_folder(
        self, registry: Registry, folder: _Folder, *, node_watch: bool = False
    ) -> None:
        names = registry.watch_children(folder.path, self._changed)
        self.listings += 1
        present = set(names)
        for gone in [n for n in folder.records if n not in present]:
            del folder.records[gone]
        new = [n for n in names if n not in folder.records]
        if not new:
            return
        paths = [f"{folder.path}/{n}" for n in new]
        if node_watch:
            got = registry.get_many(paths, watch=lambda _path: self._user_node_changed)
        else:
            got = registry.get_many(paths)
        self.reads += len(paths)
        for name, path in zip(new, paths, strict=True):
            answer = got.get(path)
            if answer is None:
                continue  # deleted since the listing: the watch has fired
            record = folder.decode(answer[0])
            if record is None or (folder.key is not None and folder.key(record) != name):
                log.warning(
                    "access: %s/%s holds no readable record of its own; ignored",
                    folder.path,
                    repr(name[:_LOGGED_NAME_CHARS]),
                )
                record = None
            folder.records[name] = record

    # -- watches: kazoo's thread; they only note and wake --------------------------------------

    def _changed(self, event: Any) -> None:
        """A folder's children watch fired: note which folder (all, if the path is unknown)."""
        path = str(getattr(event, "path", "") or "")
        folders = (ACCESS_USERS, ACCESS_GRANTS, ACCESS_TOKENS, ACCESS_TOKENS_USED)
        named = [folder for folder in folders if path.endswith(folder)]
        with self._state_lock:
            self._dirty_paths.update(named or folders)
        self._wake_up()

    def _user_node_changed(self, event: Any) -> None:
        """A user node's data watch fired (deleted, or changed): read that name again."""
        path = str(getattr(event, "path", "") or "")
        with self._state_lock:
            self._stale_users.add(path.rsplit("/", 1)[-1])
        self._wake_up()

    def _wake_up(self) -> None:
        self._dirty.set()
        wake = self._wake
        if wake is not None:
            wake()

    def counts(self) -> dict[str, int]:
        """Records followed now (users, grants, tokens)."""
        directory = self._directory
        return {
            "users": len(directory.users),
            "grants": len(directory.grants),
            "tokens": len(directory.tokens),
        }


def _decode_used(data: bytes) -> int | None:
    value = decode_count(data)
    return value if value > 0 else None

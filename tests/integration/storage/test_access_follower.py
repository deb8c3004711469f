"""The replica's copy of the access records on a real ZooKeeper (issue 26): records written by
hand with the model's codecs; a follower thread that re-reads only when a watch wakes it (its
timed pass is far beyond the one-second bound the tests hold it to), as the replica's
leader-watch thread does; bulk reads of new names only."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from scheduler.model.access.records import (
    TokenRecord,
    UserRecord,
    encode_grant,
    encode_token,
    encode_user,
)
from scheduler.model.access.roles import Grant, Principal, Rights, Role
from scheduler.model.access.tokens import new_token, secret_digest
from scheduler.storage.access_follower import AccessFollower, settings_rights
from scheduler.storage.layout import (
    ACCESS_GRANTS,
    ACCESS_TOKENS,
    ACCESS_USERS,
    access_grant_path,
    access_token_path,
    access_token_used_path,
    access_user_path,
    decode_count,
)
from scheduler.storage.registry import Registry
from scheduler.storage.transactions import Fence, FencedWriter
from tests.support.waiting import wait_for

NOW_MS = 1_700_000_000_000
# The issue asks for a second; on a loaded machine (six workers on two cores) a watch, a listing
# and a read may take longer, so the tests allow 3 s: still a tenth of the follower thread's timed
# pass (30 s), so only a watch can meet it. `./dev.sh bench tokens` prints the time it takes.
IN_FORCE_S = 3.0


def user(name: str, password_hash: str = "pbkdf2:sha256:1$salt$00") -> UserRecord:
    return UserRecord(name, password_hash, NOW_MS)


def token(owner: str = "user:alice") -> TokenRecord:
    _, parts = new_token()
    return TokenRecord(
        parts.id, "ci", owner, Role.OPERATOR, "team_a", secret_digest(parts.secret), NOW_MS, None
    )


class FollowerThread:
    """Calls `follow` when woken, else every 30 s: what it sees within a second came by watch."""

    def __init__(self, follower: AccessFollower, registry: Registry) -> None:
        self.follower = follower
        self.registry = registry
        self.woken = threading.Event()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="test-access-follower", daemon=True)

    def _run(self) -> None:
        while not self.stopping.is_set():
            self.follower.follow(self.registry, self.woken.set)
            self.woken.wait(30)
            self.woken.clear()

    def stop(self) -> None:
        self.stopping.set()
        self.woken.set()
        self.thread.join(5)
        assert not self.thread.is_alive()


@pytest.fixture
def follower() -> AccessFollower:
    return AccessFollower(settings_rights("root", "guest"))


@pytest.fixture
def following(follower: AccessFollower, registry: Registry) -> Iterator[AccessFollower]:
    """`follower` followed by a thread from the start (its first read done)."""
    registry.probe_multi_read()
    runner = FollowerThread(follower, registry)
    runner.thread.start()
    wait_for(lambda: follower.listings >= 4, 10, message="the first read")
    yield follower
    runner.stop()


def test_a_created_user_grant_and_token_are_in_force_as_soon_as_the_watch_fires(
    following: AccessFollower, registry: Registry
) -> None:
    alice = user("alice")
    grant = Grant("a" * 16, "user:alice", Role.EDITOR, "team_a")
    made = token()
    registry.create(access_user_path("alice"), encode_user(alice))
    registry.create(access_grant_path(grant.id), encode_grant(grant))
    registry.create(access_token_path(made.id), encode_token(made))
    directory = wait_for(
        lambda: following.directory if following.directory.tokens else None,
        IN_FORCE_S,
        message="the new records",
    )
    assert directory.users == {"alice": alice}
    assert directory.grants == {grant.id: grant}
    assert directory.tokens == {made.id: made}
    assert directory.rights_of(Principal("user", "alice")) == Rights(None, {"team_a": Role.EDITOR})
    assert directory.rights_of(Principal("token", made.id)) == Rights(
        None, {"team_a": Role.OPERATOR}
    )


def test_a_deleted_token_and_grant_lose_their_force_as_soon_as_the_watch_fires(
    following: AccessFollower, registry: Registry
) -> None:
    registry.create(access_user_path("alice"), encode_user(user("alice")))
    grant = Grant("b" * 16, "user:alice", Role.VIEWER, "team_a")
    made = token()
    registry.create(access_grant_path(grant.id), encode_grant(grant))
    registry.create(access_token_path(made.id), encode_token(made))
    wait_for(lambda: made.id in following.directory.tokens, 2 * IN_FORCE_S)
    registry.delete(access_token_path(made.id))
    registry.delete(access_grant_path(grant.id))
    wait_for(
        lambda: not following.directory.tokens and not following.directory.grants,
        IN_FORCE_S,
        message="the deletions",
    )
    assert following.directory.rights_of(Principal("user", "alice")) == Rights.none()


def test_a_watch_lists_only_the_folder_that_changed(
    following: AccessFollower, registry: Registry
) -> None:
    listings, reads = following.listings, following.reads
    grant = Grant("c" * 16, "user:alice", Role.VIEWER, "team_a")
    registry.create(access_grant_path(grant.id), encode_grant(grant))
    wait_for(lambda: grant.id in following.directory.grants, IN_FORCE_S)
    assert (following.listings - listings, following.reads - reads) == (1, 1)


def test_a_corrupt_node_is_ignored_logged_once_and_the_others_followed(
    following: AccessFollower, registry: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="scheduler.storage.access_follower"):
        registry.create(access_token_path("0123456789ab"), b"{not json")
        registry.create(access_user_path("mallory"), encode_user(user("someone-else")))
        wait_for(
            lambda: following.reads >= 2 and len(caplog.records) >= 2,
            IN_FORCE_S,
            message="the corrupt nodes read",
        )
        made = token()
        registry.create(access_token_path(made.id), encode_token(made))
        wait_for(lambda: made.id in following.directory.tokens, IN_FORCE_S)
    assert set(following.directory.tokens) == {made.id}
    assert following.directory.users == {}  # a record naming another user is not that user
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines  # each bad node once, though the folders were read again
    assert any("0123456789ab" in line for line in lines)
    assert any("mallory" in line for line in lines)


def test_ten_thousand_tokens_are_read_once_then_a_new_token_costs_one_read(
    follower: AccessFollower, registry: Registry, zk_client: KazooClient
) -> None:
    registry.probe_multi_read()
    registry.ensure(ACCESS_TOKENS)
    made = [token() for _ in range(10_000)]
    for start in range(0, len(made), 1000):
        transaction = zk_client.transaction()
        for record in made[start : start + 1000]:
            transaction.create(registry.abs(access_token_path(record.id)), encode_token(record))
        assert all(result is True or isinstance(result, str) for result in transaction.commit())
    follower.refresh(registry)
    assert len(follower.directory.tokens) == 10_000
    assert follower.reads == 10_000
    one_more = token()
    registry.create(access_token_path(one_more.id), encode_token(one_more))
    follower.refresh(registry)
    assert follower.reads == 10_001  # one node read, not 10,001
    assert len(follower.directory.tokens) == 10_001
    registry.delete(access_token_path(made[0].id))
    follower.refresh(registry)
    assert follower.reads == 10_001  # a deletion reads nothing
    assert made[0].id not in follower.directory.tokens
    assert len(follower.directory.tokens) == 10_000


def test_a_user_deleted_and_created_again_in_one_step_is_read_again(
    following: AccessFollower, registry: Registry, zk_client: KazooClient
) -> None:
    registry.create(access_user_path("alice"), encode_user(user("alice", "old$hash$1")))
    wait_for(lambda: "alice" in following.directory.users, 2 * IN_FORCE_S)
    # The name comes back in the same transaction: no listing can see it gone.
    transaction = zk_client.transaction()
    transaction.delete(registry.abs(access_user_path("alice")))
    transaction.create(
        registry.abs(access_user_path("alice")), encode_user(user("alice", "new$hash$2"))
    )
    transaction.commit()
    wait_for(
        lambda: following.directory.users["alice"].password_hash == "new$hash$2",
        IN_FORCE_S,
        message="the re-created user",
    )


def test_refresh_reads_at_once_without_a_watch(
    follower: AccessFollower, registry: Registry
) -> None:
    follower.refresh(registry)
    assert follower.directory.users == {}
    # The folders are made for their watches (a children watch needs the node).
    assert all(registry.exists(p) for p in (ACCESS_USERS, ACCESS_GRANTS, ACCESS_TOKENS))
    registry.create(access_user_path("bob"), encode_user(user("bob")))
    follower.refresh(registry)  # no follow thread: only the refresh reads
    assert set(follower.directory.users) == {"bob"}


def test_a_tokens_last_use_is_written_once_a_minute_and_read_by_a_new_leader(
    follower: AccessFollower, registry: Registry, fence: Fence
) -> None:
    writer = FencedWriter(registry, fence)
    made = token()
    registry.create(access_token_path(made.id), encode_token(made))
    follower.refresh(registry)
    assert follower.last_used_ms(made.id) is None
    assert follower.persist_used(made.id, writer) is False  # never used: nothing to write
    follower.note_used(made.id)
    first = follower.last_used_ms(made.id)
    assert first is not None
    assert follower.persist_used(made.id, writer) is True
    assert decode_count(registry.get(access_token_used_path(made.id))) == first
    follower.note_used(made.id)
    assert follower.persist_used(made.id, writer) is False  # within the minute: not again
    follower.refresh(registry)  # reads the stored time (a name new to it)
    # Another replica (the next leader) reads the stored time.
    successor = AccessFollower(settings_rights("root", "guest"), persist_interval_s=0.0)
    successor.refresh(registry)
    assert successor.last_used_ms(made.id) == first
    # The successor leads and writes a later use; the first replica sees it once a new term
    # of its own asks for the times again (a data change fires no children watch).
    later_ms = first + 120_000
    registry.put(access_token_used_path(made.id), str(later_ms).encode())
    follower.refresh(registry)
    assert follower.last_used_ms(made.id) not in (None, later_ms)
    follower.reload_used()
    follower.refresh(registry)
    assert follower.last_used_ms(made.id) == later_ms

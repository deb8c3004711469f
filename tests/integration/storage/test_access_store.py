"""`AccessStore` (issue 26) on a real ZooKeeper: fenced writes, a grant or token only beside its
user, a user's deletion taking its grants and tokens (in batches when there are many, the user
last), grant ids that make a duplicate collide, and what is (not) stored of secrets."""

from __future__ import annotations

import threading

import pytest
from kazoo.client import KazooClient

from scheduler.model.access.roles import Role
from scheduler.model.errors import Conflict, NotFound, NotLeader, QuotaExceeded
from scheduler.storage import access_store
from scheduler.storage.access_store import AccessStore, grant_id
from scheduler.storage.layout import (
    ACCESS_GRANTS,
    ACCESS_TOKENS,
    access_token_used_path,
    access_user_path,
)
from scheduler.storage.registry import Registry
from scheduler.storage.transactions import Fence, FencedWriter

PASSWORD = "a-password-of-alice"


@pytest.fixture
def store(registry: Registry, fence: Fence) -> AccessStore:
    return AccessStore(registry, FencedWriter(registry, fence))


def _everything(registry: Registry) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for folder in ("/access/users", ACCESS_GRANTS, ACCESS_TOKENS, "/access/tokens_used"):
        for name in registry.children(folder):
            out[f"{folder}/{name}"] = registry.get(f"{folder}/{name}") or b""
    return out


def test_a_deposed_leader_writes_nothing(registry: Registry, zk_client: KazooClient) -> None:
    registry.ensure("/ha/election")
    node = zk_client.create(registry.abs("/ha/election/n_"), b"me", ephemeral=True, sequence=True)
    acting = AccessStore(registry, FencedWriter(registry, Fence(node, lambda: True)))
    acting.add_user("alice", PASSWORD)
    zk_client.delete(node)  # the election node is gone: leadership lost
    before = _everything(registry)
    with pytest.raises(NotLeader):
        acting.add_grant("user:alice", Role.VIEWER, "team_a")
    with pytest.raises(NotLeader):
        acting.delete_user("alice")
    paused = AccessStore(registry, FencedWriter(registry, Fence(node, lambda: False)))
    with pytest.raises(NotLeader):
        paused.add_token("ci", "user:alice", Role.VIEWER, "team_a", None)
    assert _everything(registry) == before


def test_a_grant_or_token_needs_its_user_and_a_grant_is_written_once(store: AccessStore) -> None:
    with pytest.raises(NotFound):
        store.add_grant("user:ghost", Role.VIEWER, "team_a")
    with pytest.raises(NotFound):
        store.add_token("ci", "user:ghost", Role.VIEWER, "team_a", None)
    assert _everything(store.registry) == {}

    store.add_user("alice", PASSWORD)
    grant = store.add_grant("user:alice", Role.EDITOR, "team_a")
    assert grant.id == grant_id("user:alice", Role.EDITOR, "team_a")
    with pytest.raises(Conflict):
        store.add_grant("user:alice", Role.EDITOR, "team_a")
    assert store.add_grant("user:alice", Role.VIEWER, "team_a").id != grant.id
    # A settings account owns tokens without a stored user.
    made = store.add_token("ci", "user:root", Role.VIEWER, "*", 60, owner_is_stored=False)
    assert made.record.expires_at_ms == made.record.created_at_ms + 60_000
    stored = store.token(made.record.id)
    assert stored == made.record
    assert made.text.split("_")[2] not in repr(_everything(store.registry))
    with pytest.raises(Conflict):
        store.add_user("alice", PASSWORD)


def test_deleting_a_user_takes_its_grants_tokens_and_their_last_use_in_batches(
    store: AccessStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(access_store, "_OPS_PER_TRANSACTION", 3)
    store.add_user("alice", PASSWORD)
    store.add_user("bob", PASSWORD)
    for app in ("a1", "a2", "a3", "a4"):
        store.add_grant("user:alice", Role.VIEWER, app)
    kept_grant = store.add_grant("user:bob", Role.VIEWER, "a1")
    tokens = [store.add_token(f"t{i}", "user:alice", Role.VIEWER, "a1", None) for i in range(2)]
    kept_token = store.add_token("b", "user:bob", Role.VIEWER, "a1", None)
    store.registry.create(access_token_used_path(tokens[0].record.id), b"1700000000000")

    deleted = store.delete_user("alice")

    assert len(deleted.grants) == 4 and len(deleted.tokens) == 2
    assert set(_everything(store.registry)) == {
        access_user_path("bob"),
        f"{ACCESS_GRANTS}/{kept_grant.id}",
        f"{ACCESS_TOKENS}/{kept_token.record.id}",
    }
    with pytest.raises(NotFound):
        store.delete_user("alice")


def test_quotas_are_counted_on_what_is_stored(registry: Registry, fence: Fence) -> None:
    quotas = access_store.AccessQuotas(max_users=1, max_grants=1, max_tokens=1)
    store = AccessStore(registry, FencedWriter(registry, fence), quotas)
    store.add_user("alice", PASSWORD)
    store.add_grant("user:alice", Role.VIEWER, "a1")
    store.add_token("t", "user:alice", Role.VIEWER, "a1", None)
    for attempt, quota in (
        (lambda: store.add_user("bob", PASSWORD), "max_access_users"),
        (lambda: store.add_grant("user:alice", Role.VIEWER, "a2"), "max_access_grants"),
        (lambda: store.add_token("u", "user:alice", Role.VIEWER, "a1", None), "max_access_tokens"),
    ):
        with pytest.raises(QuotaExceeded) as refused:
            attempt()
        assert refused.value.quota == quota


def test_concurrent_creations_cannot_pass_a_quota_together(
    registry: Registry, fence: Fence
) -> None:
    quotas = access_store.AccessQuotas(max_tokens=3)
    store = AccessStore(registry, FencedWriter(registry, fence), quotas)
    outcomes: list[str] = []

    def make(i: int) -> None:
        try:
            store.add_token(f"t{i}", "user:root", Role.VIEWER, "*", None, owner_is_stored=False)
            outcomes.append("made")
        except QuotaExceeded:
            outcomes.append("refused")

    threads = [threading.Thread(target=make, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(outcomes) == ["made"] * 3 + ["refused"] * 5
    assert len(registry.children(ACCESS_TOKENS)) == 3

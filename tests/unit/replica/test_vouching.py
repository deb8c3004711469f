"""Vouching's rules without servers: the proof, the digest-ACL test, and which identities are
checked when (the challenge itself is exercised against real replicas in
tests/security/test_vouched_leaders.py)."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from kazoo.security import ACL, Id, Permissions, make_digest_acl

from scheduler.model.cluster_key import cluster_key
from scheduler.model.settings import Settings, load_settings
from scheduler.replica.vouching import Vouching, election_locked, proof, valid_challenge

OWN = "10.0.0.1:8899"
OTHER = "10.0.0.2:8899"
CHALLENGE = "ab" * 32


def _settings(**extra: str) -> Settings:
    return load_settings({}, {}, {"hostname": "10.0.0.1", "http_port": "8899", **extra})


@dataclass
class Checks:
    """A check that answers from a table and records who was asked."""

    answers: dict[str, bool]
    asked: list[str]

    def __call__(self, identity: str) -> tuple[bool, str]:
        self.asked.append(identity)
        ok = self.answers.get(identity, False)
        return ok, "" if ok else "no proof"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_proof_is_the_hmac_of_the_challenge_and_the_expected_identity() -> None:
    key = cluster_key(_settings(), "vouch")
    expected = hmac.new(key, f"{CHALLENGE}\n{OTHER}".encode(), hashlib.sha256).hexdigest()
    assert proof(key, CHALLENGE, OTHER) == expected
    assert proof(key, CHALLENGE, OWN) != expected  # a relay's answer is for another identity


def test_a_replica_answers_only_well_formed_challenges_with_its_own_identity() -> None:
    settings = _settings()
    vouching = Vouching(settings)
    assert vouching.answer(CHALLENGE) == proof(cluster_key(settings, "vouch"), CHALLENGE, OWN)
    for bad in ("", "AB" * 32, "ab" * 31, "ab" * 33, "zz" * 32, CHALLENGE + "\n"):
        assert not valid_challenge(bad)
        assert vouching.answer(bad) is None


def test_another_clusters_settings_give_another_proof() -> None:
    ours = Vouching(_settings()).answer(CHALLENGE)
    theirs = Vouching(_settings(auth_admin_password="other")).answer(CHALLENGE)
    assert ours != theirs


def test_only_an_election_path_locked_to_the_digest_since_its_creation_proves_its_nodes() -> None:
    digest = "ejcloud:secret"
    locked = [make_digest_acl("ejcloud", "secret", all=True)]
    assert election_locked(locked, 0, digest)
    assert not election_locked(locked, 1, digest)  # secured later: may hold older nodes
    assert not election_locked(locked, 0, "")  # no digest of ours: nothing to compare
    assert not election_locked(locked, 0, "ejcloud:other")
    world = ACL(Permissions.CREATE, Id("world", "anyone"))
    assert not election_locked([*locked, world], 0, digest)
    read_only = ACL(Permissions.READ, Id("world", "anyone"))
    assert election_locked([*locked, read_only], 0, digest)


def test_members_are_checked_once_and_a_failed_one_again_after_a_back_off() -> None:
    checks = Checks({OTHER: True}, [])
    clock = Clock()
    vouching = Vouching(_settings(), check=checks, clock=clock)
    rogue = "127.0.0.2:9000"

    vouching.update([rogue, OTHER, OWN], [], 0)
    assert checks.asked == [rogue, OTHER]
    assert not vouching.is_vouched(rogue) and vouching.is_vouched(OTHER)
    assert vouching.vouched([rogue, OTHER, OWN]) == [OTHER, OWN]

    checks.asked.clear()
    vouching.update([rogue, OTHER, OWN], [], 0)
    assert checks.asked == []  # nothing due yet
    clock.now += 2.0
    vouching.update([rogue, OTHER, OWN], [], 0)
    assert checks.asked == [rogue]  # the failed one, after 2 s
    clock.now += 2.0
    vouching.update([rogue, OTHER, OWN], [], 0)
    assert checks.asked == [rogue]  # then after 4 s
    clock.now += 2.0
    vouching.update([rogue, OTHER, OWN], [], 0)
    assert checks.asked == [rogue, rogue]


def test_a_new_leader_is_checked_again_and_a_vouched_one_stays_vouched() -> None:
    checks = Checks({OTHER: True}, [])
    vouching = Vouching(_settings(), check=checks, clock=Clock())
    vouching.update([OTHER, OWN], [], 0)
    vouching.update([OWN, OTHER], [], 0)
    checks.answers[OTHER] = False  # say it now fails: re-checked when it leads again
    vouching.update([OTHER, OWN], [], 0)
    assert checks.asked == [OTHER, OTHER]
    assert not vouching.is_vouched(OTHER)


def test_a_flood_of_members_costs_a_bounded_number_of_checks_per_pass() -> None:
    checks = Checks({}, [])
    vouching = Vouching(_settings(), check=checks, clock=Clock())
    forged = [f"127.0.0.2:{port}" for port in range(1000, 1200)]
    vouching.update(forged, [], 0)
    assert len(checks.asked) == 1 + 3  # the leader, then at most three others
    assert vouching.vouched(forged) == [OWN]


def test_the_digest_acl_vouches_for_every_member_without_a_check() -> None:
    checks = Checks({}, [])
    vouching = Vouching(_settings(zk_digest="ejcloud:secret"), check=checks, clock=Clock())
    locked = [make_digest_acl("ejcloud", "secret", all=True)]
    vouching.update([OTHER, OWN], locked, 0)
    assert checks.asked == [] and vouching.is_vouched(OTHER) and vouching.by_acl
    vouching.update([OTHER, OWN], locked, 1)  # the ACL was changed since: checks decide
    assert checks.asked == [OTHER] and not vouching.is_vouched(OTHER)


def test_the_leader_is_published_before_the_other_members_are_checked() -> None:
    checks = Checks({OTHER: True}, [])
    vouching = Vouching(_settings(), check=checks, clock=Clock())
    seen: list[tuple[list[str], bool]] = []
    forged = [f"127.0.0.2:{port}" for port in range(1000, 1003)]

    def decided() -> None:
        seen.append((list(checks.asked), vouching.is_vouched(OTHER)))

    vouching.update([OTHER, *forged, OWN], [], 0, leader_decided=decided)
    assert seen == [([OTHER], True)]  # only the leader checked when it was published
    assert checks.asked == [OTHER, *forged]

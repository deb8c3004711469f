"""The cluster key: equal for equal settings, different per purpose and per credential."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from scheduler.model.cluster_key import cluster_key
from scheduler.model.settings import Settings


def test_replicas_with_the_same_settings_derive_the_same_key() -> None:
    assert cluster_key(Settings(), "vouch") == cluster_key(Settings(), "vouch")
    assert len(cluster_key(Settings(), "vouch")) == 32


def test_each_purpose_gets_its_own_key() -> None:
    assert cluster_key(Settings(), "vouch") != cluster_key(Settings(), "session")


def test_a_changed_credential_digest_or_namespace_changes_the_key() -> None:
    base = cluster_key(Settings(), "session")
    changes: list[dict[str, Any]] = [
        {"auth_admin_password": "other"},
        {"auth_admin_password_hash": "scrypt:32768:8:1$salt$00"},
        {"auth_guest_password": "other"},
        {"zk_digest": "u:p"},
        {"zk_namespace": "other"},
    ]
    for change in changes:
        assert cluster_key(replace(Settings(), **change), "session") != base, change


def test_field_boundaries_cannot_be_shifted() -> None:
    one = replace(Settings(), auth_admin_username="ab", auth_admin_password="c")
    two = replace(Settings(), auth_admin_username="a", auth_admin_password="bc")
    assert cluster_key(one, "session") != cluster_key(two, "session")

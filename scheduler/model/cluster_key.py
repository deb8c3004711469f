"""A secret every replica of one cluster derives alike from its settings, and nobody else can.

Replicas share their settings (the same properties file or Marathon app): the namespace, the
ZooKeeper digest and the API's credentials. A key derived from them lets one replica prove to
another that it belongs to the cluster (a leader's identity is vouched for by a proof over a
fresh challenge) and lets any replica check what another issued (a console session), without
any state of its own. Changing a password or the digest changes the key, which ends every
session issued under the old one. With the default credentials the key is only as secret as
they are: the replica warns about those at start.

Each use asks for its own `purpose`, so a value made for one use is never accepted by another.
"""

from __future__ import annotations

import hashlib
import hmac

from scheduler.model.settings import Settings

__all__ = ["cluster_key"]


def _material(settings: Settings) -> bytes:
    parts = (
        "ejcloud cluster key v1",
        settings.zk_namespace,
        settings.zk_digest,
        settings.auth_admin_username,
        settings.auth_admin_password_hash or settings.auth_admin_password,
        settings.auth_guest_username,
        settings.auth_guest_password_hash or settings.auth_guest_password,
    )
    # Lengths first, so no two different tuples give the same bytes.
    return b"".join(len(p.encode()).to_bytes(4, "big") + p.encode() for p in parts)


def cluster_key(settings: Settings, purpose: str) -> bytes:
    """A 32-byte key for `purpose` (e.g. "vouch", "session"), the same on every replica."""
    root = hashlib.sha256(_material(settings)).digest()
    return hmac.new(root, purpose.encode(), hashlib.sha256).digest()

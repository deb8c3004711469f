"""`AccessDirectory`: the access records a replica follows, indexed for the request path.

Immutable snapshots: a follower (storage/access_follower.py) builds a new directory from what it
read and swaps it in; a request reads whichever snapshot is current, without a lock and without
a ZooKeeper round trip. Every lookup is a dictionary get.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from scheduler.model.access.records import TokenRecord, UserRecord
from scheduler.model.access.roles import USER_PREFIX, Grant, Principal, Rights


@dataclass(frozen=True)
class AccessDirectory:
    """Users by name, tokens by id, grants by id and by principal.

    `settings_rights` maps the settings' accounts (`user:root`, `user:guest`) to their fixed
    rights (cluster-admin and viewer on every app); a stored user of the same name is ignored.
    """

    users: Mapping[str, UserRecord] = field(default_factory=dict)
    tokens: Mapping[str, TokenRecord] = field(default_factory=dict)
    grants: Mapping[str, Grant] = field(default_factory=dict)
    settings_rights: Mapping[str, Rights] = field(default_factory=dict)
    _by_principal: Mapping[str, tuple[Grant, ...]] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        users: Iterable[UserRecord],
        tokens: Iterable[TokenRecord],
        grants: Iterable[Grant],
        settings_rights: Mapping[str, Rights],
    ) -> AccessDirectory:
        by_principal: dict[str, list[Grant]] = {}
        grant_map: dict[str, Grant] = {}
        for grant in grants:
            grant_map[grant.id] = grant
            by_principal.setdefault(grant.principal, []).append(grant)
        return cls(
            users={u.name: u for u in users},
            tokens={t.id: t for t in tokens},
            grants=grant_map,
            settings_rights=dict(settings_rights),
            _by_principal={p: tuple(g) for p, g in by_principal.items()},
        )

    def grants_of(self, principal: str) -> tuple[Grant, ...]:
        return self._by_principal.get(principal, ())

    def user_rights(self, actor: str) -> Rights:
        """The rights of `user:NAME` (a settings account's fixed ones, else its grants)."""
        fixed = self.settings_rights.get(actor)
        if fixed is not None:
            return fixed
        name = actor[len(USER_PREFIX) :] if actor.startswith(USER_PREFIX) else None
        if name is None or name not in self.users:
            return Rights.none()  # a deleted user's grants (and tokens) grant nothing
        return Rights.of(self.grants_of(actor))

    def token_rights(self, token: TokenRecord) -> Rights:
        """A token's rights: its role on its app, never more than its owner holds now."""
        return self.user_rights(token.owner).capped(token.role, token.app)

    def rights_of(self, principal: Principal) -> Rights:
        if principal.kind == "anonymous":
            return Rights.cluster_admin()
        if principal.kind == "token":
            token = self.tokens.get(principal.name)
            return Rights.none() if token is None else self.token_rights(token)
        return self.user_rights(principal.actor)

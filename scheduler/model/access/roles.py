"""Roles, grants, principals and the rights they add up to."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

ANY_APP = "*"
"""A grant's app that means every app, now and later."""


class Role(enum.IntEnum):
    """A role on an app; a greater one includes every lesser one."""

    VIEWER = 1  # read the app, its jobs, runs, logs, statistics, events
    OPERATOR = 2  # + trigger, kill, enable, disable
    EDITOR = 3  # + register, update and delete jobs, update the app
    APP_ADMIN = 4  # + grant roles on the app, make tokens scoped to it, delete it
    CLUSTER_ADMIN = 5  # everything: users, creating apps, settings-level operations

    @property
    def wire(self) -> str:
        """The role's name in the API (`viewer`, ..., `app-admin`, `cluster-admin`)."""
        return self.name.lower().replace("_", "-")

    @classmethod
    def parse(cls, text: object) -> Role:
        """The role named `text`; ValueError naming the choices otherwise."""
        for role in cls:
            if role.wire == text:
                return role
        choices = ", ".join(r.wire for r in cls)
        raise ValueError(f"must be one of {choices}")


USER_PREFIX = "user:"
TOKEN_PREFIX = "token:"


@dataclass(frozen=True)
class Principal:
    """Who a request acts as. `kind` is `settings` (the settings' admin or guest account),
    `user` (a user of the access records), `token` (an API token: `name` is its public id) or
    `anonymous` (auth is off: acts as cluster-admin, as the settings' admin did).

    `actor` is how audit records and grants name it: `user:NAME` or `token:ID` (the settings'
    accounts are users too: `user:root`).
    """

    kind: str
    name: str

    @property
    def actor(self) -> str:
        if self.kind == "token":
            return TOKEN_PREFIX + self.name
        if self.kind == "anonymous":
            return "anonymous"
        return USER_PREFIX + self.name


@dataclass(frozen=True)
class Grant:
    """`principal` (`user:NAME`) has `role` on `app` (an app name or `ANY_APP`)."""

    id: str
    principal: str
    role: Role
    app: str


@dataclass(frozen=True)
class Rights:
    """What a principal may do: its greatest role on each app, and on every app (`everywhere`).

    Built by `Rights.of(grants)`; a token's rights are `capped` by its own role and app.
    """

    everywhere: Role | None = None
    per_app: Mapping[str, Role] = field(default_factory=dict)

    @classmethod
    def of(cls, grants: Iterable[Grant]) -> Rights:
        everywhere: Role | None = None
        per_app: dict[str, Role] = {}
        for grant in grants:
            if grant.app == ANY_APP or grant.role is Role.CLUSTER_ADMIN:
                everywhere = grant.role if everywhere is None else max(everywhere, grant.role)
            else:
                held = per_app.get(grant.app)
                per_app[grant.app] = grant.role if held is None else max(held, grant.role)
        return cls(everywhere, per_app)

    @classmethod
    def cluster_admin(cls) -> Rights:
        return cls(Role.CLUSTER_ADMIN)

    @classmethod
    def viewer_everywhere(cls) -> Rights:
        return cls(Role.VIEWER)

    @classmethod
    def none(cls) -> Rights:
        return cls()

    def role_on(self, app: str) -> Role | None:
        """The greatest role on `app` (None: the app is invisible to this principal)."""
        own = self.per_app.get(app)
        if self.everywhere is None:
            return own
        return self.everywhere if own is None else max(own, self.everywhere)

    def may(self, role: Role, app: str) -> bool:
        """Whether the principal holds at least `role` on `app`."""
        held = self.role_on(app)
        return held is not None and held >= role

    def sees(self, app: str) -> bool:
        """Whether the app (and what is in it) is visible: any role on it."""
        return self.role_on(app) is not None

    def may_everywhere(self, role: Role) -> bool:
        """At least `role` on every app (a cluster-wide grant)."""
        return self.everywhere is not None and self.everywhere >= role

    @property
    def is_cluster_admin(self) -> bool:
        return self.everywhere is Role.CLUSTER_ADMIN

    def capped(self, role: Role, app: str) -> Rights:
        """These rights limited to `role` on `app` (a token's): never more than they were."""
        if app == ANY_APP:
            everywhere = None if self.everywhere is None else min(self.everywhere, role)
            per_app = {a: min(r, role) for a, r in self.per_app.items()}
            return Rights(everywhere, per_app)
        held = self.role_on(app)
        if held is None:
            return Rights.none()
        capped = min(held, role)
        if capped is Role.CLUSTER_ADMIN:
            return Rights(Role.CLUSTER_ADMIN)  # only a cluster-admin makes such a token
        return Rights(None, {app: capped})

    def summary(self) -> dict[str, object]:
        """For `GET /api/session` and the console: `{"everywhere": role|None, "apps": {...}}`."""
        return {
            "everywhere": None if self.everywhere is None else self.everywhere.wire,
            "apps": {app: role.wire for app, role in sorted(self.per_app.items())},
        }

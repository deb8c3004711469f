"""Authorization on every API route (issue 26): who may do what to which app.

Every view function of the API declares the least role it needs with `@requires(role, scope)`:

- `scope="cluster"`: the role on every app (`Rights.may_everywhere`), checked before the
  handler runs; 403 otherwise. Cluster-wide operations (creating apps, reconcile) say nothing
  about any one app, so refusing them reveals nothing.
- `scope="app"`: the app of the resource decides, and only the handler knows it (a job's app is
  in its stored config, a registration's in its body), so the handler calls `require_app` or
  `require_job`. An app the caller cannot see is a 404 with the message of one that does not
  exist (never a 403 that confirms the name); a 403 only when the caller sees the app but lacks
  the role. A handler that answers 2xx without either call is a bug that would leak: the
  after-request guard turns it into a 500 logged at ERROR, so a test finds it.
- `scope="list"`: the handler keeps only the items whose app is `visible` (the list's shape
  stays the original's).
- `scope="authenticated"`: any accepted principal (role None).
- `scope="public"`: no credentials needed (`/api/session`, which checks what it is given).

A route without a declaration answers 500 (logged at ERROR) rather than running unchecked;
`tests/unit/api/test_route_roles.py` also fails on one, and compares every declaration with the
table in `docs/routes.md`.

Who the caller is comes from the authentication hook (`api/auth.py`): `g.principal` and
`g.rights`. Where they are not set (only `g.identify`, the original's `root`/`guest`), the
settings' accounts' fixed rights apply: cluster-admin and viewer on every app.

For the audit log (`api/audit.py`), a refusal made here leaves `g.access_refusal`: `"forbidden"`
(the 403) or `"hidden"` (the 404 that hides an existing resource of an invisible app), and the
resource through `audit_hooks.note_resource`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal, ParamSpec, TypeVar

from flask import Flask, Response, current_app, g, request

from scheduler.api.audit_hooks import note_resource
from scheduler.api.errors import error_response
from scheduler.api.term_access import term_access
from scheduler.model.access.roles import Principal, Rights, Role
from scheduler.model.config.job import JobConfig
from scheduler.model.errors import Forbidden, NotFound

__all__ = [
    "Requirement",
    "Scope",
    "current_principal",
    "current_rights",
    "install_access_control",
    "require_app",
    "require_job",
    "requirement_of",
    "requires",
    "sees_every_app",
    "visible",
    "visible_job_configs",
    "visible_jobs",
]

log = logging.getLogger(__name__)

Scope = Literal["cluster", "app", "list", "authenticated", "public"]
SCOPES: tuple[Scope, ...] = ("cluster", "app", "list", "authenticated", "public")

_ATTRIBUTE = "ejc_access_requirement"
_ROLE_BASED: frozenset[str] = frozenset({"cluster", "app", "list"})

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class Requirement:
    """A route's least role and where it applies (see the module docstring)."""

    role: Role | None
    scope: Scope

    @property
    def shown_role(self) -> str:
        """The role as docs/routes.md writes it (`-` for none)."""
        return "-" if self.role is None else self.role.wire


def requires(
    role: Role | None, scope: Scope = "cluster"
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Declare a view function's least role; apply it below the route decorator (`@bp.get`
    first, then `@requires`), so the registered view carries the declaration.

    ValueError at import time for a declaration that cannot be right (a role for
    `authenticated`/`public`, none for the others), so no route is declared half.
    """
    if scope not in SCOPES:
        raise ValueError(f"unknown scope {scope!r}; one of {', '.join(SCOPES)}")
    if (role is None) == (scope in _ROLE_BASED):
        raise ValueError(f"scope {scope!r} {'needs a role' if role is None else 'takes no role'}")
    requirement = Requirement(role, scope)

    def mark(view: Callable[P, R]) -> Callable[P, R]:
        setattr(view, _ATTRIBUTE, requirement)
        return view

    return mark


def requirement_of(view: object) -> Requirement | None:
    """The declaration `requires` put on a view function (None: undeclared)."""
    found = getattr(view, _ATTRIBUTE, None)
    return found if isinstance(found, Requirement) else None


# -- who is asking -----------------------------------------------------------------------------

_SETTINGS_RIGHTS = {"root": Rights.cluster_admin(), "guest": Rights.viewer_everywhere()}


def current_rights() -> Rights:
    """The caller's rights: `g.rights` from the authentication hook, else the fixed rights of
    the settings' account `g.identify` names (none for nobody)."""
    rights = g.get("rights")
    if isinstance(rights, Rights):
        return rights
    return _SETTINGS_RIGHTS.get(str(g.get("identify") or ""), Rights.none())


def current_principal() -> Principal:
    """The caller: `g.principal` from the authentication hook, else the settings' account that
    `g.identify` names (`anonymous` when there is none)."""
    principal = g.get("principal")
    if isinstance(principal, Principal):
        return principal
    identify = g.get("identify")
    if identify:
        return Principal("settings", str(identify))
    return Principal("anonymous", "")


def visible(app: str) -> bool:
    """Whether the caller sees `app` (any role on it) and so everything in it."""
    return current_rights().sees(app)


def sees_every_app() -> bool:
    """Whether the caller holds a role on every app: lists need no filtering, aggregates need
    no recount."""
    return current_rights().everywhere is not None


def visible_jobs(job_names: Iterable[str]) -> set[str]:
    """Those of `job_names` whose app the caller sees (jobs that no longer exist are left out
    for a caller who does not see every app). Each job's app comes from the term's `JobApps`
    (kept by watches; a job not known yet is read once), not from a read per request."""
    names = set(job_names)
    if sees_every_app():
        return names
    rights = current_rights()
    if not names or not rights.per_app:
        return set()
    apps = term_access().job_apps.apps_of(names)
    return {name for name, app in apps.items() if rights.sees(app)}


def visible_job_configs(job_names: Iterable[str]) -> dict[str, JobConfig]:
    """The configs of those of `job_names` that exist and whose app the caller sees, by name:
    the visible ones (`visible_jobs`) read in bulk (100 to a multiRead), each checked again
    against the app its config names now (a job moved meanwhile is left out)."""
    names = visible_jobs(name for name in job_names if name)
    if not names:
        return {}
    rights = current_rights()
    jobs = term_access().config.jobs_named(sorted(names))
    return {job.job_name: job for job in jobs if rights.sees(job.app_name)}


# -- the checks a handler makes ----------------------------------------------------------------


def require_app(role: Role, app: str) -> None:
    """Refuse unless the caller holds `role` on `app`: NotFound (404, the message of an app that
    does not exist) when the app is invisible to the caller, Forbidden (403) when it sees it but
    holds less. Does not check that the app exists."""
    g.ejc_access_checked = True
    rights = current_rights()
    if not rights.sees(app):
        if term_access().config.app_exists(app):
            _refused("hidden", f"app/{app}", app)
        raise NotFound(f"app '{app}' does not exist")
    if not rights.may(role, app):
        _refused("forbidden", f"app/{app}", app)
        held = rights.role_on(app)
        raise Forbidden(
            f"{role.wire} on app '{app}' is needed; {_caller()} holds {_wire(held)} there"
        )


def require_job(role: Role, job_name: str) -> JobConfig:
    """The stored config of `job_name` if the caller holds `role` on its app. NotFound (404, the
    message of a job that does not exist) unless the job exists and its app is visible;
    Forbidden (403) when the app is visible but the role is lacking."""
    g.ejc_access_checked = True
    job = term_access().config.job(job_name)
    if job is None:
        raise NotFound(f"job '{job_name}' does not exist")
    if not visible(job.app_name):
        _refused("hidden", f"job/{job_name}", job.app_name)
        raise NotFound(f"job '{job_name}' does not exist")
    require_app(role, job.app_name)
    return job


def _refused(kind: str, resource: str, app: str) -> None:
    g.access_refusal = kind
    note_resource(resource, app)


def _wire(role: Role | None) -> str:
    return "no role" if role is None else role.wire


def _caller() -> str:
    actor = current_principal().actor
    return "the caller" if actor == "anonymous" else actor


# -- enforcement -------------------------------------------------------------------------------


def install_access_control(app: Flask) -> None:
    """Check every request's route declaration before its handler (after authentication:
    install this after `install_auth`), and guard app-scope answers after it."""

    @app.before_request
    def _authorize() -> Response | None:
        rule = request.url_rule
        if rule is None:
            return None  # no route: 404 or 405 follows, nothing runs
        view = current_app.view_functions.get(rule.endpoint)
        requirement = requirement_of(view)
        if requirement is None:
            log.error(
                "api: route %s %s (%s) declares no role (@requires); refused",
                request.method,
                rule.rule,
                rule.endpoint,
            )
            return error_response(
                500, "internal error: this route declares no role", "InternalError"
            )
        if requirement.scope == "cluster" and requirement.role is not None:
            rights = current_rights()
            if not rights.may_everywhere(requirement.role):
                g.access_refusal = "forbidden"
                note_resource("cluster")
                return error_response(
                    403,
                    f"{requirement.role.wire} on every app is needed; "
                    f"{_caller()} holds {_wire(rights.everywhere)} there",
                    "Forbidden",
                )
        return None

    @app.after_request
    def _guard_unchecked(response: Response) -> Response:
        rule = request.url_rule
        if rule is None or request.method == "OPTIONS" or not 200 <= response.status_code < 300:
            return response
        requirement = requirement_of(current_app.view_functions.get(rule.endpoint))
        if requirement is None or requirement.scope != "app" or g.get("ejc_access_checked"):
            return response
        log.error(
            "api: route %s %s (%s) is app-scoped but answered %s without require_app or "
            "require_job; answer withheld",
            request.method,
            rule.rule,
            rule.endpoint,
            response.status_code,
        )
        return error_response(
            500, "internal error: this route did not check the caller's role", "InternalError"
        )

"""`ejcloud user|grant|token ...`: who may do what on the cluster (issue 26).

Users, grants of roles on apps, and API tokens, through `/api/access/*`. A password is never
taken from the command line (where `ps` and the shell's history would keep it): it is asked on
the terminal, or read from stdin with `--password-stdin`. A new token is printed once, with a
warning to store it (`--json` prints it in the answer, for a script that stores it).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import click

from ejcloud_cli.client import ApiClient
from ejcloud_cli.context import State, confirm, json_option, segment
from ejcloud_cli.errors import ApiError, UsageProblem
from ejcloud_cli.output import format_time, objects, render_fields

ROLES = ("viewer", "operator", "editor", "app-admin", "cluster-admin")
_MAX_PASSWORD_BYTES = 1024 * 4
_DURATION = re.compile(r"^([0-9]{1,10})([smhdwy]?)$")
_PAGE_SIZE = 500
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


# -- users ----------------------------------------------------------------------------------------


@click.group("user")
def user_group() -> None:
    """Users: names with passwords that log in with HTTP Basic (a cluster-admin manages them)."""


@user_group.command("add")
@click.argument("name")
@click.option(
    "--password-stdin",
    is_flag=True,
    help="Read the password from stdin's first line (else it is asked on the terminal).",
)
@json_option
@click.pass_obj
def add_user(state: State, name: str, password_stdin: bool) -> None:
    """Create user NAME. It holds no role until one is granted (`ejcloud grant add`).

    \b
    printf '%s\\n' "$PASSWORD" | ejcloud user add alice --password-stdin
    """
    password = _read_password(state, password_stdin, name)
    answer = state.client().call(
        "POST", "/api/access/users", body={"name": name, "password": password}
    )
    created = answer.get("createdAt") if isinstance(answer, dict) else None
    state.done(f"user {name} created", action="created", name=name, createdAt=created)


def _read_password(state: State, from_stdin: bool, name: str) -> str:
    if from_stdin:
        raw = state.stdin().readline(_MAX_PASSWORD_BYTES + 1)
        if len(raw) > _MAX_PASSWORD_BYTES:
            raise UsageProblem(f"the password on stdin is longer than {_MAX_PASSWORD_BYTES} bytes")
        try:
            password = raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as exc:
            raise UsageProblem("the password on stdin is not UTF-8") from exc
        if not password:
            raise UsageProblem("no password on stdin")
        return password
    if not sys.stdin.isatty():
        raise UsageProblem("no terminal to ask the password on: give it with --password-stdin")
    asked: str = click.prompt(
        f"password for new user {name}", hide_input=True, confirmation_prompt=True, err=True
    )
    return asked


@user_group.command("list")
@json_option
@click.pass_obj
def list_users(state: State) -> None:
    """List the users, in name order."""
    users = list(_walk(state.client(), "/api/access/users"))
    rows = [(u.get("name"), format_time(u.get("createdAt"))) for u in objects(users)]
    state.show_table(users, ("NAME", "CREATED"), rows, "no users")


@user_group.command("delete")
@click.argument("name")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@json_option
@click.pass_obj
def delete_user(state: State, name: str, yes: bool) -> None:
    """Delete user NAME with its grants and tokens (its tokens stop working at once)."""
    confirm(f"Delete user {name} with its grants and tokens?", yes)
    state.client().call("DELETE", f"/api/access/users/{segment(name)}")
    state.done(f"user {name} deleted with its grants and tokens", action="deleted", name=name)


# -- grants ---------------------------------------------------------------------------------------


@click.group("grant")
def grant_group() -> None:
    """Grants: a role on one app (or '*', every app) for a user.

    Roles, each with the ones before it: viewer, operator (trigger, kill, enable, disable),
    editor (register, update, delete jobs), app-admin (grants and tokens of the app),
    cluster-admin (everything; on '*' only).
    """


@grant_group.command("add")
@click.argument("principal", metavar="user:NAME")
@click.argument("role", type=click.Choice(ROLES))
@click.argument("app", metavar="APP|'*'")
@json_option
@click.pass_obj
def add_grant(state: State, principal: str, role: str, app: str) -> None:
    """Grant ROLE on APP ('*': every app) to user:NAME.

    \b
    ejcloud grant add user:alice editor team_a
    """
    if not principal.startswith("user:"):
        raise UsageProblem(f"the principal must be user:NAME, not {principal!r}")
    body = {"principal": principal, "role": role, "app": app}
    answer = state.client().call("POST", "/api/access/grants", body=body)
    gid = answer.get("id") if isinstance(answer, dict) else None
    state.done(f"grant {gid}: {principal} is {role} on {app}", action="granted", id=gid, **body)


@grant_group.command("list")
@click.option("--app", help="Only the grants on this app ('*': those on every app).")
@click.option("--principal", metavar="user:NAME", help="Only this user's grants.")
@json_option
@click.pass_obj
def list_grants(state: State, app: str | None, principal: str | None) -> None:
    """List the grants you may see (a cluster-admin all; an app-admin its apps'; yours)."""
    filters = {k: v for k, v in (("app", app), ("principal", principal)) if v is not None}
    grants = list(_walk(state.client(), "/api/access/grants", filters))
    rows = [(g.get("id"), g.get("principal"), g.get("role"), g.get("app")) for g in objects(grants)]
    state.show_table(grants, ("ID", "PRINCIPAL", "ROLE", "APP"), rows, "no grants")


@grant_group.command("delete")
@click.argument("grant_id", metavar="ID")
@json_option
@click.pass_obj
def delete_grant(state: State, grant_id: str) -> None:
    """Delete grant ID (as `grant list` shows it)."""
    state.client().call("DELETE", f"/api/access/grants/{segment(grant_id)}")
    state.done(f"grant {grant_id} deleted", action="deleted", id=grant_id)


# -- tokens ---------------------------------------------------------------------------------------


@click.group("token")
def token_group() -> None:
    """API tokens: for scripts and CI, sent as `Authorization: Bearer` (EJCLOUD_TOKEN).

    A token acts with its role on its app, never with more than its owner (who made it) holds
    at the time; it stops working when revoked, when it expires, or when its owner is deleted.
    """


@token_group.command("create")
@click.argument("name")
@click.option("--role", required=True, type=click.Choice(ROLES), help="The token's role.")
@click.option("--app", required=True, help="The app it acts on ('*': every app).")
@click.option(
    "--expires-in",
    metavar="DURATION",
    help="Expire after this long: 3600, 90m, 12h, 30d, 8w, 1y (60 s to 10 y; default: never).",
)
@json_option
@click.pass_obj
def create_token(state: State, name: str, role: str, app: str, expires_in: str | None) -> None:
    """Make token NAME with ROLE on APP, and print it once.

    \b
    ejcloud token create ci-deploy --role operator --app team_a --expires-in 90d
    """
    body: dict[str, object] = {"name": name, "role": role, "app": app}
    if expires_in is not None:
        body["expiresInSeconds"] = parse_duration(expires_in)
    answer = state.client().call("POST", "/api/access/tokens", body=body)
    if state.json_output or not isinstance(answer, dict):
        state.show(answer, lambda: "")
        return
    click.echo(
        "ejcloud: store this token now: it is not shown again (use it as EJCLOUD_TOKEN)",
        err=True,
    )
    click.echo(render_fields([("token", answer.get("token"))]))
    details = [
        ("id", answer.get("id")),
        ("role", answer.get("role")),
        ("app", answer.get("app")),
        ("owner", answer.get("owner")),
        ("expires", format_time(answer.get("expiresAt")) if answer.get("expiresAt") else "never"),
    ]
    click.echo(render_fields(details), err=True)


def parse_duration(text: str) -> int:
    """Seconds in `3600`, `90m`, `12h`, `30d`, `8w` or `1y` (365 days); UsageProblem naming
    `--expires-in` otherwise (the server checks the range)."""
    match = _DURATION.match(text.strip())
    if match is None:
        raise UsageProblem(
            f"--expires-in {text!r}: give a number with an optional unit s, m, h, d, w or y "
            "(30d, 12h)"
        )
    return int(match.group(1)) * _UNIT_S[match.group(2)]


@token_group.command("list")
@json_option
@click.pass_obj
def list_tokens(state: State) -> None:
    """List the tokens you may see (never their secrets)."""
    tokens = list(_walk(state.client(), "/api/access/tokens"))
    rows = [
        (
            t.get("id"),
            t.get("name"),
            t.get("owner"),
            t.get("role"),
            t.get("app"),
            format_time(t.get("expiresAt")) if t.get("expiresAt") else "never",
            format_time(t.get("lastUsedAt")) if t.get("lastUsedAt") else "never",
        )
        for t in objects(tokens)
    ]
    headers = ("ID", "NAME", "OWNER", "ROLE", "APP", "EXPIRES", "LAST_USED")
    state.show_table(tokens, headers, rows, "no tokens")


@token_group.command("revoke")
@click.argument("token_id", metavar="ID")
@json_option
@click.pass_obj
def revoke_token(state: State, token_id: str) -> None:
    """Revoke token ID (as `token list` shows it): it stops working on every replica at once."""
    state.client().call("DELETE", f"/api/access/tokens/{segment(token_id)}")
    state.done(f"token {token_id} revoked", action="revoked", id=token_id)


def _walk(client: ApiClient, path: str, filters: Mapping[str, str] | None = None) -> Iterator[Any]:
    """Every item of the access list at `path` (`{"items", "nextCursor"}`), a page at a time,
    with `filters` in each page's query."""
    cursor = ""
    while True:
        query: dict[str, str | int] = {**(filters or {}), "limit": _PAGE_SIZE}
        if cursor:
            query["cursor"] = cursor
        page = client.call("GET", path, query=query)
        if not isinstance(page, dict) or not isinstance(page.get("items"), list):
            raise ApiError(200, f"GET {path}: the server answered a page of an unknown shape")
        yield from page["items"]
        following = page.get("nextCursor")
        if not following or not isinstance(following, str):
            return
        cursor = following

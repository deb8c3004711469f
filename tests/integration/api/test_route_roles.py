"""Every route of the API declares its least role, and docs/routes.md says the same (issue 26).

The routes are walked from `create_app`'s url_map (a real ZooKeeper behind it, as the API is
built for a term), so a route added anywhere joins this test by itself: it must carry
`@requires` (scheduler/api/access_control.py) and have its line in docs/routes.md's table. The
failure message gives the missing lines as they are to be pasted.

Also here: what the enforcement does with a route that forgot (a 500 logged at ERROR, never the
handler's answer).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from flask import Flask, Response, jsonify

from scheduler.api.access_control import Requirement, requirement_of, requires
from scheduler.model.access.roles import Role
from tests.integration.api.conftest import ADMIN, GUEST, Api

ROUTES_MD = Path(__file__).resolve().parents[3] / "docs" / "routes.md"
_METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH")
_SCOPES = ("cluster", "app", "list", "authenticated", "public")


def _shown_rule(rule: str) -> str:
    """`/api/job/<job_name>/kill` as the table writes it: `/api/job/{job_name}/kill`."""
    return re.sub(r"<(?:[^:>]*:)?([^>]*)>", r"{\1}", rule)


def _key(method: str, path: str) -> tuple[str, str]:
    return method, re.sub(r"\{[^}]*\}|<[^>]*>", "{}", path).rstrip("/") or "/"


def _routes(app: Flask) -> dict[tuple[str, str], tuple[str, str, Requirement | None]]:
    """(method, normalised rule) -> (method, shown rule, declaration) of every route."""
    found = {}
    for rule in app.url_map.iter_rules():
        if rule.endpoint == "static":
            continue
        requirement = requirement_of(app.view_functions[rule.endpoint])
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            found[_key(method, rule.rule)] = (method, _shown_rule(rule.rule), requirement)
    return found


def _table() -> dict[tuple[str, str], tuple[str, str]]:
    """(method, normalised path) -> (role, scope) of each row of docs/routes.md's table."""
    rows: dict[tuple[str, str], tuple[str, str]] = {}
    for line in ROUTES_MD.read_text(encoding="utf-8").splitlines():
        cells = [c.strip().strip("`").strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or cells[0] not in _METHODS or not cells[1].startswith("/"):
            continue
        rows[_key(cells[0], cells[1])] = (cells[2], cells[3])
    return rows


def _line(method: str, rule: str, requirement: Requirement) -> str:
    return f"| {method} | `{rule}` | {requirement.shown_role} | {requirement.scope} | ... |"


def test_every_route_of_the_api_declares_its_least_role(api: Api) -> None:
    undeclared = [
        f"{method} {rule}"
        for method, rule, requirement in _routes(api.client.application).values()
        if requirement is None
    ]
    assert not undeclared, (
        "routes without @requires(role, scope) (scheduler/api/access_control.py): every view "
        "function of the API must declare its least role: " + ", ".join(sorted(undeclared))
    )


def test_docs_routes_md_lists_every_route_with_the_role_it_declares(api: Api) -> None:
    assert ROUTES_MD.is_file(), "docs/routes.md (the table of every route's least role) is missing"
    routes = _routes(api.client.application)
    table = _table()
    problems = []
    for key, (method, rule, requirement) in sorted(routes.items()):
        if requirement is None:
            continue  # the test above names it
        documented = table.get(key)
        wanted = (requirement.shown_role, requirement.scope)
        if documented is None:
            problems.append(
                f"missing: add this line to docs/routes.md's table (say what the role applies "
                f"to in place of ...):\n{_line(method, rule, requirement)}"
            )
        elif documented != wanted:
            problems.append(
                f"{method} {rule}: docs/routes.md says {documented[0]} / {documented[1]}, the "
                f"route declares {wanted[0]} / {wanted[1]}; make the line:\n"
                f"{_line(method, rule, requirement)}"
            )
    for key in sorted(set(table) - set(routes)):
        problems.append(f"docs/routes.md lists {key[0]} {key[1]}, which is no route: remove it")
    assert not problems, "\n".join(problems)


def test_the_table_uses_only_known_roles_and_scopes() -> None:
    roles = {r.wire for r in Role} | {"-"}
    for (method, path), (role, scope) in _table().items():
        assert role in roles, f"{method} {path}: unknown role {role!r}"
        assert scope in _SCOPES, f"{method} {path}: unknown scope {scope!r}"
        assert (role == "-") == (scope in ("authenticated", "public")), (method, path, role)


def test_a_route_without_a_declaration_answers_500_and_logs_an_error(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    app = api.client.application

    def forgotten() -> Response:
        return jsonify({"secret": "of every app"})

    app.add_url_rule("/api/forgotten", "forgotten", forgotten)
    with caplog.at_level(logging.ERROR, logger="scheduler.api.access_control"):
        response = api.client.get("/api/forgotten", headers=ADMIN)
    assert response.status_code == 500
    assert "secret" not in response.get_data(as_text=True)
    assert any("/api/forgotten" in r.getMessage() for r in caplog.records), caplog.text


def test_an_app_scoped_route_that_answers_without_checking_answers_500(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    app = api.client.application

    @requires(Role.VIEWER, scope="app")
    def unchecked() -> Response:
        return jsonify({"secret": "of every app"})

    app.add_url_rule("/api/unchecked", "unchecked", unchecked)
    with caplog.at_level(logging.ERROR, logger="scheduler.api.access_control"):
        response = api.client.get("/api/unchecked", headers=ADMIN)
    assert response.status_code == 500
    assert "secret" not in response.get_data(as_text=True)
    assert any("without require_app" in r.getMessage() for r in caplog.records), caplog.text


def test_a_cluster_scoped_route_refuses_the_guest_before_its_handler(api: Api) -> None:
    app = api.client.application
    ran = []

    @requires(Role.CLUSTER_ADMIN)
    def cluster_wide() -> Response:
        ran.append(True)
        return jsonify({})

    app.add_url_rule("/api/cluster-wide", "cluster_wide", cluster_wide, methods=["POST"])
    response = api.client.post("/api/cluster-wide", headers=GUEST)
    assert response.status_code == 403
    body = response.get_json()
    assert body["type"] == "Forbidden"
    assert "cluster-admin on every app is needed" in body["error"]
    assert not ran
    assert api.client.post("/api/cluster-wide", headers=ADMIN).status_code == 200
    assert ran == [True]


def test_a_declaration_that_cannot_be_right_fails_at_import() -> None:
    with pytest.raises(ValueError, match="needs a role"):
        requires(None, scope="app")
    with pytest.raises(ValueError, match="takes no role"):
        requires(Role.VIEWER, scope="authenticated")
    with pytest.raises(ValueError, match="unknown scope"):
        requires(Role.VIEWER, scope="team")  # type: ignore[arg-type]


def test_head_and_options_of_an_app_scoped_route_are_checked_or_harmless(api: Api) -> None:
    assert api.call("POST", "/api/app", {"appName": "demo_app", **_APP_REST}).status_code == 204
    # OPTIONS is Flask's own answer (the allowed methods), no handler runs: not a leak, no 500.
    options = api.client.options("/api/app/demo_app", headers=ADMIN)
    assert options.status_code == 200 and "GET" in options.headers["Allow"]
    # HEAD runs the GET handler, and so its check: an app nobody sees is a 404, as for GET.
    assert api.client.head("/api/app/demo_app", headers=ADMIN).status_code == 200
    assert api.client.head("/api/app/no_such_app", headers=GUEST).status_code == 404


_APP_REST = {
    "appURL": "http://example.invalid/demo.tar.gz",
    "bootstrapScript": "bin/start.sh",
    "cpuCount": 0.5,
    "memoryMB": 64,
}

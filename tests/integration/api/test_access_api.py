"""`/api/access/users|grants|tokens` (issue 26) on a real ZooKeeper: the contract, who may do
what, what each caller sees, hostile bodies, quotas, and what the audit log is told."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from flask import g
from kazoo.client import KazooClient

from scheduler.model.access.records import MAX_TOKEN_TTL_S, decode_token, decode_user
from scheduler.storage.layout import ACCESS_TOKENS_USED as USED
from scheduler.storage.layout import access_token_path, access_user_path
from tests.integration.api.conftest import ADMIN, APP, GUEST, Api, make_api

PASSWORD = "correct horse battery"


def basic(user: str, password: str = PASSWORD) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass
class AccessApi(Api):
    """The term's API with what the audit log was told of each request (`note_change`)."""

    changes: list[dict[str, Any]] = field(default_factory=list)

    def user(self, name: str) -> dict[str, str]:
        """Create user `name` (as root) and return its Basic credentials."""
        answer = self.call("POST", "/api/access/users", {"name": name, "password": PASSWORD})
        assert answer.status_code == 201, answer.get_json()
        return basic(name)

    def grant(self, principal: str, role: str, app: str, headers: dict[str, str] = ADMIN) -> str:
        body = {"principal": principal, "role": role, "app": app}
        answer = self.call("POST", "/api/access/grants", body, headers=headers)
        assert answer.status_code == 201, answer.get_json()
        gid: str = answer.get_json()["id"]
        return gid

    def app(self, name: str) -> None:
        answer = self.call("POST", "/api/app", {**APP, "appName": name})
        assert answer.status_code == 204, answer.get_json()

    def written(self) -> dict[str, bytes]:
        """The namespace (`snapshot`) without the tokens' last-use times, which a request with
        a token writes whether or not it is refused."""
        return {k: v for k, v in self.snapshot().items() if not k.startswith(USED)}

    def items(self, path: str, headers: dict[str, str] = ADMIN) -> list[dict[str, Any]]:
        answer = self.call("GET", path, headers=headers)
        assert answer.status_code == 200, answer.get_json()
        found: list[dict[str, Any]] = answer.get_json()["items"]
        return found


def build(zk_client: KazooClient, namespace: str, **settings: str) -> AccessApi:
    """The term's API (`make_api`), recording what each request told the audit log."""
    made = make_api(zk_client, namespace, **settings)
    built = AccessApi(made.client, made.registry, made.actions, made.term)

    @made.client.application.after_request
    def _record(response: Any) -> Any:
        if "audit_changes" in g:
            built.changes.append(
                {"resource": g.get("audit_resource"), "app": g.get("audit_app"), **g.audit_changes}
            )
        return response

    return built


@pytest.fixture
def api(zk_client: KazooClient, zk_namespace: str) -> Iterator[AccessApi]:
    yield build(zk_client, zk_namespace)


def _error(answer: Any) -> tuple[int, str]:
    body = answer.get_json() or {}
    return answer.status_code, str(body.get("type"))


# -- users ----------------------------------------------------------------------------------------


def test_cluster_admin_creates_lists_and_deletes_users_whose_passwords_are_stored_hashed(
    api: AccessApi,
) -> None:
    answer = api.call("POST", "/api/access/users", {"name": "alice", "password": PASSWORD})
    assert answer.status_code == 201
    body = answer.get_json()
    assert body["name"] == "alice" and body["createdAt"].endswith("Z")
    stored = api.registry.get(access_user_path("alice"))
    assert stored is not None and PASSWORD.encode() not in stored
    user = decode_user(stored)
    assert user is not None and user.password_hash.startswith("scrypt:")
    assert [u["name"] for u in api.items("/api/access/users")] == ["alice"]
    assert set(api.items("/api/access/users")[0]) == {"name", "createdAt"}

    again = api.call("POST", "/api/access/users", {"name": "alice", "password": PASSWORD})
    assert _error(again) == (409, "Conflict")
    settings_account = api.call("POST", "/api/access/users", {"name": "root", "password": PASSWORD})
    assert _error(settings_account) == (409, "Conflict")

    assert api.call("DELETE", "/api/access/users/alice").status_code == 204
    assert api.registry.get(access_user_path("alice")) is None
    assert api.items("/api/access/users") == []
    assert _error(api.call("DELETE", "/api/access/users/alice")) == (404, "NotFound")
    assert all(PASSWORD not in json.dumps(change) for change in api.changes)
    assert api.changes[0] == {
        "resource": "user/alice",
        "app": None,
        "before": None,
        "after": {"name": "alice"},
    }


@pytest.mark.parametrize(
    ("body", "field_name"),
    [
        ({"name": "alice"}, "password"),
        ({"password": PASSWORD}, "name"),
        ({"name": "alice", "password": PASSWORD, "role": "cluster-admin"}, "role"),
        ({"name": "alice", "password": "short"}, "password"),
        ({"name": "alice", "password": "x" * 1025}, "password"),
        ({"name": "alice", "password": 12345678}, "password"),
        ({"name": "a/b", "password": PASSWORD}, "name"),
        ({"name": "..", "password": PASSWORD}, "name"),
        ({"name": "x" * 65, "password": PASSWORD}, "name"),
        ({"name": "al\u0000ice", "password": PASSWORD}, "name"),
        ({"name": "\u00e9lise", "password": PASSWORD}, "name"),
        ({"name": ["alice"], "password": PASSWORD}, "name"),
    ],
)
def test_a_bad_user_is_a_400_naming_the_field_and_writes_nothing(
    api: AccessApi, body: dict[str, Any], field_name: str
) -> None:
    before = api.written()
    answer = api.call("POST", "/api/access/users", body)
    assert _error(answer) == (400, "InvalidRequest")
    assert field_name in answer.get_json()["fields"]
    assert PASSWORD not in json.dumps(answer.get_json())
    assert api.written() == before


def test_bodies_that_are_not_a_json_object_are_refused(api: AccessApi) -> None:
    before = api.written()
    for path in ("/api/access/users", "/api/access/grants", "/api/access/tokens"):
        assert _error(api.call("POST", path, ["alice"]))[0] == 400
        assert _error(api.call("POST", path, raw="{not json"))[0] == 400
        text = api.client.post(path, data="name=alice", headers=ADMIN, content_type="text/plain")
        assert text.status_code == 415
    assert api.written() == before


def test_only_a_cluster_admin_manages_users(api: AccessApi) -> None:
    alice = api.user("alice")
    api.app("team_a")
    api.grant("user:alice", "app-admin", "team_a")
    before = api.written()
    for headers in (GUEST, alice):
        posted = api.call(
            "POST", "/api/access/users", {"name": "eve", "password": PASSWORD}, headers=headers
        )
        assert _error(posted) == (403, "Forbidden")
        assert _error(api.call("GET", "/api/access/users", headers=headers)) == (403, "Forbidden")
        deleted = api.call("DELETE", "/api/access/users/alice", headers=headers)
        assert _error(deleted) == (403, "Forbidden")
    assert api.call("GET", "/api/access/users", headers={}).status_code == 401
    assert api.written() == before


def test_deleting_a_user_deletes_its_grants_and_tokens(api: AccessApi) -> None:
    alice = api.user("alice")
    api.user("bob")
    api.app("team_a")
    api.grant("user:alice", "app-admin", "team_a")
    kept = api.grant("user:bob", "viewer", "team_a")
    made = api.call(
        "POST",
        "/api/access/tokens",
        {"name": "ci", "role": "viewer", "app": "team_a"},
        headers=alice,
    )
    assert made.status_code == 201
    token = made.get_json()
    assert api.call("GET", "/api/app/team_a", headers=bearer(token["token"])).status_code == 200

    assert api.call("DELETE", "/api/access/users/alice").status_code == 204

    assert [g["id"] for g in api.items("/api/access/grants")] == [kept]
    assert api.items("/api/access/tokens") == []
    assert api.registry.get(access_token_path(token["id"])) is None
    refused = api.call("GET", "/api/app/team_a", headers=bearer(token["token"]))
    assert refused.status_code == 401
    assert api.changes[-1]["before"]["tokens"] == [token["id"]]
    assert token["token"] not in json.dumps(api.changes)


def test_user_quota_is_a_409_naming_it(zk_client: KazooClient, zk_namespace: str) -> None:
    api = build(zk_client, zk_namespace, max_access_users="1")
    api.user("alice")
    before = api.written()
    answer = api.call("POST", "/api/access/users", {"name": "bob", "password": PASSWORD})
    assert _error(answer) == (409, "QuotaExceeded")
    assert answer.get_json()["quota"] == "max_access_users"
    assert api.written() == before


# -- grants ---------------------------------------------------------------------------------------


def test_grants_are_made_listed_filtered_and_deleted(api: AccessApi) -> None:
    api.user("alice")
    api.user("bob")
    api.app("team_a")
    answer = api.call(
        "POST", "/api/access/grants", {"principal": "user:alice", "role": "editor", "app": "team_a"}
    )
    assert answer.status_code == 201
    grant = answer.get_json()
    assert grant == {
        "id": grant["id"],
        "principal": "user:alice",
        "role": "editor",
        "app": "team_a",
    }
    everywhere = api.grant("user:bob", "viewer", "*")
    admin = api.grant("user:bob", "cluster-admin", "*")
    assert len(api.items("/api/access/grants")) == 3
    assert [g["id"] for g in api.items("/api/access/grants?app=team_a")] == [grant["id"]]
    by_bob = {g["id"] for g in api.items("/api/access/grants?principal=user:bob")}
    assert by_bob == {everywhere, admin}
    assert api.items("/api/access/grants?app=team_a&principal=user:bob") == []

    twice = api.call(
        "POST", "/api/access/grants", {"principal": "user:alice", "role": "editor", "app": "team_a"}
    )
    assert _error(twice) == (409, "Conflict")
    assert api.call("DELETE", f"/api/access/grants/{grant['id']}").status_code == 204
    assert _error(api.call("DELETE", f"/api/access/grants/{grant['id']}")) == (404, "NotFound")
    assert api.changes[-1] == {
        "resource": f"grant/{grant['id']}",
        "app": "team_a",
        "before": {"principal": "user:alice", "role": "editor", "app": "team_a"},
        "after": None,
    }


@pytest.mark.parametrize(
    ("body", "field_name"),
    [
        ({"principal": "user:nobody", "role": "viewer", "app": "team_a"}, "principal"),
        ({"principal": "user:root", "role": "viewer", "app": "team_a"}, "principal"),
        ({"principal": "token:0123456789ab", "role": "viewer", "app": "team_a"}, "principal"),
        ({"principal": "alice", "role": "viewer", "app": "team_a"}, "principal"),
        ({"principal": "user:alice", "role": "owner", "app": "team_a"}, "role"),
        ({"principal": "user:alice", "role": 3, "app": "team_a"}, "role"),
        ({"principal": "user:alice", "role": "cluster-admin", "app": "team_a"}, "app"),
        ({"principal": "user:alice", "role": "viewer", "app": ""}, "app"),
        ({"principal": "user:alice", "role": "viewer", "app": "a/b"}, "app"),
        ({"principal": "user:alice", "role": "viewer", "app": "x" * 101}, "app"),
        ({"principal": "user:alice", "role": "viewer"}, "app"),
        ({"principal": "user:alice", "role": "viewer", "app": "team_a", "id": "x"}, "id"),
    ],
)
def test_a_bad_grant_is_a_400_naming_the_field_and_writes_nothing(
    api: AccessApi, body: dict[str, Any], field_name: str
) -> None:
    api.user("alice")
    before = api.written()
    answer = api.call("POST", "/api/access/grants", body)
    assert _error(answer) == (400, "InvalidRequest")
    assert field_name in answer.get_json()["fields"]
    assert api.written() == before


def test_an_app_admin_grants_on_its_app_only_and_sees_its_apps_grants(api: AccessApi) -> None:
    alice = api.user("alice")
    bob = api.user("bob")
    api.user("carol")
    for name in ("team_a", "team_b", "team_c"):
        api.app(name)
    own = api.grant("user:alice", "app-admin", "team_a")
    api.grant("user:alice", "viewer", "team_c")
    others = api.grant("user:carol", "editor", "team_b")

    made = api.grant("user:bob", "editor", "team_a", headers=alice)
    api.grant("user:carol", "app-admin", "team_a", headers=alice)
    before = api.written()
    for body, refusal in (
        ({"principal": "user:bob", "role": "viewer", "app": "team_b"}, (404, "NotFound")),
        ({"principal": "user:bob", "role": "viewer", "app": "team_c"}, (403, "Forbidden")),
        ({"principal": "user:bob", "role": "viewer", "app": "*"}, (403, "Forbidden")),
        ({"principal": "user:bob", "role": "cluster-admin", "app": "*"}, (403, "Forbidden")),
    ):
        answer = api.call("POST", "/api/access/grants", body, headers=alice)
        assert _error(answer) == refusal, body
    hidden = api.call("DELETE", f"/api/access/grants/{others}", headers=alice)
    assert _error(hidden) == (404, "NotFound")
    assert "team_b" not in hidden.get_json()["error"]
    assert api.written() == before

    seen = {g["id"] for g in api.items("/api/access/grants", headers=alice)}
    assert others not in seen and {own, made} <= seen
    assert api.items("/api/access/grants?app=team_b", headers=alice) == []
    assert [g["id"] for g in api.items("/api/access/grants", headers=bob)] == [made]
    # bob sees his own grant, but an editor may not delete grants.
    assert _error(api.call("DELETE", f"/api/access/grants/{made}", headers=bob))[0] == 403
    assert api.call("DELETE", f"/api/access/grants/{made}", headers=alice).status_code == 204


def test_grant_quota_is_a_409_naming_it(zk_client: KazooClient, zk_namespace: str) -> None:
    api = build(zk_client, zk_namespace, max_access_grants="1")
    api.user("alice")
    api.grant("user:alice", "viewer", "team_a")
    answer = api.call(
        "POST", "/api/access/grants", {"principal": "user:alice", "role": "viewer", "app": "x"}
    )
    assert _error(answer) == (409, "QuotaExceeded")
    assert answer.get_json()["quota"] == "max_access_grants"


# -- tokens ---------------------------------------------------------------------------------------


def test_a_token_is_shown_once_stored_as_a_digest_works_and_stops_when_revoked(
    api: AccessApi,
) -> None:
    api.app("team_a")
    answer = api.call(
        "POST",
        "/api/access/tokens",
        {"name": "CI deploys", "role": "operator", "app": "team_a", "expiresInSeconds": 3600},
    )
    assert answer.status_code == 201
    made = answer.get_json()
    assert set(made) == {"id", "token", "name", "owner", "role", "app", "createdAt", "expiresAt"}
    assert made["token"].startswith(f"ejc_{made['id']}_")
    assert (made["owner"], made["role"], made["app"]) == ("user:root", "operator", "team_a")
    stored = api.registry.get(access_token_path(made["id"]))
    assert stored is not None and made["token"].split("_")[2].encode() not in stored
    record = decode_token(stored)
    assert record is not None and record.expires_at_ms == record.created_at_ms + 3_600_000

    listed = api.items("/api/access/tokens")
    assert listed == [
        {
            "id": made["id"],
            "name": "CI deploys",
            "owner": "user:root",
            "role": "operator",
            "app": "team_a",
            "createdAt": made["createdAt"],
            "expiresAt": made["expiresAt"],
            "lastUsedAt": None,
        }
    ]
    assert api.call("GET", "/api/app/team_a", headers=bearer(made["token"])).status_code == 200
    (used,) = api.items("/api/access/tokens")
    assert used["lastUsedAt"] is not None and used["lastUsedAt"] >= made["createdAt"]
    assert made["token"] not in json.dumps(api.changes)
    assert api.changes[-1]["after"]["owner"] == "user:root"

    assert api.call("DELETE", f"/api/access/tokens/{made['id']}").status_code == 204
    assert api.items("/api/access/tokens") == []
    assert api.call("GET", "/api/app/team_a", headers=bearer(made["token"])).status_code == 401
    assert _error(api.call("DELETE", f"/api/access/tokens/{made['id']}")) == (404, "NotFound")


@pytest.mark.parametrize(
    ("body", "field_name"),
    [
        *(
            (
                {"name": "ci", "role": "viewer", "app": "team_a", "expiresInSeconds": ttl},
                "expiresInSeconds",
            )
            for ttl in (59, MAX_TOKEN_TTL_S + 1, "3600", True, 60.5)
        ),
        ({"name": "", "role": "viewer", "app": "team_a"}, "name"),
        ({"name": "x" * 101, "role": "viewer", "app": "team_a"}, "name"),
        ({"name": "ci\nrun", "role": "viewer", "app": "team_a"}, "name"),
        ({"role": "viewer", "app": "team_a"}, "name"),
        ({"name": "ci", "role": "root", "app": "team_a"}, "role"),
        ({"name": "ci", "role": "cluster-admin", "app": "team_a"}, "app"),
        ({"name": "ci", "role": "viewer", "app": None}, "app"),
        ({"name": "ci", "role": "viewer", "app": "team_a", "owner": "user:bob"}, "owner"),
        ({"name": "ci", "role": "viewer", "app": "team_a", "token": "ejc_x"}, "token"),
    ],
)
def test_a_bad_token_request_is_a_400_naming_the_field_and_writes_nothing(
    api: AccessApi, body: dict[str, Any], field_name: str
) -> None:
    before = api.written()
    answer = api.call("POST", "/api/access/tokens", body)
    assert _error(answer) == (400, "InvalidRequest")
    assert field_name in answer.get_json()["fields"]
    assert api.written() == before


def test_token_rules_follow_the_makers_roles(api: AccessApi) -> None:
    alice = api.user("alice")
    bob = api.user("bob")
    for name in ("team_a", "team_b", "team_c"):
        api.app(name)
    api.grant("user:alice", "app-admin", "team_a")
    api.grant("user:alice", "editor", "team_c")
    api.grant("user:bob", "editor", "team_a")

    made = api.call(
        "POST",
        "/api/access/tokens",
        {"name": "ci", "role": "editor", "app": "team_a"},
        headers=alice,
    )
    assert made.status_code == 201 and made.get_json()["owner"] == "user:alice"
    alice_token = made.get_json()
    before = api.written()
    for headers, body, refusal in (
        (bob, {"name": "x", "role": "viewer", "app": "team_a"}, (403, "Forbidden")),
        (alice, {"name": "x", "role": "viewer", "app": "team_b"}, (404, "NotFound")),
        (alice, {"name": "x", "role": "viewer", "app": "team_c"}, (403, "Forbidden")),
        (alice, {"name": "x", "role": "viewer", "app": "*"}, (403, "Forbidden")),
        (alice, {"name": "x", "role": "cluster-admin", "app": "*"}, (403, "Forbidden")),
        (GUEST, {"name": "x", "role": "viewer", "app": "team_a"}, (403, "Forbidden")),
        # Alice's editor token holds editor, not app-admin: it may make no token.
        (
            bearer(alice_token["token"]),
            {"name": "x", "role": "viewer", "app": "team_a"},
            (403, "Forbidden"),
        ),
    ):
        answer = api.call("POST", "/api/access/tokens", body, headers=headers)
        assert _error(answer) == refusal, (headers, body)
    assert api.written() == before

    # Not even an app-admin token makes a token: a child would outlive its parent's expiry and
    # revocation (a 60 s token could otherwise leave one that never expires).
    admin_token = api.call(
        "POST",
        "/api/access/tokens",
        {"name": "admin", "role": "app-admin", "app": "team_a", "expiresInSeconds": 60},
        headers=alice,
    ).get_json()
    before = api.written()
    child = api.call(
        "POST",
        "/api/access/tokens",
        {"name": "child", "role": "viewer", "app": "team_a"},
        headers=bearer(admin_token["token"]),
    )
    assert _error(child) == (403, "Forbidden")
    assert "cannot make tokens" in child.get_json()["error"]
    assert api.written() == before
    everywhere = api.call(
        "POST", "/api/access/tokens", {"name": "all", "role": "viewer", "app": "*"}
    )
    assert everywhere.status_code == 201 and everywhere.get_json()["app"] == "*"


def test_token_lists_and_revocation_follow_ownership_and_app_admins(api: AccessApi) -> None:
    alice = api.user("alice")
    bob = api.user("bob")
    carol = api.user("carol")
    api.app("team_a")
    api.app("team_b")
    api.grant("user:alice", "app-admin", "team_a")
    api.grant("user:bob", "app-admin", "team_a")
    api.grant("user:carol", "app-admin", "team_b")

    def make(headers: dict[str, str], name: str, app: str) -> dict[str, Any]:
        answer = api.call(
            "POST",
            "/api/access/tokens",
            {"name": name, "role": "viewer", "app": app},
            headers=headers,
        )
        assert answer.status_code == 201
        made: dict[str, Any] = answer.get_json()
        return made

    a1 = make(alice, "a1", "team_a")
    c1 = make(carol, "c1", "team_b")
    r1 = make(ADMIN, "r1", "*")
    assert {t["id"] for t in api.items("/api/access/tokens")} == {a1["id"], c1["id"], r1["id"]}
    assert [t["id"] for t in api.items("/api/access/tokens", headers=alice)] == [a1["id"]]
    assert [t["id"] for t in api.items("/api/access/tokens", headers=bob)] == [a1["id"]]
    assert [t["id"] for t in api.items("/api/access/tokens", headers=carol)] == [c1["id"]]
    assert all("token" not in t and "digest" not in t for t in api.items("/api/access/tokens"))
    # A token sees its owner's tokens on the apps it sees.
    seen_by_token = api.items("/api/access/tokens", headers=bearer(a1["token"]))
    assert [t["id"] for t in seen_by_token] == [a1["id"]]
    assert seen_by_token[0]["lastUsedAt"] is None or seen_by_token[0]["lastUsedAt"].endswith("Z")

    before = api.written()
    hidden = api.call("DELETE", f"/api/access/tokens/{c1['id']}", headers=alice)
    assert _error(hidden) == (404, "NotFound")
    assert _error(api.call("DELETE", f"/api/access/tokens/{r1['id']}", headers=bob))[0] == 404
    assert _error(api.call("DELETE", "/api/access/tokens/NOT-AN-ID", headers=alice))[0] == 400
    assert api.written() == before
    # An app-admin of team_a revokes alice's token on team_a.
    assert api.call("DELETE", f"/api/access/tokens/{a1['id']}", headers=bob).status_code == 204
    assert api.call("DELETE", f"/api/access/tokens/{c1['id']}", headers=carol).status_code == 204


def test_token_quota_is_a_409_naming_it(zk_client: KazooClient, zk_namespace: str) -> None:
    api = build(zk_client, zk_namespace, max_access_tokens="1")
    body = {"name": "ci", "role": "viewer", "app": "*"}
    assert api.call("POST", "/api/access/tokens", body).status_code == 201
    answer = api.call("POST", "/api/access/tokens", body)
    assert _error(answer) == (409, "QuotaExceeded")
    assert answer.get_json()["quota"] == "max_access_tokens"


# -- lists ----------------------------------------------------------------------------------------


def test_lists_page_with_limit_and_cursor_and_check_their_queries(api: AccessApi) -> None:
    for name in ("t1", "t2", "t3"):
        api.call("POST", "/api/access/tokens", {"name": name, "role": "viewer", "app": "*"})
    first = api.call("GET", "/api/access/tokens?limit=2").get_json()
    assert len(first["items"]) == 2 and first["nextCursor"]
    second = api.call("GET", f"/api/access/tokens?limit=2&cursor={first['nextCursor']}")
    rest = second.get_json()
    assert len(rest["items"]) == 1 and rest["nextCursor"] is None
    ids = [t["id"] for t in first["items"] + rest["items"]]
    assert ids == sorted(ids) and len(set(ids)) == 3
    for query, name in (
        ("limit=0", "limit"),
        ("cursor=abc", "cursor"),
        ("owner=user:root", "owner"),
    ):
        answer = api.call("GET", f"/api/access/tokens?{query}")
        assert _error(answer)[0] == 400 and name in answer.get_json()["fields"]
    for query, name in (
        ("app=a/b", "app"),
        ("principal=alice", "principal"),
        ("app=" + "x" * 300, "app"),
    ):
        answer = api.call("GET", f"/api/access/grants?{query}")
        assert _error(answer)[0] == 400 and name in answer.get_json()["fields"], query
    assert _error(api.call("DELETE", "/api/access/grants/xyz"))[0] == 400
    assert _error(api.call("DELETE", "/api/access/users/a%20b"))[0] == 400


def test_with_auth_off_users_and_grants_are_managed_but_no_token_is_made(
    zk_client: KazooClient, zk_namespace: str
) -> None:
    api = build(zk_client, zk_namespace, auth_enabled="false")
    assert (
        api.call(
            "POST", "/api/access/users", {"name": "alice", "password": PASSWORD}, headers={}
        ).status_code
        == 201
    )
    api.grant("user:alice", "editor", "team_a", headers={})
    before = api.written()
    made = api.call(
        "POST", "/api/access/tokens", {"name": "ci", "role": "viewer", "app": "*"}, headers={}
    )
    assert _error(made) == (409, "Conflict")
    assert "auth_enabled is false" in made.get_json()["error"]
    assert api.written() == before
    assert len(api.items("/api/access/grants", headers={})) == 1


def test_an_app_deleted_and_made_again_keeps_none_of_its_grants_and_tokens(
    api: AccessApi,
) -> None:
    alice = api.user("alice")
    api.app("x_app")
    api.app("y_app")
    api.grant("user:alice", "app-admin", "x_app")
    kept = api.grant("user:alice", "viewer", "y_app")
    made = api.call(
        "POST",
        "/api/access/tokens",
        {"name": "ci", "role": "editor", "app": "x_app"},
        headers=alice,
    )
    assert made.status_code == 201
    token = bearer(made.get_json()["token"])
    assert api.call("GET", "/api/app/x_app", headers=token).status_code == 200

    assert api.call("DELETE", "/api/app/x_app").status_code == 204
    assert [g["app"] for g in api.items("/api/access/grants")] == ["y_app"]
    assert api.items("/api/access/tokens") == []
    assert api.call("GET", "/api/app/x_app", headers=token).status_code == 401

    # Another team's app of the same name opens to nobody of the old one.
    api.app("x_app")
    assert _error(api.call("GET", "/api/app/x_app", headers=alice)) == (404, "NotFound")
    assert [g["id"] for g in api.items("/api/access/grants")] == [kept]

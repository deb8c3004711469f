"""Users and API tokens at the leader's API on a real ZooKeeper (issue 26): records written by
hand with the model's codecs, the API's follower refreshed as the access API does after its own
writes; who a request is (`GET /api/session`'s principal and rights), a token's console session
and its end, the login's body checks, a token's last use written by the leader."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient
from werkzeug.security import generate_password_hash

from scheduler.edge.authenticator import Authenticator
from scheduler.model.access.records import (
    TokenRecord,
    UserRecord,
    encode_grant,
    encode_token,
    encode_user,
)
from scheduler.model.access.roles import Grant, Role
from scheduler.model.access.tokens import new_token, secret_digest
from scheduler.storage.layout import (
    access_grant_path,
    access_token_path,
    access_token_used_path,
    access_user_path,
    decode_count,
)
from tests.integration.api.conftest import Api, make_api

ORIGIN = "http://localhost"
NOW_MS = 1_700_000_000_000
PROBE = "/api/app/no_such_app"  # 404 with accepted credentials, 401 without


@pytest.fixture
def api(zk_client: KazooClient, zk_namespace: str) -> Iterator[Api]:
    yield make_api(zk_client, zk_namespace)


def authenticator(api: Api) -> Authenticator:
    auth = api.client.application.extensions["ejc_authenticator"]
    assert isinstance(auth, Authenticator)
    return auth


def add_alice(api: Api, role: Role = Role.EDITOR) -> None:
    hashed = generate_password_hash("alice-pass", method="pbkdf2:sha256:1")
    api.registry.create(access_user_path("alice"), encode_user(UserRecord("alice", hashed, NOW_MS)))
    grant = Grant("a" * 16, "user:alice", role, "team_a")
    api.registry.create(access_grant_path(grant.id), encode_grant(grant))
    authenticator(api).access.refresh(api.registry)


def add_token(api: Api, role: Role = Role.OPERATOR, expires_at_ms: int | None = None) -> str:
    text, parts = new_token()
    record = TokenRecord(
        parts.id,
        "ci",
        "user:alice",
        role,
        "team_a",
        secret_digest(parts.secret),
        NOW_MS,
        expires_at_ms,
    )
    api.registry.create(access_token_path(parts.id), encode_token(record))
    authenticator(api).access.refresh(api.registry)
    return text


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_a_token_request_says_which_token_and_its_rights(api: Api) -> None:
    add_alice(api)
    text = add_token(api)
    token_id = text.split("_")[1]
    answer = api.client.get("/api/session", headers={"Authorization": f"Bearer {text}"})
    assert answer.status_code == 200
    body = answer.get_json()
    assert body["principal"] == f"token:{token_id}"
    assert body["rights"] == {"everywhere": None, "apps": {"team_a": "operator"}}
    assert body["role"] == "guest"
    assert text.split("_")[2] not in answer.get_data(as_text=True)


def test_a_stored_users_basic_credentials_are_accepted_with_its_grants(api: Api) -> None:
    add_alice(api)
    body = api.client.get("/api/session", headers=basic("alice", "alice-pass")).get_json()
    assert body["principal"] == "user:alice"
    assert body["rights"] == {"everywhere": None, "apps": {"team_a": "editor"}}
    assert (
        api.client.get("/api/session", headers=basic("alice", "wrong-pass")).get_json()["principal"]
        is None
    )
    root = api.client.get("/api/session", headers=basic("root", "root")).get_json()
    assert root["principal"] == "user:root" and root["rights"]["everywhere"] == "cluster-admin"


def test_nobody_has_no_principal(api: Api) -> None:
    body = api.client.get("/api/session").get_json()
    assert body["principal"] is None and body["rights"] is None and body["role"] is None


def test_a_token_login_issues_a_session_that_ends_when_the_token_is_revoked(api: Api) -> None:
    add_alice(api)
    text = add_token(api)
    token_id = text.split("_")[1]
    login = api.client.post("/api/session", json={"token": text}, headers={"Origin": ORIGIN})
    assert login.status_code == 200, login.get_json()
    body = login.get_json()
    assert body["principal"] == f"token:{token_id}" and body["expiresAt"].endswith("Z")
    assert text.split("_")[2] not in login.headers["Set-Cookie"]  # the secret stays out
    who = api.client.get("/api/session").get_json()  # the test client keeps the cookie
    assert who["principal"] == f"token:{token_id}"
    assert api.client.get(PROBE).status_code == 404
    api.registry.delete(access_token_path(token_id))  # revoked
    authenticator(api).access.refresh(api.registry)
    assert api.client.get("/api/session").get_json()["principal"] is None
    assert api.client.get(PROBE).status_code == 401


def test_a_wrong_token_login_is_refused_as_a_failed_login(api: Api) -> None:
    text = add_token(api)
    wrong = text[:-1] + ("0" if text[-1] != "0" else "1")
    answer = api.client.post("/api/session", json={"token": wrong}, headers={"Origin": ORIGIN})
    assert answer.status_code == 401
    assert "Set-Cookie" not in answer.headers
    assert authenticator(api).counters["failed"] == 1


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"token": "ejc_x", "user": "alice"}, "user"),
        ({"token": 5}, "token"),
        ({"token": ""}, "token"),
        ({"token": "e" * 5000}, "token"),
    ],
)
def test_a_token_login_body_is_checked(api: Api, body: dict[str, object], named: str) -> None:
    answer = api.client.post("/api/session", json=body, headers={"Origin": ORIGIN})
    assert answer.status_code == 400
    assert named in answer.get_json()["error"]
    assert authenticator(api).counters["failed"] == 0  # refused before anything was checked


def test_the_leader_writes_a_tokens_last_use(api: Api) -> None:
    add_alice(api)
    text = add_token(api)
    token_id = text.split("_")[1]
    assert api.registry.get(access_token_used_path(token_id)) is None
    assert api.client.get(PROBE, headers={"Authorization": f"Bearer {text}"}).status_code == 404
    stored = decode_count(api.registry.get(access_token_used_path(token_id)))
    assert stored > NOW_MS
    assert authenticator(api).access.last_used_ms(token_id) == stored

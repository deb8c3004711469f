"""Console sessions on the leader's API with a real ZooKeeper (issue 23): a login issues a signed
cookie, never the password; the cookie authenticates reads, and writes from the console's own
origin only; a logout revokes it on every replica (here: a second replica's Sessions following
the same namespace)."""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from scheduler.edge.authenticator import authenticator_for
from scheduler.edge.sessions import COOKIE_NAME, Sessions
from scheduler.model.settings import load_settings
from scheduler.storage.layout import REVOKED_SESSIONS
from scheduler.storage.registry import Registry
from scheduler.storage.transactions import FencedWriter
from tests.integration.api.conftest import APP, Api, make_api
from tests.support.waiting import wait_for

ORIGIN = "http://localhost"  # the Flask test client's own origin
PROBE = "/api/app/no_such_app"  # 404 with accepted credentials, 401 without


@pytest.fixture
def api(zk_client: KazooClient, zk_namespace: str) -> Iterator[Api]:
    yield make_api(zk_client, zk_namespace)


def login(api: Api, user: str = "root", password: str = "root") -> str:
    answer = api.client.post(
        "/api/session", json={"user": user, "password": password}, headers={"Origin": ORIGIN}
    )
    assert answer.status_code == 200, answer.get_json()
    cookie = answer.headers["Set-Cookie"]
    token = cookie.split(";", 1)[0].split("=", 1)[1]
    return token


def test_a_login_issues_an_httponly_strict_cookie_that_holds_no_password(api: Api) -> None:
    answer = api.client.post(
        "/api/session", json={"user": "root", "password": "root"}, headers={"Origin": ORIGIN}
    )
    assert answer.status_code == 200
    body = answer.get_json()
    assert body["user"] == "root" and body["role"] == "root" and body["expiresAt"].endswith("Z")
    assert answer.headers["identify"] == "root"
    assert answer.headers["Cache-Control"] == "no-store"
    cookie = answer.headers["Set-Cookie"]
    attributes = [part.strip() for part in cookie.split(";")]
    assert attributes[0].startswith(f"{COOKIE_NAME}=")
    assert {"HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=28800"} <= set(attributes)
    assert "Secure" not in attributes  # plain http here
    token = attributes[0].split("=", 1)[1]
    decoded = base64.urlsafe_b64decode(token.split(".")[0] + "==")
    assert b"root:root" not in decoded and b'"root"' in decoded  # user and role, no password
    assert base64.b64encode(b"root:root") not in token.encode()


def test_a_login_over_https_sets_a_secure_cookie(api: Api) -> None:
    answer = api.client.post(
        "/api/session",
        json={"user": "guest", "password": "guest"},
        headers={"Origin": "https://localhost"},
        base_url="https://localhost",
    )
    assert answer.status_code == 200
    assert "Secure" in [p.strip() for p in answer.headers["Set-Cookie"].split(";")]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"user": "root"}, "password"),
        ({"user": "root", "password": "root", "remember": True}, "remember"),
        ({"user": 1, "password": "root"}, "user"),
        ({"user": "root", "password": "x" * 5000}, "password"),
    ],
)
def test_a_malformed_login_is_a_400_naming_the_field(api: Api, body: object, field: str) -> None:
    answer = api.client.post("/api/session", json=body, headers={"Origin": ORIGIN})
    assert answer.status_code == 400
    assert field in answer.get_json()["fields"]
    assert "Set-Cookie" not in answer.headers


def test_a_wrong_password_is_a_401_without_a_cookie_or_a_browser_dialog(api: Api) -> None:
    answer = api.client.post(
        "/api/session",
        json={"user": "root", "password": "wrong"},
        headers={"Origin": ORIGIN, "Sec-Fetch-Mode": "cors"},
    )
    assert answer.status_code == 401
    assert "Set-Cookie" not in answer.headers
    assert "WWW-Authenticate" not in answer.headers  # the console shows its own message


def test_the_cookie_reads_and_writes_from_the_own_origin_only(api: Api) -> None:
    token = login(api)
    api.client.set_cookie(COOKIE_NAME, token)
    whoami = api.client.get("/api/session")
    assert whoami.status_code == 200 and whoami.get_json()["role"] == "root"
    assert api.client.get(PROBE).status_code == 404
    # A write with the cookie but without the console's own Origin: refused, nothing written.
    for headers in ({}, {"Origin": "http://localhost:9999"}, {"Origin": "http://evil.example"}):
        refused = api.client.post("/api/app", json=APP, headers=headers)
        assert refused.status_code == 403, headers
        assert refused.get_json()["type"] == "CrossOriginRefused"
    assert api.registry.get(f"/config/app/{APP['appName']}") is None
    written = api.client.post("/api/app", json=APP, headers={"Origin": ORIGIN})
    assert written.status_code == 204
    # A guest's session reads but may not write.
    api.client.set_cookie(COOKIE_NAME, login(api, "guest", "guest"))
    assert api.client.get(PROBE).status_code == 404
    assert (
        api.client.delete(f"/api/app/{APP['appName']}", headers={"Origin": ORIGIN}).status_code
        == 403
    )


def test_a_forged_or_foreign_token_is_refused(api: Api) -> None:
    token = login(api, "guest", "guest")
    body, mac = token.split(".")
    forged = base64.urlsafe_b64encode(
        base64.urlsafe_b64decode(body + "==").replace(b'"guest"', b'"root"')
    ).rstrip(b"=")
    assert forged.decode() != body
    other_cluster = Sessions(load_settings({}, {}, {"auth_admin_password": "other"}))
    foreign, _ = other_cluster.issue("root", "root")
    for bad in (f"{forged.decode()}.{mac}", body + "." + mac[::-1], foreign, "x" * 3000, "a.b"):
        api.client.set_cookie(COOKIE_NAME, bad)
        answer = api.client.get(PROBE)
        assert answer.status_code == 401
        assert answer.get_json()["type"] == "Unauthorized"
        assert api.client.get("/api/session").get_json()["role"] is None  # nobody


def test_a_logout_revokes_the_session_on_every_replica(
    api: Api, zk_client: KazooClient, zk_namespace: str
) -> None:
    # Another replica of the same cluster: its own Sessions following the same namespace.
    settings = load_settings({}, {}, {"time_zone": "UTC"})
    other = Sessions(settings)
    woken = threading.Event()
    other_registry = Registry(zk_client, zk_namespace)
    assert other.follow(other_registry, woken.set)
    token = login(api)
    assert other.check(token) is not None  # the other replica accepts this cluster's token

    api.client.set_cookie(COOKIE_NAME, token)
    out = api.client.delete("/api/session", headers={"Origin": ORIGIN})
    assert out.status_code == 204
    assert "Max-Age=0" in out.headers["Set-Cookie"]
    # Refused at once where it was logged out, and after its watch fired everywhere else.
    api.client.set_cookie(COOKIE_NAME, token)
    assert api.client.get(PROBE).status_code == 401
    assert len(api.registry.children(REVOKED_SESSIONS)) == 1
    wait_for(woken.is_set, 5, message="the other replica's watch to fire")
    assert other.follow(other_registry, woken.set)
    assert other.check(token) is None
    # A session that was not logged out still works there.
    assert other.check(login(api)) is not None


def test_revocations_are_bounded_and_pruned(api: Api, zk_client: KazooClient) -> None:
    auth = authenticator_for(load_settings({}, {}, {}))  # any: only its Sessions is used
    sessions = auth.sessions
    writer = FencedWriter(api.registry, api.term.fence)
    # An expired revocation is pruned by the next logout.
    api.registry.ensure(REVOKED_SESSIONS)
    api.registry.create(f"{REVOKED_SESSIONS}/1000-{'a' * 32}", b"")
    _, session = sessions.issue("root", "root")
    sessions.revoke(api.registry, writer, session)
    assert api.registry.children(REVOKED_SESSIONS) == [f"{session.expires_at_ms}-{session.id}"]


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"not json",
        b"[]",
        b'"root:root"',
        b'{"user": "\\ud800", "password": "\\udfff"}',
        b'{"user": "root\\u0000", "password": "root"}',
        b'{"user": {"a": 1}, "password": ["root"]}',
        b"[" * 5000 + b"]" * 5000,
        b'{"user": "root", "password": "root", "user": "guest"}',
    ],
)
def test_hostile_login_bodies_are_refused_below_500_and_write_nothing(api: Api, raw: bytes) -> None:
    before = api.snapshot()
    answer = api.client.post(
        "/api/session", data=raw, content_type="application/json", headers={"Origin": ORIGIN}
    )
    assert 400 <= answer.status_code < 500 or answer.status_code == 200, answer.status_code
    if answer.status_code != 200:
        assert "Set-Cookie" not in answer.headers
        assert isinstance(answer.get_json()["error"], str)
    assert api.snapshot() == before

"""Console session tokens (scheduler.edge.sessions): signed, expiring, bound to one cluster's
settings, and read from a Cookie header defensively. No ZooKeeper here (revocation across
replicas is in tests/integration/api/test_sessions.py)."""

from __future__ import annotations

import base64
import json

import pytest

from scheduler.edge.authenticator import Authenticator
from scheduler.edge.console import security_headers
from scheduler.edge.sessions import (
    COOKIE_NAME,
    Sessions,
    clear_cookie,
    session_cookie,
    session_token,
)
from scheduler.model.settings import load_settings


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def sessions(clock: Clock, **settings: str) -> Sessions:
    return Sessions(
        load_settings({}, {}, {"auth_session_timeout_seconds": "600", **settings}), clock=clock
    )


def test_a_token_says_who_and_until_when_and_expires() -> None:
    clock = Clock()
    issuer = sessions(clock)
    token, session = issuer.issue("root", "root")
    checked = issuer.check(token)
    assert checked == session
    assert session.expires_at_ms - session.issued_at_ms == 600_000
    clock.now += 599
    assert issuer.check(token) is not None
    clock.now += 1
    assert issuer.check(token) is None


def test_each_token_has_its_own_id() -> None:
    issuer = sessions(Clock())
    ids = {issuer.issue("root", "root")[1].id for _ in range(50)}
    assert len(ids) == 50


def test_a_changed_payload_or_signature_is_refused() -> None:
    issuer = sessions(Clock())
    token, _ = issuer.issue("guest", "guest")
    body, mac = token.split(".")
    fields = json.loads(base64.urlsafe_b64decode(body + "=="))
    fields[3] = "root"  # promote the guest
    forged = base64.urlsafe_b64encode(json.dumps(fields).encode()).rstrip(b"=").decode()
    for bad in (
        f"{forged}.{mac}",
        f"{body}.{mac[:-2]}AA",
        body,
        f"{body}.",
        "",
        ".",
        "€.€",
        f"{body}.{mac}" + "x" * 1000,
    ):
        assert issuer.check(bad) is None, bad


def test_another_clusters_or_an_old_passwords_token_is_refused() -> None:
    clock = Clock()
    token, _ = sessions(clock).issue("root", "root")
    assert sessions(clock).check(token) is not None  # another replica of the same cluster
    assert sessions(clock, zk_namespace="other").check(token) is None
    assert sessions(clock, auth_admin_password="changed").check(token) is None


def test_the_cookie_is_httponly_strict_and_secure_only_over_https() -> None:
    plain = session_cookie("tok", 600, secure=False)
    assert plain == f"{COOKIE_NAME}=tok; Path=/; Max-Age=600; HttpOnly; SameSite=Strict"
    assert session_cookie("tok", 600, secure=True).endswith("; Secure")
    assert "Max-Age=0" in clear_cookie(False)


@pytest.mark.parametrize(
    ("header", "found"),
    [
        (f"{COOKIE_NAME}=abc", "abc"),
        (f"other=1; {COOKIE_NAME}=abc; third=x", "abc"),
        (f'{COOKIE_NAME}="abc"', "abc"),
        (f"x{COOKIE_NAME}=abc", None),
        (f"{COOKIE_NAME}=", None),
        ("garbage;;;==", None),
        (None, None),
        (f"{COOKIE_NAME}=" + "a" * 9000, None),
    ],
)
def test_the_token_is_read_from_the_cookie_header(header: str | None, found: str | None) -> None:
    assert session_token(header) == found


def test_the_authenticator_takes_basic_first_then_the_cookie() -> None:
    auth = Authenticator(load_settings({}, {}, {}))
    token, _ = auth.sessions.issue("guest", "guest")
    cookie = f"{COOKIE_NAME}={token}"
    by_cookie = auth.check_request({"HTTP_COOKIE": cookie, "REMOTE_ADDR": "10.0.0.1"})
    assert by_cookie.identify == "guest" and by_cookie.session is not None
    basic = "Basic " + base64.b64encode(b"root:root").decode()
    both = auth.check_request(
        {"HTTP_COOKIE": cookie, "HTTP_AUTHORIZATION": basic, "REMOTE_ADDR": "10.0.0.1"}
    )
    assert both.identify == "root" and both.session is None
    ended = auth.check_request({"HTTP_COOKIE": f"{COOKIE_NAME}=x.y", "REMOTE_ADDR": "10.0.0.1"})
    assert ended.status == 401 and "log in again" in ended.message
    assert auth.counters["failed"] == 0  # a bad cookie guesses nothing: no failure counted


def test_the_console_policy_connects_only_to_the_given_replicas_over_their_scheme() -> None:
    policy = dict(security_headers(["10.0.0.1:8899", "evil host:1"], "https"))[
        "Content-Security-Policy"
    ]
    assert "connect-src 'self' https://10.0.0.1:8899;" in policy
    assert "evil" not in policy

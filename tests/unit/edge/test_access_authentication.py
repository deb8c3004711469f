"""Stored users and API tokens in the authenticator (issue 26), counted in password hashes and
failed logins, never in time: a stored user is accepted through the same bounded machinery, a
deleted or re-created user is refused even with a cached acceptance, a token costs no hash and a
wrong one is a failed login, rights follow the grants at each check, sessions end with their
user or token."""

from __future__ import annotations

import base64
import json
import logging
from typing import Any

import pytest
from werkzeug.security import generate_password_hash

from scheduler.edge.authenticator import Authenticator
from scheduler.edge.sessions import COOKIE_NAME, Sessions
from scheduler.model.access.directory import AccessDirectory
from scheduler.model.access.records import TokenRecord, UserRecord
from scheduler.model.access.roles import ANY_APP, Grant, Principal, Rights, Role
from scheduler.model.access.tokens import new_token, secret_digest
from scheduler.storage.access_follower import settings_rights
from tests.unit.edge.test_authenticator import Clock, CountingVerify, basic, make

ADDRESS = "10.0.0.7"
# Cheap real werkzeug hashes (one pbkdf2 round): the tests count calls, not seconds.
ALICE_HASH = generate_password_hash("alice-pass", method="pbkdf2:sha256:1")
ALICE_NEW_HASH = generate_password_hash("alice-new-pass", method="pbkdf2:sha256:1")
NOW_MS = 1_700_000_000_000


def directory(
    users: tuple[UserRecord, ...] = (),
    tokens: tuple[TokenRecord, ...] = (),
    grants: tuple[Grant, ...] = (),
) -> AccessDirectory:
    return AccessDirectory.build(users, tokens, grants, settings_rights("root", "guest"))


def alice(password_hash: str = ALICE_HASH, created_at_ms: int = NOW_MS) -> UserRecord:
    return UserRecord("alice", password_hash, created_at_ms)


EDITOR_ON_TEAM_A = Grant("a" * 16, "user:alice", Role.EDITOR, "team_a")


def token_of(
    owner: str = "user:alice",
    role: Role = Role.OPERATOR,
    app: str = "team_a",
    expires_at_ms: int | None = None,
) -> tuple[str, TokenRecord]:
    text, parts = new_token()
    record = TokenRecord(
        parts.id, "ci", owner, role, app, secret_digest(parts.secret), NOW_MS, expires_at_ms
    )
    return text, record


def bearer(text: str) -> str:
    return f"Bearer {text}"


def with_directory(found: AccessDirectory, **kwargs: Any) -> tuple[Authenticator, CountingVerify]:
    auth, verify, _ = make(**kwargs)
    auth.access.install(found)
    return auth, verify


def test_a_stored_user_is_accepted_with_the_rights_of_its_grants() -> None:
    auth, verify = with_directory(directory((alice(),), grants=(EDITOR_ON_TEAM_A,)))
    result = auth.check(basic("alice", "alice-pass"), ADDRESS)
    assert result.status == 200
    assert result.principal == Principal("user", "alice")
    assert result.rights == Rights(None, {"team_a": Role.EDITOR})
    assert result.identify == "guest"  # not a cluster-admin: the original console's guest
    assert verify.calls == [ALICE_HASH]
    # Cached: the second check costs no hash.
    assert auth.check(basic("alice", "alice-pass"), ADDRESS).status == 200
    assert verify.calls == [ALICE_HASH]
    assert auth.check(basic("alice", "wrong-pass"), ADDRESS).status == 401


def test_the_settings_accounts_keep_their_roles_and_get_fixed_rights() -> None:
    auth, _ = with_directory(directory((alice(),)))
    root = auth.check(basic("root", "s3cret"), ADDRESS)
    guest = auth.check(basic("guest", "guest"), ADDRESS)
    assert (root.identify, root.principal, root.rights) == (
        "root",
        Principal("settings", "root"),
        Rights.cluster_admin(),
    )
    assert (guest.identify, guest.rights) == ("guest", Rights.viewer_everywhere())
    assert guest.principal is not None and guest.principal.actor == "user:guest"


def test_a_stored_user_named_like_a_settings_account_never_takes_its_place() -> None:
    impostor = UserRecord("root", generate_password_hash("impostor", "pbkdf2:sha256:1"), NOW_MS)
    auth, _ = with_directory(directory((impostor,)))
    assert auth.check(basic("root", "impostor"), ADDRESS).status == 401
    assert auth.check(basic("root", "s3cret"), ADDRESS).identify == "root"


def test_a_deleted_user_is_refused_even_with_a_cached_acceptance() -> None:
    auth, verify = with_directory(directory((alice(),), grants=(EDITOR_ON_TEAM_A,)))
    assert auth.check(basic("alice", "alice-pass"), ADDRESS).status == 200
    auth.access.install(directory(grants=(EDITOR_ON_TEAM_A,)))  # alice deleted, grant left over
    assert auth.check(basic("alice", "alice-pass"), ADDRESS).status == 401
    # Not the cached acceptance: checked again, against the settings' dummy (no user left).
    assert len(verify.calls) == 2 and verify.calls[1] != ALICE_HASH


def test_a_user_created_again_with_another_password_is_checked_against_the_new_one() -> None:
    auth, verify = with_directory(directory((alice(),)))
    assert auth.check(basic("alice", "alice-pass"), ADDRESS).status == 200
    auth.access.install(directory((alice(ALICE_NEW_HASH, NOW_MS + 1),)))
    assert auth.check(basic("alice", "alice-pass"), ADDRESS).status == 401
    assert auth.check(basic("alice", "alice-new-pass"), ADDRESS).status == 200
    assert verify.calls == [ALICE_HASH, ALICE_NEW_HASH, ALICE_NEW_HASH]


def test_an_unknown_name_costs_a_hash_like_the_stored_users_ones() -> None:
    scrypt_like = "scrypt:32768:8:1$" + "s" * 16 + "$" + "ab" * 64
    other = UserRecord("bob", scrypt_like, NOW_MS)
    auth, verify = with_directory(directory((other,)))
    assert auth.check(basic("nobody", "whatever"), ADDRESS).status == 401
    assert len(verify.calls) == 1
    method, salt, digest = verify.calls[0].split("$")
    assert method == "scrypt:32768:8:1" and len(salt) == 16 and len(digest) == 128
    assert verify.calls[0] != scrypt_like


def test_rights_follow_the_grants_at_each_check_even_for_cached_credentials() -> None:
    auth, verify = with_directory(directory((alice(),), grants=(EDITOR_ON_TEAM_A,)))
    assert auth.check(basic("alice", "alice-pass"), ADDRESS).rights == Rights(
        None, {"team_a": Role.EDITOR}
    )
    auth.access.install(directory((alice(),)))  # the grant revoked
    again = auth.check(basic("alice", "alice-pass"), ADDRESS)
    assert again.status == 200 and again.rights == Rights.none()
    admin = Grant("b" * 16, "user:alice", Role.CLUSTER_ADMIN, ANY_APP)
    auth.access.install(directory((alice(),), grants=(admin,)))
    promoted = auth.check(basic("alice", "alice-pass"), ADDRESS)
    assert promoted.rights == Rights.cluster_admin() and promoted.identify == "root"
    assert len(verify.calls) == 1


def test_a_right_token_is_accepted_with_its_capped_rights_and_costs_no_hash() -> None:
    text, record = token_of(role=Role.OPERATOR)
    auth, verify = with_directory(directory((alice(),), (record,), (EDITOR_ON_TEAM_A,)))
    result = auth.check(bearer(text), ADDRESS)
    assert result.status == 200
    assert result.principal == Principal("token", record.id)
    assert result.principal.actor == f"token:{record.id}"
    assert result.rights == Rights(None, {"team_a": Role.OPERATOR})  # its role, not alice's
    assert verify.calls == []
    # Never more than its owner holds now: a viewer owner makes an operator token a viewer.
    viewer = Grant("c" * 16, "user:alice", Role.VIEWER, "team_a")
    auth.access.install(directory((alice(),), (record,), (viewer,)))
    assert auth.check(bearer(text), ADDRESS).rights == Rights(None, {"team_a": Role.VIEWER})
    # A deleted owner's token grants nothing.
    auth.access.install(directory((), (record,), (EDITOR_ON_TEAM_A,)))
    assert auth.check(bearer(text), ADDRESS).rights == Rights.none()


@pytest.mark.parametrize(
    "case", ["wrong secret", "unknown id", "malformed", "not hex", "too long", "empty"]
)
def test_a_wrong_unknown_or_malformed_token_is_a_failed_login(case: str) -> None:
    text, record = token_of()
    prefix, tid, secret = text.split("_")
    sent = {
        "wrong secret": f"{prefix}_{tid}_{'0' * len(secret)}",
        "unknown id": f"{prefix}_{'f' * len(tid)}_{secret}",
        "malformed": f"{prefix}-{tid}-{secret}",
        "not hex": f"{prefix}_{tid}_{'Z' * len(secret)}",
        "too long": text + "0",
        "empty": "",
    }[case]
    auth, verify = with_directory(directory((alice(),), (record,), (EDITOR_ON_TEAM_A,)))
    result = auth.check(bearer(sent), ADDRESS)
    assert result.status == 401 and result.kind == "Unauthorized"
    assert result.principal is None and result.identify is None
    assert auth.counters["failed"] == 1
    assert verify.calls == []


def test_an_expired_token_is_refused_and_one_without_expiry_is_not() -> None:
    expired_text, expired = token_of(expires_at_ms=NOW_MS)  # long past
    lasting_text, lasting = token_of(expires_at_ms=None)
    auth, _ = with_directory(directory((alice(),), (expired, lasting), (EDITOR_ON_TEAM_A,)))
    refused = auth.check(bearer(expired_text), ADDRESS)
    assert refused.status == 401 and "expired" in refused.message
    assert auth.check(bearer(lasting_text), ADDRESS).status == 200


def test_the_failure_limiter_counts_wrong_tokens_as_wrong_passwords() -> None:
    text, record = token_of()
    auth, _ = with_directory(
        directory((alice(),), (record,), (EDITOR_ON_TEAM_A,)), auth_max_failures=3
    )
    wrong = bearer(text[:-4] + "0000" if not text.endswith("0000") else text[:-4] + "1111")
    assert [auth.check(wrong, ADDRESS).status for _ in range(3)] == [401, 401, 401]
    limited = auth.check(wrong, ADDRESS)
    assert limited.status == 429 and limited.retry_after_s >= 1
    # Once limited, even the right token waits (nothing is checked for that address) ...
    assert auth.check(bearer(text), ADDRESS).status == 429
    # ... and wrong passwords and wrong tokens share one budget.
    assert auth.check(basic("alice", "alice-pass"), ADDRESS).status == 429
    assert auth.check(bearer(text), "10.0.0.8").status == 200


def test_a_token_secret_never_appears_in_a_log_line_or_an_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    text, record = token_of()
    auth, _ = with_directory(directory((alice(),), (record,), (EDITOR_ON_TEAM_A,)))
    secret = text.rsplit("_", 1)[1]
    wrong = text[:-8] + ("0" * 8 if not text.endswith("0" * 8) else "1" * 8)
    with caplog.at_level(logging.DEBUG):
        results = [
            auth.check(bearer(wrong), ADDRESS),
            auth.check(bearer("ejc-" + secret), ADDRESS),
            auth.check(bearer(text), ADDRESS),
        ]
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "failed token login" in logged and record.id in logged
    for shown in (secret, wrong.rsplit("_", 1)[1]):
        assert shown not in logged
        assert all(shown not in json.dumps(r.__dict__, default=str) for r in results)


def test_a_user_session_ends_when_the_user_is_deleted_or_created_again() -> None:
    clock = Clock()
    auth, _ = with_directory(directory((alice(),), grants=(EDITOR_ON_TEAM_A,)), clock=clock)
    token, session = auth.sessions.issue("alice", "guest", kind="user", principal_name="alice")
    cookie = {"HTTP_COOKIE": f"{COOKIE_NAME}={token}", "REMOTE_ADDR": ADDRESS}
    accepted = auth.check_request(cookie)
    assert accepted.status == 200 and accepted.session == session
    assert accepted.principal == Principal("user", "alice")
    assert accepted.rights == Rights(None, {"team_a": Role.EDITOR})
    later = alice(ALICE_NEW_HASH, session.issued_at_ms + 1)
    auth.access.install(directory((later,), grants=(EDITOR_ON_TEAM_A,)))
    assert auth.check_request(cookie).status == 401
    auth.access.install(directory(grants=(EDITOR_ON_TEAM_A,)))
    assert auth.check_request(cookie).status == 401


def test_a_token_session_ends_when_the_token_is_revoked_and_lasts_no_longer_than_it() -> None:
    _, record = token_of()
    auth, _ = with_directory(directory((alice(),), (record,), (EDITOR_ON_TEAM_A,)))
    cap_ms = session_end(auth.sessions) - 5000
    token, session = auth.sessions.issue(
        f"token:{record.id}", "guest", kind="token", principal_name=record.id, not_after_ms=cap_ms
    )
    assert session.expires_at_ms == cap_ms
    cookie = {"HTTP_COOKIE": f"{COOKIE_NAME}={token}", "REMOTE_ADDR": ADDRESS}
    accepted = auth.check_request(cookie)
    assert accepted.status == 200 and accepted.principal == Principal("token", record.id)
    assert accepted.rights == Rights(None, {"team_a": Role.OPERATOR})
    auth.access.install(directory((alice(),), (), (EDITOR_ON_TEAM_A,)))  # revoked
    assert auth.check_request(cookie).status == 401


def session_end(sessions: Sessions) -> int:
    """When a session issued now would expire (ms), to cap one below it."""
    _, probe = sessions.issue("probe", "guest")
    return probe.expires_at_ms


def test_a_cookie_issued_before_principals_existed_still_reads_as_the_settings_account() -> None:
    auth, _ = with_directory(directory())
    sessions = auth.sessions
    body = [1, "0" * 32, "guest", "guest", 1, 2**52]
    encoded = base64.urlsafe_b64encode(json.dumps(body).encode()).rstrip(b"=").decode()
    old = f"{encoded}.{sessions._mac(encoded)}"
    session = sessions.verify(old)
    assert session is not None and (session.kind, session.principal_name) == ("settings", "guest")
    result = auth.check_request({"HTTP_COOKIE": f"{COOKIE_NAME}={old}", "REMOTE_ADDR": ADDRESS})
    assert result.identify == "guest" and result.rights == Rights.viewer_everywhere()


def test_auth_off_makes_every_request_the_anonymous_cluster_admin() -> None:
    auth, _, _ = make(auth_enabled="false")
    for result in (
        auth.check(None, ADDRESS),
        auth.check("Bearer junk", ADDRESS),
        auth.check_request({"REMOTE_ADDR": ADDRESS}),
    ):
        assert result.identify == "root" and result.rights == Rights.cluster_admin()
        assert result.principal is not None and result.principal.actor == "anonymous"

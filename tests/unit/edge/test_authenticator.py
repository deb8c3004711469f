"""The authenticator's bounds, counted in password hashes (never in time): cache, single flight,
hash slots, constant cost for unknown users, the per-address failure limit, the log line."""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from flask import Flask, g
from werkzeug.security import check_password_hash, generate_password_hash

from scheduler.api.auth import install_auth
from scheduler.edge.authenticator import WAITERS_PER_SLOT, Authenticator, authenticator_for
from scheduler.model.errors import SettingsError
from scheduler.model.settings import Settings, load_settings
from tests.support.waiting import wait_for

# A real werkzeug hash, made cheap (one pbkdf2 round) so the tests count calls, not seconds.
ADMIN_HASH = generate_password_hash("s3cret", method="pbkdf2:sha256:1")


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class CountingVerify:
    """werkzeug's check_password_hash, counting calls and, optionally, held at a gate."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.calls: list[str] = []  # the stored hash each call checked against
        self.gate = gate
        self.running = 0
        self.most_running = 0
        self._lock = threading.Lock()

    def __call__(self, stored: str, password: str) -> bool:
        with self._lock:
            self.calls.append(stored)
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        try:
            if self.gate is not None:
                assert self.gate.wait(10), "test gate never opened"
            return check_password_hash(stored, password)
        finally:
            with self._lock:
                self.running -= 1


def make_settings(**values: Any) -> Settings:
    flags = {"auth_admin_password_hash": ADMIN_HASH, **values}
    return load_settings({}, {}, {k: str(v) for k, v in flags.items()})


def make(
    verify: CountingVerify | None = None, clock: Clock | None = None, **kwargs: Any
) -> tuple[Authenticator, CountingVerify, Clock]:
    verify = verify or CountingVerify()
    clock = clock or Clock()
    settings_keys = {k: kwargs.pop(k) for k in list(kwargs) if k.startswith("auth_")}
    auth = Authenticator(make_settings(**settings_keys), verify_hash=verify, clock=clock, **kwargs)
    return auth, verify, clock


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()  # never leave a test thread parked at the gate


# -- one hash per credential ------------------------------------------------------------------


def test_a_credential_costs_one_hash_whether_right_or_wrong() -> None:
    auth, verify, _ = make()
    for _ in range(5):
        assert auth.identify(basic("root", "s3cret"), "10.0.0.1") == "root"
    for _ in range(5):
        result = auth.check(basic("root", "wrong"), "10.0.0.2")
        assert result.status == 401
    assert len(verify.calls) == 2
    assert auth.counters["accepted"] == 5 and auth.counters["failed"] == 5


def test_the_cache_keeps_no_plaintext() -> None:
    auth, _, _ = make()
    auth.check(basic("root", "s3cret"), "10.0.0.1")
    auth.check(basic("root", "guess-123"), "10.0.0.1")
    entries = {
        **vars(vars(auth)["_accepted"])["_entries"],
        **vars(vars(auth)["_refused"])["_entries"],
    }
    assert len(entries) == 2
    assert all(isinstance(key, bytes) and len(key) == 32 for key in entries)  # HMAC-SHA256
    for secret in ("s3cret", "guess-123"):
        assert secret not in repr(entries) and secret.encode().hex() not in repr(entries)


def test_a_cached_outcome_expires_after_its_ttl() -> None:
    auth, verify, clock = make(cache_ttl_s=600)
    auth.check(basic("root", "s3cret"), "10.0.0.1")
    clock.now += 599
    auth.check(basic("root", "s3cret"), "10.0.0.1")
    assert len(verify.calls) == 1
    clock.now += 2
    assert auth.identify(basic("root", "s3cret"), "10.0.0.1") == "root"
    assert len(verify.calls) == 2


def test_the_caches_are_bounded_and_refused_guesses_never_evict_accepted_ones() -> None:
    auth, verify, _ = make(cache_size=4, auth_max_failures=1000)
    auth.check(basic("root", "s3cret"), "10.0.0.1")
    for i in range(20):
        auth.check(basic("root", f"guess-{i}"), "10.0.0.2")
    assert auth.cache_sizes()[:2] == (1, 4)
    calls = len(verify.calls)
    assert auth.identify(basic("root", "s3cret"), "10.0.0.1") == "root"
    auth.check(basic("root", "guess-19"), "10.0.0.2")  # still cached: among the last 4
    assert len(verify.calls) == calls
    auth.check(basic("root", "guess-0"), "10.0.0.2")  # evicted long ago: hashed again
    assert len(verify.calls) == calls + 1


def test_concurrent_requests_with_one_credential_share_one_hash(gate: threading.Event) -> None:
    auth, verify, _ = make(CountingVerify(gate), hash_wait_s=5)
    with ThreadPoolExecutor(6) as pool:
        futures = [
            pool.submit(auth.identify, basic("root", "s3cret"), "10.0.0.1") for _ in range(6)
        ]
        wait_for(lambda: len(verify.calls) == 1, 5, message="the first hash started")
        gate.set()
        assert [f.result(10) for f in futures] == ["root"] * 6
    assert len(verify.calls) == 1


# -- a few hashes at once ---------------------------------------------------------------------


def test_at_most_the_configured_hashes_run_at_once_and_extra_waiters_get_503(
    gate: threading.Event,
) -> None:
    # 2 slots: 2 requests hash, WAITERS_PER_SLOT * 2 wait, the rest get 503 at once.
    auth, verify, _ = make(
        CountingVerify(gate), hash_wait_s=10, auth_max_concurrent_hashes=2, auth_max_failures=100
    )
    admitted = 2 + 2 * WAITERS_PER_SLOT
    with ThreadPoolExecutor(12) as pool:
        futures = [
            pool.submit(auth.check, basic("root", f"guess-{i}"), f"10.0.1.{i}") for i in range(12)
        ]
        wait_for(
            lambda: verify.running == 2 and sum(f.done() for f in futures) == 12 - admitted,
            5,
            message="two hashes running, the waiters waiting, the rest refused at once",
        )
        busy = [f.result() for f in futures if f.done()]
        assert {r.status for r in busy} == {503}
        assert all(r.retry_after_s >= 1 and r.kind == "AuthenticationBusy" for r in busy)
        gate.set()
        statuses = sorted(f.result(10).status for f in futures)
    assert statuses == [401] * admitted + [503] * (12 - admitted)
    assert verify.most_running == 2
    assert len(verify.calls) == admitted
    assert auth.counters["busy"] == 12 - admitted


def test_a_request_that_waits_too_long_for_a_slot_gets_503(gate: threading.Event) -> None:
    auth, verify, _ = make(
        CountingVerify(gate), hash_wait_s=0.3, auth_max_concurrent_hashes=1, auth_max_failures=100
    )
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(auth.check, basic("root", "a"), "10.0.0.1")
        wait_for(lambda: verify.running == 1, 5, message="first hash running")
        second = auth.check(basic("root", "b"), "10.0.0.2")
        assert second.status == 503 and second.retry_after_s == 1
        gate.set()
        assert first.result(10).status == 401
    assert len(verify.calls) == 1
    # A 503 is not a failed login: nothing was checked.
    assert auth.counters["failed"] == 1


# -- unknown users cost what wrong passwords cost ---------------------------------------------


def test_an_unknown_user_costs_one_hash_of_the_same_method_and_parameters() -> None:
    auth, verify, _ = make(auth_max_failures=100)
    assert auth.check(basic("nobody", "s3cret"), "10.0.0.1").status == 401
    assert auth.check(basic("root", "wrong"), "10.0.0.1").status == 401
    dummy, real = verify.calls
    assert real == ADMIN_HASH
    assert dummy != ADMIN_HASH
    dummy_method, dummy_salt, _ = dummy.split("$")
    real_method, real_salt, _ = real.split("$")
    assert dummy_method == real_method == "pbkdf2:sha256:1"
    assert len(dummy_salt) == len(real_salt)
    # ... and, like a wrong password, only once.
    auth.check(basic("nobody", "s3cret"), "10.0.0.1")
    assert len(verify.calls) == 2


def test_the_admins_password_with_another_name_is_refused() -> None:
    auth, _, _ = make()
    assert auth.identify(basic("nobody", "s3cret"), "10.0.0.1") is None
    assert auth.identify(basic("root", "s3cret"), "10.0.0.1") == "root"


def test_plain_passwords_are_compared_without_hashing() -> None:
    auth, verify, _ = make(auth_admin_password_hash="")
    assert auth.identify(basic("root", "root"), "10.0.0.1") == "root"
    assert auth.identify(basic("guest", "guest"), "10.0.0.1") == "guest"
    assert auth.identify(basic("root", "guest"), "10.0.0.1") is None
    assert auth.identify(basic("nobody", "root"), "10.0.0.1") is None
    assert verify.calls == []


def test_a_wrong_password_for_a_hashed_guest_costs_one_hash() -> None:
    guest_hash = generate_password_hash("g", method="pbkdf2:sha256:1")
    auth, verify, _ = make(auth_guest_password_hash=guest_hash)
    for _ in range(4):
        assert auth.identify(basic("guest", "nope"), "10.0.0.1") is None
    assert auth.identify(basic("guest", "g"), "10.0.0.1") == "guest"
    assert verify.calls == [guest_hash, guest_hash]


# -- failed logins per client address ---------------------------------------------------------


def test_an_address_that_failed_too_often_gets_429_without_any_hash() -> None:
    auth, verify, clock = make(auth_max_failures=3, auth_failure_window_seconds=60)
    for i in range(3):
        assert auth.check(basic("root", f"guess-{i}"), "10.0.0.9").status == 401
        clock.now += 1
    hashes = len(verify.calls)
    for password in ("guess-99", "s3cret"):  # even the right password: no oracle while blocked
        result = auth.check(basic("root", password), "10.0.0.9")
        assert result.status == 429
        assert result.kind == "TooManyFailedLogins"
        assert result.retry_after_s == 57  # until the first failure (t=0) leaves the window
    assert len(verify.calls) == hashes
    # Other addresses are not affected, and the address is let in again after the window.
    assert auth.identify(basic("root", "s3cret"), "10.0.0.10") == "root"
    clock.now += 57
    assert auth.identify(basic("root", "s3cret"), "10.0.0.9") == "root"


def test_repeating_a_cached_wrong_password_still_counts_as_failures() -> None:
    auth, verify, _ = make(auth_max_failures=3)
    statuses = [auth.check(basic("root", "same"), "10.0.0.9").status for _ in range(5)]
    assert statuses == [401, 401, 401, 429, 429]
    assert len(verify.calls) == 1


def test_concurrent_different_guesses_from_one_address_cannot_exceed_the_budget(
    gate: threading.Event,
) -> None:
    auth, verify, _ = make(
        CountingVerify(gate), hash_wait_s=10, auth_max_concurrent_hashes=8, auth_max_failures=3
    )
    with ThreadPoolExecutor(10) as pool:
        futures = [
            pool.submit(auth.check, basic("root", f"guess-{i}"), "10.0.0.9") for i in range(10)
        ]
        wait_for(
            lambda: verify.running == 3 and sum(f.done() for f in futures) == 7,
            5,
            message="three hashes running and seven guesses refused",
        )
        limited = [f.result() for f in futures if f.done()]
        gate.set()
        results = [f.result(10) for f in futures]
    assert sorted(r.status for r in results) == [401] * 3 + [429] * 7
    assert len(verify.calls) == 3
    assert all(r.status == 429 for r in limited)


def test_the_address_table_is_bounded() -> None:
    auth, _, _ = make(max_addresses=5, auth_max_failures=100)
    for i in range(50):
        auth.check(basic("root", "wrong"), f"10.0.2.{i}")
    assert auth.cache_sizes()[2] == 5
    # Clients that only succeed take no room.
    auth2, _, _ = make()
    for i in range(20):
        auth2.check(basic("root", "s3cret"), f"10.0.3.{i}")
    assert auth2.cache_sizes()[2] == 0


def test_a_failed_login_is_logged_with_an_escaped_bounded_user_and_the_address(
    caplog: pytest.LogCaptureFixture,
) -> None:
    auth, _, _ = make(auth_max_failures=2)
    forged = "evil\nWARNING forged line\x1b[2J\u202e" + "x" * 500
    with caplog.at_level(logging.WARNING, logger="scheduler.edge.authenticator"):
        auth.check(basic("root", "wrong"), "10.0.0.7")
        auth.check(basic(forged, "wrong"), "10.0.0.7")
        auth.check(basic("root", "s3cret"), "10.0.0.7")  # refused (429): not logged again
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0] == "auth: failed login for user 'root' from '10.0.0.7'"
    second = messages[1]
    assert "\n" not in second and "\x1b" not in second and "\u202e" not in second
    assert "'evil\\nWARNING forged line\\x1b[2J\\u202e" in second
    assert len(second) < 200 and "from '10.0.0.7'" in second
    assert "client '10.0.0.7' refused (429) after 2 failed logins" in messages[2]
    assert len(messages) == 3


def test_malformed_credentials_are_failures_without_a_hash() -> None:
    auth, verify, _ = make(auth_max_failures=100)
    for header in (
        "Basic",
        "Basic !!!",
        "Basic " + base64.b64encode(b"no-colon").decode(),
        "basic " + "A" * 5000,
    ):
        result = auth.check(header, "10.0.0.1")
        assert result.status == 401, header
    assert auth.counters["failed"] == 4
    assert verify.calls == []
    # Missing credentials or another scheme are not guesses (a malformed Bearer token is: an
    # API token is a credential since issue 26, see test_access_authentication.py).
    assert auth.check(None, "10.0.0.1").status == 401
    assert auth.check("Digest abc", "10.0.0.1").status == 401
    assert auth.counters["failed"] == 4


def test_utf8_and_latin1_credentials_decode() -> None:
    auth, _, _ = make(auth_admin_password_hash="", auth_admin_password="pässwörd")
    utf8 = "Basic " + base64.b64encode("root:pässwörd".encode()).decode()
    latin1 = "Basic " + base64.b64encode("root:pässwörd".encode("latin-1")).decode()
    assert auth.identify(utf8, "10.0.0.1") == "root"
    assert auth.identify(latin1, "10.0.0.1") == "root"


def test_x_forwarded_for_is_ignored_unless_trusted() -> None:
    environ = {"REMOTE_ADDR": "10.0.0.1", "HTTP_X_FORWARDED_FOR": "6.6.6.6, 192.168.1.5"}
    assert make()[0].client_address(environ) == "10.0.0.1"
    trusted = make(auth_trust_x_forwarded_for="true")[0]
    assert trusted.client_address(environ) == "192.168.1.5"
    assert trusted.client_address({"REMOTE_ADDR": "10.0.0.1"}) == "10.0.0.1"


def test_auth_off_identifies_everyone_as_root() -> None:
    auth, verify, _ = make(auth_enabled="false")
    assert auth.identify(None, "10.0.0.1") == "root"
    assert auth.identify(basic("root", "wrong"), "10.0.0.1") == "root"
    assert verify.calls == []


# -- one authenticator per process, settings checked at start --------------------------------


def test_one_authenticator_per_settings_object() -> None:
    settings = make_settings()
    assert authenticator_for(settings) is authenticator_for(settings)
    assert authenticator_for(make_settings()) is not authenticator_for(settings)


@pytest.mark.parametrize(
    "value",
    ["plain-text", "md5$x$y", "scrypt:1048576:8:1$salt$00", "scrypt:x:8:1$s$00", "pbkdf2:nope$s$0"],
)
def test_a_malformed_or_too_costly_password_hash_is_refused_at_start(value: str) -> None:
    with pytest.raises(SettingsError) as info:
        load_settings({}, {}, {"auth_admin_password_hash": value})
    assert "auth_admin_password_hash" in info.value.problems


def test_werkzeug_default_hashes_are_accepted() -> None:
    scrypt = generate_password_hash("x")
    pbkdf2 = generate_password_hash("x", method="pbkdf2")
    settings = load_settings(
        {}, {}, {"auth_admin_password_hash": scrypt, "auth_guest_password_hash": pbkdf2}
    )
    assert settings.auth_admin_password_hash == scrypt


# -- the HTTP answers ---------------------------------------------------------------------------


def test_the_flask_hook_answers_401_429_and_503_as_json_with_retry_after(
    gate: threading.Event,
) -> None:
    app = Flask("t")
    auth, verify, _ = make(
        CountingVerify(gate), hash_wait_s=0.2, auth_max_failures=2, auth_max_concurrent_hashes=1
    )
    install_auth(app, make_settings(), auth)
    app.add_url_rule("/api/x", "x", lambda: {"ok": True}, methods=["GET", "POST"])
    app.add_url_rule(
        "/api/who", "who", lambda: {"actor": g.principal.actor, "rights": g.rights.summary()}
    )
    client = app.test_client()
    gate.set()
    wrong = {"Authorization": basic("root", "wrong")}
    first = client.get("/api/x", headers=wrong)
    assert first.status_code == 401 and first.json == {
        "error": "wrong user name or password",
        "type": "Unauthorized",
    }
    assert first.headers["WWW-Authenticate"].startswith("Basic realm=")
    client.get("/api/x", headers=wrong)
    limited = client.get("/api/x", headers={"Authorization": basic("root", "s3cret")})
    assert limited.status_code == 429 and limited.json is not None
    assert limited.json["type"] == "TooManyFailedLogins"
    assert int(limited.headers["Retry-After"]) >= 1
    other = {"REMOTE_ADDR": "10.9.9.9"}
    ok = client.get(
        "/api/x", headers={"Authorization": basic("root", "s3cret")}, environ_base=other
    )
    assert ok.status_code == 200 and ok.headers["identify"] == "root"
    # Who the request is, for the handlers (what a guest may do is access control's to say:
    # api/access_control.py and its role matrix test).
    guest = client.get(
        "/api/who", headers={"Authorization": basic("guest", "guest")}, environ_base=other
    )
    assert guest.status_code == 200 and guest.headers["identify"] == "guest"
    assert guest.json == {
        "actor": "user:guest",
        "rights": {"everywhere": "viewer", "apps": {}},
    }
    # Busy: the only slot is held by a hash at the gate.
    gate.clear()
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(
            client.get,
            "/api/x",
            headers={"Authorization": basic("root", "slow")},
            environ_base={"REMOTE_ADDR": "10.9.9.8"},
        )
        wait_for(lambda: verify.running == 1, 5, message="slot held")
        busy = client.get(
            "/api/x",
            headers={"Authorization": basic("root", "other")},
            environ_base={"REMOTE_ADDR": "10.9.9.7"},
        )
        gate.set()
        assert held.result(10).status_code == 401
    assert busy.status_code == 503 and busy.headers["Retry-After"] == "1"
    assert busy.json is not None and busy.json["type"] == "AuthenticationBusy"

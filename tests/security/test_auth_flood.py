"""Password guessing against a real replica process whose admin has a scrypt hash (32 MiB each).

Floods are sent from this process to 127.0.0.1 only, bounded in count (200 requests, 200
threads) and time (every request has a timeout). Distinct source addresses are taken from
127.0.0.0/8 (all loopback on Linux), so one flood can look like many clients or like one.
/health latency and RSS are sampled by a probe process of its own (tests.support.health_probe).
Figures (RSS before, peak and after, /health p99 under the flood, the flood's own median answer
time) are printed; run with `-s`.
"""

from __future__ import annotations

import base64
import http.client
import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
from werkzeug.security import generate_password_hash

from tests.security.conftest import StartReplica
from tests.support.health_probe import HealthProbe
from tests.support.parallel import ahead_of_the_suite
from tests.support.waiting import wait_for

PASSWORD = "correct horse battery staple"
FLOOD = 200  # concurrent clients (threads)
ROUNDS = 5  # guesses each client sends in a row
API = "/api/app/list"


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: Any
    seconds: float  # from connecting to the answer's last byte


def get(
    port: int, path: str, authorization: str | None = None, source: str = "127.0.0.1"
) -> Answer:
    """One GET on a fresh connection from `source` (a loopback address) to 127.0.0.1."""
    started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(source, 0))
    try:
        conn.request("GET", path, headers={"Authorization": authorization} if authorization else {})
        resp = conn.getresponse()
        raw = resp.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        headers = {k.lower(): v for k, v in resp.getheaders()}
        return Answer(resp.status, headers, body, time.monotonic() - started)
    finally:
        conn.close()


def proc_status_kb(pid: int, field_name: str) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    raise AssertionError(f"{field_name} missing from /proc/{pid}/status")


def flood(
    senders: list[str], requests: Callable[[int], list[tuple[str, str]]], port: int
) -> list[Answer]:
    """Every sender (a source address) in its own thread, all starting at once, sends its
    `requests(index)` (authorization, path) one after the other. At most FLOOD threads."""
    assert len(senders) <= FLOOD
    start = threading.Barrier(len(senders))

    def one(index: int) -> list[Answer]:
        start.wait(30)
        return [get(port, path, auth, senders[index]) for auth, path in requests(index)]

    with ThreadPoolExecutor(len(senders)) as pool:
        futures = [pool.submit(one, i) for i in range(len(senders))]
        return [answer for f in futures for answer in f.result(120)]


@pytest.fixture(scope="module")
def admin_hash() -> str:
    # werkzeug's default method: scrypt with N=2**15, r=8 (32 MiB per check).
    hashed = generate_password_hash(PASSWORD)
    assert hashed.startswith("scrypt:32768:8:1$")
    return hashed


def test_a_flood_of_wrong_passwords_keeps_memory_health_and_the_term(
    start_leader: StartReplica, admin_hash: str
) -> None:
    leader = start_leader(auth_admin_password_hash=admin_hash, auth_max_failures=20)
    ahead_of_the_suite(leader.pid)  # other tests' processes beside it do not count as the flood
    port = leader.port
    rss_before_kb = proc_status_kb(leader.pid, "VmRSS")
    hwm_before_kb = proc_status_kb(leader.pid, "VmHWM")
    # 200 clients, each sending ROUNDS different guesses in a row: half of them for the admin,
    # half for users that do not exist.
    senders = [f"127.0.1.{i + 1}" for i in range(FLOOD)]

    def guesses(i: int) -> list[tuple[str, str]]:
        user = "root" if i % 2 else f"user-{i}"
        return [(basic(user, f"guess-{i}-{r}"), API) for r in range(ROUNDS)]

    probe = HealthProbe(port, leader.pid, ahead=True).start()
    try:
        started = time.monotonic()
        answers = flood(senders, guesses, port)
        flood_s = time.monotonic() - started
    finally:
        figures = probe.stop()
    # The same guesses again: every one that was checked is answered from the cache.
    checked = [a.status == 401 for a in answers]
    again = flood(
        senders,
        lambda i: [g for r, g in enumerate(guesses(i)) if checked[i * ROUNDS + r]],
        port,
    )
    rss_after_kb = proc_status_kb(leader.pid, "VmRSS")
    peak_kb = max([proc_status_kb(leader.pid, "VmHWM"), *figures["rss_kb"]])
    statuses = [a.status for a in answers]
    flood_p50_s = sorted(a.seconds for a in answers)[len(answers) // 2]
    print(
        f"\nauth flood: {len(answers)} wrong passwords from {FLOOD} addresses in {flood_s:.2f} s: "
        f"{statuses.count(401)} x 401, {statuses.count(503)} x 503; repeated: "
        f"{len(again)} x {sorted({a.status for a in again})}\n"
        f"RSS before {rss_before_kb / 1024:.1f} MiB (peak since start {hwm_before_kb / 1024:.1f}), "
        f"peak {peak_kb / 1024:.1f} MiB, after {rss_after_kb / 1024:.1f} MiB; "
        f"/health p50 {probe.p50_s() * 1000:.0f} ms, p99 {probe.p99_s() * 1000:.0f} ms, "
        f"max {max(figures['latencies_s']) * 1000:.0f} ms over {probe.samples()} samples; "
        f"flood answers p50 {flood_p50_s * 1000:.0f} ms"
    )
    # Every guess was refused with a JSON error: 401 once checked, else 503 (busy, retry).
    assert len(answers) == FLOOD * ROUNDS
    assert set(statuses) <= {401, 503}, statuses
    assert statuses.count(401) >= 6  # hashes ran: two at a time, four waiting
    for answer in answers:
        assert isinstance(answer.body, dict)
        assert answer.body["type"] in ("Unauthorized", "AuthenticationBusy")
        if answer.status == 503:
            assert int(answer.headers["retry-after"]) >= 1
    # A checked credential costs no second hash: the repeat is all 401, none waits for a slot.
    assert [a.status for a in again] == [401] * sum(checked)
    # Memory stays bounded while the hashes run, and /health keeps answering: its p99 stays
    # under 1 s, or under half the flood's median answer time when the machine is so loaded
    # that the flood's own answers take over 2 s at the median (both measured in this run). The
    # replica and the probe run ahead of the rest of the suite (tests/support/parallel.py): CI
    # twice measured p99 1.03-1.04 s with other tests' processes beside them; with 24 CPU-bound
    # sessions beside them, 780 ms without and 52 ms with. (That /health never waits behind the
    # API's workers is checked without timing in test_wsgiserver.py.)
    assert peak_kb - rss_before_kb < 100 * 1024
    assert probe.samples() >= 20
    assert probe.p99_s() < max(1.0, 0.5 * flood_p50_s)
    # The replica kept its term throughout.
    assert set(figures["roles"]) == {"leader"}
    health = leader.health()
    assert health is not None and health["role"] == "leader"
    assert health["zookeeper"] == "CONNECTED"
    assert leader.log_text().count(" won term ") == 1
    # Failed logins are logged with the user and the client address (before each answer).
    log = leader.log_text()
    refused = {i for i in range(FLOOD) if any(checked[i * ROUNDS : (i + 1) * ROUNDS])}
    for i in refused:
        user = "root" if i % 2 else f"user-{i}"
        assert f"failed login for user '{user}' from '{senders[i]}'" in log
    assert log.count("auth: failed login for user ") == 2 * sum(checked)
    # The right password still works, from a flood address and from a new one.
    for source in ("127.0.1.2", "127.0.2.1"):
        ok = get(port, API, basic("root", PASSWORD), source)
        assert ok.status == 200 and ok.headers["identify"] == "root"


def test_an_address_that_keeps_failing_gets_429_and_the_right_password_works_after(
    start_leader: StartReplica, admin_hash: str
) -> None:
    # A 10 s window: the flood and the top-up below must fall in one window even on a loaded
    # machine (with 3 s, a first failure left the window before the last under six workers).
    leader = start_leader(
        auth_admin_password_hash=admin_hash, auth_max_failures=5, auth_failure_window_seconds=10
    )
    port = leader.port
    # 200 different guesses at once from one address: at most 5 are ever checked.
    one_address = ["127.0.0.1"] * FLOOD
    answers = flood(one_address, lambda i: [(basic("root", f"guess-{i}"), API)], port)
    statuses = [a.status for a in answers]
    print(
        f"\none address, {FLOOD} guesses: {statuses.count(401)} x 401, "
        f"{statuses.count(429)} x 429, {statuses.count(503)} x 503"
    )
    assert set(statuses) <= {401, 429, 503}, statuses
    assert 1 <= statuses.count(401) <= 5
    # The rest refused unchecked: 429, or 503 for a guess that waited too long for a hash slot.
    assert statuses.count(429) >= FLOOD - 5 - statuses.count(503)
    limited = next(a for a in answers if a.status == 429)
    assert isinstance(limited.body, dict) and limited.body["type"] == "TooManyFailedLogins"
    assert 1 <= int(limited.headers["retry-after"]) <= 10
    # Top up with single guesses until the address is blocked (a guess that waited too long for
    # a hash slot got 503 and did not count).
    failures = statuses.count(401)
    for i in range(6):
        answer = get(port, API, basic("root", f"more-{i}"), "127.0.0.1")
        failures += answer.status == 401
        if answer.status == 429:
            break
    assert failures == 5
    # While blocked, even the right password gets 429 (no free oracle for guesses) ...
    blocked = get(port, API, basic("root", PASSWORD), "127.0.0.1")
    assert blocked.status == 429 and 1 <= int(blocked.headers["retry-after"]) <= 10
    # ... other addresses are not affected ...
    ok = get(port, API, basic("root", PASSWORD), "127.0.0.2")
    assert ok.status == 200 and ok.headers["identify"] == "root"
    # ... and the address is let in again once its failures leave the window.
    wait_for(
        lambda: get(port, API, basic("root", PASSWORD), "127.0.0.1").status == 200,
        20,
        interval_s=0.5,
        message="the blocked address is let in after the window",
    )
    log = leader.log_text()
    assert log.count("failed login for user 'root' from '127.0.0.1'") == 5
    assert log.count("client '127.0.0.1' refused (429) after 5 failed logins within 10 s") == 1

"""The HTTP edge of a real replica process under hostile clients.

Each test starts `python -m scheduler` processes over the session's ZooKeeper, attacks them from
this process on 127.0.0.1 (bounded in count and time), and checks that `/health` stays fast, the
ZooKeeper session and the leadership term survive, and every refusal is a 4xx.
Figures (latencies, drop times, memory) are printed; run with `-s` to see them.
"""

from __future__ import annotations

import base64
import http.client
import json
import resource
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from tests.security.conftest import StartReplica
from tests.support.parallel import ahead_of_the_suite
from tests.support.replicas import ReplicaProcess, http_get
from tests.support.waiting import wait_for

AUTH = "Basic " + base64.b64encode(b"root:root").decode()


# -- helpers ---------------------------------------------------------------------------------


def _connect(port: int, timeout_s: float = 5.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=timeout_s)


@contextmanager
def _sockets() -> Iterator[list[socket.socket]]:
    """A list of sockets closed at the end, whatever happens."""
    held: list[socket.socket] = []
    try:
        yield held
    finally:
        for sock in held:
            sock.close()


def _read_until_closed(sock: socket.socket, timeout_s: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes, and the seconds that took."""
    started = time.monotonic()
    sock.settimeout(timeout_s)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data, time.monotonic() - started


def _status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


def _body(answer: bytes) -> dict[str, object]:
    parsed: dict[str, object] = json.loads(answer.partition(b"\r\n\r\n")[2])
    return parsed


def _metrics(replica: ReplicaProcess) -> dict[str, float]:
    return replica.metrics()


def _health_latencies(replica: ReplicaProcess, count: int) -> list[float]:
    """`count` sequential GET /health on fresh connections; a failure counts as 10 s."""
    latencies = []
    for _ in range(count):
        started = time.monotonic()
        try:
            conn = http.client.HTTPConnection("127.0.0.1", replica.port, timeout=5)
            conn.request("GET", "/health")
            response = conn.getresponse()
            response.read()
            conn.close()
            ok = response.status == 200
        except OSError:
            ok = False
        latencies.append(time.monotonic() - started if ok else 10.0)
    return latencies


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def _open_connections(replica: ReplicaProcess, held: list[socket.socket], count: int) -> None:
    """Open `count` connections in batches, each sending `b""`, and wait until the replica holds
    them all (accepted, not just queued by the kernel)."""
    base = _metrics(replica)["ejc_http_connections"]
    for start in range(0, count, 250):
        for _ in range(min(250, count - start)):
            held.append(_connect(replica.port))
        wait_for(
            lambda: _metrics(replica)["ejc_http_connections"] >= base + len(held) - 1,
            15,
            message=f"replica holds {len(held)} connections",
        )


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _same_term(replica: ReplicaProcess, terms_before: float) -> bool:
    metrics = _metrics(replica)
    return (
        metrics["ejc_leader"] == 1
        and metrics["ejc_leader_terms_total"] == terms_before
        and metrics['ejc_zookeeper_state{state="CONNECTED"}'] == 1
    )


# -- connections held open -------------------------------------------------------------------


def test_many_idle_connections_leave_health_fast_and_the_term_intact(
    start_leader: StartReplica,
) -> None:
    replica = start_leader(http_channel_timeout_seconds=300)
    ahead_of_the_suite(replica.pid)  # its /health bound is on it, not on other tests beside it
    terms = _metrics(replica)["ejc_leader_terms_total"]
    with _sockets() as held:
        _open_connections(replica, held, 1500)
        latencies = _health_latencies(replica, 200)
        health = replica.health()
        assert health is not None and health["role"] == "leader"
        assert health["zookeeper"] == "CONNECTED"
        assert _same_term(replica, terms)
        print(
            f"\nFIGURE idle connections held: {len(held)}; /health p50 "
            f"{sorted(latencies)[100] * 1000:.1f} ms, p99 {_p99(latencies) * 1000:.1f} ms, "
            f"max {max(latencies) * 1000:.1f} ms"
        )
        assert _p99(latencies) < 1.0
    wait_for(
        lambda: _metrics(replica)["ejc_http_connections"] < 10, 15, message="connections closed"
    )
    assert _same_term(replica, terms)


def test_closing_thousands_of_half_sent_requests_at_once_keeps_the_term(
    start_leader: StartReplica,
) -> None:
    replica = start_leader(
        http_header_timeout_seconds=300,
        http_body_timeout_seconds=300,
        http_channel_timeout_seconds=300,
    )
    ahead_of_the_suite(replica.pid)  # its /health bound is on it, not on other tests beside it
    terms = _metrics(replica)["ejc_leader_terms_total"]
    with _sockets() as held:
        _open_connections(replica, held, 3000)
        for i, sock in enumerate(held):
            # Half of them stop inside the headers, half inside a declared body.
            if i % 2:
                sock.sendall(b"GET /api/job/jobs HTTP/1.1\r\nHost: x\r\nX-Partial: ")
            else:
                sock.sendall(b"POST /api/app HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        wait_for(
            lambda: (
                _metrics(replica)["ejc_http_requests_timed_out_total"] == 0
                and _metrics(replica)["ejc_http_connections"] >= len(held)
            ),
            10,
            message="all half-sent requests held",
        )
        with ThreadPoolExecutor(max_workers=1) as sampler:
            # /health sampled while the connections close, and for a while after.
            during = sampler.submit(_health_latencies, replica, 100)
            started = time.monotonic()
            for sock in held:
                sock.close()
            held.clear()
            latencies = during.result()
    wait_for(
        lambda: _metrics(replica)["ejc_http_connections"] < 10, 15, message="connections closed"
    )
    print(
        f"\nFIGURE 3000 half-sent requests closed at once: /health p99 "
        f"{_p99(latencies) * 1000:.1f} ms meanwhile; all closed server-side in "
        f"{time.monotonic() - started:.2f} s"
    )
    assert _p99(latencies) < 1.0
    assert _same_term(replica, terms)


def test_health_stays_fast_while_the_api_is_flooded(start_leader: StartReplica) -> None:
    replica = start_leader(http_threads=2)
    ahead_of_the_suite(replica.pid)  # its /health bound is on it, not on other tests beside it
    terms = _metrics(replica)["ejc_leader_terms_total"]

    def api_call(_: int) -> tuple[int, float]:
        started = time.monotonic()
        try:
            conn = http.client.HTTPConnection("127.0.0.1", replica.port, timeout=30)
            conn.request("GET", "/api/job/jobs", headers={"Authorization": AUTH})
            status = conn.getresponse().status
            conn.close()
        except OSError:
            status = 0
        return status, time.monotonic() - started

    with ThreadPoolExecutor(max_workers=32) as pool:
        flood = pool.map(api_call, range(1500))
        latencies = _health_latencies(replica, 100)
        answers = list(flood)
    statuses = [status for status, _ in answers]
    api_p50 = sorted(seconds for _, seconds in answers)[len(answers) // 2]
    print(
        f"\nFIGURE /api flood (1500 requests, 32 at once, 2 API workers): /health p99 "
        f"{_p99(latencies) * 1000:.1f} ms; API answers {sorted(set(statuses))}, "
        f"p50 {api_p50 * 1000:.1f} ms"
    )
    # Under 1 s; on a machine so loaded that the API's own answers take over 2 s at the median
    # (measured in this run), under half of that. (That /health never queues behind the API's
    # workers is checked without timing in test_wsgiserver.py.)
    assert _p99(latencies) < max(1.0, 0.5 * api_p50)
    assert 500 not in statuses
    assert _same_term(replica, terms)


# -- requests that never finish --------------------------------------------------------------


def test_a_half_sent_request_is_dropped_within_the_header_timeout(
    start_leader: StartReplica,
) -> None:
    replica = start_leader(http_header_timeout_seconds=2, http_body_timeout_seconds=2)
    with _sockets() as held:
        sock = _connect(replica.port)
        held.append(sock)
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        answer, seconds = _read_until_closed(sock, 15)
        print(f"\nFIGURE half-sent request (2 s header timeout) dropped after {seconds:.2f} s")
        assert 1.9 <= seconds <= 4.0
        assert _status(answer) == 408 and _body(answer)["type"] == "RequestTimeout"

        # One byte every 0.2 s keeps the connection busy but does not move the deadline.
        drip = _connect(replica.port)
        held.append(drip)
        drip.sendall(b"GET /health HTTP/1.1\r\n")
        started = time.monotonic()
        drip.settimeout(0.2)
        answer = b""
        while time.monotonic() - started < 15:
            try:
                drip.sendall(b"X")
                answer += drip.recv(65536)
                if answer:
                    break
            except TimeoutError:
                continue
            except OSError:
                break
        seconds = time.monotonic() - started
        print(f"FIGURE slow-drip request (a byte every 0.2 s) dropped after {seconds:.2f} s")
        assert seconds <= 4.0
        assert _status(answer) == 408

        # A declared body that never arrives: the body deadline.
        body = _connect(replica.port)
        held.append(body)
        body.sendall(b"POST /api/app HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{")
        answer, seconds = _read_until_closed(body, 15)
        print(f"FIGURE body not sent (2 s body timeout) dropped after {seconds:.2f} s")
        assert 1.9 <= seconds <= 4.0
        assert _status(answer) == 408
    assert _metrics(replica)["ejc_http_requests_timed_out_total"] == 3


# -- bodies and framing ----------------------------------------------------------------------


def test_a_body_over_the_limit_gets_413_and_writes_nothing(start_leader: StartReplica) -> None:
    replica = start_leader(http_max_body_bytes=65536)
    app = {
        "appName": "big",
        "appURL": "file:///tmp/big.tar.gz",
        "bootstrapScript": "bin/start.sh",
        "padding": "x" * 70000,
    }
    data = json.dumps(app).encode()
    head = (
        f"POST /api/app HTTP/1.1\r\nHost: x\r\nAuthorization: {AUTH}\r\n"
        "Content-Type: application/json\r\n"
    ).encode()
    with _sockets() as held:
        # Declared length over the limit: refused before the body is read.
        sock = _connect(replica.port)
        held.append(sock)
        sock.sendall(head + f"Content-Length: {len(data)}\r\n\r\n".encode())
        answer, _ = _read_until_closed(sock, 10)
        assert _status(answer) == 413
        assert _body(answer)["type"] == "RequestEntityTooLarge"
        assert "65536" in str(_body(answer)["error"])

        # An absurd declared length, too.
        sock = _connect(replica.port)
        held.append(sock)
        sock.sendall(head + b"Content-Length: 99999999999999999999\r\n\r\n")
        assert _status(_read_until_closed(sock, 10)[0]) == 413

        # Chunked, in chunks each within the limit, adding up over it.
        sock = _connect(replica.port)
        held.append(sock)
        chunks = b"".join(
            b"%x\r\n" % len(part) + part + b"\r\n" for part in (data[:40000], data[40000:])
        )
        sock.sendall(head + b"Transfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n")
        assert _status(_read_until_closed(sock, 10)[0]) == 413

    status, _, _ = http_get(f"http://{replica.identity}/api/app/big")
    assert status in (401, 404)  # never written (401 only if reads need credentials here)
    conn = http.client.HTTPConnection("127.0.0.1", replica.port, timeout=5)
    conn.request("GET", "/api/app/big", headers={"Authorization": AUTH})
    assert conn.getresponse().status == 404
    conn.close()


def test_absurd_chunk_sizes_get_400_without_memory_growth(start_leader: StartReplica) -> None:
    replica = start_leader()
    terms = _metrics(replica)["ejc_leader_terms_total"]
    head = b"POST /api/app HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    with _sockets() as held:
        # The answer itself: 400 at once, naming the problem.
        for framing in (
            b"FFFFFFFFFFFFFFFFFFFF\r\nabc",
            b"7fffffff\r\nabc",
            b"F" * 4096,
            b"zz\r\n",
        ):
            sock = _connect(replica.port)
            held.append(sock)
            sock.sendall(head + framing)
            answer, seconds = _read_until_closed(sock, 10)
            assert _status(answer) == 400, (framing[:30], answer[:200])
            assert seconds < 2.0
        rss_before = _rss_mb(replica.pid)

        # Memory: 200 connections each announcing a 1 TiB chunk and pushing 1 MiB at it.
        payload = head + b"10000000000\r\n" + b"x" * (1 << 20)

        def attack(_: int) -> int:
            try:
                with _connect(replica.port, timeout_s=10) as sock:
                    try:
                        sock.sendall(payload)
                    except OSError:
                        pass  # the server answered and closed before taking it all
                    return _status(_read_until_closed(sock, 10)[0])
            except OSError:
                return 0

        with ThreadPoolExecutor(max_workers=20) as pool:
            statuses = list(pool.map(attack, range(200)))
        rss_after = _rss_mb(replica.pid)
    print(
        f"\nFIGURE absurd chunk sizes: 200 x 1 MiB pushed at a 1 TiB chunk; RSS "
        f"{rss_before:.0f} -> {rss_after:.0f} MB; answers {sorted(set(statuses))}"
    )
    # 0: the server closed the connection before the answer could be read back (reset).
    assert set(statuses) <= {400, 0}
    assert statuses.count(400) > 0
    assert rss_after - rss_before < 50
    assert _same_term(replica, terms)


# -- redirects and start-up ------------------------------------------------------------------


def test_a_crlf_path_to_a_standby_is_redirected_not_500(start_replica: StartReplica) -> None:
    replicas = [start_replica(), start_replica()]
    leader = wait_for(
        lambda: next((r for r in replicas if r.is_leader()), None), 30, message="a leader"
    )
    standby = next(r for r in replicas if r is not leader)
    wait_for(
        lambda: (standby.health() or {}).get("leader") == leader.identity,
        15,
        message="standby follows",
    )
    status, headers, _ = http_get(f"http://{standby.identity}/api/%0d%0a?q=%0d%0a%22")
    assert status == 307
    assert headers["Location"] == f"http://{leader.identity}/api/%0D%0A?q=%0d%0a%22"
    # Raw bytes that must never reach a header unencoded.
    with _sockets() as held:
        sock = _connect(standby.port)
        held.append(sock)
        sock.sendall(b"GET /api/a%0Db%FF?x=\x01\x7f HTTP/1.1\r\nHost: localhost\r\n\r\n")
        answer = sock.recv(65536)
    assert _status(answer) == 307
    location = answer.split(b"Location: ", 1)[1].split(b"\r\n", 1)[0]
    assert location == f"http://{leader.identity}/api/a%0Db%FF?x=%01%7F".encode()
    assert "Traceback" not in standby.log_text()


def test_the_replica_raises_its_descriptor_limit_and_derives_its_connection_limit(
    start_replica: StartReplica,
) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
    try:
        replica = start_replica()  # inherits the low soft limit
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    wait_for(replica.is_leader, 30, message="leader")
    with open(f"/proc/{replica.pid}/limits") as limits:
        line = next(line for line in limits if line.startswith("Max open files"))
    assert line.split()[3:5] == [str(hard), str(hard)]
    expected = min(4096, (hard - 512) // 2)
    assert _metrics(replica)["ejc_http_connection_limit"] == expected


def test_a_taken_port_exits_1(start_leader: StartReplica, start_replica: StartReplica) -> None:
    first = start_leader()
    second = start_replica(http_port=first.port)
    assert second.wait(60) == 1
    assert "cannot start" in second.log_text()
    assert first.is_leader()

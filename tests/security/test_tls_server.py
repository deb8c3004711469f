"""The hardened server's TLS in-process: whole bodies both ways, keep-alive, slow readers.

A real EdgeServer on 127.0.0.1 with a self-signed certificate made by `openssl`; the app echoes
a digest of the body it got and can answer many megabytes, so that records larger than one read,
bytes OpenSSL already decrypted (`pending()`) and writes that would block all happen.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import socket
import ssl
import threading
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from deploy.zookeeper import free_port
from scheduler.edge.wsgiserver import EdgeServer, HttpLimits, server_tls_context
from tests.support.certificates import self_signed
from tests.support.waiting import wait_for

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment


def _app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
    body = environ["wsgi.input"].read()
    if environ["PATH_INFO"] == "/nothing":
        start_response("204 No Content", [])
        return []
    if environ["PATH_INFO"] == "/big":
        size = int(environ["QUERY_STRING"] or "0")
        block = os.urandom(65536)
        start_response("200 OK", [("Content-Type", "application/octet-stream"),
                                  ("Content-Length", str(size))])  # fmt: skip
        return (block[: min(65536, size - i)] for i in range(0, size, 65536))
    answer = json.dumps(
        {
            "scheme": environ["wsgi.url_scheme"],
            "length": len(body),
            "sha256": hashlib.sha256(body).hexdigest(),
        }
    ).encode()
    start_response("200 OK", [("Content-Type", "application/json"),
                              ("Content-Length", str(len(answer)))])  # fmt: skip
    return [answer]


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tls")
    self_signed(folder, ips=(), kind="rsa")
    return folder


@pytest.fixture
def server(certificate: Path) -> Iterator[tuple[EdgeServer, int]]:
    port = free_port()
    tls = server_tls_context(str(certificate / "cert.pem"), str(certificate / "key.pem"))
    edge = EdgeServer(_app, "127.0.0.1", port, HttpLimits(header_timeout_s=1.0), tls=tls)
    edge.start()
    yield edge, port
    edge.stop(5)


def _client(certificate: Path, port: int) -> http.client.HTTPSConnection:
    context = ssl.create_default_context(cafile=str(certificate / "cert.pem"))
    return http.client.HTTPSConnection("localhost", port, timeout=20, context=context)


def test_bodies_of_every_size_arrive_whole_both_ways_on_one_connection(
    server: tuple[EdgeServer, int], certificate: Path
) -> None:
    _, port = server
    conn = _client(certificate, port)
    try:
        for size in (0, 1, 8191, 8192, 16384, 16385, 100_000, 1_000_000):
            body = os.urandom(size)
            conn.request("POST", "/echo", body=body, headers={"Content-Type": "x/y"})
            answer = conn.getresponse()
            got = json.loads(answer.read())
            assert got == {
                "scheme": "https",
                "length": size,
                "sha256": hashlib.sha256(body).hexdigest(),
            }
        for size in (1, 70_000, 8_000_000):
            conn.request("GET", f"/big?{size}")
            answer = conn.getresponse()
            assert len(answer.read()) == size
    finally:
        conn.close()


def test_an_answer_without_content_keeps_the_connection_open(
    server: tuple[EdgeServer, int], certificate: Path
) -> None:
    # waitress closed the connection after every 204: a new handshake for each console write.
    _, port = server
    conn = _client(certificate, port)
    try:
        conn.request("POST", "/nothing")
        first = conn.getresponse()
        first.read()
        assert (first.status, first.will_close) == (204, False)
        assert first.getheader("Content-Type") is None
        sock = conn.sock
        conn.request("POST", "/echo", body=b"after")
        assert conn.getresponse().status == 200
        assert conn.sock is sock  # the same connection
    finally:
        conn.close()


def test_a_client_that_pauses_reading_gets_every_byte_and_others_are_served_meanwhile(
    server: tuple[EdgeServer, int], certificate: Path
) -> None:
    _, port = server
    context = ssl.create_default_context(cafile=str(certificate / "cert.pem"))
    raw = socket.create_connection(("127.0.0.1", port), timeout=20)
    slow = context.wrap_socket(raw, server_hostname="localhost")
    # More than the kernel's buffers hold on loopback: the server's TLS writes would block.
    size = 12_000_000
    received = bytearray()
    try:
        slow.sendall(f"GET /big?{size} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
        received += slow.recv(1024)  # the answer has started; the rest waits in the server
        while b"\r\n\r\n" not in received:
            received += slow.recv(1024)
        done = threading.Event()

        def others() -> None:
            for _ in range(5):
                conn = _client(certificate, port)
                conn.request("POST", "/echo", body=b"x")
                assert conn.getresponse().status == 200
                conn.close()
            done.set()

        worker = threading.Thread(target=others, name="test-other-clients")
        worker.start()
        assert done.wait(10), "other clients waited for the slow reader"
        worker.join(5)
        head, _, body = bytes(received).partition(b"\r\n\r\n")
        rest = bytearray(body)
        while len(rest) < size and (chunk := slow.recv(65536)):
            rest += chunk
        assert b" 200 " in head.split(b"\r\n")[0]
        assert len(rest) == size
    finally:
        slow.close()


def test_a_failed_handshake_is_counted_and_the_server_goes_on(
    server: tuple[EdgeServer, int], certificate: Path
) -> None:
    edge, port = server
    untrusting = ssl.create_default_context()  # does not trust the self-signed certificate
    with pytest.raises(ssl.SSLCertVerificationError):
        untrusting.wrap_socket(
            socket.create_connection(("127.0.0.1", port), timeout=5), server_hostname="localhost"
        )
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"\x16\x03\x01\x00\x05hello")  # a handshake record that is no hello
        assert _closed_by_server(sock)
    wait_for(lambda: edge.tls_failed >= 2, 5, message="both failed handshakes are counted")
    conn = _client(certificate, port)
    conn.request("POST", "/echo", body=b"still")
    assert conn.getresponse().status == 200
    conn.close()


def _closed_by_server(sock: socket.socket) -> bool:
    """Read (at most an alert) until the server closes the connection."""
    try:
        while chunk := sock.recv(4096):
            if len(chunk) > 64:
                return False
    except ConnectionResetError:
        pass
    return True


def test_only_tls_1_2_and_later_without_compression(
    server: tuple[EdgeServer, int], certificate: Path
) -> None:
    _, port = server
    for version, name in ((ssl.TLSVersion.TLSv1_2, "TLSv1.2"), (ssl.TLSVersion.TLSv1_3, "TLSv1.3")):
        context = ssl.create_default_context(cafile=str(certificate / "cert.pem"))
        context.minimum_version = context.maximum_version = version
        with context.wrap_socket(
            socket.create_connection(("127.0.0.1", port), timeout=5), server_hostname="localhost"
        ) as sock:
            assert (sock.version(), sock.compression()) == (name, None)
    old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    old.load_verify_locations(str(certificate / "cert.pem"))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # what this test is about
            old.minimum_version = ssl.TLSVersion.TLSv1
            old.maximum_version = ssl.TLSVersion.TLSv1_1
        old.set_ciphers("ALL:@SECLEVEL=0")
    except (ValueError, ssl.SSLError):
        pytest.skip("this OpenSSL cannot even offer TLS 1.1")
    with pytest.raises(ssl.SSLError):
        old.wrap_socket(
            socket.create_connection(("127.0.0.1", port), timeout=5), server_hostname="localhost"
        )

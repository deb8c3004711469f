"""The console's static files and the replica origins it may call, as plain WSGI (no server)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from scheduler.edge.console import STATIC_DIR, Console
from scheduler.edge.console.origins import (
    cors_headers,
    origin_of,
    preflight_headers,
    replica_origin,
)

REPLICAS = ("127.0.0.1:8899", "sched-b.example:8900")


class Answer:
    """What a WSGI app passed to start_response, and its body."""

    def __init__(self) -> None:
        self.status = ""
        self.headers: dict[str, str] = {}
        self.body = b""

    def start(
        self, status: str, headers: list[tuple[str, str]], exc_info: Any = None, /
    ) -> Callable[[bytes], object]:
        self.status = status
        self.headers = dict(headers)
        return lambda _data: None

    @property
    def code(self) -> int:
        return int(self.status.split(" ", 1)[0])


def serve(console: Console, path: str, method: str = "GET", **environ: str) -> Answer:
    answer = Answer()
    body = console.serve(
        {"PATH_INFO": path, "REQUEST_METHOD": method, **environ},
        answer.start,
        REPLICAS,
    )
    answer.body = b"".join(body)
    return answer


@pytest.fixture(scope="module")
def console() -> Console:
    return Console()


def test_root_serves_the_page_with_strict_headers(console: Console) -> None:
    answer = serve(console, "/")
    assert answer.code == 200
    assert answer.headers["Content-Type"] == "text/html; charset=utf-8"
    assert answer.body == (STATIC_DIR / "index.html").read_bytes()
    assert answer.headers["X-Content-Type-Options"] == "nosniff"
    assert answer.headers["X-Frame-Options"] == "DENY"
    assert answer.headers["Cache-Control"] == "no-cache"
    policy = dict(
        part.strip().split(" ", 1) for part in answer.headers["Content-Security-Policy"].split(";")
    )
    assert policy["default-src"] == "'none'"
    assert policy["script-src"] == "'self'"  # no inline script, no other host
    assert policy["style-src"] == "'self'"
    assert policy["frame-ancestors"] == "'none'"
    # The page may call this replica and the replicas in the election, nothing else.
    assert set(policy["connect-src"].split()) == {
        "'self'",
        "http://127.0.0.1:8899",
        "http://sched-b.example:8900",
    }


def test_the_page_has_no_inline_script_or_style() -> None:
    html = (STATIC_DIR / "index.html").read_text()
    assert "<script>" not in html and "<style" not in html and "style=" not in html
    assert 'type="module" src="/console/js/main.js"' in html


@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        ("/console/js/main.js", "text/javascript; charset=utf-8"),
        ("/console/console.css", "text/css; charset=utf-8"),
        ("/console/icon.svg", "image/svg+xml"),
        ("/console/vendor/uPlot.esm.js", "text/javascript; charset=utf-8"),
        ("/console/vendor/uPlot.min.css", "text/css; charset=utf-8"),
    ],
)
def test_assets_have_their_content_type(console: Console, path: str, content_type: str) -> None:
    answer = serve(console, path)
    assert answer.code == 200
    assert answer.headers["Content-Type"] == content_type
    assert answer.body == (STATIC_DIR / path.removeprefix("/console/")).read_bytes()
    assert answer.headers["ETag"].startswith('"')


def test_every_module_the_page_imports_is_served(console: Console) -> None:
    """Each relative `import ... from "./x.js"` in the console's modules names a served file."""
    js = STATIC_DIR / "js"
    for module in js.rglob("*.js"):
        for spec in _imports(module.read_text()):
            target = (module.parent / spec).resolve()
            assert target.is_file(), f"{module.name} imports {spec}, which does not exist"
            served = "/console/" + target.relative_to(STATIC_DIR).as_posix()
            assert serve(console, served).code == 200


def _imports(source: str) -> list[str]:
    return re.findall(r'from\s+"(\.{1,2}/[^"]+)"', source)


def test_an_unchanged_file_answers_304_without_a_body(console: Console) -> None:
    first = serve(console, "/console/console.css")
    again = serve(console, "/console/console.css", HTTP_IF_NONE_MATCH=first.headers["ETag"])
    assert again.code == 304
    assert again.body == b""
    other = serve(console, "/console/console.css", HTTP_IF_NONE_MATCH='"something-else"')
    assert other.code == 200


@pytest.mark.parametrize(
    "path",
    [
        "/console/",
        "/console/nope.js",
        "/console/../http.py",
        "/console/../../etc/passwd",
        "/console/js/../../__init__.py",
        "/console/%2e%2e/origins.py",
        "/console/js\x00.js",
    ],
)
def test_only_the_console_files_are_served(console: Console, path: str) -> None:
    answer = serve(console, path)
    assert answer.code == 404
    assert answer.headers["Content-Type"] == "application/json"
    assert json.loads(answer.body)["type"] == "NotFound"


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "OPTIONS", "PATCH"])
def test_the_console_files_can_only_be_read(console: Console, method: str) -> None:
    answer = serve(console, "/", method)
    assert answer.code == 405
    assert answer.headers["Allow"] == "GET, HEAD"
    assert json.loads(answer.body)["type"] == "MethodNotAllowed"


def test_head_answers_headers_only(console: Console) -> None:
    answer = serve(console, "/", "HEAD")
    assert answer.code == 200
    assert answer.body == b""
    assert int(answer.headers["Content-Length"]) == len((STATIC_DIR / "index.html").read_bytes())


def test_a_missing_static_folder_answers_404(tmp_path: Path) -> None:
    answer = serve(Console(tmp_path), "/")
    assert answer.code == 404


def test_identities_that_are_not_host_port_never_reach_a_header() -> None:
    assert origin_of("127.0.0.1:8899") == "http://127.0.0.1:8899"
    assert origin_of("[::1]:8899") == "http://[::1]:8899"
    for bad in (
        "host",
        "host:port",
        "a b:1",
        "h:1\r\nX-Evil: 1",
        "h:1\n",
        "http://h:1",
        "h:123456",
        "",
    ):
        assert origin_of(bad) is None


@pytest.mark.parametrize(
    "origin",
    [
        "http://127.0.0.1:8899",
        "http://SCHED-B.example:8900",  # host names compare without case
    ],
)
def test_replica_origins_are_recognised(origin: str) -> None:
    assert replica_origin(origin, REPLICAS) == origin


@pytest.mark.parametrize(
    "origin",
    [
        None,
        "",
        "null",
        "*",
        "http://127.0.0.1:8898",
        "https://127.0.0.1:8899",  # another scheme is another origin
        "http://127.0.0.1:8899/",
        "http://127.0.0.1:8899/path",
        "http://user@127.0.0.1:8899",
        "http://127.0.0.1:8899.evil.example",
        "http://evil.example",
        "http://127.0.0.1:99999",
        "http://" + "a" * 400 + ":8899",
    ],
)
def test_other_origins_are_not(origin: str | None) -> None:
    assert replica_origin(origin, REPLICAS) is None


def test_replicas_serving_tls_grant_their_https_origins_only() -> None:
    assert origin_of("127.0.0.1:8899", "https") == "https://127.0.0.1:8899"
    assert replica_origin("https://127.0.0.1:8899", REPLICAS, "https") == "https://127.0.0.1:8899"
    assert replica_origin("http://127.0.0.1:8899", REPLICAS, "https") is None
    assert replica_origin("https://sched.example", ["sched.example:443"], "https") is not None


def test_default_port_matches_an_identity_on_port_80() -> None:
    assert replica_origin("http://sched.example", ["sched.example:80"]) == "http://sched.example"


def test_cors_answers_name_exactly_the_origin_and_no_credentials() -> None:
    origin = "http://127.0.0.1:8899"
    for headers in (dict(cors_headers(origin)), dict(preflight_headers(origin))):
        assert headers["Access-Control-Allow-Origin"] == origin
        assert headers["Vary"] == "Origin"
        assert "Access-Control-Allow-Credentials" not in headers
    assert "identify" in dict(cors_headers(origin))["Access-Control-Expose-Headers"]
    preflight = dict(preflight_headers(origin))
    assert "Authorization" in preflight["Access-Control-Allow-Headers"]
    assert "POST" in preflight["Access-Control-Allow-Methods"]

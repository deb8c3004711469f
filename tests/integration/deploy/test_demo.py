"""The demo's registration asks a leader that does not answer yet again, and stops asking once
it answered; a registration that already went through (409) counts as done."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from deploy import demo


class _Leader(BaseHTTPRequestHandler):
    """A replica's API as the demo uses it: each POST path answers 503 for its first
    `busy` calls, then 204 (or 409 once registered)."""

    calls: list[tuple[str, str]] = []
    busy = 2

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.calls.append(("POST", self.path))
        seen = sum(1 for call in self.calls if call == ("POST", self.path))
        status = 503 if seen <= self.busy else (204 if seen == self.busy + 1 else 409)
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        self.calls.append(("GET", self.path))
        body: Any = False
        if self.path == "/api/job/jobs/demo_job":
            body = {
                "jobExecutionType": "TRANSIENT",
                "jobType": "SIMPLE",
                "shardingTotalCount": 3,
                "cron": "0/5 * * * * ?",
            }
        raw = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def leader() -> Iterator[str]:
    _Leader.calls = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Leader)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(5)


def test_a_busy_leader_is_asked_again_until_the_demo_is_registered(
    leader: str, tmp_path: Path
) -> None:
    line = demo.install_demo(leader, tmp_path)
    assert "job demo_job: TRANSIENT SIMPLE, 3 shards, cron 0/5 * * * * ?, enabled" in line
    posts = [path for method, path in _Leader.calls if method == "POST"]
    assert posts == ["/api/app"] * 3 + ["/api/job/register"] * 3


def test_a_leader_that_never_answers_is_reported_after_the_wait(
    leader: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_Leader, "busy", 10**6)
    monkeypatch.setattr(demo, "_REGISTER_WITHIN_S", 2.5)
    line = demo.install_demo(leader, tmp_path)
    assert line.endswith("not registered: POST /api/app answered 503")
    assert 2 <= len(_Leader.calls) <= 5

"""The `ejcloud` CLI, as a real subprocess, against recording HTTP servers (issue 23): credentials
go only to the configured servers and to a leader one of them vouches for over an authenticated
call; job output reaches the terminal with its control sequences escaped."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.recording_http import Recorded, RecordingServer, Reply, recording_server
from tests.support.replicas import ROOT

ROOT_AUTH = "Basic " + base64.b64encode(b"root:s3cret-password").decode()
TASK = "j@-@0@-@READY@-@S0@-@0000"
OSC52 = "\x1b]52;c;ZWNobyBwd25lZA==\x07"  # writes "echo pwned" to the clipboard
TITLE = "\x1b]0;innocent title\x07"


def ejcloud(home: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EJCLOUD_")}
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        EJCLOUD_USER="root",
        EJCLOUD_PASSWORD="s3cret-password",
    )
    return subprocess.run(
        [sys.executable, "-m", "ejcloud_cli", "--timeout", "5", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=30,
        check=False,
    )


@pytest.fixture
def rogue() -> Iterator[RecordingServer]:
    """A server outside the configuration (127.0.0.2: another host) that answers everything."""
    with recording_server(lambda _r: Reply(200, []), host="127.0.0.2") as server:
        yield server


def standby_naming(leader: str, vouched: bool) -> RecordingServer:
    """A configured server that redirects /api to `leader` and names it in /health."""

    def answer(request: Recorded) -> Reply:
        if request.path.startswith("/api/"):
            return Reply(
                307,
                {"error": f"this replica is a standby; the leader is {leader}"},
                (("Location", f"http://{leader}{request.path}"),),
            )
        if request.path == "/health":
            return Reply(200, {"role": "standby", "leader": leader, "leaderVouched": vouched})
        return Reply(404, {"error": "no such path"})

    return RecordingServer(answer)


@pytest.mark.parametrize("vouched", [False, None])
def test_cli_refuses_to_send_the_password_to_a_host_outside_its_configuration(
    rogue: RecordingServer, tmp_path: Path, vouched: bool | None
) -> None:
    # A standby that names the rogue as its leader without vouching for it (or, None, a
    # replica from before vouching, whose /health has no leaderVouched at all).
    standby = standby_naming(rogue.identity, bool(vouched))
    try:
        done = ejcloud(tmp_path, "--server", standby.url, "app", "list")
    finally:
        standby.close()
    err = done.stderr.decode()
    assert done.returncode == 3, err
    assert f"redirected to http://{rogue.identity}" in err
    assert "not a configured server" in err and "--server" in err
    assert rogue.requests == []  # nothing at all reached it, let alone the password
    # The configured server was asked, with the credentials, whom it vouches for.
    assert [(r.path.split("?")[0], r.credentials) for r in standby.requests] == [
        ("/api/app/list", ROOT_AUTH),
        ("/health", ROOT_AUTH),
    ]


def test_cli_without_credentials_follows_no_unvouched_redirect_either(
    rogue: RecordingServer, tmp_path: Path
) -> None:
    # No password to lose, but the body (an app's definition) goes where credentials would.
    standby = standby_naming(rogue.identity, False)
    env = {k: v for k, v in os.environ.items() if not k.startswith("EJCLOUD_")}
    env.update(HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / ".config"))
    try:
        done = subprocess.run(
            [
                *(sys.executable, "-m", "ejcloud_cli", "--timeout", "5", "--server", standby.url),
                *("app", "add", "a1", "--url", "file:///a1.tar.gz", "--bootstrap", "b"),
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            timeout=30,
            check=False,
        )
    finally:
        standby.close()
    assert done.returncode == 3, done.stderr
    assert rogue.requests == []
    assert all(r.credentials is None for r in standby.requests)


def test_cli_refuses_a_leader_vouched_for_under_another_name(
    rogue: RecordingServer, tmp_path: Path
) -> None:
    # The standby vouches for some leader, but not for the host its redirect points to.
    def answer(request: Recorded) -> Reply:
        if request.path == "/health":
            return Reply(200, {"role": "standby", "leader": "10.9.9.9:8899", "leaderVouched": True})
        return Reply(307, None, (("Location", f"{rogue.url}{request.path}"),))

    with recording_server(answer) as standby:
        done = ejcloud(tmp_path, "--server", standby.identity, "job", "list")
    assert done.returncode == 3, done.stderr
    assert rogue.requests == []


def test_cli_follows_the_leader_a_configured_server_vouches_for(
    rogue: RecordingServer, tmp_path: Path
) -> None:
    leader = rogue  # same recording server, now vouched for: it may have the credentials
    standby = standby_naming(leader.identity, True)
    try:
        done = ejcloud(tmp_path, "--json", "--server", standby.url, "app", "list")
    finally:
        standby.close()
    assert done.returncode == 0, done.stderr.decode()
    assert json.loads(done.stdout) == []
    assert [(r.method, r.path.split("?")[0], r.credentials) for r in leader.requests] == [
        ("GET", "/api/app/list", ROOT_AUTH)
    ]


def test_logs_escape_terminal_control_sequences_unless_raw(tmp_path: Path) -> None:
    output = f"line one\tok\n{OSC52}{TITLE}\x9b31mred\r\nend\n"

    def answer(request: Recorded) -> Reply:
        if "/log" not in request.path:
            return Reply(404, {"error": "no such path"})
        if "offset=0" in request.path:
            size = len(output.encode())
            return Reply(200, {"data": output, "offset": 0, "nextOffset": size})
        return Reply(200, {"data": "", "offset": len(output.encode())})

    with recording_server(answer) as leader:
        done = ejcloud(tmp_path, "--server", leader.url, "logs", TASK)
        raw = ejcloud(tmp_path, "--server", leader.url, "logs", TASK, "--raw")
    assert done.returncode == 0, done.stderr
    shown = done.stdout.decode()
    assert "\x1b" not in shown and "\x07" not in shown and "\x9b" not in shown and "\r" not in shown
    assert shown == (
        "line one\tok\n\\x1b]52;c;ZWNobyBwd25lZA==\\x07\\x1b]0;innocent title\\x07"
        "\\x9b31mred\\x0d\nend\n"
    )
    assert raw.returncode == 0 and raw.stdout.decode() == output

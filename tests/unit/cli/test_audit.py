"""`ejcloud audit` without a server: its rows and its checks of what it is asked."""

from __future__ import annotations

from ejcloud_cli.audit import AUDIT_HEADERS, audit_row
from ejcloud_cli.output import render_table
from tests.unit.cli.conftest import Run


def test_a_record_is_a_row_with_its_time_in_utc_and_controls_escaped() -> None:
    row = audit_row(
        {
            "time": "2026-11-26T19:00:01.250Z",
            "actor": "user:mallory\x1b[2J",
            "source": "10.0.0.9",
            "action": "app.create",
            "resource": "app/demo",
            "outcome": "denied",
            "status": 401,
            "requestId": "ab" * 16,
            "term": 4,
        }
    )
    table = render_table(AUDIT_HEADERS, [row])
    assert "2026-11-26 19:00:01" in table
    assert "\x1b" not in table and "user:mallory\\x1b[2J" in table
    assert table.splitlines()[0].split() == list(AUDIT_HEADERS)


def test_the_command_is_listed_and_checks_its_options_before_sending(run: Run) -> None:
    assert "\n  audit " in run("--help").out
    bad = run("--server", "http://127.0.0.1:9", "audit", "--outcome", "maybe")
    assert bad.code == 2 and "maybe" in bad.err
    assert run("--server", "http://127.0.0.1:9", "audit", "--limit", "0").code == 2

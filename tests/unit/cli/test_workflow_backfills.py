"""`ejcloud workflow backfill ...` without a server: its commands and usage errors (exit code 2,
nothing sent). What the server does with them: tests/e2e/test_workflow_backfill.py."""

from __future__ import annotations

import pytest

from tests.unit.cli.conftest import Run

# Nothing listens here: a command that reached the network would fail with exit code 3.
NOWHERE = {"EJCLOUD_SERVER": "127.0.0.1:9", "EJCLOUD_USER": "u", "EJCLOUD_PASSWORD": "p"}
COMMANDS = ("backfill", "backfills", "backfill-pause", "backfill-resume", "backfill-cancel")
RANGE = ("--from", "2026-11-23T00:00:00Z", "--to", "2026-11-23T01:00:00Z")


def test_help_lists_every_backfill_command_in_the_workflow_group(run: Run) -> None:
    listed = run("workflow", "--help").out
    for command in COMMANDS:
        assert f"\n  {command} " in listed, command


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("workflow", "backfill", "w", "--to", "2026-11-23T01:00:00Z"), "Missing option '--from'"),
        (("workflow", "backfill", "w", *RANGE, "--rate", "nan"), "--rate"),
        (("workflow", "backfill", "w", *RANGE, "--rate", "0"), "--rate"),
        (("workflow", "backfill", "w", *RANGE, "--overlap-policy", "NEVER"), "--overlap-policy"),
        (("workflow", "backfill-cancel", "w"), "Missing argument 'ID'"),
    ],
)
def test_click_refuses_bad_arguments_with_exit_2(
    run: Run, args: tuple[str, ...], message: str
) -> None:
    ran = run(*args, env=NOWHERE)
    assert ran.code == 2, ran.err
    assert message in ran.err


def test_a_well_formed_backfill_is_sent_and_fails_only_on_the_connection(run: Run) -> None:
    ran = run("workflow", "backfill", "w", *RANGE, "--rate", "2", "--dry-run", env=NOWHERE)
    assert ran.code == 3, ran.err

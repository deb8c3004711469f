"""`ejcloud job backfill ...` without a server: its commands, usage errors (exit code 2, nothing
sent) and how a dry run's fire list is printed. What the server does with them is proved end to
end in tests/e2e/test_backfill.py."""

from __future__ import annotations

import pytest

from ejcloud_cli.backfills import _fire_lines
from tests.unit.cli.conftest import Run

# Nothing listens here: a command that reached the network would fail with exit code 3.
NOWHERE = {"EJCLOUD_SERVER": "127.0.0.1:9", "EJCLOUD_USER": "u", "EJCLOUD_PASSWORD": "p"}
COMMANDS = (
    "backfill", "backfills", "backfill-show", "backfill-pause", "backfill-resume",
    "backfill-cancel",
)  # fmt: skip
RANGE = ("--from", "2026-11-23T00:00:00Z", "--to", "2026-11-23T01:00:00Z")


def test_help_lists_every_backfill_command_in_the_job_group(run: Run) -> None:
    listed = run("job", "--help").out
    for command in COMMANDS:
        assert f"\n  {command} " in listed, command


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("job", "backfill", "j", "--to", "2026-11-23T01:00:00Z"), "Missing option '--from'"),
        (("job", "backfill", "j", "--from", "2026-11-23T00:00:00Z"), "Missing option '--to'"),
        (("job", "backfill", "j", *RANGE, "--rate", "fast"), "'fast' is not a valid float"),
        (("job", "backfill", "j", *RANGE, "--overlap-policy", "SOMETIMES"), "--overlap-policy"),
        (("job", "backfill-pause", "j"), "Missing argument 'ID'"),
    ],
)
def test_click_refuses_bad_arguments_with_exit_2(
    run: Run, args: tuple[str, ...], message: str
) -> None:
    ran = run(*args, env=NOWHERE)
    assert ran.code == 2, ran.err
    assert message in ran.err


@pytest.mark.parametrize("rate", ["nan", "inf", "-inf"])
def test_a_rate_that_is_not_a_number_is_a_usage_error_before_anything_is_sent(
    run: Run, rate: str
) -> None:
    ran = run("job", "backfill", "j", *RANGE, "--rate", rate, env=NOWHERE)
    assert ran.code == 2, ran.err
    # nan passes click's range check (no comparison holds for it) and is refused by ours;
    # infinities are outside the range: both name the option, nothing is sent (exit 3 else).
    if rate == "nan":
        assert ran.err.startswith("ejcloud: error: --rate must be a number")
    else:
        assert "--rate" in ran.err and "0.01<=x<=600" in ran.err


def test_a_well_formed_backfill_is_sent_and_fails_only_on_the_connection(run: Run) -> None:
    ran = run("job", "backfill", "j", *RANGE, "--rate", "2", "--dry-run", env=NOWHERE)
    assert ran.code == 3, ran.err


def test_the_fire_list_shows_what_the_server_listed_and_counts_the_rest() -> None:
    listed = [f"2026-11-23T00:{m:02d}:00+00:00" for m in range(3)]
    assert _fire_lines({"fires": 3, "fireTimes": listed}) == listed
    assert _fire_lines({"fires": 250, "fireTimes": listed}) == [*listed, "... and 247 more"]
    assert _fire_lines({"fires": 0, "fireTimes": []}) == []
    assert _fire_lines({"fires": "x", "fireTimes": "y"}) == []

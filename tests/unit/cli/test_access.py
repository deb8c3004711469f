"""The CLI's API tokens (issue 26): where a token comes from, which credentials win, that it is
never shown; and the access commands' checks made before anything is sent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ejcloud_cli.access import parse_duration
from ejcloud_cli.errors import UsageProblem
from ejcloud_cli.settings import ConfigFile, Flags, read_config_file, resolve
from tests.unit.cli.conftest import Run

TOKEN = "ejc_0123456789ab_" + "c" * 48
OTHER = "ejc_ba9876543210_" + "d" * 48
NOWHERE = {"EJCLOUD_SERVER": "http://127.0.0.1:9", "EJCLOUD_TIMEOUT": "1"}


def test_a_token_from_the_environment_is_used_instead_of_a_user_from_the_file() -> None:
    file = ConfigFile(Path("/cfg.toml"), {"user": "alice", "password": "pw"})
    got = resolve(Flags(), {"EJCLOUD_TOKEN": TOKEN}, file)
    assert (got.token, got.user, got.password) == (TOKEN, None, None)
    assert got.sources["token"] == "env"


def test_a_user_flag_wins_over_a_token_in_the_environment_or_file() -> None:
    file = ConfigFile(Path("/cfg.toml"), {"token": OTHER})
    for env, config in (({"EJCLOUD_TOKEN": TOKEN}, ConfigFile(None, {})), ({}, file)):
        got = resolve(Flags(user="alice", password="pw"), env, config)
        assert (got.token, got.user, got.password) == (None, "alice", "pw")
        assert "token" not in got.sources


def test_the_token_flag_wins_over_the_environment() -> None:
    got = resolve(
        Flags(token=TOKEN), {"EJCLOUD_TOKEN": OTHER, "EJCLOUD_USER": "bob"}, ConfigFile(None, {})
    )
    assert (got.token, got.user) == (TOKEN, None)


def test_a_token_and_a_user_from_the_same_place_are_a_usage_problem() -> None:
    with pytest.raises(UsageProblem, match="EJCLOUD_TOKEN or EJCLOUD_USER"):
        resolve(Flags(), {"EJCLOUD_TOKEN": TOKEN, "EJCLOUD_USER": "bob"}, ConfigFile(None, {}))
    with pytest.raises(UsageProblem, match="--token or --user"):
        resolve(Flags(user="bob", token=TOKEN), {}, ConfigFile(None, {}))


@pytest.mark.parametrize(
    "bad",
    [TOKEN.upper(), TOKEN + "0", TOKEN[:-1], "ejc_0123456789ab_c\nX-Evil: 1", "root:root"],
)
def test_a_malformed_token_is_named_without_being_shown(bad: str) -> None:
    with pytest.raises(UsageProblem) as refused:
        resolve(Flags(token=bad), {}, ConfigFile(None, {}))
    assert "--token is not an ejcloud API token" in refused.value.message
    assert bad.strip() not in refused.value.message


def test_a_token_in_a_config_file_that_others_may_read_is_warned_about(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(f'token = "{TOKEN}"\n')
    path.chmod(0o644)
    config = read_config_file(path, True)
    assert config.values["token"] == TOKEN
    assert any("holds a token" in w for w in config.warnings)
    path.chmod(0o600)
    assert read_config_file(path, True).warnings == ()


def test_config_shows_that_a_token_is_set_but_never_the_token(run: Run) -> None:
    ran = run("--json", "config", env={"EJCLOUD_TOKEN": TOKEN})
    assert ran.code == 0, ran.err
    shown = json.loads(ran.out)
    assert shown["token"] == "set" and shown["user"] is None
    assert shown["sources"]["token"] == "env"
    text = run("config", env={"EJCLOUD_TOKEN": TOKEN})
    assert "token:" in text.out and "set (env)" in text.out
    assert TOKEN not in ran.out + ran.err + text.out + text.err


def test_a_bad_token_stops_every_command_before_anything_is_sent(run: Run) -> None:
    bad = "ejc_secret_but_wrong"
    ran = run("app", "list", env={**NOWHERE, "EJCLOUD_TOKEN": bad})
    assert ran.code == 2
    assert "EJCLOUD_TOKEN is not an ejcloud API token" in ran.err
    assert bad not in ran.out + ran.err


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("3600", 3600), ("90s", 90), ("90m", 5400), ("12h", 43200), ("30d", 2_592_000),
     ("2w", 1_209_600), ("1y", 31_536_000)],
)  # fmt: skip
def test_expires_in_takes_a_number_with_a_unit(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "30 days", "1.5h", "-1d", "d", "30x", "99999999999d"])
def test_expires_in_refuses_what_is_not_a_duration(text: str) -> None:
    with pytest.raises(UsageProblem, match="--expires-in"):
        parse_duration(text)


def test_user_add_never_takes_a_password_from_the_command_line(run: Run) -> None:
    refused = run("user", "add", "alice", "--password", "x", env=NOWHERE)
    # --password is the global option: given after the subcommand it is unknown there.
    assert refused.code == 2
    no_terminal = run("user", "add", "alice", env=NOWHERE, stdin="")
    assert no_terminal.code == 2 and "--password-stdin" in no_terminal.err
    empty = run("user", "add", "alice", "--password-stdin", env=NOWHERE, stdin="\n")
    assert empty.code == 2 and "no password on stdin" in empty.err


def test_grant_add_takes_a_user_principal_and_a_known_role(run: Run) -> None:
    assert run("grant", "add", "alice", "viewer", "team_a", env=NOWHERE).code == 2
    bad_role = run("grant", "add", "user:alice", "owner", "team_a", env=NOWHERE)
    assert bad_role.code == 2 and "owner" in bad_role.err

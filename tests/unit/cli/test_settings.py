"""Where the CLI connects: flags over environment over config file over defaults."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ejcloud_cli.errors import UsageProblem
from ejcloud_cli.settings import (
    ConfigFile,
    Flags,
    config_file_path,
    parse_servers,
    read_config_file,
    resolve,
)
from tests.unit.cli.conftest import Run

FILE = ConfigFile(
    Path("/cfg.toml"),
    {"server": ("file-host:1",), "user": "file-user", "password": "file-pw", "timeout": 7.0},
)
ENV = {
    "EJCLOUD_SERVER": "env-host:2",
    "EJCLOUD_USER": "env-user",
    "EJCLOUD_PASSWORD": "env-pw",
    "EJCLOUD_TIMEOUT": "8",
}
FLAGS = Flags(servers=("flag-host:3",), user="flag-user", password="flag-pw", timeout_s=9.0)


def test_flags_win_over_environment_file_and_defaults() -> None:
    got = resolve(FLAGS, ENV, FILE)
    assert got.servers == ("http://flag-host:3",)
    assert (got.user, got.password, got.timeout_s) == ("flag-user", "flag-pw", 9.0)
    assert set(got.sources.values()) == {"flag"}


def test_environment_wins_over_file() -> None:
    got = resolve(Flags(), ENV, FILE)
    assert got.servers == ("http://env-host:2",)
    assert (got.user, got.password, got.timeout_s) == ("env-user", "env-pw", 8.0)
    assert set(got.sources.values()) == {"env"}


def test_file_wins_over_defaults_and_empty_environment_counts_as_unset() -> None:
    empty_env = {name: "" for name in ENV}
    got = resolve(Flags(), empty_env, FILE)
    assert got.servers == ("http://file-host:1",)
    assert (got.user, got.password, got.timeout_s) == ("file-user", "file-pw", 7.0)
    assert set(got.sources.values()) == {"file"}


def test_defaults_without_flags_environment_or_file() -> None:
    got = resolve(Flags(), {}, ConfigFile(None, {}))
    assert got.servers == ("http://127.0.0.1:8899",)
    assert (got.user, got.password, got.timeout_s) == (None, None, 10.0)
    assert set(got.sources.values()) == {"default"}


def test_each_setting_is_resolved_on_its_own() -> None:
    got = resolve(Flags(user="flag-user"), {"EJCLOUD_TIMEOUT": "3"}, FILE)
    assert got.user == "flag-user" and got.password == "file-pw"
    assert got.timeout_s == 3.0 and got.servers == ("http://file-host:1",)
    assert got.sources == {"server": "file", "user": "flag", "password": "file", "timeout": "env"}


def test_servers_are_repeated_or_comma_separated_and_normalised() -> None:
    assert parse_servers(["a:1, https://b:2/prefix/", "a:1", "http://c"], "--server") == (
        "http://a:1",
        "https://b:2/prefix",
        "http://c",
    )


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("ftp://a:1", "not an http:// or https:// URL"),
        ("http://a:99999", "is not a server URL"),
        ("http://user:pw@a:1", "credentials go in --user"),
        ("http://a:1/?x=1", "scheme://host[:port][/prefix]"),
        (" , ", "no server given"),
    ],
)
def test_bad_servers_are_refused_naming_where_they_came_from(value: str, problem: str) -> None:
    with pytest.raises(UsageProblem) as raised:
        parse_servers([value], "EJCLOUD_SERVER")
    assert raised.value.message.startswith("EJCLOUD_SERVER")
    assert problem in raised.value.message


@pytest.mark.parametrize("value", ["0", "-1", "nan", "3601", "soon"])
def test_bad_timeouts_are_refused(value: str) -> None:
    with pytest.raises(UsageProblem, match="EJCLOUD_TIMEOUT"):
        resolve(Flags(), {"EJCLOUD_TIMEOUT": value}, ConfigFile(None, {}))


def test_config_file_location_follows_flag_then_env_then_xdg_then_home() -> None:
    env = {"EJCLOUD_CONFIG": "/e.toml", "XDG_CONFIG_HOME": "/xdg", "HOME": "/home/u"}
    assert config_file_path(Flags(config_path="/f.toml"), env) == (Path("/f.toml"), True)
    assert config_file_path(Flags(), env) == (Path("/e.toml"), True)
    del env["EJCLOUD_CONFIG"]
    assert config_file_path(Flags(), env) == (Path("/xdg/ejcloud/config.toml"), False)
    # A relative XDG_CONFIG_HOME is not valid (XDG base directory spec) and is ignored.
    env["XDG_CONFIG_HOME"] = "relative"
    assert config_file_path(Flags(), env) == (Path("/home/u/.config/ejcloud/config.toml"), False)


def test_config_file_values_are_read_and_checked(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('server = ["a:1", "b:2"]\nuser = "root"\ntimeout = 4\n')
    got = read_config_file(path, required=True)
    assert got.values == {"server": ("a:1", "b:2"), "user": "root", "timeout": 4.0}
    assert got.warnings == ()
    assert read_config_file(tmp_path / "absent.toml", required=False).values == {}


def test_a_password_in_a_file_others_can_read_is_warned_about(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('password = "secret"\n')
    path.chmod(0o644)
    assert "chmod 600" in read_config_file(path, required=False).warnings[0]
    path.chmod(0o600)
    assert read_config_file(path, required=False).warnings == ()


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("servers = 'a'\n", "unknown key 'servers'"),
        ("server = 3\n", "server must be a string or a list of strings"),
        ("user = 1\n", "user must be a string"),
        ("timeout = 'x'\n", "timeout must be a number of seconds"),
        ("timeout = 0\n", "must be more than 0"),
        ("server = [\n", "is not valid TOML"),
    ],
)
def test_bad_config_files_are_refused_naming_the_file_and_key(
    tmp_path: Path, text: str, problem: str
) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(UsageProblem) as raised:
        read_config_file(path, required=False)
    assert str(path) in raised.value.message and problem in raised.value.message


def test_a_config_file_named_explicitly_must_exist(tmp_path: Path) -> None:
    with pytest.raises(UsageProblem, match="does not exist"):
        read_config_file(tmp_path / "absent.toml", required=True)


def test_cli_reports_the_settings_and_their_sources(run: Run, tmp_path: Path) -> None:
    config = tmp_path / "config" / "ejcloud" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('server = "file-host:1"\nuser = "file-user"\npassword = "pw"\ntimeout = 7\n')
    config.chmod(0o600)
    env = {"EJCLOUD_USER": "env-user", "EJCLOUD_TIMEOUT": "8"}
    ran = run("--json", "--timeout", "9", "config", env=env)
    assert ran.code == 0, ran.err
    got = json.loads(ran.out)
    assert got == {
        "servers": ["http://file-host:1"],
        "user": "env-user",
        "password": "set",
        "timeout": 9.0,
        "sources": {"server": "file", "user": "env", "password": "file", "timeout": "flag"},
        "configFile": str(config),
    }
    assert "pw" not in ran.out.replace("password", "")
    # The flag after the subcommand works too, and the server flag wins over the file.
    ran = run("--server", "a:1", "--server", "b:2,c:3", "config", "--json", env=env)
    assert json.loads(ran.out)["servers"] == ["http://a:1", "http://b:2", "http://c:3"]


def test_cli_refuses_a_bad_config_file_with_exit_code_2(run: Run, tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("surver = 'x'\n")
    ran = run("job", "list", env={"EJCLOUD_CONFIG": str(config)})
    assert ran.code == 2
    assert ran.err.strip() == (
        f"ejcloud: error: config file {config}: unknown key 'surver' "
        "(known: server, user, password, token, timeout, cacert)"
    )


def test_cli_without_a_password_and_without_a_terminal_says_what_to_give(run: Run) -> None:
    ran = run("--user", "root", "app", "list")
    assert ran.code == 2
    assert "no password for user 'root'" in ran.err and "EJCLOUD_PASSWORD" in ran.err

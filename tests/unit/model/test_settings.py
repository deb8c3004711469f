from __future__ import annotations

import dataclasses

import pytest

from scheduler.model.errors import SettingsError
from scheduler.model.settings import (
    KEYS_BY_NAME,
    Settings,
    load_settings,
    read_properties,
)
from scheduler.wiring.command_line import settings_from_argv


def test_defaults_match_the_original_keys() -> None:
    s = load_settings({}, {}, {})
    assert s.http_port == 8899
    assert s.zk_namespace == "elastic-job-cloud"
    assert s.zk_session_timeout_seconds == 10.0
    assert s.identity == "localhost:8899"


def test_every_key_has_one_default() -> None:
    # The key table (help, parsing) names exactly the dataclass's fields, and takes each
    # default from its field: the default is written in one place.
    fields = {f.name: f.default for f in dataclasses.fields(Settings)}
    assert list(fields) == list(KEYS_BY_NAME)
    assert fields == {name: key.default for name, key in KEYS_BY_NAME.items()}


def test_flags_override_environment_which_overrides_the_file() -> None:
    s = load_settings(
        {"http_port": "1000", "zk_servers": "file:1", "hostname": "file"},
        {"http_port": "2000", "EJC_ZK_SERVERS": "env:2"},
        {"http_port": "3000"},
    )
    assert (s.http_port, s.zk_servers, s.hostname) == (3000, "env:2", "file")


def test_every_bad_key_is_named_at_once() -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(
            {"nonsense_key": "1"},
            {},
            {"http_port": "eighty", "zk_session_timeout_seconds": "0", "zk_digest": "nocolon"},
        )
    assert set(caught.value.problems) == {
        "nonsense_key",
        "http_port",
        "zk_session_timeout_seconds",
        "zk_digest",
    }
    assert "eighty" in caught.value.problems["http_port"]


def test_required_values_cannot_be_empty() -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings({}, {}, {"zk_servers": ""})
    assert "zk_servers" in caught.value.problems


def test_properties_file_syntax() -> None:
    text = "# comment\n! also\nhostname = a.example\nhttp_port: 9000\n\nzk_namespace=x=y\n"
    assert read_properties(text) == {
        "hostname": "a.example",
        "http_port": "9000",
        "zk_namespace": "x=y",
    }


def test_config_file_is_read_and_unreadable_file_is_an_error(tmp_path) -> None:
    cfg = tmp_path / "s.properties"
    cfg.write_text("http_port=7001\n")
    assert settings_from_argv(["--config", str(cfg)], environ={}).http_port == 7001
    with pytest.raises(SettingsError) as caught:
        settings_from_argv(["--config", str(tmp_path / "missing")], environ={})
    assert "--config" in caught.value.problems


def test_secrets_are_masked_for_logs() -> None:
    s = load_settings({}, {}, {"zk_digest": "u:p", "framework_secret": "s"})
    shown = s.redacted()
    assert shown["zk_digest"] == "***" and shown["framework_secret"] == "***"
    assert shown["http_port"] == 8899


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("jdbc:h2:mem:trace", "unsupported JDBC URL"),
        ("not a url", "not a database URL"),
        ("nosuchdb://host/db", "no SQLAlchemy dialect"),
        ("mysql+nosuchdriver://host/db", "no SQLAlchemy dialect"),
        ("mssql+pymssql://host/db", "driver is not installed"),
    ],
)
def test_a_trace_database_url_that_cannot_work_is_refused_at_start(url: str, problem: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings({}, {}, {"event_trace_rdb_url": url})
    assert problem in caught.value.problems["event_trace_rdb_url"]


@pytest.mark.parametrize(
    "url",
    [
        "",
        "none",
        "NONE",
        "sqlite:///data/x.db",
        "postgresql+psycopg://u@h/db",
        "jdbc:postgresql://h/db",
    ],
)
def test_usable_trace_database_urls_pass(url: str) -> None:
    assert load_settings({}, {}, {"event_trace_rdb_url": url}).event_trace_rdb_url == url


def test_jdbc_urls_are_translated_and_the_user_settings_fill_in() -> None:
    from scheduler.model.trace_url import resolve_url

    url = resolve_url("jdbc:mysql://db.example:3306/ejc?useSSL=false", "ejc", "s3cret")
    assert url.render_as_string(hide_password=False) == (
        "mysql+pymysql://ejc:s3cret@db.example:3306/ejc"
    )
    kept = resolve_url("postgresql+psycopg://own@h/db", "other", "pw")
    assert (kept.username, kept.password) == ("own", None)


def test_metrics_max_jobs_is_from_0_to_100000() -> None:
    assert load_settings({}, {}, {}).metrics_max_jobs == 5000
    assert load_settings({}, {}, {"metrics_max_jobs": "0"}).metrics_max_jobs == 0
    for bad in ("-1", "100001", "many"):
        with pytest.raises(SettingsError) as caught:
            load_settings({}, {}, {"metrics_max_jobs": bad})
        assert set(caught.value.problems) == {"metrics_max_jobs"}

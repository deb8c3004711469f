"""The Host allow-list and the trusted-proxy rules as pure functions (model/http_trust.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.model.errors import SettingsError
from scheduler.model.http_trust import (
    HostAllowList,
    TrustedProxies,
    absolute_form_authority,
    parse_authority,
)
from scheduler.model.settings import load_settings

IDENTITIES = ("10.0.0.7:31001", "sched-b.example:31002")


def _default(scheme: str = "http", configured: str = "") -> HostAllowList:
    return HostAllowList.build(configured, "sched-a.example", 8899, scheme)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("LocalHost", ("localhost", None)),
        ("localhost.:8899", ("localhost", 8899)),
        ("localhost:", ("localhost", None)),
        ("127.0.0.1:080", ("127.0.0.1", 80)),
        ("[0:0::1]:8899", ("[::1]", 8899)),
        ("[::FFFF:127.0.0.1]", ("[::ffff:7f00:1]", None)),
        ("a_b-c.example", ("a_b-c.example", None)),
    ],
)
def test_authorities_are_normalised(text: str, expected: tuple[str, int | None]) -> None:
    assert parse_authority(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        " localhost",
        "localhost, evil.example",  # two Host headers, as waitress joins them
        "user@localhost",
        "::1",
        "[::1",
        "[::1]x",
        "[fe80::1%eth0]",
        "localhost:99999",
        "localhost:8899:1",
        "localhost..",
        "-bad.example",
        "évil.example",
        "a" * 301,
    ],
)
def test_malformed_authorities_are_refused(text: str) -> None:
    assert parse_authority(text) is None


@pytest.mark.parametrize(
    "host",
    [
        "localhost",
        "localhost:8899",
        "LOCALHOST.:8899",
        "127.0.0.1:8899",
        "[::1]:8899",
        "sched-a.example",
        "sched-a.example:8899",
        "sched-a.example:80",
        "10.0.0.7:31001",
        "10.0.0.7",
        "10.0.0.7:8899",
        "Sched-B.example.:31002",
    ],
)
def test_own_names_and_vouched_identities_are_allowed(host: str) -> None:
    assert _default().allows(host, IDENTITIES)


@pytest.mark.parametrize(
    "host",
    [
        None,  # no Host on HTTP/1.1
        "evil.example:8899",
        "evil.example",
        "localhost:9999",
        "sched-a.example:9999",
        "10.0.0.7:31002",
        "127.0.0.2:8899",
        "2130706433:8899",
        "localhost:8899, evil.example:8899",
    ],
)
def test_other_hosts_are_refused(host: str | None) -> None:
    assert not _default().allows(host, IDENTITIES)


def test_configured_entries_add_to_the_defaults_and_star_allows_any() -> None:
    allow = _default(configured="ejcloud.example.com, proxy.example:8443")
    assert allow.allows("ejcloud.example.com", ())
    assert allow.allows("ejcloud.example.com:8899", ())
    assert not allow.allows("ejcloud.example.com:8443", ())
    assert allow.allows("proxy.example:8443", ())
    assert not allow.allows("proxy.example", ())
    assert allow.allows("localhost:8899", ())
    assert _default(configured="*").allows("evil.example:1", ())
    assert _default(configured="*").allows(None, ())


def test_the_default_port_follows_the_scheme() -> None:
    https = _default("https")
    assert https.allows("sched-a.example:443", ())
    assert not https.allows("sched-a.example:80", ())


def test_bad_settings_are_refused_at_load_naming_the_key() -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(
            {"http_allowed_hosts": "ok.example, bad host", "http_trusted_proxies": "x"}, {}, {}
        )
    assert set(caught.value.problems) == {"http_allowed_hosts", "http_trusted_proxies"}


@pytest.mark.parametrize(
    "target, expected",
    [
        ("/api/job/jobs", None),
        ("*", None),
        ("http://evil.example:8899/api/x", "evil.example:8899"),
        ("HTTPS://h/", "h"),
        ("http://u@h:1?x", "u@h:1"),
    ],
)
def test_absolute_form_targets_name_their_authority(target: str, expected: str | None) -> None:
    assert absolute_form_authority(target) == expected


@given(st.text(max_size=60))
def test_any_host_text_is_decided_without_error(text: str) -> None:
    _default().allows(text, IDENTITIES)


PROXIES = TrustedProxies.parse("10.1.0.0/16, 2001:db8::/32, 127.0.0.2")


def test_an_untrusted_peer_is_not_believed() -> None:
    headers = {"HTTP_X_FORWARDED_PROTO": "https", "HTTP_X_FORWARDED_FOR": "1.2.3.4"}
    assert PROXIES.forwarding("127.0.0.1", headers) is None
    assert TrustedProxies.parse("").forwarding("10.1.0.1", headers) is None


def test_x_forwarded_headers_from_a_trusted_peer() -> None:
    found = PROXIES.forwarding(
        "10.1.2.3", {"HTTP_X_FORWARDED_PROTO": "https", "HTTP_X_FORWARDED_FOR": "198.51.100.9"}
    )
    assert found is not None
    assert (found.scheme, found.client) == ("https", "198.51.100.9")
    assert found == PROXIES.forwarding(
        "::ffff:10.1.2.3",
        {"HTTP_X_FORWARDED_PROTO": "HTTPS", "HTTP_X_FORWARDED_FOR": "198.51.100.9"},
    )


def test_a_client_cannot_choose_its_address_by_prepending_to_the_chain() -> None:
    found = PROXIES.forwarding(
        "10.1.2.3", {"HTTP_X_FORWARDED_FOR": "127.0.0.1, 203.0.113.5, 10.1.9.9, 10.1.2.4"}
    )
    assert found is not None and found.client == "203.0.113.5" and found.scheme is None


def test_forwarded_wins_and_takes_the_proto_of_the_clients_hop() -> None:
    found = PROXIES.forwarding(
        "10.1.2.3",
        {
            "HTTP_FORWARDED": (
                'for=192.0.2.60;proto=https;by=x, for="[2001:db8::7]:4711";proto=http'
            ),
            "HTTP_X_FORWARDED_PROTO": "http",
            "HTTP_X_FORWARDED_FOR": "9.9.9.9",
        },
    )
    assert found is not None
    assert (found.scheme, found.client) == ("https", "192.0.2.60")


@pytest.mark.parametrize(
    "headers, expected",
    [
        (
            {"HTTP_X_FORWARDED_PROTO": "gopher", "HTTP_X_FORWARDED_FOR": "1.2.3.4"},
            (None, "1.2.3.4"),
        ),
        ({"HTTP_X_FORWARDED_FOR": "not-an-ip"}, (None, None)),
        ({"HTTP_X_FORWARDED_PROTO": "https"}, ("https", None)),
        ({"HTTP_FORWARDED": "for=_hidden;proto=https"}, ("https", None)),
        ({"HTTP_FORWARDED": 'for="1.2.3.4;proto=https'}, (None, None)),
        ({"HTTP_FORWARDED": "proto=https;for=unknown, for=10.1.0.9"}, ("https", None)),
        (
            {"HTTP_X_FORWARDED_PROTO": "https, http", "HTTP_X_FORWARDED_FOR": "1.2.3.4, 10.1.0.9"},
            ("https", "1.2.3.4"),
        ),
        (
            {"HTTP_X_FORWARDED_PROTO": "http, https", "HTTP_X_FORWARDED_FOR": "1.2.3.4"},
            ("https", "1.2.3.4"),
        ),
    ],
)
def test_what_a_trusted_proxy_says_is_read_strictly(
    headers: dict[str, str], expected: tuple[str | None, str | None]
) -> None:
    found = PROXIES.forwarding("10.1.0.1", headers)
    assert found is not None
    assert (found.scheme, found.client) == expected


@given(st.text(max_size=80), st.text(max_size=80), st.text(max_size=80))
def test_any_forwarding_headers_are_read_without_error(fwd: str, xff: str, proto: str) -> None:
    found = PROXIES.forwarding(
        "10.1.0.1",
        {"HTTP_FORWARDED": fwd, "HTTP_X_FORWARDED_FOR": xff, "HTTP_X_FORWARDED_PROTO": proto},
    )
    assert found is not None and found.scheme in (None, "http", "https")

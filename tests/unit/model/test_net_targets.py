"""Webhook targets: every spelling of a host normalised as a resolver reads it, internal
addresses and names refused unless allowed, the allow-list setting read and checked."""

from __future__ import annotations

import ipaddress
import socket

import pytest

from scheduler.model.errors import SettingsError
from scheduler.model.net_targets import (
    AllowList,
    TargetRefused,
    address_problem,
    allowlist_problem,
    normalise_host,
    parse_inet_aton,
    parse_target,
    resolved_problem,
    target_problem,
)
from scheduler.model.settings import load_settings

NONE = AllowList()


@pytest.mark.parametrize(
    "text",
    [
        "127.0.0.1",
        "127.1",
        "127.0.1",
        "2130706433",
        "0x7f000001",
        "0X7F000001",
        "0177.0.0.1",
        "0x7f.0.0.1",
        "0x7f.1",
        "017700000001",
        "0",
        "00",
        "1.2.3",
        "255.255.255.255",
        "4294967295",
        "256.1.1.1",
        "1.2.3.4.5",
        "08.1.1.1",
        "0x",
        "4294967296",
        "1.2.3.256",
        "1..2",
        "",
        " 1.2.3.4",
        "1.2.3.4 ",
        "+1.2.3.4",
        "1_0.0.0.1",
    ],
)
def test_ipv4_spellings_read_as_inet_aton_reads_them(text: str) -> None:
    try:
        expected: ipaddress.IPv4Address | None = ipaddress.IPv4Address(socket.inet_aton(text))
    except OSError:
        expected = None
    if text != text.strip():  # glibc stops at white space; a URL host never holds any
        expected = None
    assert parse_inet_aton(text) == expected


@pytest.mark.parametrize(
    ("url", "name", "reason"),
    [
        ("http://127.0.0.1:2181/", "127.0.0.1", "127.0.0.1 is a loopback address"),
        ("http://2130706433/", "127.0.0.1", "loopback"),
        ("http://0x7f000001/", "127.0.0.1", "loopback"),
        ("http://0177.0.0.1/", "127.0.0.1", "loopback"),
        ("http://127.1/", "127.0.0.1", "loopback"),
        ("http://0.0.0.0/", "0.0.0.0", "0.0.0.0 is an unspecified ('this host') address"),
        ("http://0/", "0.0.0.0", "unspecified"),
        ("http://[::]/", "::", "unspecified"),
        ("http://[::1]:8899/", "::1", "::1 is a loopback address"),
        (
            "http://[::ffff:127.0.0.1]/",
            "::ffff:7f00:1",
            "::ffff:7f00:1 is the IPv4-mapped form of 127.0.0.1, a loopback address",
        ),
        ("http://[::ffff:7f00:1]/", "::ffff:7f00:1", "IPv4-mapped form of 127.0.0.1"),
        ("http://[::127.0.0.1]/", "::7f00:1", "IPv4-compatible form of 127.0.0.1"),
        ("http://[2002:7f00:1::]/", "2002:7f00:1::", "6to4 form of 127.0.0.1"),
        ("http://[2002:a9fe:a9fe::]/", "2002:a9fe:a9fe::", "6to4 form of 169.254.169.254"),
        ("http://[64:ff9b::a00:1]/", "64:ff9b::a00:1", "NAT64 form of 10.0.0.1, a private"),
        (
            "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/",
            "2001:0:4136:e378:8000:63bf:80ff:fffe",
            "Teredo form of 127.0.0.1",
        ),
        ("http://169.254.169.254/latest/", "169.254.169.254", "a cloud metadata address"),
        ("http://[fd00:ec2::254]/", "fd00:ec2::254", "a cloud metadata address"),
        ("http://100.100.100.200/", "100.100.100.200", "a cloud metadata address"),
        ("http://169.254.1.1/", "169.254.1.1", "a link-local address"),
        ("http://[fe80::1]/", "fe80::1", "a link-local address"),
        ("http://[fe80::1%25eth0]/", "fe80::1%25eth0", "a link-local address"),
        ("http://10.1.2.3/", "10.1.2.3", "a private address"),
        ("http://172.16.0.1/", "172.16.0.1", "a private address"),
        ("http://192.168.1.1/", "192.168.1.1", "a private address"),
        ("http://[fd12:3456::1]/", "fd12:3456::1", "a unique-local address"),
        ("http://[fec0::1]/", "fec0::1", "a site-local address"),
        ("http://224.0.0.1/", "224.0.0.1", "a multicast address"),
        ("http://[ff02::1]/", "ff02::1", "a multicast address"),
        ("http://100.64.0.1/", "100.64.0.1", "a shared (carrier-grade NAT) address"),
        ("http://240.0.0.1/", "240.0.0.1", "a reserved address"),
        ("http://255.255.255.255/", "255.255.255.255", "reserved"),
        ("http://192.0.2.1/", "192.0.2.1", "192.0.2.1 is a"),
        ("http://localhost/", "localhost", "localhost is a loopback name"),
        ("http://localhost./", "localhost", "localhost is a loopback name"),
        ("http://LocalHost:80/", "localhost", "localhost is a loopback name"),
        ("http://app.localhost/", "app.localhost", "a loopback name"),
        ("http://\u24dbocalhost/", "localhost", "a loopback name"),  # circled l (IDNA: l)
        ("http://\uff4cocalhost/", "localhost", "a loopback name"),  # fullwidth l
        ("http://\uff11\uff12\uff17\u3002\uff10\u3002\uff10\u3002\uff11/", "127.0.0.1", "loopback"),
        ("http://metadata.google.internal/", "metadata.google.internal", "cloud metadata name"),
        ("http://METADATA.google.internal./", "metadata.google.internal", "metadata name"),
        ("http://metadata/", "metadata", "a cloud metadata name"),
        ("http://instance-data/", "instance-data", "a cloud metadata name"),
    ],
)
def test_internal_targets_are_refused_in_every_spelling(url: str, name: str, reason: str) -> None:
    target = parse_target(url)
    assert target.name == name
    problem = target_problem(target, NONE)
    assert problem is not None and reason in problem, problem
    assert problem.startswith("refused: ")
    assert problem.endswith("; allow it with notify_webhook_allowed_targets")


@pytest.mark.parametrize(
    "url",
    [
        "https://alerts.example.com/hook?token=x",
        "http://8.8.8.8:9/hook",
        "http://134744072/",  # 8.8.8.8 in decimal: public whatever the spelling
        "https://[2606:4700:4700::1111]/",
        "http://[::ffff:8.8.8.8]/",
        "http://b\u00fccher.example/",
        "http://1e100.net/",
    ],
)
def test_public_targets_pass_before_resolution(url: str) -> None:
    assert target_problem(parse_target(url), NONE) is None


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://1.2.3.4.5/", "is not a valid IPv4 address"),
        ("http://256.0.0.1/", "is not a valid IPv4 address"),
        ("http://0x/", "is not a valid IPv4 address"),
        ("http://08.0.0.1/", "is not a valid IPv4 address"),
        ("http://127.0.0.1%2e/", "must not be percent-encoded"),
        ("http://exa%6dple.com/", "must not be percent-encoded"),
        ("http://bad_label-.example/", "is not a valid host name"),
        ("http://a..b/", "is not a valid host name"),
        ("http://[::1::2]/", "is not a URL"),
        ("ftp://example.com/", "must be an http:// or https:// URL"),
        ("http:///nohost", "names no host"),
    ],
)
def test_hosts_no_resolver_reads_alike_are_refused(url: str, why: str) -> None:
    with pytest.raises(TargetRefused) as refused:
        parse_target(url)
    assert why in refused.value.message


def test_a_target_keeps_what_the_request_needs() -> None:
    target = parse_target("HTTPS://Hooks.Example.COM.:8443/a/b?token=s3cret")
    assert (target.scheme, target.name, target.port) == ("https", "hooks.example.com", 8443)
    assert target.host_header == "hooks.example.com:8443" and target.path == "/a/b?token=s3cret"
    assert target.destination == "https://hooks.example.com:8443"
    bare = parse_target("http://[::ffff:127.0.0.1]")
    assert (bare.port, bare.host_header, bare.path) == (80, "[::ffff:7f00:1]", "/")
    assert bare.address == ipaddress.ip_address("::ffff:127.0.0.1")
    assert parse_target("http://b\u00fccher.example/").host_header == "xn--bcher-kva.example"


def test_the_allow_list_allows_networks_names_and_subdomains() -> None:
    allowed = AllowList.parse(" 127.0.0.1/32, 10.1.0.0/16 , alerts.internal, *.corp.example,[::1]")
    assert allowed.networks == (
        ipaddress.ip_network("127.0.0.1/32"),
        ipaddress.ip_network("10.1.0.0/16"),
        ipaddress.ip_network("::1/128"),
    )
    for url in (
        "http://127.0.0.1:9/",
        "http://2130706433/",
        "http://[::ffff:127.0.0.1]/",  # the IPv4 inside is allowed
        "http://10.1.200.3/",
        "http://alerts.internal./",
        "http://ALERTS.internal/",
        "http://hooks.corp.example/",
        "http://[::1]/",
    ):
        assert target_problem(parse_target(url), allowed) is None, url
    for url in ("http://127.0.0.2/", "http://10.2.0.1/", "http://corp.example.localhost/"):
        assert target_problem(parse_target(url), allowed) is not None, url
    # A name allowed may resolve anywhere; another name only to allowed or public addresses.
    private = [ipaddress.ip_address("10.9.9.9")]
    assert resolved_problem(parse_target("http://alerts.internal/"), private, allowed) is None
    assert resolved_problem(parse_target("http://x.corp.example/"), private, allowed) is None
    why = resolved_problem(parse_target("http://other.example/"), private, allowed)
    assert why == (
        "refused: other.example resolves to 10.9.9.9, a private address; "
        "allow it with notify_webhook_allowed_targets"
    )
    inside = [ipaddress.ip_address("10.1.0.7")]
    assert resolved_problem(parse_target("http://other.example/"), inside, allowed) is None


def test_one_internal_address_among_those_resolved_is_enough_to_refuse() -> None:
    addresses = [ipaddress.ip_address("93.184.215.14"), ipaddress.ip_address("::1")]
    why = resolved_problem(parse_target("http://mixed.example/"), addresses, NONE)
    assert why is not None and "resolves to ::1, a loopback address" in why
    public = [ipaddress.ip_address("93.184.215.14")]
    assert resolved_problem(parse_target("http://mixed.example/"), public, NONE) is None


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("10.0.0.0/33", "is not a CIDR"),
        ("bad host!", "is not a valid host name"),
        ("1.2.3.4.5", "is not a valid IPv4 address"),
    ],
)
def test_a_bad_allow_list_is_refused_naming_the_entry(text: str, why: str) -> None:
    problem = allowlist_problem(f"127.0.0.1/32,{text}")
    assert problem is not None and why in problem


def test_address_problem_is_none_for_global_addresses_only() -> None:
    assert address_problem(ipaddress.ip_address("8.8.8.8")) is None
    assert address_problem(ipaddress.ip_address("2606:4700::1111")) is None
    assert address_problem(ipaddress.ip_address("198.18.0.1")) is not None  # benchmarking


def test_normalise_host_reads_unicode_dots_and_case() -> None:
    assert normalise_host("EXAMPLE.com.") == "example.com"
    assert normalise_host("example\u3002com") == "example.com"
    assert normalise_host("[::1]") == ipaddress.ip_address("::1")


def test_the_default_webhook_setting_is_judged_at_start() -> None:
    with pytest.raises(SettingsError) as refused:
        load_settings({}, {}, {"notify_webhook_url": "http://[::ffff:127.0.0.1]:9/h"})
    assert "IPv4-mapped form of 127.0.0.1" in refused.value.problems["notify_webhook_url"]
    with pytest.raises(SettingsError) as bad_list:
        load_settings({}, {}, {"notify_webhook_allowed_targets": "10.0.0.0/99"})
    assert "is not a CIDR" in bad_list.value.problems["notify_webhook_allowed_targets"]
    allowed = load_settings(
        {},
        {},
        {
            "notify_webhook_url": "http://127.0.0.1:9/h",
            "notify_webhook_allowed_targets": "127.0.0.1/32",
        },
    )
    assert allowed.notify_webhook_url == "http://127.0.0.1:9/h"

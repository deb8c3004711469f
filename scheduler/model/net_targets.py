"""Where the leader may send a request it was asked to make: webhook targets (no I/O here).

A failure webhook is a URL an admin writes; the leader POSTs to it from inside the cluster's
network. Without a rule the leader could be made to POST to ZooKeeper, the Mesos master, a cloud
metadata service or anything else only the cluster reaches. The rule: the target must be a
globally reachable address, or allowed by `notify_webhook_allowed_targets` (CIDRs and host
names). Every spelling of a host is normalised before it is judged, as a resolver would read it:

- names: IDNA (Unicode names and dots, NFKC: `ⓛocalhost` is `localhost`), lower case, one
  trailing dot dropped;
- IPv4 in the forms `inet_aton` accepts (what getaddrinfo accepts for a numeric host): decimal
  `2130706433`, hex `0x7f000001`, octal `0177.0.0.1`, short `127.1`; a name whose last label is
  numeric but no such address is refused (no resolver would look it up as a name);
- IPv6 literals, and the IPv4 address inside IPv4-mapped (`::ffff:127.0.0.1`), IPv4-compatible
  (`::127.0.0.1`), 6to4 (`2002:7f00:1::`), Teredo and NAT64 (`64:ff9b::7f00:1`) forms.

`parse_target` reads a URL into a `Target` (raises TargetRefused for a host no resolver would
read alike), `target_problem` judges it before resolution (literal addresses, `localhost` and
the cloud metadata names), `resolved_problem` judges the addresses a name resolved to. The
resolution itself is I/O and lives with the requests (`scheduler/leader/outbound.py`).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from scheduler.model.errors import SchedulerError

__all__ = [
    "METADATA_ADDRESSES",
    "METADATA_NAMES",
    "AllowList",
    "IPAddress",
    "Target",
    "TargetRefused",
    "address_problem",
    "allowlist_problem",
    "normalise_host",
    "parse_inet_aton",
    "parse_target",
    "resolved_problem",
    "target_problem",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Instance metadata services: AWS, GCP, Azure, OpenStack, DigitalOcean, Oracle (IPv4 and the
# AWS IPv6 endpoint), AWS ECS task metadata, Alibaba Cloud.
METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200", "192.0.0.192")
)
METADATA_NAMES = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.azure.internal",
        "metadata.tencentyun.com",
    }
)
_SHARED = ipaddress.ip_network("100.64.0.0/10")
_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_SITE_LOCAL = ipaddress.ip_network("fec0::/10")
_UNIQUE_LOCAL = ipaddress.ip_network("fc00::/7")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
_NAME_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
_NUMERIC_LABEL = re.compile(r"[0-9]+|0x[0-9a-f]*")
_INET_ATON_PART = re.compile(r"0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*", re.ASCII)
_ALLOW_HINT = "allow it with notify_webhook_allowed_targets"


class TargetRefused(SchedulerError):
    """A request target the leader must not send to; `message` says why (safe to show)."""

    http_status = 400


@dataclass(frozen=True)
class Target:
    """Where a URL points, its host normalised.

    `name` is the ASCII host name (lower case, no trailing dot) or the address's text;
    `address` is set when the URL names an address rather than a name. `host_header` is what
    the request's `Host` header says (the normalised host, with the port when the URL gives
    one).
    """

    scheme: str
    name: str
    port: int
    address: IPAddress | None
    host_header: str
    path: str

    @property
    def destination(self) -> str:
        """`scheme://host:port`: what one connection serves (the webhook queues' key)."""
        host = f"[{self.name}]" if ":" in self.name else self.name
        return f"{self.scheme}://{host}:{self.port}"


@dataclass(frozen=True)
class AllowList:
    """`notify_webhook_allowed_targets`: networks and names allowed although internal.

    A name allows that name (`*.example.com`: every name below example.com) whatever it
    resolves to; a network allows the addresses in it, whatever name led there.
    """

    networks: tuple[IPNetwork, ...] = ()
    names: frozenset[str] = frozenset()
    suffixes: tuple[str, ...] = field(default=())

    @classmethod
    def parse(cls, text: str) -> AllowList:
        """Read the comma-separated setting; ValueError names the first bad entry."""
        networks: list[IPNetwork] = []
        names: set[str] = set()
        suffixes: list[str] = []
        for raw in text.split(","):
            entry = raw.strip()
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
                continue
            except ValueError:
                pass
            if "/" in entry:
                raise ValueError(f"{entry!r} is not a CIDR (as in 10.1.0.0/16 or fd12::/64)")
            wildcard = entry.startswith("*.")
            try:
                host = normalise_host(entry[2:] if wildcard else entry)
            except TargetRefused as exc:
                raise ValueError(exc.message) from None
            if not isinstance(host, str):
                networks.append(ipaddress.ip_network(host))
            elif wildcard:
                suffixes.append("." + host)
            else:
                names.add(host)
        return cls(tuple(networks), frozenset(names), tuple(suffixes))

    def allows_name(self, name: str) -> bool:
        return name in self.names or any(name.endswith(s) for s in self.suffixes)

    def allows_address(self, address: IPAddress) -> bool:
        candidates = [address, *(v4 for _form, v4 in _embedded_ipv4(address))]
        return any(a.version == n.version and a in n for a in candidates for n in self.networks)


def allowlist_problem(text: str) -> str | None:
    """Why `text` is not a valid `notify_webhook_allowed_targets`, or None."""
    try:
        AllowList.parse(text)
    except ValueError as exc:
        return str(exc)
    return None


def parse_inet_aton(text: str) -> ipaddress.IPv4Address | None:
    """`text` read as `inet_aton` reads an IPv4 address (1 to 4 parts, each decimal, 0x-hex or
    0-octal, the last filling the remaining bytes), or None when it is not one."""
    parts = text.split(".")
    if not 1 <= len(parts) <= 4 or not all(_INET_ATON_PART.fullmatch(p) for p in parts):
        return None
    values = [
        int(p[2:], 16) if p[:2].lower() == "0x" else int(p, 8 if p.startswith("0") else 10)
        for p in parts
    ]
    *head, last = values
    if any(v > 255 for v in head) or last >= 256 ** (4 - len(head)):
        return None
    number = 0
    for v in head:
        number = number * 256 + v
    return ipaddress.IPv4Address(number * 256 ** (4 - len(head)) + last)


def normalise_host(host: str) -> str | IPAddress:
    """The host as a resolver reads it: an address, or an ASCII lower-case name without the
    trailing dot. Raises TargetRefused for a host no resolver would read alike."""
    if not host:
        raise TargetRefused("names no host")
    text = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if ":" in text:
        try:
            return ipaddress.IPv6Address(text)
        except ValueError:
            raise TargetRefused(f"{_shown(host)} is not a valid IPv6 address") from None
    if not text.isascii():
        try:
            text = text.encode("idna").decode("ascii")
        except UnicodeError:
            raise TargetRefused(f"{_shown(host)} is not a valid host name (IDNA)") from None
    text = text.lower()
    if text.endswith("."):
        text = text[:-1]
    labels = text.split(".")
    if _NUMERIC_LABEL.fullmatch(labels[-1]):
        address = parse_inet_aton(text)
        if address is None:
            raise TargetRefused(f"{_shown(host)} is not a valid IPv4 address")
        return address
    if len(text) > 253 or not all(_NAME_LABEL.fullmatch(label) for label in labels):
        raise TargetRefused(f"{_shown(host)} is not a valid host name")
    return text


def parse_target(url: str) -> Target:
    """The target of an http(s) URL, its host normalised. Raises TargetRefused."""
    try:
        parts = urlsplit(url)
        port = parts.port
        netloc_host = parts.netloc.rpartition("@")[2]
    except ValueError as exc:
        raise TargetRefused(f"is not a URL ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise TargetRefused("must be an http:// or https:// URL")
    # The host as written (urlsplit's `hostname` lower-cases it and drops the brackets).
    if netloc_host.startswith("["):
        raw_host = netloc_host[: netloc_host.find("]") + 1]
    else:
        raw_host = netloc_host.rpartition(":")[0] if ":" in netloc_host else netloc_host
    if "%" in raw_host and not raw_host.startswith("["):
        raise TargetRefused(f"host {_shown(raw_host)} must not be percent-encoded")
    host = normalise_host(raw_host)
    if port is None:
        port = 443 if scheme == "https" else 80
    if isinstance(host, str):
        name, address = host, None
        shown_host = host
    else:
        name, address = str(host), host
        shown_host = f"[{host}]" if host.version == 6 else str(host)
    host_header = shown_host if parts.port is None else f"{shown_host}:{port}"
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    return Target(scheme, name, port, address, host_header, path)


def address_problem(address: IPAddress) -> str | None:
    """Why `address` is internal (not to be sent to unless allowed), or None when it is a
    globally reachable address."""
    what = _what_internal(address)
    return None if what is None else f"{address} is {what}"


def _what_internal(address: IPAddress) -> str | None:
    """What internal address `address` is ("a loopback address", "the IPv4-mapped form of
    127.0.0.1, a loopback address"), or None."""
    for form, v4 in _embedded_ipv4(address):
        inner = _internal_kind(v4)
        if inner is not None:
            return f"the {form} of {v4}, {inner}"
        if form == "IPv4-mapped form":
            return None  # the connection goes to the IPv4 address, which is public
    return _internal_kind(address)


def _internal_kind(address: IPAddress) -> str | None:
    """What kind of internal address `address` is ("a loopback address"), or None."""
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if address.is_unspecified or (address.version == 4 and address in _THIS_NETWORK):
        return "an unspecified ('this host') address"
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if address.version == 6 and address in _UNIQUE_LOCAL:
        return "a unique-local address"
    if address.version == 6 and address in _SITE_LOCAL:
        return "a site-local address"
    if address.is_multicast:
        return "a multicast address"
    if address.version == 4 and address in _SHARED:
        return "a shared (carrier-grade NAT) address"
    if address.version == 6 and (
        address in _NAT64_LOCAL or (address in _IPV4_COMPATIBLE and int(address) >> 32 == 0)
    ):
        return "a special-purpose address"
    if address.is_reserved:
        return "a reserved address"
    if address.is_private:
        return "a private address"
    if not address.is_global:
        return "a special-purpose address (not globally reachable)"
    return None


def target_problem(target: Target, allowed: AllowList) -> str | None:
    """Why `target` is refused before any resolution (an internal address, `localhost`, a cloud
    metadata name), or None; the message ends with how to allow it."""
    if target.address is not None:
        if allowed.allows_address(target.address):
            return None
        why = address_problem(target.address)
    elif allowed.allows_name(target.name):
        return None
    elif target.name == "localhost" or target.name.endswith(".localhost"):
        why = f"{target.name} is a loopback name"
    elif target.name in METADATA_NAMES:
        why = f"{target.name} is a cloud metadata name"
    else:
        why = None
    return None if why is None else f"refused: {why}; {_ALLOW_HINT}"


def resolved_problem(
    target: Target, addresses: Iterable[IPAddress], allowed: AllowList
) -> str | None:
    """Why the addresses `target`'s name resolved to are refused (one internal address is
    enough), or None; None as well when the name itself is allowed."""
    if target.address is None and allowed.allows_name(target.name):
        return None
    for address in addresses:
        if allowed.allows_address(address):
            continue
        what = _what_internal(address)
        if what is not None:
            return f"refused: {target.name} resolves to {address}, {what}; {_ALLOW_HINT}"
    return None


def _embedded_ipv4(address: IPAddress) -> list[tuple[str, ipaddress.IPv4Address]]:
    """The IPv4 addresses an IPv6 address carries (mapped, compatible, 6to4, Teredo, NAT64),
    with the form's name; [] for an IPv4 address or a plain IPv6 one."""
    if address.version == 4:
        return []
    assert isinstance(address, ipaddress.IPv6Address)
    found: list[tuple[str, ipaddress.IPv4Address]] = []
    if address.ipv4_mapped is not None:
        found.append(("IPv4-mapped form", address.ipv4_mapped))
    number = int(address)
    if address in _IPV4_COMPATIBLE and number >> 32 == 0 and number > 1:
        found.append(("IPv4-compatible form", ipaddress.IPv4Address(number & 0xFFFFFFFF)))
    if (number >> 32) == 0xFFFF0000:  # ::ffff:0:a.b.c.d, IPv4-translated (RFC 2765)
        found.append(("IPv4-translated form", ipaddress.IPv4Address(number & 0xFFFFFFFF)))
    if address.sixtofour is not None:
        found.append(("6to4 form", address.sixtofour))
    if address.teredo is not None:
        found.append(("Teredo form", address.teredo[1]))
    if address in _NAT64:
        found.append(("NAT64 form", ipaddress.IPv4Address(number & 0xFFFFFFFF)))
    return found


def _shown(text: str) -> str:
    return repr(text if len(text) <= 80 else text[:77] + "...")

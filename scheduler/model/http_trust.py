"""Which `Host` names a replica answers, and whose forwarding headers it believes: pure rules.

**The Host allow-list.** A browser puts the name it resolved in `Host`, so a page of
`evil.example` whose name re-resolves to a replica (DNS rebinding) sends `Host: evil.example`,
and an `Origin` that matches it. A replica answers only the names it is known by: its
`hostname`, the identities (`host:port`) of the replicas it vouches for, `localhost`,
`127.0.0.1` and `[::1]`, plus the entries of `http_allowed_hosts`; `*` there turns the check
off. Names are compared case-insensitively with one trailing dot dropped, IPv6 literals in
their compressed form. An entry without a port allows the name without a port, with the
scheme's default port, or with this replica's own port; an entry `host:port` allows that port
too. Anything that is not a well-formed host (several `Host` headers, user info, spaces,
non-ASCII) is simply not allowed.

**Trusted proxies.** Only when the TCP peer is inside `http_trusted_proxies` (CIDRs) are
`Forwarded` (RFC 7239; it wins when present) or `X-Forwarded-For` / `X-Forwarded-Proto`
believed. The client is the rightmost address of the chain that is not itself a trusted proxy
(so a client cannot prepend addresses to choose its own); the scheme is the `proto` the proxy
nearest that client recorded (for `X-Forwarded-Proto` with one value per hop, the value at the
client's position, else its rightmost value). Only `http` and `https` are believed as schemes,
and only IP addresses as clients.

Everything here is a function of its arguments: no I/O, no clock.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "ANY_HOST",
    "Forwarding",
    "HostAllowList",
    "TrustedProxies",
    "absolute_form_authority",
    "allowed_hosts_problem",
    "parse_authority",
    "trusted_proxies_problem",
]

ANY_HOST = "*"
DEFAULT_PORTS = {"http": 80, "https": 443}
_ALWAYS = ("localhost", "127.0.0.1", "[::1]")
_MAX_AUTHORITY = 300
_LABEL = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$")
_PORT = re.compile(r"^[0-9]{1,5}$")
# A proxy chain longer than this is not walked further (the rest counts as untrusted).
_MAX_HOPS = 32
_ABSOLUTE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://([^/?#]*)")
_FORWARDED_PAIR = re.compile(
    r'\s*([!#$%&\'*+.^_`|~0-9A-Za-z-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^;,\s]*)\s*'
)

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Authority = tuple[str, int | None]


def parse_authority(text: str) -> Authority | None:
    """(host, port) of a `Host` value or an allow-list entry, normalised; None if malformed.

    The host is lower-case without a trailing dot, an IPv6 literal is `[compressed]`; an empty
    port (`host:`) counts as none.
    """
    if not text or len(text) > _MAX_AUTHORITY or text != text.strip():
        return None
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or "%" in text[:end]:
            return None
        try:
            host = f"[{ipaddress.IPv6Address(text[1:end]).compressed}]"
        except ValueError:
            return None
        rest = text[end + 1 :]
        if rest and not rest.startswith(":"):
            return None
        port_text = rest[1:]
    else:
        name, _, port_text = text.partition(":")
        if ":" in port_text:
            return None  # an IPv6 literal without brackets, or two ports
        host = name.lower()
        if host.endswith("."):
            host = host[:-1]
        if not host or len(host) > 253 or not all(_LABEL.match(p) for p in host.split(".")):
            return None
    if not port_text:
        return host, None
    if not _PORT.match(port_text) or int(port_text) > 65535:
        return None
    return host, int(port_text)


def absolute_form_authority(request_target: str) -> str | None:
    """The authority of an absolute-form request target (`GET http://host:port/path`), else
    None (origin-form `/path`, `*`)."""
    found = _ABSOLUTE.match(request_target)
    return found.group(1) if found else None


@dataclass(frozen=True)
class HostAllowList:
    """The `Host` names one replica answers (see the module docstring)."""

    any_host: bool
    entries: frozenset[Authority]
    own_port: int
    default_port: int

    @classmethod
    def build(cls, configured: str, hostname: str, own_port: int, scheme: str) -> HostAllowList:
        """The allow-list of `http_allowed_hosts` = `configured` for a replica known as
        `hostname`, serving `scheme` on `own_port`. Raises ValueError naming a bad entry."""
        items = [item.strip() for item in configured.split(",") if item.strip()]
        entries: set[Authority] = set()
        for item in items:
            if item != ANY_HOST:
                parsed = parse_authority(item)
                if parsed is None:
                    raise ValueError(f"{item!r} is not a host or host:port (nor *)")
                entries.add(parsed)
        # The replica's own names; a hostname that is no valid Host (a bare IPv6 address is
        # bracketed first) can never be sent by a client anyway.
        own = f"[{hostname}]" if hostname.count(":") > 1 else hostname
        for item in (*_ALWAYS, own):
            parsed = parse_authority(item)
            if parsed is not None:
                entries.add(parsed)
        default_port = DEFAULT_PORTS[scheme]
        return cls(
            ANY_HOST in items,
            frozenset(_without_default(e, default_port) for e in entries),
            own_port,
            default_port,
        )

    def allows(self, host: str | None, identities: Iterable[str] = ()) -> bool:
        """Whether a request naming `host` (its `Host` header or absolute-form authority; None:
        none sent) is for this replica; `identities` are the replicas' `host:port` (allowed with
        or without their port)."""
        if self.any_host:
            return True
        if host is None:
            return False
        wanted = parse_authority(host)
        if wanted is None:
            return False
        name, port = _without_default(wanted, self.default_port)
        if port is None or port == self.own_port:
            if (name, None) in self.entries:
                return True
        elif (name, port) in self.entries:
            return True
        for identity in identities:
            known = parse_authority(identity)
            if known is not None and known[0] == name:
                if port in (None, self.own_port, known[1]):
                    return True
        return False


def allowed_hosts_problem(configured: str) -> str | None:
    """What is wrong with an `http_allowed_hosts` value, or None (a settings check)."""
    try:
        HostAllowList.build(configured, "localhost", 1, "http")
    except ValueError as exc:
        return str(exc)
    return None


def trusted_proxies_problem(configured: str) -> str | None:
    """What is wrong with an `http_trusted_proxies` value, or None (a settings check)."""
    try:
        TrustedProxies.parse(configured)
    except ValueError as exc:
        return str(exc)
    return None


def _without_default(authority: Authority, default_port: int) -> Authority:
    host, port = authority
    return (host, None) if port == default_port else authority


@dataclass(frozen=True)
class Forwarding:
    """What a trusted proxy said of the request: the client's scheme and address (None: not
    said, or not believable)."""

    scheme: str | None
    client: str | None


@dataclass(frozen=True)
class TrustedProxies:
    """The proxies whose forwarding headers are believed (see the module docstring)."""

    networks: tuple[Network, ...] = ()

    @classmethod
    def parse(cls, text: str) -> TrustedProxies:
        """From `http_trusted_proxies` (comma-separated CIDRs or addresses). Raises ValueError
        naming a bad entry."""
        networks: list[Network] = []
        for item in (part.strip() for part in text.split(",")):
            if not item:
                continue
            try:
                networks.append(ipaddress.ip_network(item, strict=False))
            except ValueError as exc:
                raise ValueError(f"{item!r} is not a CIDR or an IP address") from exc
        return cls(tuple(networks))

    def trusts(self, address: str) -> bool:
        """Whether `address` (a peer or a hop of a chain) is one of the trusted proxies."""
        ip = _ip(address)
        return ip is not None and any(ip in network for network in self.networks)

    def forwarding(self, peer: str, headers: Mapping[str, str]) -> Forwarding | None:
        """What the request's forwarding headers say, if `peer` is trusted; else None.

        `headers` are WSGI environ keys (`HTTP_FORWARDED`, `HTTP_X_FORWARDED_FOR`,
        `HTTP_X_FORWARDED_PROTO`).
        """
        if not self.networks or not self.trusts(peer):
            return None
        forwarded = headers.get("HTTP_FORWARDED")
        if forwarded:
            hops = _forwarded_elements(forwarded)
            clients = [hop.get("for", "") for hop in hops]
            protos = [hop.get("proto", "") for hop in hops]
        else:
            clients = _list(headers.get("HTTP_X_FORWARDED_FOR", ""))
            protos = _list(headers.get("HTTP_X_FORWARDED_PROTO", ""))
            if len(protos) != len(clients):
                protos = protos[-1:] * len(clients) if clients else protos[-1:]
        index = self._client_index(clients)
        if index is None:
            proto = protos[-1] if protos else ""
            return Forwarding(_scheme(proto), None)
        client = _ip(clients[index])
        proto = protos[index] if index < len(protos) else ""
        return Forwarding(_scheme(proto), str(client) if client is not None else None)

    def _client_index(self, clients: list[str]) -> int | None:
        """Index of the rightmost hop that is not a trusted proxy (the leftmost if all are)."""
        if not clients:
            return None
        lowest = max(0, len(clients) - _MAX_HOPS)
        for index in range(len(clients) - 1, lowest - 1, -1):
            if not self.trusts(clients[index]):
                return index
        return lowest


def _list(value: str) -> list[str]:
    return [item.strip() for item in value.split(",")][-_MAX_HOPS:] if value.strip() else []


def _forwarded_elements(value: str) -> list[dict[str, str]]:
    """The elements of a `Forwarded` header, each a dict of lower-case parameter names; a
    malformed element is kept as an empty one (its position still counts)."""
    elements: list[dict[str, str]] = []
    for raw in _split_outside_quotes(value, ",")[-_MAX_HOPS:]:
        pairs: dict[str, str] = {}
        for part in _split_outside_quotes(raw, ";"):
            found = _FORWARDED_PAIR.fullmatch(part)
            if found is None:
                pairs = {}
                break
            text = found.group(2)
            if text.startswith('"'):
                text = re.sub(r"\\(.)", r"\1", text[1:-1])
            pairs[found.group(1).lower()] = text
        elements.append(pairs)
    return elements


def _split_outside_quotes(text: str, separator: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    quoted = escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\" and quoted:
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == separator and not quoted:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return parts


def _ip(text: str) -> Address | None:
    """The address of `192.0.2.1`, `192.0.2.1:80`, `2001:db8::1`, `[2001:db8::1]:80`; an
    IPv4-mapped IPv6 address as its IPv4 address; None for anything else."""
    text = text.strip()
    if text.startswith("["):
        text = text[1 : text.find("]")] if "]" in text else ""
    elif text.count(":") == 1:
        text = text.partition(":")[0]
    if "%" in text:
        return None
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _scheme(proto: str) -> str | None:
    proto = proto.strip().lower()
    return proto if proto in DEFAULT_PORTS else None

"""Where the registry may connect on a client's behalf: public addresses only, after DNS resolution.

A URL a client supplies (an MCP server, an OAuth token endpoint) is resolved, and refused when any
address it resolves to is loopback, private, link-local (cloud metadata), shared, documentation,
benchmarking, multicast, reserved, unspecified, or one of this host's own addresses (`address_rule`
names which), unless an operator exception lists it:
`REGISTRY_EGRESS_ALLOW` is a comma-separated list of `host`, `host:port` or CIDR entries (for tests
and private deployments). Callers connect to the addresses returned here, so a second DNS answer
cannot swap in a private address (no rebinding between check and use).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlsplit

from django.conf import settings

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class AddressRule:
    """A rule that keeps the registry off an address: its name (in logs and headers) and what it says of
    the address ("is in a documentation range")."""

    name: str
    says: str


UNSPECIFIED = AddressRule("unspecified", "is the unspecified address")
LOOPBACK = AddressRule("loopback", "is a loopback address")
LINK_LOCAL = AddressRule("link_local", "is a link-local address (where cloud metadata answers)")
MULTICAST = AddressRule("multicast", "is a multicast address")
RESERVED = AddressRule("reserved", "is in a reserved range")
PRIVATE = AddressRule("private", "is in a private range")
SPECIAL = AddressRule("special_purpose", "is in a special-purpose range")
OWN_ADDRESS = AddressRule("own_address", "is an address of this host")
DOCUMENTATION = AddressRule("documentation", "is in a documentation range")
FLAGGED = (
    (UNSPECIFIED, "is_unspecified"),
    (LOOPBACK, "is_loopback"),
    (LINK_LOCAL, "is_link_local"),
    (MULTICAST, "is_multicast"),
)
# Ranges named before the flags above (Python counts most of them as private): RFC 5737, 3849 and 9637, 6598, 2544.
NAMED_RANGES: tuple[tuple[AddressRule, tuple[IpNetwork, ...]], ...] = tuple(
    (rule, tuple(ipaddress.ip_network(network) for network in networks))
    for rule, networks in (
        (DOCUMENTATION, ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32", "3fff::/20")),
        (AddressRule("shared", "is in the shared address space (carrier-grade NAT)"), ("100.64.0.0/10",)),
        (AddressRule("benchmarking", "is in a benchmarking range"), ("198.18.0.0/15", "2001:2::/48")),
    )
)


class EgressRefused(Exception):
    """The destination is not one the registry connects to; the message never says what is listening.
    `address` and `rule` say which address was refused and why (None when the host did not resolve)."""

    def __init__(self, message: str, *, address: IpAddress | None = None, rule: AddressRule | None = None) -> None:
        super().__init__(message)
        self.address = address
        self.rule = rule


@dataclass(frozen=True)
class EgressRules:
    """Operator exceptions to the ban on non-public addresses."""

    hosts: frozenset[str] = frozenset()
    host_ports: frozenset[tuple[str, int]] = frozenset()
    networks: tuple[IpNetwork, ...] = ()

    @classmethod
    def parse(cls, text: str) -> EgressRules:
        hosts: set[str] = set()
        host_ports: set[tuple[str, int]] = set()
        networks: list[IpNetwork] = []
        for entry in (item.strip().lower() for item in text.split(",")):
            if not entry:
                continue
            if "/" in entry:
                networks.append(ipaddress.ip_network(entry, strict=False))
            elif entry.count(":") == 1:
                host, port = entry.rsplit(":", 1)
                host_ports.add((host.strip("[]"), int(port)))
            else:
                hosts.add(entry.strip("[]"))
        return cls(frozenset(hosts), frozenset(host_ports), tuple(networks))

    def lifts(self, host: str, address: IpAddress, port: int) -> bool:
        names = {host.lower(), str(address)}
        return (
            bool(names & self.hosts)
            or any((name, port) in self.host_ports for name in names)
            or any(address in network for network in self.networks)
        )


def is_public(address: IpAddress) -> bool:
    """A globally routable unicast address that is not this host's own."""
    return address_rule(address) is None


def address_rule(address: IpAddress) -> AddressRule | None:
    """The rule that keeps the registry off this address, or None for a public one (an IPv4-mapped IPv6
    address is judged as its IPv4 address)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    for rule, networks in NAMED_RANGES:
        if any(address in network for network in networks):
            return rule
    for rule, flag in FLAGGED:
        if getattr(address, flag):
            return rule
    if not address.is_global:
        return RESERVED if address.is_reserved else PRIVATE if address.is_private else SPECIAL
    return OWN_ADDRESS if address in own_addresses() else None


@lru_cache(maxsize=1)
def own_addresses() -> frozenset[IpAddress]:
    """This host's addresses (by its name), which the registry never calls on a client's say-so."""
    found: set[IpAddress] = set()
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None):
            found.add(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]))
    except OSError:
        pass
    return frozenset(found)


def resolve(host: str, port: int) -> list[IpAddress]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as error:
        raise EgressRefused(f"{host} could not be resolved.") from error
    return list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos))


def check_addresses(host: str, port: int, addresses: Iterable[IpAddress], rules: EgressRules) -> None:
    for address in addresses:
        rule = address_rule(address)
        if rule is not None and not rules.lifts(host, address, port):
            message = f"Connections to {host} are not allowed (it is not a public address)."
            raise EgressRefused(message, address=address, rule=rule)


def check_url(url: str, rules: EgressRules | None = None) -> list[IpAddress]:
    """Refuse a client-supplied URL unless every address its host resolves to may be reached.

    Returns the resolved addresses (connect to these, not to a second lookup).
    """
    parts = urlsplit(url)
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        raise EgressRefused("Only http and https URLs with a host are allowed.")
    port = parts.port or DEFAULT_PORTS[parts.scheme]
    addresses = resolve(parts.hostname, port)
    check_addresses(parts.hostname, port, addresses, rules or runtime_rules())
    return addresses


def runtime_rules() -> EgressRules:
    """The exceptions for the runtime's own calls to client-supplied URLs (`REGISTRY_EGRESS_ALLOW`)."""
    return _parsed(settings.REGISTRY_EGRESS_ALLOW)


@lru_cache(maxsize=8)
def _parsed(text: str) -> EgressRules:
    return EgressRules.parse(text)

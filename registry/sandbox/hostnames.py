"""Host names as the sandbox's network rules use them: a credential's host entries (`host`, `*.domain` or an
IPv4 address, with an optional `:port`), the authority a request claims (`Host`, absolute targets), and the
matching of one against the other. Names are compared lower-cased, without a trailing dot or brackets."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_CREDENTIAL_HOSTS = 16
LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")
WILDCARD = "*."
AUTHORITY = re.compile(r"[A-Za-z0-9._\[\]:-]+")


@dataclass(frozen=True)
class Endpoint:
    """Where a connection really goes: a host (name or address) and a port, over TLS or not."""

    host: str
    port: int
    secure: bool = False

    @property
    def default_port(self) -> int:
        return 443 if self.secure else 80

    def authority(self) -> str:
        """The `Host` header value naming this endpoint (no port when it is the scheme's default)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == self.default_port else f"{host}:{self.port}"


HostPattern = tuple[str, int | None]  # (name, `*.domain` or address; port, None: any)


def normalized(host: str) -> str:
    """A host as compared: lower case, without IPv6 brackets or a trailing dot."""
    return host.strip("[]").rstrip(".").lower()


def name_matches(pattern: str, host: str) -> bool:
    """`host` is `pattern`, or a subdomain of a `*.domain` pattern (never `domain` itself)."""
    host = normalized(host)
    return host == pattern or (pattern.startswith(WILDCARD) and host.endswith(pattern[1:]))


def host_listed(host: str, entries: tuple[str, ...]) -> bool:
    """An environment's `allowed_hosts` (names without ports) lists `host`."""
    return any(name_matches(entry, host) for entry in entries)


def pattern_matches(pattern: HostPattern, host: str, port: int) -> bool:
    name, bound_port = pattern
    return name_matches(name, host) and bound_port in (None, port)


def parse_host_entry(entry: str) -> HostPattern:
    """A credential's `allowed_hosts` entry as (name, port or None); ValueError says what is wrong with it."""
    if not entry:
        raise ValueError("an entry is empty")
    if "/" in entry or "@" in entry:
        raise ValueError(f"{entry!r} is not a host name: URLs and paths are not accepted")
    if "[" in entry or entry.count(":") > 1:
        raise ValueError(f"{entry!r}: IPv6 addresses are not accepted")
    name, colon, port_text = entry.partition(":")
    port = _port(port_text, entry) if colon else None
    name = name.rstrip(".").lower()
    bare = name.removeprefix(WILDCARD)
    if not (_is_hostname(bare) or (bare == name and _is_ipv4(name))):
        raise ValueError(f"{entry!r} is not a host name, an IPv4 address or a `*.` wildcard")
    return name, port


def _port(text: str, entry: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise ValueError(f"{entry!r}: a port is a number from 1 to 65535")
    return int(text)


def _is_hostname(name: str) -> bool:
    labels = name.split(".")
    return len(name) <= 253 and all(LABEL.fullmatch(label) for label in labels) and not labels[-1].isdigit()


def _is_ipv4(name: str) -> bool:
    try:
        ipaddress.IPv4Address(name)
    except ValueError:
        return False
    return True


def parse_authority(value: str, default_port: int) -> tuple[str, int] | None:
    """(host, port) of a `Host` header value or an authority-form target; None when it is not one."""
    if not AUTHORITY.fullmatch(value):
        return None
    parts = urlsplit(f"//{value}")
    try:
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname or parts.username is not None or parts.path or parts.query or parts.fragment:
        return None
    return normalized(parts.hostname), port or default_port


def names_endpoint(authority: tuple[str, int] | None, endpoint: Endpoint) -> bool:
    """A parsed authority (None: unparsable) is the endpoint's host and port."""
    return authority == (normalized(endpoint.host), endpoint.port)

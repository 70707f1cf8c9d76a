"""The sandbox's only way out: a host-side HTTP proxy on a Unix socket, enforcing the session's policy.

The sandbox has no network interface but its own loopback. Its shell starts a small bridge
(`BRIDGE_SOURCE`) listening on 127.0.0.1:3128 inside, which carries each connection over the Unix
socket bound into the sandbox to this proxy, and the usual proxy variables point there. The proxy
speaks HTTP CONNECT (for TLS and anything else), plain absolute-form HTTP requests and SOCKS5
(`socks5h://127.0.0.1:3128`, CONNECT without authentication) on the same port; it resolves
the host, checks every address against the egress rules (no loopback, private, link-local or own
address unless `REGISTRY_SANDBOX_EGRESS_ALLOW` lifts it) and the environment's policy
(`unrestricted`: any public host; `limited`: `allowed_hosts`, plus package indexes with
`allow_package_managers`, plus the agent's MCP hosts with `allow_mcp_servers`), then connects to the
address it checked (no second lookup, no rebinding). A refusal is an HTTP 403 with the reason and
a counted metric, never a hang. A raw socket in the sandbox reaches nothing but its own loopback.
For a host one of the sandbox's secrets goes to, the proxy relays HTTP itself (ending TLS with the
deployment CA) and puts the secrets in place of their placeholders (`interception`); any other
CONNECT stays a blind tunnel.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from prometheus_client import Counter

from registry.core.egress import EgressRefused, EgressRules, check_addresses, resolve
from registry.sandbox.interception import Interception, SecretInjection, host_listed, relay

logger = logging.getLogger(__name__)

PROXY_PORT = 3128
SOCKET_INSIDE = "/run/egress.sock"
CONNECT_TIMEOUT_SECONDS = 10
MAX_HEAD_BYTES = 64 * 1024
PACKAGE_INDEX_HOSTS = (
    "pypi.org",
    "files.pythonhosted.org",
    "registry.npmjs.org",
    "deb.debian.org",
    "security.debian.org",
    "crates.io",
    "static.crates.io",
    "index.crates.io",
    "rubygems.org",
    "proxy.golang.org",
    "sum.golang.org",
)
SOCKS_VERSION, SOCKS_NO_AUTH, SOCKS_CONNECT = 5, 0, 1
SOCKS_SUCCEEDED, SOCKS_REFUSED, SOCKS_UNREACHABLE, SOCKS_BAD_COMMAND, SOCKS_BAD_ADDRESS = 0, 2, 4, 7, 8
REFUSED = Counter("registry_sandbox_egress_refused_total", "Connections the sandbox egress proxy refused", ["reason"])
# Runs inside the sandbox (its python3): 127.0.0.1:3128 -> the proxy's Unix socket, byte for byte.
BRIDGE_SOURCE = f"""
import socket, threading
def pump(a, b):
    try:
        while (data := a.recv(65536)):
            b.sendall(data)
    except OSError:
        pass
    finally:
        for s in (a, b):
            try: s.shutdown(socket.SHUT_RDWR)
            except OSError: pass
def serve(client):
    upstream = socket.socket(socket.AF_UNIX)
    try:
        upstream.connect({SOCKET_INSIDE!r})
    except OSError:
        client.close(); return
    threading.Thread(target=pump, args=(client, upstream), daemon=True).start()
    pump(upstream, client)
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", {PROXY_PORT}))
listener.listen(64)
while True:
    threading.Thread(target=serve, args=(listener.accept()[0],), daemon=True).start()
"""
PROXY_URL = f"http://127.0.0.1:{PROXY_PORT}"
# No NO_PROXY: nothing but the bridge listens on the sandbox's own loopback, so every name goes out
# through the proxy (and `127.0.0.1` means the host's, subject to the rules like any other address).
PROXY_ENV = {
    name: PROXY_URL for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy")
}


@dataclass(frozen=True)
class NetworkPolicy:
    """An environment's `config.networking`, as the proxy enforces it."""

    type: str = "unrestricted"  # or "limited"
    allowed_hosts: tuple[str, ...] = ()
    allow_package_managers: bool = False
    allow_mcp_servers: bool = False
    mcp_hosts: tuple[str, ...] = ()

    @classmethod
    def from_environment(cls, config: dict[str, object], mcp_hosts: tuple[str, ...] = ()) -> NetworkPolicy:
        networking = config.get("networking") or {}
        assert isinstance(networking, dict)
        return cls(
            type=str(networking.get("type") or "unrestricted"),
            allowed_hosts=tuple(str(host).lower() for host in networking.get("allowed_hosts") or ()),
            allow_package_managers=bool(networking.get("allow_package_managers")),
            allow_mcp_servers=bool(networking.get("allow_mcp_servers")),
            mcp_hosts=mcp_hosts,
        )

    def allows(self, host: str) -> bool:
        """May the sandbox reach this host name at all (before the address checks)?"""
        if self.type != "limited":
            return True
        listed = self.allowed_hosts
        if self.allow_package_managers:
            listed += PACKAGE_INDEX_HOSTS
        if self.allow_mcp_servers:
            listed += self.mcp_hosts
        return host_listed(host, listed)


class EgressProxy:
    """One sandbox's proxy: a Unix socket on the host and a thread per connection."""

    def __init__(
        self, socket_path: Path, policy: NetworkPolicy, rules: EgressRules, interception: Interception | None = None
    ) -> None:
        self.socket_path, self.policy, self.rules, self.interception = socket_path, policy, rules, interception
        with contextlib.suppress(FileNotFoundError):
            socket_path.unlink()
        self.listener = socket.socket(socket.AF_UNIX)
        self.listener.bind(str(socket_path))
        self.listener.listen(64)
        self.closed = threading.Event()
        threading.Thread(target=self._accept, name="sandbox-egress", daemon=True).start()

    def close(self) -> None:
        self.closed.set()
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with client:
            if _first_byte(client) == SOCKS_VERSION:
                self._serve_socks(client)
                return
            head = _read_head(client)
            if head is None:
                return
            method, target, rest = _request_line(head)
            host, port, forward = _destination(method, target, head, rest)
            if host is None:
                _answer(client, 400, "The proxy takes CONNECT host:port or absolute http:// requests.")
                return
            upstream = self._connect(client, host, port)
            if upstream is None:
                return
            with upstream:
                injections = self.interception.covering(host) if self.interception else ()
                if injections and forward is None:
                    self._intercept(client, upstream, host, injections)
                elif injections:
                    relay(client, upstream, injections, received=head)
                elif forward is None:
                    client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    _relay(client, upstream)
                else:
                    upstream.sendall(forward)
                    _relay(client, upstream)

    def _intercept(
        self, client: socket.socket, upstream: socket.socket, host: str, injections: tuple[SecretInjection, ...]
    ) -> None:
        """A CONNECT to a host the sandbox's secrets go to: verified TLS upstream before the CONNECT is
        answered (so an untrusted host is a 502, not a tunnel), then the sandbox's TLS ended here."""
        assert self.interception is not None
        try:
            secured_upstream = self.interception.open_upstream(upstream, host)
        except OSError as error:  # ssl.SSLCertVerificationError included
            REFUSED.labels(reason="upstream_tls").inc()
            _answer(client, 502, f"{host} did not complete a TLS handshake this proxy trusts ({type(error).__name__}).")
            return
        with secured_upstream:
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            try:
                secured_client = self.interception.accept_client(client, host)
            except OSError:
                return
            with secured_client:
                relay(secured_client, secured_upstream, injections)

    def _connect(self, client: socket.socket, host: str, port: int) -> socket.socket | None:
        """The upstream connection, or None once the HTTP client was told why not."""
        try:
            return self._open(host, port)
        except Refusal as refusal:
            _answer(client, refusal.status, refusal.message)
            return None

    def _open(self, host: str, port: int) -> socket.socket:
        """Connect to `host:port` after the environment's policy and the egress rules said yes, to the very
        address that was checked (no second lookup)."""
        if not self.policy.allows(host):
            REFUSED.labels(reason="not_allowed").inc()
            raise Refusal(403, f"{host} is not in this environment's allowed hosts.")
        try:
            addresses = resolve(host, port)
            check_addresses(host, port, addresses, self.rules)
        except EgressRefused as refused:
            REFUSED.labels(reason="address").inc()
            raise Refusal(403, str(refused)) from None
        try:
            upstream = socket.create_connection((str(addresses[0]), port), timeout=CONNECT_TIMEOUT_SECONDS)
        except OSError as error:
            REFUSED.labels(reason="unreachable").inc()
            raise Refusal(502, f"{host}:{port} could not be reached ({type(error).__name__}).") from None
        upstream.settimeout(None)  # the timeout was for connecting; a quiet stream may stay open
        return upstream

    def _serve_socks(self, client: socket.socket) -> None:
        """SOCKS5 (RFC 1928) on the same socket: no authentication, CONNECT only, the same checks as an HTTP
        CONNECT. The tunnel is blind: a credential's placeholder passes unchanged (never the secret)."""
        client.settimeout(30)
        try:
            host, port = _socks_request(client)
        except (OSError, ValueError):
            return
        try:
            upstream = self._open(host, port)
        except Refusal as refusal:
            _socks_reply(client, SOCKS_REFUSED if refusal.status == 403 else SOCKS_UNREACHABLE)
            return
        client.settimeout(None)
        with upstream:
            _socks_reply(client, SOCKS_SUCCEEDED)
            _relay(client, upstream)


class Refusal(Exception):
    """Why the proxy will not connect (an HTTP status and a reason the sandbox may read)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _first_byte(client: socket.socket) -> int | None:
    client.settimeout(30)
    try:
        peeked = client.recv(1, socket.MSG_PEEK)
    except OSError:
        return None
    return peeked[0] if peeked else None


def _receive(client: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = client.recv(size - len(data))
        if not chunk:
            raise ValueError("the SOCKS client left")
        data += chunk
    return data


def _socks_request(client: socket.socket) -> tuple[str, int]:
    """The greeting (only "no authentication" is offered) and a CONNECT request: (host, port)."""
    _, methods = _receive(client, 2)
    if SOCKS_NO_AUTH not in _receive(client, methods):
        client.sendall(bytes([SOCKS_VERSION, 0xFF]))
        raise ValueError("no acceptable SOCKS method")
    client.sendall(bytes([SOCKS_VERSION, SOCKS_NO_AUTH]))
    _, command, _, kind = _receive(client, 4)
    if kind == 1:
        host = str(ipaddress.IPv4Address(_receive(client, 4)))
    elif kind == 4:
        host = str(ipaddress.IPv6Address(_receive(client, 16)))
    elif kind == 3:
        host = _receive(client, _receive(client, 1)[0]).decode("idna")
    else:
        _socks_reply(client, SOCKS_BAD_ADDRESS)
        raise ValueError("unknown SOCKS address type")
    port = int.from_bytes(_receive(client, 2), "big")
    if command != SOCKS_CONNECT:
        _socks_reply(client, SOCKS_BAD_COMMAND)
        raise ValueError("only SOCKS CONNECT is served")
    return host, port


def _socks_reply(client: socket.socket, code: int) -> None:
    with contextlib.suppress(OSError):
        client.sendall(bytes([SOCKS_VERSION, code, 0, 1, 0, 0, 0, 0, 0, 0]))


def _read_head(client: socket.socket) -> bytes | None:
    client.settimeout(30)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = client.recv(65536)
            if not chunk or len(data) > MAX_HEAD_BYTES:
                return None
            data += chunk
    except OSError:
        return None
    client.settimeout(None)
    return data


def _request_line(head: bytes) -> tuple[str, str, bytes]:
    line, _, rest = head.partition(b"\r\n")
    parts = line.decode("latin-1").split(" ")
    return (parts[0].upper(), parts[1], rest) if len(parts) == 3 else ("", "", rest)


def _destination(method: str, target: str, head: bytes, rest: bytes) -> tuple[str | None, int, bytes | None]:
    """(host, port, bytes to send upstream: None for a CONNECT tunnel)."""
    if method == "CONNECT":
        host, _, port = target.rpartition(":")
        return (host.strip("[]") or None, int(port) if port.isdigit() else 443, None)
    parts = urlsplit(target)
    if parts.scheme != "http" or not parts.hostname:
        return None, 0, None
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    origin_form = f"{method} {path} HTTP/1.1\r\n".encode() + rest
    return parts.hostname, parts.port or 80, origin_form


def _answer(client: socket.socket, status: int, message: str) -> None:
    body = (message + "\n").encode()
    reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}[status]
    head = f"HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain\r\ncontent-length: {len(body)}\r\n"
    with contextlib.suppress(OSError):
        client.sendall(head.encode() + b"connection: close\r\n\r\n" + body)


def _relay(client: socket.socket, upstream: socket.socket) -> None:
    def pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)

    other = threading.Thread(target=pump, args=(upstream, client), daemon=True)
    other.start()
    pump(client, upstream)
    other.join(timeout=300)


def socket_path_for(workspace: Path) -> Path:
    """The proxy's socket sits beside the workspace (in the session's private directory)."""
    return workspace.parent / "egress.sock"


def chown_socket(path: Path, uid: int) -> None:
    os.chown(path, uid, uid)

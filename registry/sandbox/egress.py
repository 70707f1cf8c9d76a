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
For a host and port one of the sandbox's secrets goes to, a CONNECT is intercepted: the proxy ends the
sandbox's TLS with the deployment CA and relays HTTP itself (`relaying`), putting the secrets in place of
their placeholders where the request names the host it really goes to. Plain `http://` requests are
always relayed as HTTP. Every answer the proxy reads for a sandbox with secrets has them taken out
(`redaction`). Other tunnels (CONNECT, SOCKS) stay blind, but for a sandbox with secrets or under
`limited` networking the proxy first reads what the client sends: a ClientHello must name the tunnel's
host (under `limited`), plain HTTP in a tunnel is relayed as HTTP. One sandbox's proxy serves at most
`REGISTRY_SANDBOX_MAX_CONNECTIONS` connections at once, with at most two threads each.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from registry.core.egress import EgressRefused, EgressRules, check_addresses, resolve
from registry.sandbox.hostnames import Endpoint, host_listed, normalized
from registry.sandbox.interception import Interception
from registry.sandbox.openings import Opening, OpeningKind, read_opening
from registry.sandbox.refusals import REFUSED, Refusal
from registry.sandbox.relaying import ExchangeRules, HttpRelay, relay_blindly

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
ESTABLISHED = b"HTTP/1.1 200 Connection established\r\n\r\n"
TOO_MANY_CONNECTIONS = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\n"
    b"This sandbox has as many connections open through its proxy as it may; close some and try again.\n"
)
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
    """One sandbox's proxy: a Unix socket on the host, a thread per connection up to a cap (and a second one
    while a connection is relayed blind)."""

    def __init__(
        self, socket_path: Path, policy: NetworkPolicy, rules: EgressRules, interception: Interception | None = None
    ) -> None:
        self.socket_path, self.policy, self.rules, self.interception = socket_path, policy, rules, interception
        with contextlib.suppress(FileNotFoundError):
            socket_path.unlink()
        self.listener = socket.socket(socket.AF_UNIX)
        self.listener.bind(str(socket_path))
        self.listener.listen(64)
        self.slots = threading.BoundedSemaphore(settings.REGISTRY_SANDBOX_MAX_CONNECTIONS)
        self.closed = threading.Event()
        threading.Thread(target=self._accept, name="sandbox-egress", daemon=True).start()

    @property
    def limited(self) -> bool:
        return self.policy.type == "limited"

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
            if not self.slots.acquire(blocking=False):
                _turn_away(client)
                continue
            try:
                threading.Thread(target=self._serve_in_slot, args=(client,), daemon=True).start()
            except RuntimeError:  # the host is out of threads: this connection is turned away, the next may fit
                self.slots.release()
                _turn_away(client)

    def _serve_in_slot(self, client: socket.socket) -> None:
        try:
            with client:
                self._serve(client)
        finally:
            self.slots.release()

    def _serve(self, client: socket.socket) -> None:
        if _first_byte(client) == SOCKS_VERSION:
            self._serve_socks(client)
            return
        received = _read_head(client)
        if received is None:
            return
        method, target = _request_line(received)
        if method == "CONNECT":
            self._serve_connect(client, target, received.partition(b"\r\n\r\n")[2])
        elif target.lower().startswith("http://"):
            self._serve_plain(client, received)
        else:
            _answer(client, 400, "The proxy takes CONNECT host:port or absolute http:// requests.")

    def _serve_plain(self, client: socket.socket, received: bytes) -> None:
        """Absolute-form `http://` requests, each to the host it names, relayed as HTTP."""
        rules = _exchange_rules(self.interception, substitutes=True, bind_hosts=self.limited)
        HttpRelay(client, rules, connect=self._open_endpoint, received=received).run()

    def _serve_connect(self, client: socket.socket, target: str, early: bytes) -> None:
        host, _, port_text = target.rpartition(":")
        host = host.strip("[]")
        if not host or not port_text.isdigit():
            _answer(client, 400, "CONNECT takes host:port.")
            return
        port = int(port_text)
        upstream = self._connect(client, host, port)
        if upstream is None:
            return
        with upstream:
            interception = self.interception
            if interception and interception.covering(host, port):
                self._intercept(client, upstream, Endpoint(host, port, secure=True), interception, early)
            else:
                client.sendall(ESTABLISHED)
                self._tunnel(client, upstream, Endpoint(host, port), early)

    def _intercept(
        self,
        client: socket.socket,
        upstream: socket.socket,
        endpoint: Endpoint,
        interception: Interception,
        early: bytes,
    ) -> None:
        """A CONNECT to a host and port the sandbox's secrets go to: verified TLS upstream before the CONNECT
        is answered (so an untrusted host is a 502, not a tunnel), then the sandbox's TLS, whose ClientHello
        must name that host, ended here; every request on it must name that host and port too."""
        try:
            secured_upstream = interception.open_upstream(upstream, endpoint.host)
        except OSError as error:  # ssl.SSLCertVerificationError included
            REFUSED.labels(reason="upstream_tls").inc()
            message = f"{endpoint.host} did not complete a TLS handshake this proxy trusts ({type(error).__name__})."
            _answer(client, 502, message)
            return
        with secured_upstream:
            client.sendall(ESTABLISHED)
            opening = read_opening(client, received=early)
            if opening.kind is not OpeningKind.TLS or not _names_tunnel(opening, endpoint):
                _count_refused_opening(opening)
                return
            try:
                secured_client = interception.accept_client(client, endpoint.host, opening.data)
            except OSError:
                return
            rules = _exchange_rules(interception, substitutes=True, bind_hosts=True)
            try:
                HttpRelay(secured_client, rules, fixed=(endpoint, secured_upstream)).run()
            finally:
                secured_client.close()

    def _tunnel(self, client: socket.socket, upstream: socket.socket, endpoint: Endpoint, early: bytes) -> None:
        """A tunnel no secret goes into. Blind at once for a sandbox without secrets under `unrestricted`
        networking; else what the client sends first decides: TLS stays blind (under `limited` only when its
        ClientHello names the tunnel's host), plain HTTP is relayed as HTTP (redacted, and under `limited`
        bound to the host), another protocol (or one whose server speaks first) stays blind."""
        interception = self.interception
        if interception is None and not self.limited:
            relay_blindly(client, upstream, early)
            return
        opening = read_opening(client, upstream, early)
        if opening.kind is OpeningKind.HTTP:
            rules = _exchange_rules(interception, substitutes=False, bind_hosts=self.limited)
            HttpRelay(client, rules, fixed=(endpoint, upstream), received=opening.data).run()
        elif self._passes_blind(opening, endpoint):
            relay_blindly(client, upstream, opening.data)
        else:
            _count_refused_opening(opening)

    def _passes_blind(self, opening: Opening, endpoint: Endpoint) -> bool:
        """TLS the proxy does not end (naming the tunnel's host, under `limited`), and any protocol that is
        neither TLS nor HTTP (it names no host the server could route by)."""
        if opening.kind is OpeningKind.TLS:
            return not self.limited or _names_tunnel(opening, endpoint)
        return opening.kind in (OpeningKind.OTHER, OpeningKind.SERVER_FIRST)

    def _connect(self, client: socket.socket, host: str, port: int) -> socket.socket | None:
        """The upstream connection, or None once the HTTP client was told why not."""
        try:
            return self._open(host, port)
        except Refusal as refusal:
            _answer(client, refusal.status, refusal.message)
            return None

    def _open_endpoint(self, endpoint: Endpoint) -> socket.socket:
        return self._open(endpoint.host, endpoint.port)

    def _open(self, host: str, port: int) -> socket.socket:
        """Connect to `host:port` after the environment's policy and the egress rules said yes, to the very
        address that was checked (no second lookup)."""
        if not self.policy.allows(host):
            raise Refusal(403, f"{host} is not in this environment's allowed hosts.", "not_allowed")
        try:
            addresses = resolve(host, port)
            check_addresses(host, port, addresses, self.rules)
        except EgressRefused as refused:
            raise Refusal(403, str(refused), "address") from None
        try:
            upstream = socket.create_connection((str(addresses[0]), port), timeout=CONNECT_TIMEOUT_SECONDS)
        except OSError as error:
            raise Refusal(502, f"{host}:{port} could not be reached ({type(error).__name__}).", "unreachable") from None
        upstream.settimeout(None)  # the timeout was for connecting; a quiet stream may stay open
        return upstream

    def _serve_socks(self, client: socket.socket) -> None:
        """SOCKS5 (RFC 1928) on the same socket: no authentication, CONNECT only, the same checks as an HTTP
        CONNECT and the same tunnel, never intercepted: a credential's placeholder passes unchanged."""
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
            self._tunnel(client, upstream, Endpoint(host, port), b"")


def _exchange_rules(interception: Interception | None, *, substitutes: bool, bind_hosts: bool) -> ExchangeRules:
    """What an HTTP relay does for this sandbox: its secrets put in (where `substitutes`) and taken out of
    every answer, and requests bound to their destination."""
    if interception is None:
        return ExchangeRules(bind_hosts=bind_hosts)
    injections = interception.injections if substitutes else ()
    return ExchangeRules(injections, interception.redactor, bind_hosts)


def _names_tunnel(opening: Opening, endpoint: Endpoint) -> bool:
    """A ClientHello names the tunnel's host, or no host at all."""
    return opening.server_name is None or normalized(opening.server_name) == normalized(endpoint.host)


def _count_refused_opening(opening: Opening) -> None:
    """A tunnel closed before anything was passed on (a TLS client could not read an HTTP refusal)."""
    if opening.kind is OpeningKind.TLS:
        REFUSED.labels(reason="sni_mismatch").inc()
    elif opening.kind is not OpeningKind.SILENT:
        REFUSED.labels(reason="unreadable_opening").inc()


def _turn_away(client: socket.socket) -> None:
    """Over the cap: answered (and counted) by the accepting thread, which must not wait on the client."""
    REFUSED.labels(reason="too_many_connections").inc()
    with client:
        client.setblocking(False)
        with contextlib.suppress(OSError):
            client.send(TOO_MANY_CONNECTIONS)


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


def _request_line(head: bytes) -> tuple[str, str]:
    line = head.partition(b"\r\n")[0]
    parts = line.decode("latin-1").split(" ")
    return (parts[0].upper(), parts[1]) if len(parts) == 3 else ("", "")


def _answer(client: socket.socket, status: int, message: str) -> None:
    body = (message + "\n").encode()
    reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}[status]
    head = f"HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain\r\ncontent-length: {len(body)}\r\n"
    with contextlib.suppress(OSError):
        client.sendall(head.encode() + b"connection: close\r\n\r\n" + body)


def chown_socket(path: Path, uid: int) -> None:
    os.chown(path, uid, uid)

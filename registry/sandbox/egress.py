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
address it checked (no second lookup, no rebinding). A refusal is never a hang: an HTTP 403 (502 for a
host that does not resolve or answer) whose reason phrase, body and `X-Sandbox-Egress-Refused` header
name the rule and the address ("refused: 203.0.113.80 (pypi.org) is in a documentation range;
REGISTRY_SANDBOX_EGRESS_ALLOW lifts it"), or the matching SOCKS reply code; each is counted and logged
with the sandbox's session (`refusals`). A raw socket in the sandbox reaches nothing but its own loopback.
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

from registry.core.egress import EgressRefused, EgressRules, IpAddress, check_addresses, resolve
from registry.core.observability import log_ids
from registry.sandbox.hostnames import Endpoint, host_listed, normalized
from registry.sandbox.interception import Interception
from registry.sandbox.openings import Opening, OpeningKind, read_opening
from registry.sandbox.refusals import REFUSED as REFUSED  # the counter, where the tests and metrics look
from registry.sandbox.refusals import Refusal, refused
from registry.sandbox.relaying import NOT_A_PROXY_REQUEST, ExchangeRules, HttpRelay, relay_blindly

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
TOO_MANY_CONNECTIONS = "this sandbox has as many connections open through its proxy as it may; close some and try again"
EXCEPTION_SETTING = "REGISTRY_SANDBOX_EGRESS_ALLOW"
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

    def admitting(self, host: str) -> str:
        """What would admit a host this policy refuses (the setting of `config.networking` to change)."""
        if not self.allow_package_managers and host_listed(host, PACKAGE_INDEX_HOSTS):
            return "networking.allow_package_managers admits it (a package index)"
        if not self.allow_mcp_servers and host_listed(host, self.mcp_hosts):
            return "networking.allow_mcp_servers admits it (an MCP server of the agent)"
        return "networking.allowed_hosts admits it"


class EgressProxy:
    """One sandbox's proxy: a Unix socket on the host, a thread per connection up to a cap (and a second one
    while a connection is relayed blind). Its threads log with the sandbox's `session_id`."""

    def __init__(
        self,
        socket_path: Path,
        policy: NetworkPolicy,
        rules: EgressRules,
        interception: Interception | None = None,
        *,
        session_id: str | None = None,
    ) -> None:
        self.socket_path, self.policy, self.rules, self.interception = socket_path, policy, rules, interception
        self.session_id = session_id
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
        with log_ids(session_id=self.session_id):
            while not self.closed.is_set():
                try:
                    client, _ = self.listener.accept()
                except OSError:
                    return
                self._hand_over(client)

    def _hand_over(self, client: socket.socket) -> None:
        """A thread of its own for the connection, or the 503 when the sandbox holds as many as it may."""
        if not self.slots.acquire(blocking=False):
            _turn_away(client)
            return
        try:
            threading.Thread(target=self._serve_in_slot, args=(client,), daemon=True).start()
        except RuntimeError:  # the host is out of threads: this connection is turned away, the next may fit
            self.slots.release()
            _turn_away(client)

    def _serve_in_slot(self, client: socket.socket) -> None:
        try:
            with client, log_ids(session_id=self.session_id):
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
            _refuse(client, Refusal(400, NOT_A_PROXY_REQUEST, "bad_request"))

    def _serve_plain(self, client: socket.socket, received: bytes) -> None:
        """Absolute-form `http://` requests, each to the host it names, relayed as HTTP."""
        rules = _exchange_rules(self.interception, substitutes=True, bind_hosts=self.limited)
        HttpRelay(client, rules, connect=self._open_endpoint, received=received).run()

    def _serve_connect(self, client: socket.socket, target: str, early: bytes) -> None:
        host, _, port_text = target.rpartition(":")
        host = host.strip("[]")
        if not host or not port_text.isdigit():
            _refuse(client, Refusal(400, "CONNECT takes host:port", "bad_request"))
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
            what = f"{endpoint.host} did not complete a TLS handshake this proxy trusts ({type(error).__name__})"
            _refuse(client, Refusal(502, what, "upstream_tls", host=endpoint.host, port=endpoint.port))
            return
        with secured_upstream:
            client.sendall(ESTABLISHED)
            opening = read_opening(client, received=early)
            if opening.kind is not OpeningKind.TLS or not _names_tunnel(opening, endpoint):
                _count_refused_opening(opening, endpoint)
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
            _count_refused_opening(opening, endpoint)

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
            _refuse(client, refusal)
            return None

    def _open_endpoint(self, endpoint: Endpoint) -> socket.socket:
        return self._open(endpoint.host, endpoint.port)

    def _open(self, host: str, port: int) -> socket.socket:
        """Connect to `host:port` after the environment's policy and the egress rules said yes, to the very
        address that was checked (no second lookup)."""
        if not self.policy.allows(host):
            what = f"{host} is not among the hosts this environment allows; {self.policy.admitting(host)}"
            raise Refusal(403, what, "not_allowed", host=host, port=port)
        address = self._checked_address(host, port)
        try:
            upstream = socket.create_connection((str(address), port), timeout=CONNECT_TIMEOUT_SECONDS)
        except OSError as error:
            what = f"{host}:{port} could not be reached ({type(error).__name__})"
            raise Refusal(502, what, "unreachable", host=host, address=str(address), port=port) from None
        upstream.settimeout(None)  # the timeout was for connecting; a quiet stream may stay open
        return upstream

    def _checked_address(self, host: str, port: int) -> IpAddress:
        """The address to connect to, once every address the host resolves to passed the egress rules."""
        try:
            addresses = resolve(host, port)
            check_addresses(host, port, addresses, self.rules)
        except EgressRefused as refused:
            raise _address_refusal(host, port, refused) from None
        return addresses[0]

    def _serve_socks(self, client: socket.socket) -> None:
        """SOCKS5 (RFC 1928) on the same socket: no authentication, CONNECT only, the same checks as an HTTP
        CONNECT and the same tunnel, never intercepted: a credential's placeholder passes unchanged. A refusal
        is reply 2 (not allowed by the ruleset), a host that does not resolve or answer 4 (host unreachable)."""
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


def _address_refusal(host: str, port: int, refused: EgressRefused) -> Refusal:
    """Why the egress rules keep the proxy off a host: the address and its range, or that it did not resolve."""
    if refused.address is None or refused.rule is None:
        return Refusal(502, f"{host} could not be resolved", "unresolvable", host=host, port=port)
    address = str(refused.address)
    subject = address if normalized(host) == address else f"{address} ({host})"
    what = f"{subject} {refused.rule.says}; {EXCEPTION_SETTING} lifts it"
    return Refusal(403, what, "address", rule=refused.rule.name, host=host, address=address, port=port)


def _count_refused_opening(opening: Opening, endpoint: Endpoint) -> None:
    """A tunnel closed before anything was passed on (a TLS client could not read an HTTP refusal)."""
    if opening.kind is OpeningKind.TLS:
        refused("sni_mismatch", host=endpoint.host, port=endpoint.port)
    elif opening.kind is not OpeningKind.SILENT:
        refused("unreadable_opening", host=endpoint.host, port=endpoint.port)


def _turn_away(client: socket.socket) -> None:
    """Over the cap: answered (and counted) by the accepting thread, which must not wait on the client."""
    answer = Refusal(503, TOO_MANY_CONNECTIONS, "too_many_connections").answer()
    with client:
        client.setblocking(False)
        with contextlib.suppress(OSError):
            client.send(answer.encode())


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


def _refuse(client: socket.socket, refusal: Refusal) -> None:
    """The refusal's answer, on a connection no tunnel was opened on."""
    with contextlib.suppress(OSError):
        client.sendall(refusal.answer().encode())


def chown_socket(path: Path, uid: int) -> None:
    os.chown(path, uid, uid)

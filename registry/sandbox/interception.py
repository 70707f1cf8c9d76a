"""Secrets the egress proxy puts into a sandbox's requests: the deployment CA, TLS termination, substitution.

The sandbox holds only placeholders. For a host an injection covers, the proxy ends the sandbox's TLS
with a leaf certificate from the deployment CA (which the sandbox's trust bundle holds), opens its own
verified TLS to the host, and relays HTTP/1.1 with h11 on both sides, putting each secret in place of
its placeholder in headers (and bodies when asked). Nothing here logs a header, a body or a secret.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import os
import socket
import ssl
import tempfile
import threading
import time
from dataclasses import dataclass, field
from ipaddress import ip_address
from pathlib import Path
from urllib.parse import urlsplit

import h11
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from django.conf import settings

CA_FILE = "ca.pem"  # the CA's key and certificate, mode 0600
TRUST_BUNDLE = "trust-bundle.pem"  # system bundle + the CA, beside the sandboxes (read by their uids)
SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
TRUST_ENV = {
    name: SYSTEM_BUNDLE
    for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO")
}
CA_DAYS = 3650
LEAF_DAYS = 30
LEAF_REUSE_SECONDS = 24 * 3600
MAX_LEAVES = 1024
HANDSHAKE_TIMEOUT_SECONDS = 30
MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024  # a body the proxy must rewrite is held whole
RECV_BYTES = 65536
# Hop-by-hop framing the proxy redoes itself when it rewrites a body; `expect` it answers itself.
REFRAMED = (b"content-length", b"transfer-encoding", b"expect")
CA_KEY_USAGE = x509.KeyUsage(
    digital_signature=False, content_commitment=False, key_encipherment=False, data_encipherment=False,
    key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False,
)  # fmt: skip


def host_listed(host: str, entries: tuple[str, ...]) -> bool:
    """`host` is an entry, or under a `*.domain` entry (case and a trailing dot aside)."""
    host = host.lower().rstrip(".")
    return any(host == entry or (entry.startswith("*.") and host.endswith(entry[1:])) for entry in entries)


@dataclass(frozen=True)
class SecretInjection:
    """One secret as the proxy puts it in: its placeholder, the hosts it goes to (None: any) and where."""

    placeholder: str
    value: str = field(repr=False)
    hosts: tuple[str, ...] | None = None
    in_headers: bool = True
    in_body: bool = False

    def covers(self, host: str) -> bool:
        return self.hosts is None or host_listed(host, self.hosts)


class DeploymentCA:
    """The deployment's CA (made once, kept in its directory) and the leaf certificates it signs per host."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.key, self.certificate = _load_or_create(directory)
        self.leaf_key = ec.generate_private_key(ec.SECP256R1())
        self.leaves: dict[str, tuple[float, ssl.SSLContext]] = {}
        self.lock = threading.Lock()

    def certificate_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def server_context(self, host: str) -> ssl.SSLContext:
        """A TLS server context presenting a leaf for `host`, reused for a day."""
        with self.lock:
            reuse_until, context = self.leaves.get(host, (0.0, None))
            if context is None or reuse_until < time.monotonic():
                if len(self.leaves) >= MAX_LEAVES:
                    self.leaves.clear()
                context = self._leaf_context(host)
                self.leaves[host] = (time.monotonic() + LEAF_REUSE_SECONDS, context)
            return context

    def _leaf_context(self, host: str) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.set_alpn_protocols(["http/1.1"])
        key_pem = self.leaf_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        leaf_pem = self._leaf(host).public_bytes(serialization.Encoding.PEM)
        with tempfile.NamedTemporaryFile(dir=self.directory, suffix=".pem") as chain:  # mode 0600
            chain.write(key_pem + leaf_pem)
            chain.flush()
            context.load_cert_chain(chain.name)
        return context

    def _leaf(self, host: str) -> x509.Certificate:
        try:
            name: x509.GeneralName = x509.IPAddress(ip_address(host))
        except ValueError:
            name = x509.DNSName(host)
        now = datetime.datetime.now(datetime.UTC)
        ca_key_id = self.certificate.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        return (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host[:64])]))
            .issuer_name(self.certificate.subject)
            .public_key(self.leaf_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=LEAF_DAYS))
            .add_extension(x509.SubjectAlternativeName([name]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.leaf_key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_key_id), critical=False)
            .sign(self.key, hashes.SHA256())
        )


def _load_or_create(directory: Path) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """The CA in `directory/ca.pem`; a new one is linked in place, so racing processes agree on one."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / CA_FILE
    if not path.exists():
        with tempfile.NamedTemporaryFile(dir=directory, suffix=".pem") as fresh:  # mode 0600
            fresh.write(_new_ca())
            fresh.flush()
            with contextlib.suppress(FileExistsError):
                os.link(fresh.name, path)
    pem = path.read_bytes()
    key = serialization.load_pem_private_key(pem, password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return key, x509.load_pem_x509_certificate(pem)


def _new_ca() -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Agent registry sandbox egress CA")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(CA_KEY_USAGE, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return key_pem + certificate.public_bytes(serialization.Encoding.PEM)


@functools.cache
def deployment_ca(directory: Path) -> DeploymentCA:
    return DeploymentCA(directory)


def upstream_context(extra_ca_file: str) -> ssl.SSLContext:
    """Verifies real hosts: the system store plus the operator's extra CAs (private CAs, tests)."""
    context = ssl.create_default_context()
    if extra_ca_file:
        context.load_verify_locations(cafile=extra_ca_file)
    context.set_alpn_protocols(["http/1.1"])
    return context


@dataclass(frozen=True)
class Interception:
    """What one sandbox's proxy needs to put its secrets in, and the trust bundle its sandbox sees."""

    injections: tuple[SecretInjection, ...]
    ca: DeploymentCA
    upstream: ssl.SSLContext
    bundle: Path

    def covering(self, host: str) -> tuple[SecretInjection, ...]:
        return tuple(injection for injection in self.injections if injection.covers(host))

    def open_upstream(self, upstream: socket.socket, host: str) -> ssl.SSLSocket:
        """TLS to the real host at the address already checked, verified against its name (and SNI)."""
        upstream.settimeout(HANDSHAKE_TIMEOUT_SECONDS)
        secured = self.upstream.wrap_socket(upstream, server_hostname=host)
        secured.settimeout(None)
        return secured

    def accept_client(self, client: socket.socket, host: str) -> ssl.SSLSocket:
        """The sandbox's TLS, ended here with a leaf for `host` from the deployment CA."""
        client.settimeout(HANDSHAKE_TIMEOUT_SECONDS)
        secured = self.ca.server_context(host).wrap_socket(client, server_side=True)
        secured.settimeout(None)
        return secured


def interception_for(injections: tuple[SecretInjection, ...], root: Path) -> Interception | None:
    """A sandbox's interception (None without injections): the CA, and its trust bundle under `root`."""
    if not injections:
        return None
    ca = deployment_ca(Path(settings.REGISTRY_SANDBOX_CA_DIR or root / "ca"))
    bundle = root / TRUST_BUNDLE
    _write_bundle(bundle, ca.certificate_pem())
    return Interception(injections, ca, upstream_context(settings.REGISTRY_SANDBOX_EXTRA_CA_FILE), bundle)


def _write_bundle(path: Path, ca_pem: bytes) -> None:
    system = Path(SYSTEM_BUNDLE).read_bytes() if os.path.exists(SYSTEM_BUNDLE) else b""
    with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as staged:
        staged.write(system.rstrip(b"\n") + b"\n" + ca_pem)
    os.chmod(staged.name, 0o644)
    os.replace(staged.name, path)


class BodyTooLarge(Exception):
    """A body the proxy would have to rewrite is larger than it holds."""


def relay(
    client: socket.socket, upstream: socket.socket, injections: tuple[SecretInjection, ...], received: bytes = b""
) -> None:
    """Relay HTTP/1.1 exchanges (kept alive while both sides allow) with the secrets put in, until either
    side closes or breaks the protocol. `received` is what the proxy already read from the client."""
    inbound = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
    outbound = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)
    if received:  # h11 takes empty data for the end of the stream
        inbound.receive_data(received)
    with contextlib.suppress(h11.ProtocolError, OSError):
        while _exchange(client, upstream, inbound, outbound, injections):
            inbound.start_next_cycle()
            outbound.start_next_cycle()


def _exchange(
    client: socket.socket,
    upstream: socket.socket,
    inbound: h11.Connection,
    outbound: h11.Connection,
    injections: tuple[SecretInjection, ...],
) -> bool:
    """One request and its response; True when the connection may carry another."""
    request = _next_event(inbound, client)
    if not isinstance(request, h11.Request):
        return False
    if inbound.they_are_waiting_for_100_continue:  # answered here: the body may have to be read whole first
        client.sendall(inbound.send(h11.InformationalResponse(status_code=100, headers=[])))
    try:
        _forward_request(request, client, upstream, inbound, outbound, injections)
    except BodyTooLarge:
        client.sendall(_refusal(inbound, 413, "The request body is too large for the proxy to rewrite."))
        return False
    _forward_response(client, upstream, inbound, outbound)
    return all(side.our_state is h11.DONE and side.their_state is h11.DONE for side in (inbound, outbound))


def _forward_request(
    request: h11.Request,
    client: socket.socket,
    upstream: socket.socket,
    inbound: h11.Connection,
    outbound: h11.Connection,
    injections: tuple[SecretInjection, ...],
) -> None:
    headers = [
        (name, _substituted(value, injections, in_headers=True)) for name, value in request.headers if name != b"expect"
    ]
    target = _origin_form(request.target)
    if not any(injection.in_body for injection in injections):
        upstream.sendall(outbound.send(h11.Request(method=request.method, target=target, headers=headers)))
        while isinstance(event := _next_event(inbound, client), h11.Data):
            upstream.sendall(outbound.send(event))
        upstream.sendall(outbound.send(h11.EndOfMessage()))
        return
    framed = any(name in REFRAMED for name, _ in headers)
    body = _substituted(_whole_body(inbound, client), injections, in_headers=False)
    headers = [(name, value) for name, value in headers if name not in REFRAMED]
    if framed or body:
        headers.append((b"content-length", str(len(body)).encode()))
    upstream.sendall(outbound.send(h11.Request(method=request.method, target=target, headers=headers)))
    if body:
        upstream.sendall(outbound.send(h11.Data(data=body)))
    upstream.sendall(outbound.send(h11.EndOfMessage()))


def _forward_response(
    client: socket.socket, upstream: socket.socket, inbound: h11.Connection, outbound: h11.Connection
) -> None:
    """Stream the response back as it comes. A protocol switch (101) is not carried: the connection ends."""
    while True:
        event = _next_event(outbound, upstream)
        if not isinstance(event, h11.InformationalResponse | h11.Response | h11.Data | h11.EndOfMessage):
            raise ConnectionResetError("the upstream closed before its response ended")
        if isinstance(event, h11.InformationalResponse) and event.status_code == 101:
            raise ConnectionAbortedError("protocol upgrades are not relayed on a connection with secrets")
        client.sendall(inbound.send(event))
        if isinstance(event, h11.EndOfMessage):
            return


def _next_event(connection: h11.Connection, sock: socket.socket) -> object:
    """The next event (or PAUSED), reading from `sock` as needed; an end of file is an event too."""
    while (event := connection.next_event()) is h11.NEED_DATA:
        connection.receive_data(sock.recv(RECV_BYTES))
    return event


def _whole_body(inbound: h11.Connection, client: socket.socket) -> bytes:
    parts: list[bytes] = []
    size = 0
    while isinstance(event := _next_event(inbound, client), h11.Data):
        size += len(event.data)
        if size > MAX_BODY_BYTES:
            raise BodyTooLarge
        parts.append(event.data)
    return b"".join(parts)


def _substituted(data: bytes, injections: tuple[SecretInjection, ...], *, in_headers: bool) -> bytes:
    for injection in injections:
        if injection.in_headers if in_headers else injection.in_body:
            data = data.replace(injection.placeholder.encode(), injection.value.encode())
    return data


def _origin_form(target: bytes) -> bytes:
    """An absolute-form target (plain HTTP through a proxy) as the origin server expects it."""
    if not target.lower().startswith((b"http://", b"https://")):
        return target
    parts = urlsplit(target.decode("latin-1"))
    return ((parts.path or "/") + (f"?{parts.query}" if parts.query else "")).encode("latin-1")


def _refusal(inbound: h11.Connection, status: int, message: str) -> bytes:
    body = (message + "\n").encode()
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    headers.append((b"connection", b"close"))
    return inbound.send(h11.Response(status_code=status, headers=headers)) + inbound.send(h11.Data(data=body))

"""Secrets the egress proxy puts into a sandbox's requests: the injections, the deployment CA and TLS termination.

The sandbox holds only placeholders. For a host and port an injection covers, the proxy ends the sandbox's
TLS with a leaf certificate from the deployment CA (which the sandbox's trust bundle holds), opens its own
verified TLS to the host, and relays HTTP/1.1 itself (`relaying`), putting each secret in place of its
placeholder where its credential allows. Nothing here logs a header, a body or a secret.
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
from collections.abc import Callable
from dataclasses import dataclass, field
from ipaddress import ip_address
from pathlib import Path
from typing import TypeVar

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from django.conf import settings

from registry.sandbox.hostnames import HostPattern, pattern_matches
from registry.sandbox.redaction import Redactor

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
RECV_BYTES = 65536
Result = TypeVar("Result")
CA_KEY_USAGE = x509.KeyUsage(
    digital_signature=False, content_commitment=False, key_encipherment=False, data_encipherment=False,
    key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False,
)  # fmt: skip


@dataclass(frozen=True)
class SecretInjection:
    """One secret as the proxy puts it in: its placeholder, the hosts it goes to (None: any; a host pattern
    with a port binds that port too) and where in a request (header values, the body; never the target)."""

    placeholder: str
    value: str = field(repr=False)
    hosts: tuple[HostPattern, ...] | None = None
    in_headers: bool = True
    in_body: bool = False

    def covers(self, host: str, port: int) -> bool:
        return self.hosts is None or any(pattern_matches(pattern, host, port) for pattern in self.hosts)


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
    redactor: Redactor = field(repr=False)  # every secret of the sandbox, taken out of what the proxy reads

    def covering(self, host: str, port: int) -> tuple[SecretInjection, ...]:
        return tuple(injection for injection in self.injections if injection.covers(host, port))

    def open_upstream(self, upstream: socket.socket, host: str) -> ssl.SSLSocket:
        """TLS to the real host at the address already checked, verified against its name (and SNI)."""
        upstream.settimeout(HANDSHAKE_TIMEOUT_SECONDS)
        secured = self.upstream.wrap_socket(upstream, server_hostname=host)
        secured.settimeout(None)
        return secured

    def accept_client(self, client: socket.socket, host: str, client_hello: bytes) -> TerminatedTls:
        """The sandbox's TLS, ended here with a leaf for `host` from the deployment CA, starting from the
        ClientHello the proxy already read."""
        secured = TerminatedTls(client, self.ca.server_context(host), client_hello)
        client.settimeout(HANDSHAKE_TIMEOUT_SECONDS)
        try:
            secured.handshake()
        finally:
            client.settimeout(None)
        return secured


class TerminatedTls:
    """The sandbox's TLS ended by the proxy: OpenSSL over memory buffers fed from the socket, so what was
    read before the handshake (the ClientHello) can start it."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, received: bytes) -> None:
        self.sock = sock
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.incoming.write(received)
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_side=True)

    def handshake(self) -> None:
        self._run(self.tls.do_handshake)

    def recv(self, size: int, /) -> bytes:
        try:
            return self._run(self.tls.read, size)
        except ssl.SSLZeroReturnError:  # the sandbox closed its TLS cleanly
            return b""

    def sendall(self, data: bytes, /) -> None:
        self._run(self.tls.write, data)  # a memory buffer takes it all at once

    def close(self) -> None:
        """Send the TLS goodbye without waiting for the sandbox's."""
        with contextlib.suppress(ssl.SSLError):  # SSLWantReadError: the sandbox's goodbye is not awaited
            self.tls.unwrap()
        with contextlib.suppress(OSError):
            self._flush()

    def _run(self, operation: Callable[..., Result], *arguments: object) -> Result:
        """Run a TLS operation, sending what it writes and reading from the socket while it needs more."""
        while True:
            try:
                result = operation(*arguments)
            except ssl.SSLWantReadError:
                self._flush()
                data = self.sock.recv(RECV_BYTES)
                if not data:
                    raise ConnectionResetError("the sandbox closed its connection mid-TLS") from None
                self.incoming.write(data)
                continue
            self._flush()
            return result

    def _flush(self) -> None:
        if pending := self.outgoing.read():
            self.sock.sendall(pending)


def interception_for(injections: tuple[SecretInjection, ...], *, ca_dir: Path, bundle_dir: Path) -> Interception | None:
    """A sandbox's interception (None without injections): the CA (in `REGISTRY_SANDBOX_CA_DIR`, else
    `ca_dir`, which no sandbox sees), and its trust bundle in `bundle_dir` (bound into sandboxes)."""
    if not injections:
        return None
    ca = deployment_ca(Path(settings.REGISTRY_SANDBOX_CA_DIR or ca_dir))
    bundle = bundle_dir / TRUST_BUNDLE
    _write_bundle(bundle, ca.certificate_pem())
    upstream = upstream_context(settings.REGISTRY_SANDBOX_EXTRA_CA_FILE)
    redactor = Redactor({injection.value: injection.placeholder for injection in injections})
    return Interception(injections, ca, upstream, bundle, redactor)


def _write_bundle(path: Path, ca_pem: bytes) -> None:
    system = Path(SYSTEM_BUNDLE).read_bytes() if os.path.exists(SYSTEM_BUNDLE) else b""
    with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as staged:
        staged.write(system.rstrip(b"\n") + b"\n" + ca_pem)
    os.chmod(staged.name, 0o644)
    os.replace(staged.name, path)

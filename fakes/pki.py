"""A test PKI on disk for loopback TLS: a CA with a server certificate for localhost and 127.0.0.1, and a
self-signed rogue one that no one trusts. Used by the tests and the gateway benchmark."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from ipaddress import ip_address
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _issue(name: str, key: ec.EllipticCurvePrivateKey, issuer: tuple[x509.Certificate, Any] | None = None):
    """A CA certificate (no issuer: self-signed) or a server certificate for localhost and 127.0.0.1."""
    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer[0].subject if issuer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if issuer is None:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        return builder.sign(key, hashes.SHA256())
    names = [x509.DNSName("localhost"), x509.IPAddress(ip_address("127.0.0.1"))]
    builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    builder = builder.add_extension(
        x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer[1].public_key()), critical=False
    )
    return builder.sign(issuer[1], hashes.SHA256())


def _pem(certificate: x509.Certificate, key: ec.EllipticCurvePrivateKey | None = None) -> bytes:
    text = certificate.public_bytes(serialization.Encoding.PEM)
    if key is not None:
        text += key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    return text


@dataclass(frozen=True)
class Pki:
    """Where the PEM files are."""

    ca_file: Path
    server_chain: Path  # signed by the test CA
    rogue_chain: Path  # self-signed: no one trusts it


def make_pki(tmp_path: Path) -> Pki:
    """A fresh CA, a server chain it signed and a rogue chain, written under `tmp_path`."""
    ca_key, server_key, rogue_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    ca = _issue("Test CA", ca_key)
    server = _issue("test server", server_key, (ca, ca_key))
    rogue = _issue("rogue", rogue_key, (_issue("rogue", rogue_key), rogue_key))
    paths = Pki(tmp_path / "ca.pem", tmp_path / "server.pem", tmp_path / "rogue.pem")
    paths.ca_file.write_bytes(_pem(ca))
    paths.server_chain.write_bytes(_pem(server, server_key))
    paths.rogue_chain.write_bytes(_pem(rogue, rogue_key))
    return paths

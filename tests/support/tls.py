"""TLS on loopback for tests: a test CA with a server certificate for localhost and 127.0.0.1 (and a
self-signed rogue one), and HTTP(S) servers that record what they receive, and reflect it back as a
careless API would (echoed, streamed a byte at a time, compressed, base64-encoded, stored and served)."""

from __future__ import annotations

import base64
import datetime
import gzip
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import ip_address
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    peer_port: int


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
    ca_file: Path
    server_chain: Path  # signed by the test CA
    rogue_chain: Path  # self-signed: no one trusts it


def make_pki(tmp_path: Path) -> Pki:
    ca_key, server_key, rogue_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    ca = _issue("Test CA", ca_key)
    server = _issue("test server", server_key, (ca, ca_key))
    rogue = _issue("rogue", rogue_key, (_issue("rogue", rogue_key), rogue_key))
    paths = Pki(tmp_path / "ca.pem", tmp_path / "server.pem", tmp_path / "rogue.pem")
    paths.ca_file.write_bytes(_pem(ca))
    paths.server_chain.write_bytes(_pem(server, server_key))
    paths.rogue_chain.write_bytes(_pem(rogue, rogue_key))
    return paths


class RecordingHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real APIs do
    received: list[Received]

    def do_GET(self) -> None:
        self._record(b"")

    def do_POST(self) -> None:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while size := int(self.rfile.readline().strip(), 16):
                body += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
        else:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
        self._record(body)

    def _record(self, body: bytes) -> None:
        headers = {name.lower(): value for name, value in self.headers.items()}
        self.received.append(Received(self.path, headers, body, self.client_address[1]))
        self._answer(body)

    def _answer(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("content-length", "3")
        self.end_headers()
        self.wfile.write(b"ok\n")

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


class ReflectingHandler(RecordingHandler):
    """Answers with what it received (the request's headers, then its body) and its Authorization header in
    the status line and an `x-echo` header; by path: `/echo`, `/drip` (chunked, a byte per chunk, the value
    again in a trailer), `/gzip` (gzip-compressed whatever was asked), `/base64`, `/brotli` (a coding no
    proxy could read), `/store/<key>` (a POST keeps the reflection, a GET returns it: `stored` is shared by
    every server of the process). A HEAD gets the head a GET would."""

    stored: dict[str, bytes] = {}

    def do_HEAD(self) -> None:
        self._record(b"")

    def _answer(self, body: bytes) -> None:
        reflection = str(self.headers).encode() + body
        if self.path.startswith("/store/"):
            if self.command == "POST":
                self.stored[self.path] = reflection
            reflection = self.stored.get(self.path, b"")
        if self.path == "/drip":
            self._drip(reflection)
            return
        encoding = {"/gzip": "gzip", "/brotli": "br"}.get(self.path)
        if encoding == "gzip":
            reflection = gzip.compress(reflection)
        elif self.path == "/base64":
            reflection = base64.b64encode(reflection)
        self._head(encoding, len(reflection))
        if self.command != "HEAD":
            self.wfile.write(reflection)

    def _head(self, encoding: str | None, length: int | None) -> None:
        echo = self.headers.get("authorization", "")
        self.send_response(200, f"Echo {echo}")
        self.send_header("x-echo", echo)
        if encoding:
            self.send_header("content-encoding", encoding)
        if length is not None and self.protocol_version == "HTTP/1.1":  # HTTP/1.0: the close ends the body
            self.send_header("content-length", str(length))
        self.end_headers()

    def _drip(self, reflection: bytes) -> None:
        self.send_response(200, "Dripping")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("trailer", "x-echo")
        self.end_headers()
        for byte in reflection:
            self.wfile.write(b"1\r\n" + bytes([byte]) + b"\r\n")
            self.wfile.flush()
        self.wfile.write(f"0\r\nx-echo: {self.headers.get('authorization', '')}\r\n\r\n".encode())


class Http10ReflectingHandler(ReflectingHandler):
    """An HTTP/1.0 server: one request per connection, the body ended by the close."""

    protocol_version = "HTTP/1.0"


class QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        """A refused handshake is expected in these tests."""


Serve = Callable[..., tuple[int, list[Received]]]  # (chain or None, handler class) -> (port, received)


def recording_servers() -> Iterator[Serve]:
    """Starts servers on 127.0.0.1 (TLS with the given chain, or plain) recording what they receive and
    answering as `handler` does; all are shut down when the generator is closed (use it as a fixture's body)."""
    servers: list[ThreadingHTTPServer] = []

    def start(
        chain: Path | None, handler_class: type[RecordingHandler] = RecordingHandler
    ) -> tuple[int, list[Received]]:
        received: list[Received] = []
        handler = type("Handler", (handler_class,), {"received": received})
        server = QuietServer(("127.0.0.1", 0), handler)
        if chain is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(chain)
            server.socket = context.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server.server_address[1], received

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()

"""HTTP(S) servers on loopback for tests that record what they receive, and reflect it back as a careless API
would (echoed, streamed a byte at a time, compressed, base64-encoded, stored and served); TLS with a chain of the
test PKI (`fakes.pki`), or plain."""

from __future__ import annotations

import base64
import gzip
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    peer_port: int


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

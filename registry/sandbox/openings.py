"""What a tunnel's client sends first, read before any of it goes upstream: a TLS ClientHello (and the server
name it asks for, read by OpenSSL), an HTTP request line, or another protocol; bounded in size and time."""

from __future__ import annotations

import enum
import select
import socket
import ssl
import time
from dataclasses import dataclass, field

OPENING_TIMEOUT_SECONDS = 30
MAX_CLIENT_HELLO_BYTES = 16 * 1024 + 5  # one TLS record and its header
MAX_REQUEST_LINE_BYTES = 64 * 1024
TLS_HANDSHAKE_RECORD = 0x16
TOKEN_BYTES = frozenset(b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
RECV_BYTES = 65536


class OpeningKind(enum.Enum):
    TLS = "tls"  # a whole ClientHello; `server_name` is its SNI (None when it names no server)
    HTTP = "http"  # a request line (anything up to a line end that says HTTP/)
    OTHER = "other"  # another protocol, which starts with neither
    SERVER_FIRST = "server_first"  # the server spoke before the client: neither TLS nor HTTP
    UNREADABLE = "unreadable"  # a ClientHello or request line the proxy cannot read within its limits
    SILENT = "silent"  # the client left, or sent no whole opening in time


@dataclass(frozen=True)
class Opening:
    kind: OpeningKind
    data: bytes = field(default=b"", repr=False)  # what was read from the client, to be passed on first
    server_name: str | None = None


def read_opening(client: socket.socket, upstream: socket.socket | None = None, received: bytes = b"") -> Opening:
    """Read the client's opening (after `received`, already read); with `upstream`, notice a server that
    speaks first. The client's socket is left without a timeout."""
    deadline = time.monotonic() + OPENING_TIMEOUT_SECONDS
    reader = OpeningReader(received)
    if upstream is not None and not received and _server_speaks_first(client, upstream):
        return Opening(OpeningKind.SERVER_FIRST)
    try:
        while (opening := reader.opening()) is None:
            client.settimeout(max(deadline - time.monotonic(), 0.001))
            chunk = client.recv(RECV_BYTES)
            if not chunk:
                return Opening(OpeningKind.SILENT, reader.data)
            reader.data += chunk
    except OSError:  # TimeoutError included
        return Opening(OpeningKind.SILENT, reader.data)
    finally:
        client.settimeout(None)
    return opening


def _server_speaks_first(client: socket.socket, upstream: socket.socket) -> bool:
    poller = select.poll()
    poller.register(client, select.POLLIN)
    poller.register(upstream, select.POLLIN)
    ready = {descriptor for descriptor, _ in poller.poll(OPENING_TIMEOUT_SECONDS * 1000)}
    return upstream.fileno() in ready and client.fileno() not in ready


class OpeningReader:
    """Classifies the bytes read so far, or says it needs more (None)."""

    def __init__(self, data: bytes = b"") -> None:
        self.data = data
        self.hello: ClientHelloReader | None = None  # made once the data turns out to be TLS

    def opening(self) -> Opening | None:
        if self.data[:1] == bytes([TLS_HANDSHAKE_RECORD]):
            return self._tls()
        start = self.data.lstrip(b"\r\n")  # servers skip empty lines before a request line
        if not start:
            return None if len(self.data) < MAX_REQUEST_LINE_BYTES else Opening(OpeningKind.UNREADABLE, self.data)
        if start[0] not in TOKEN_BYTES:
            return Opening(OpeningKind.OTHER, self.data)
        line, newline, _ = start.partition(b"\n")
        if not newline:
            return None if len(self.data) < MAX_REQUEST_LINE_BYTES else Opening(OpeningKind.UNREADABLE, self.data)
        return Opening(OpeningKind.HTTP if b"HTTP/" in line.upper() else OpeningKind.OTHER, self.data)

    def _tls(self) -> Opening | None:
        hello = self.hello = self.hello or ClientHelloReader()
        hello.feed(self.data[hello.fed : MAX_CLIENT_HELLO_BYTES])
        if hello.done:
            kind = OpeningKind.TLS if hello.readable else OpeningKind.UNREADABLE
            return Opening(kind, self.data, hello.server_name)
        return None if len(self.data) < MAX_CLIENT_HELLO_BYTES else Opening(OpeningKind.UNREADABLE, self.data)


class HelloReading(ssl.SSLObject):
    """A server-side TLS object that only reads a ClientHello: the SNI callback keeps the name here."""

    server_name: str | None = None
    named: bool = False


def _keep_server_name(tls: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, _: ssl.SSLContext) -> int:
    if isinstance(tls, HelloReading):
        tls.server_name, tls.named = server_name, True
    return ssl.ALERT_DESCRIPTION_HANDSHAKE_FAILURE  # nothing is answered: the reading ends here


HELLO_CONTEXT = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
HELLO_CONTEXT.sslobject_class = HelloReading
HELLO_CONTEXT.sni_callback = _keep_server_name


class ClientHelloReader:
    """OpenSSL reads the ClientHello (a server handshake over memory whose SNI callback ends it); `done` once
    it read a whole one (`readable`, `server_name`) or saw it is none."""

    def __init__(self) -> None:
        self.incoming = ssl.MemoryBIO()
        self.tls = HELLO_CONTEXT.wrap_bio(self.incoming, ssl.MemoryBIO(), server_side=True)
        self.fed = 0
        self.done = False

    @property
    def readable(self) -> bool:
        return isinstance(self.tls, HelloReading) and self.tls.named

    @property
    def server_name(self) -> str | None:
        return self.tls.server_name if isinstance(self.tls, HelloReading) else None

    def feed(self, data: bytes) -> None:
        self.fed += len(data)
        self.incoming.write(data)
        try:
            self.tls.do_handshake()
        except ssl.SSLWantReadError:
            return
        except ssl.SSLError:
            pass
        self.done = True

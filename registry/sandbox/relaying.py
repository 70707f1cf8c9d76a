"""Relaying a sandbox's connection upstream: blind (byte for byte, two threads), or as HTTP/1.1 the proxy reads
itself (h11 on both sides, one thread): each request bound to where it really goes, the secrets of the
credentials that cover that destination put in, every answer redacted when the sandbox has secrets.
Nothing here logs a header, a body or a secret."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

import h11

from registry.sandbox.hostnames import Endpoint, names_endpoint, parse_authority
from registry.sandbox.interception import SecretInjection
from registry.sandbox.redaction import Inflater, Redactor, UnreadableEncoding, inflater_for
from registry.sandbox.refusals import ProxyAnswer, Refusal

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024  # a body the proxy must rewrite is held whole
RECV_BYTES = 65536
HALF_CLOSED_SECONDS = 300  # how long a blind relay waits for the other side once one side has ended
# Hop-by-hop framing the proxy redoes itself when it rewrites a body; `expect` it answers itself.
REFRAMED = (b"content-length", b"transfer-encoding", b"expect")
# Asked for by the proxy where it redacts: whole, uncompressed answers (a range could cut a secret in two).
UNREDACTABLE_REQUEST_HEADERS = (b"accept-encoding", b"range", b"if-range")
NO_BODY_STATUSES = (204, 304)
NOT_A_PROXY_REQUEST = "the proxy takes CONNECT host:port or absolute http:// requests"


class Stream(Protocol):
    """A connection the relay reads and writes: a socket, or TLS over one."""

    def recv(self, size: int, /) -> bytes: ...

    def sendall(self, data: bytes, /) -> None: ...

    def close(self) -> None: ...


Connect = Callable[[Endpoint], Stream]  # opens a connection to an endpoint, or raises Refusal


@dataclass(frozen=True)
class ExchangeRules:
    """What the relay does to every exchange of one client connection."""

    injections: tuple[SecretInjection, ...] = ()  # put in where one covers the request's destination
    redactor: Redactor | None = None  # the sandbox's secrets, taken out of every answer
    bind_hosts: bool = False  # every request must name its destination (it must anyway when a secret may go)


class BodyTooLarge(Exception):
    """A body the proxy would have to rewrite is larger than it holds."""


@dataclass
class Upstream:
    """The connection the current request goes over, and its HTTP state."""

    endpoint: Endpoint
    stream: Stream
    http: h11.Connection


class HttpRelay:
    """HTTP/1.1 exchanges of one client connection, kept alive while both sides allow. With `fixed`, every
    request goes to that upstream (a tunnel); without it, to the `http://` URL it names (a plain proxy
    request), over a connection `connect` opens."""

    def __init__(
        self,
        client: Stream,
        rules: ExchangeRules,
        *,
        fixed: tuple[Endpoint, Stream] | None = None,
        connect: Connect | None = None,
        received: bytes = b"",
    ) -> None:
        self.client, self.rules, self.connect, self.fixed = client, rules, connect, fixed
        self.inbound = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        if received:  # h11 takes empty data for the end of the stream
            self.inbound.receive_data(received)
        self.upstream = Upstream(fixed[0], fixed[1], _client_side()) if fixed else None

    def run(self) -> None:
        """Until either side closes, breaks the protocol or is refused; then the client connection ends."""
        try:
            with contextlib.suppress(h11.ProtocolError, OSError, UnreadableEncoding):
                while self._exchange():
                    self.inbound.start_next_cycle()
        finally:
            if self.upstream is not None and self.fixed is None:
                self.upstream.stream.close()

    def _exchange(self) -> bool:
        """One request and its answer; True when the connection may carry another."""
        request = _next_event(self.inbound, self.client)
        if not isinstance(request, h11.Request):
            return False
        try:
            destination = self._destination(request)
            covering = tuple(
                injection for injection in self.rules.injections if injection.covers(destination.host, destination.port)
            )
            if (self.rules.bind_hosts or covering) and not _names(request, destination):
                what = f"the request names another host than {destination.authority()}, where this connection goes"
                raise Refusal(403, what, "host_mismatch", host=destination.host, port=destination.port)
            upstream = self._upstream_for(destination)
        except Refusal as refusal:
            self.client.sendall(self._answer(refusal.answer()))
            return False
        if self.inbound.they_are_waiting_for_100_continue:  # answered here: the body may have to be read whole first
            self.client.sendall(self.inbound.send(h11.InformationalResponse(status_code=100, headers=[])))
        try:
            self._forward_request(request, upstream, destination, covering)
        except BodyTooLarge:
            message = "The request body is too large for the proxy to rewrite."
            self.client.sendall(self._answer(ProxyAnswer.plain(413, message)))
            return False
        return self._forward_response(request, upstream)

    # -- where a request goes ------------------------------------------------------------------------
    def _destination(self, request: h11.Request) -> Endpoint:
        if self.fixed is not None:
            return self.fixed[0]
        parts = urlsplit(request.target.decode("latin-1"))
        try:
            port = parts.port or 80
        except ValueError:
            port = 0
        if parts.scheme != "http" or not parts.hostname or not port:
            raise Refusal(400, NOT_A_PROXY_REQUEST, "bad_request")
        return Endpoint(parts.hostname, port)

    def _upstream_for(self, destination: Endpoint) -> Upstream:
        if self.upstream is not None and self.upstream.endpoint == destination:
            return self.upstream
        if self.upstream is not None:
            self.upstream.stream.close()
            self.upstream = None
        assert self.connect is not None  # a fixed upstream serves its own endpoint only
        self.upstream = Upstream(destination, self.connect(destination), _client_side())
        return self.upstream

    # -- the request -----------------------------------------------------------------------------------
    def _forward_request(
        self, request: h11.Request, upstream: Upstream, destination: Endpoint, covering: tuple[SecretInjection, ...]
    ) -> None:
        headers = self._request_headers(request, destination, covering)
        target = _origin_form(request.target)
        send = upstream.stream.sendall
        if not any(injection.in_body for injection in covering):
            send(upstream.http.send(h11.Request(method=request.method, target=target, headers=headers)))
            while isinstance(event := _next_event(self.inbound, self.client), h11.Data):
                send(upstream.http.send(event))
            send(upstream.http.send(h11.EndOfMessage()))
            return
        framed = any(name in REFRAMED for name, _ in headers)
        body = _substituted(_whole_body(self.inbound, self.client), covering, in_headers=False)
        headers = [(name, value) for name, value in headers if name not in REFRAMED]
        if framed or body:
            headers.append((b"content-length", str(len(body)).encode()))
        send(upstream.http.send(h11.Request(method=request.method, target=target, headers=headers)))
        if body:
            send(upstream.http.send(h11.Data(data=body)))
        send(upstream.http.send(h11.EndOfMessage()))

    def _request_headers(
        self, request: h11.Request, destination: Endpoint, covering: tuple[SecretInjection, ...]
    ) -> list[tuple[bytes, bytes]]:
        dropped = (b"expect", *(UNREDACTABLE_REQUEST_HEADERS if self.rules.redactor else ()))
        headers = [
            (name, _substituted(value, covering, in_headers=True))
            for name, value in request.headers
            if name not in dropped
        ]
        if self.rules.redactor:
            headers.append((b"accept-encoding", b"identity"))
        if not any(name == b"host" for name, _ in headers):
            headers.append((b"host", destination.authority().encode()))
        return headers

    # -- the answer ------------------------------------------------------------------------------------
    def _forward_response(self, request: h11.Request, upstream: Upstream) -> bool:
        """Stream the answer back as it comes; True when both connections may carry another exchange."""
        response = self._final_head(upstream)
        if response is None:
            return False
        has_body = request.method != b"HEAD" and response.status_code not in NO_BODY_STATUSES
        try:
            body = AnswerBody(self.rules.redactor, response) if has_body and self.rules.redactor else None
        except UnreadableEncoding as unreadable:
            message = f"The proxy cannot look for secrets in an answer with {unreadable}; it was not passed on."
            self.client.sendall(self._answer(ProxyAnswer.plain(502, message)))
            return False
        head = self._answer_head(response, reframe=body is not None, has_body=has_body)
        self.client.sendall(self.inbound.send(head))
        self._forward_body(upstream, body, trailers_pass=self._chunked_to_client(head))
        reusable = upstream.http.our_state is h11.DONE and upstream.http.their_state is h11.DONE
        if reusable:
            upstream.http.start_next_cycle()
        return reusable and self.inbound.our_state is h11.DONE and self.inbound.their_state is h11.DONE

    def _final_head(self, upstream: Upstream) -> h11.Response | None:
        """The answer's head, after passing on the informational ones before it; None after a protocol switch."""
        while isinstance(event := _next_event(upstream.http, upstream.stream), h11.InformationalResponse):
            if event.status_code == 101:
                self._switch_protocols(event, upstream)
                return None
            self.client.sendall(self.inbound.send(self._informational_for_client(event)))
        if not isinstance(event, h11.Response):
            raise ConnectionResetError("the upstream closed before its answer")
        return event

    def _forward_body(self, upstream: Upstream, body: AnswerBody | None, *, trailers_pass: bool) -> None:
        while isinstance(event := _next_event(upstream.http, upstream.stream), h11.Data):
            for piece in body.feed(event.data) if body else (event.data,):
                self.client.sendall(self.inbound.send(h11.Data(data=piece)))
        if not isinstance(event, h11.EndOfMessage):
            raise ConnectionResetError("the upstream closed before its answer ended")
        if rest := body.finish() if body else b"":
            self.client.sendall(self.inbound.send(h11.Data(data=rest)))
        trailers = self._redacted_headers(event.headers.raw_items()) if trailers_pass else []
        self.client.sendall(self.inbound.send(h11.EndOfMessage(headers=trailers)))

    def _chunked_to_client(self, head: h11.Response) -> bool:
        """h11 sends this head's body chunked (so trailers can follow): an HTTP/1.1 client, no length."""
        return self.inbound.their_http_version == b"1.1" and not _has(head, b"content-length")

    def _answer_head(self, response: h11.Response, *, reframe: bool, has_body: bool) -> h11.Response:
        """The upstream's head as the client gets it: HTTP/1.1 (h11 frames a 1.0 upstream's body), redacted,
        without the framing a rewritten body would break, closing when the upstream does not keep alive."""
        headers = self._redacted_headers(response.headers.raw_items())
        if reframe:
            headers = [(name, value) for name, value in headers if name.lower() not in AnswerBody.REFRAMED]
        if not _keeps_alive(response, has_body):
            headers.append((b"connection", b"close"))
        return h11.Response(status_code=response.status_code, headers=headers, reason=self._redacted(response.reason))

    def _informational_for_client(self, response: h11.InformationalResponse) -> h11.InformationalResponse:
        """An informational answer as the client gets it: HTTP/1.1, redacted."""
        headers = self._redacted_headers(response.headers.raw_items())
        return h11.InformationalResponse(
            status_code=response.status_code, headers=headers, reason=self._redacted(response.reason)
        )

    def _redacted_headers(self, headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        return [(self._redacted(name), self._redacted(value)) for name, value in headers]

    def _redacted(self, data: bytes) -> bytes:
        return self.rules.redactor.redact(data) if self.rules.redactor else data

    def _switch_protocols(self, response: h11.InformationalResponse, upstream: Upstream) -> None:
        """A protocol switch is carried blind where the proxy has nothing to redact (plain sockets, no secrets);
        for a sandbox with secrets it is refused."""
        client, stream = self.client, upstream.stream
        if self.rules.redactor is None and isinstance(client, socket.socket) and isinstance(stream, socket.socket):
            client.sendall(self.inbound.send(self._informational_for_client(response)))
            relay_blindly(client, stream, self.inbound.trailing_data[0], upstream.http.trailing_data[0])
            return
        message = "Protocol upgrades are not relayed for a sandbox with secrets: the proxy could not redact them."
        self.client.sendall(self._answer(ProxyAnswer.plain(502, message)))

    def _answer(self, answer: ProxyAnswer) -> bytes:
        """The proxy's own answer (a refusal), after which the connection closes; redacted too, since it may
        quote what the upstream said."""
        answer = answer.redacted(self._redacted)
        response = h11.Response(status_code=answer.status, headers=answer.headers(), reason=answer.reason)
        sent = self.inbound.send(response) + self.inbound.send(h11.Data(data=answer.body))
        return sent + self.inbound.send(h11.EndOfMessage())


class AnswerBody:
    """One answer's body as it streams to the client: inflated when it is compressed, then redacted. It may
    change length and loses its coding, so those headers go (h11 frames it again)."""

    REFRAMED = (b"content-length", b"content-encoding")

    def __init__(self, redactor: Redactor, response: h11.Response) -> None:
        self.redacting = redactor.stream()
        encodings = [value.lower() for name, value in response.headers if name == b"content-encoding"]
        self.inflater: Inflater | None = inflater_for(encodings)

    def feed(self, data: bytes) -> Iterator[bytes]:
        for piece in self.inflater.feed(data) if self.inflater else (data,):
            if redacted := self.redacting.feed(piece):
                yield redacted

    def finish(self) -> bytes:
        rest = self.inflater.finish() if self.inflater else b""
        return self.redacting.feed(rest) + self.redacting.finish()


def relay_blindly(
    client: socket.socket, upstream: socket.socket, to_upstream: bytes = b"", to_client: bytes = b""
) -> None:
    """Byte for byte both ways (after what was already read from either side) until both sides end; one
    thread besides the caller's, ended with the connections."""

    def pump(source: socket.socket, sink: socket.socket, first: bytes) -> None:
        try:
            if first:
                sink.sendall(first)
            while data := source.recv(RECV_BYTES):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)

    other = threading.Thread(target=pump, args=(upstream, client, to_client), daemon=True)
    other.start()
    pump(client, upstream, to_upstream)
    other.join(timeout=HALF_CLOSED_SECONDS)
    for side in (client, upstream):  # wakes the other thread if it still waits
        with contextlib.suppress(OSError):
            side.shutdown(socket.SHUT_RDWR)
    other.join()


def _client_side() -> h11.Connection:
    return h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)


def _names(request: h11.Request, destination: Endpoint) -> bool:
    """Every authority the request claims (its Host headers, an absolute or authority-form target) is the
    destination's, port included (the scheme's default when a Host header carries none)."""
    claims = [
        parse_authority(value.decode("latin-1"), destination.default_port)
        for name, value in request.headers
        if name == b"host"
    ]
    target = request.target.decode("latin-1")
    if request.method == b"CONNECT":
        claims.append(parse_authority(target, 0))
    elif "://" in target:
        parts = urlsplit(target)
        claims.append(parse_authority(parts.netloc, {"http": 80, "https": 443}.get(parts.scheme, 0)))
    return all(names_endpoint(claim, destination) for claim in claims)


def _keeps_alive(response: h11.Response, has_body: bool) -> bool:
    """The upstream keeps its connection open after this answer (HTTP/1.1, no `close`, a framed body)."""
    closes = any(name == b"connection" and b"close" in value.lower() for name, value in response.headers)
    framed = not has_body or _has(response, b"content-length") or _has(response, b"transfer-encoding")
    return response.http_version == b"1.1" and not closes and framed


def _has(response: h11.Response, header: bytes) -> bool:
    return any(name == header for name, _ in response.headers)


def _next_event(connection: h11.Connection, stream: Stream) -> object:
    """The next event (or PAUSED), reading from `stream` as needed; an end of file is an event too."""
    while (event := connection.next_event()) is h11.NEED_DATA:
        connection.receive_data(stream.recv(RECV_BYTES))
    return event


def _whole_body(inbound: h11.Connection, client: Stream) -> bytes:
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

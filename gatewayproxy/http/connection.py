"""A sans-IO server connection over h11: bytes in, complete requests or protocol failures out, bytes back.

It adds what h11 leaves to its user: header size and count limits (431), a body limit answered from
Content-Length before the body is read (413), and refusal of ambiguous framing (400).

Plain requests take a fast path (httptools parses the head, the response head is written here, byte for
byte what h11 writes); anything else goes through h11. tests/gatewayproxy/test_http.py checks the two agree.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from http import HTTPStatus

import h11
import httptools
import orjson

from gatewayproxy.errors import ErrorCode, Protocol, error_body

_HEAD_END = b"\r\n\r\n"
# h11 also ends a head at a blank line ended by a bare line feed.
_ANY_HEAD_END = re.compile(rb"\n\r?\n")
# A line that starts with whitespace continues the previous one (obs-fold), whatever ended that line.
_OBSOLETE_FOLD = (b"\n ", b"\n\t")
# RFC 9110 uri-host [":" port]: an IP literal, or a reg-name / IPv4 address.
_HOST = re.compile(rb"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9\-._~!$&'()*+,;=%]*)(:[0-9]*)?")
# After the head, what h11 may hold while waiting for the end of a line: a chunk-size line with its
# extensions, or a trailer field. Chunked bodies are fed in pieces of this size so a longer line is refused
# (431) before it is buffered.
MAX_CHUNK_LINE_BYTES = 1024
# The fast path only takes heads that h11 would accept unchanged; anything else goes through h11.
_TARGET = re.compile(rb"[\x21-\x7e]+")
_DIGITS = re.compile(rb"[0-9]+")
_FALLBACK_HEADERS = frozenset({b"transfer-encoding", b"upgrade", b"expect"})
# Response header grammar as h11 checks it (RFC 9110 token names; values without NUL, CR, LF or edge space).
_FIELD_NAME = re.compile(rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+")
_FIELD_VALUE = re.compile(rb"(?:[^\x00\s]+(?:[ \t]+[^\x00\s]+)*)?")
_CHECKED_NAMES: dict[bytes, bytes] = {}
_CHECKED_NAMES_MAX = 4096


@dataclass(frozen=True)
class HttpLimits:
    """Per-request parsing limits."""

    max_header_bytes: int = 16384
    max_header_count: int = 100
    max_body_bytes: int = 32 * 1024 * 1024


@dataclass
class Request:
    """A complete request as the application sees it (header names lower-case)."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes
    request_id: str = ""


@dataclass(frozen=True)
class RequestReceived:
    """A whole request has arrived."""

    request: Request


@dataclass(frozen=True)
class ProtocolFailure:
    """The peer broke the protocol or a limit; answer `status` with `code` and close."""

    status: int
    code: ErrorCode
    message: str


Event = RequestReceived | ProtocolFailure

# What h11 reports for bytes after a request that ends the connection.
_DATA_AFTER_CLOSE = ProtocolFailure(400, ErrorCode.INVALID_REQUEST, "malformed request: Got data when expecting EOF")


def _request_of(head: h11.Request, body: bytes) -> Request:
    target = head.target.decode("latin-1")
    path, _, query = target.partition("?")
    headers: dict[str, str] = {}
    for name, value in head.headers:
        key = name.decode("latin-1")
        text = value.decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return Request(method=head.method.decode("ascii"), path=path, query=query, headers=headers, body=body)


def _framing_problem(head: h11.Request) -> str | None:
    names = {name for name, _ in head.headers}
    if b"content-length" in names and b"transfer-encoding" in names:
        return "ambiguous framing: both Content-Length and Transfer-Encoding"
    if b"transfer-encoding" in names and head.http_version != b"1.1":
        return "Transfer-Encoding in an HTTP/1.0 request"
    return None


def _host_problem(head: h11.Request) -> str | None:
    """RFC 9112 3.2: one valid Host (required of HTTP/1.1)."""
    hosts = [value for name, value in head.headers if name == b"host"]
    if len(hosts) > 1:
        return "more than one Host"
    if not hosts:
        return "no Host" if head.http_version == b"1.1" else None
    if _HOST.fullmatch(hosts[0]) is None:
        return "an invalid Host"
    return None


def _comma_values(headers: list[tuple[bytes, bytes]], name: bytes) -> list[bytes]:
    """h11's get_comma_header over (lower-case name, value) pairs."""
    values: list[bytes] = []
    for found, value in headers:
        if found == name:
            values += [piece.strip() for piece in value.lower().split(b",") if piece.strip()]
    return values


class _HeadCollector:
    """httptools callbacks for one request head."""

    __slots__ = ("complete", "headers", "url")

    def __init__(self) -> None:
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.complete = False

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value.strip(b" \t")))

    def on_headers_complete(self) -> None:
        self.complete = True


class _FastCycle:
    """One request/response cycle served without h11: a plain HTTP/1.1 request with at most a Content-Length
    body, answered with the bytes h11 would have produced."""

    __slots__ = (
        "body",
        "body_left",
        "chunked",
        "delivered",
        "eof",
        "headers",
        "keep_alive",
        "length",
        "pending",
        "request",
        "state",
    )

    def __init__(self, request: Request, headers: list[tuple[bytes, bytes]], length: int, keep_alive: bool) -> None:
        self.request = request
        self.headers = headers
        self.length = length
        self.keep_alive = keep_alive
        self.body = bytearray()
        self.pending = bytearray()
        self.eof = False
        self.delivered = False
        self.state = "idle"  # idle -> body -> done, or error
        self.chunked = False
        self.body_left = 0

    @property
    def received(self) -> bool:
        return len(self.body) == self.length


class ServerConnection:
    """One client connection's HTTP state: feed bytes with `receive`, write what the `send_*` methods return.

    Plain requests (HTTP/1.1, one Host, no Transfer-Encoding/Upgrade/Expect, not HEAD/CONNECT, within the
    limits) are parsed with httptools and answered without h11, byte for byte as h11 would; every other
    request goes through h11 unchanged.
    """

    def __init__(self, limits: HttpLimits) -> None:
        self.limits = limits
        self._h11 = self._new_h11()
        self._h11_fed = False  # whether h11 holds bytes a fast cycle re-reads (then it starts afresh)
        self._head: h11.Request | None = None
        self._body = bytearray()
        self._head_scan = bytearray()
        self._fast: _FastCycle | None = None
        self._carry: tuple[bytes, bool] | None = None
        self._chunked = False
        self.failed = False

    def _new_h11(self) -> h11.Connection:
        # h11's own limit only applies to incomplete events; the head check below enforces ours.
        return h11.Connection(h11.SERVER, max_incomplete_event_size=self.limits.max_header_bytes + 1024)

    @property
    def waiting_for_request(self) -> bool:
        """True while no request of the current cycle has started arriving."""
        return self._fast is None and self._head is None and not self._head_scan

    def receive(self, data: bytes) -> list[Event]:
        """Feed bytes from the peer (b"" at end of stream); returns the events they complete."""
        if self.failed:
            return []
        if self._fast is not None:
            return self._fast_receive(self._fast, data, eof=not data)
        if self._head is None:
            problem = self._scan_head(data)
            if problem is not None:
                return [self._fail(problem)]
            if data:
                fast = self._try_fast()
                if fast is not None:
                    return fast
                body_start = self._body_start(len(data))
                if body_start:
                    # The head goes first so that a chunked body after it is fed in bounded pieces.
                    self._h11_fed = True
                    self._h11.receive_data(data[:body_start])
                    events = self._events()
                    return events if self.failed else events + self._feed(data[body_start:])
        return self._feed(data)

    def _body_start(self, received: int) -> int:
        """Where the head ends within the last `received` scanned bytes (0: not within them)."""
        found = _ANY_HEAD_END.search(self._head_scan)
        if found is None:
            return 0
        length = found.end()
        start = received - (len(self._head_scan) - length)
        return start if 0 < start < received else 0

    def _feed(self, data: bytes) -> list[Event]:
        self._h11_fed = True
        if not self._chunked or len(data) <= MAX_CHUNK_LINE_BYTES:
            self._h11.receive_data(data)
            return self._events()
        events: list[Event] = []
        for offset in range(0, len(data), MAX_CHUNK_LINE_BYTES):
            self._h11.receive_data(data[offset : offset + MAX_CHUNK_LINE_BYTES])
            events += self._events()
            if self.failed:
                break
        return events

    def _try_fast(self) -> list[Event] | None:
        """Take the fast path when the scanned head is complete and plain; None leaves it to h11."""
        end = self._head_scan.find(_HEAD_END)
        if end < 0:
            return None
        head = bytes(self._head_scan[: end + 4])
        if _ANY_HEAD_END.search(head).end() != end + 4:  # type: ignore[union-attr]
            return None  # a bare line feed ends the head earlier: h11's reading applies
        if b"\x0b" in head or b"\x0c" in head or b"\x00" in head:
            return None
        collector = _HeadCollector()
        parser = httptools.HttpRequestParser(collector)
        try:
            parser.feed_data(head)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):
            return None
        method = parser.get_method()
        headers = collector.headers
        if (
            not collector.complete
            or parser.get_http_version() != "1.1"
            or method in (b"HEAD", b"CONNECT")
            or _TARGET.fullmatch(collector.url) is None
            or len(headers) > self.limits.max_header_count
        ):
            return None
        hosts = 0
        declared = b""
        host = b""
        for name, value in headers:
            if name in _FALLBACK_HEADERS:
                return None
            if name == b"host":
                hosts += 1
                host = value
        if hosts != 1 or _HOST.fullmatch(host) is None:
            return None
        lengths = [value for name, value in headers if name == b"content-length"]
        if lengths:
            declared = lengths[0]
            if len(lengths) > 1 or _DIGITS.fullmatch(declared) is None:
                return None
        length = int(declared) if declared else 0
        if length > self.limits.max_body_bytes:
            return None
        keep_alive = b"close" not in _comma_values(headers, b"connection")
        target = collector.url.decode("latin-1")
        path, _, query = target.partition("?")
        text_headers: dict[str, str] = {}
        for name, value in headers:
            key = name.decode("latin-1")
            text = value.decode("latin-1")
            text_headers[key] = f"{text_headers[key]}, {text}" if key in text_headers else text
        request = Request(method=method.decode("ascii"), path=path, query=query, headers=text_headers, body=b"")
        fast = _FastCycle(request, headers, length, keep_alive)
        rest = bytes(self._head_scan[end + 4 :])
        self._head_scan.clear()
        self._fast = fast
        if self._h11_fed:
            self._h11, self._h11_fed = self._new_h11(), False
        return self._fast_receive(fast, rest, eof=False)

    def _fast_receive(self, fast: _FastCycle, data: bytes, eof: bool) -> list[Event]:
        if fast.delivered:
            if data and not fast.keep_alive:
                return [self._fail(_DATA_AFTER_CLOSE)]
            fast.pending += data
            fast.eof = fast.eof or eof
            return []
        if eof:
            failure = ProtocolFailure(
                400,
                ErrorCode.INVALID_REQUEST,
                "malformed request: peer closed connection "
                f"without sending complete message body: received {len(fast.body)} bytes, "
                f"expected {fast.length}",
            )
            return [self._fail(failure)]
        wanted = fast.length - len(fast.body)
        fast.body += data[:wanted]
        fast.pending += data[wanted:]
        if not fast.received:
            return []
        fast.request.body = bytes(fast.body)
        fast.delivered = True
        if fast.pending and not fast.keep_alive:
            return [RequestReceived(fast.request), self._fail(_DATA_AFTER_CLOSE)]
        return [RequestReceived(fast.request)]

    def _scan_head(self, data: bytes) -> ProtocolFailure | None:
        self._head_scan += data
        found = _ANY_HEAD_END.search(self._head_scan)
        # Where the blank line begins (a head ended by bare line feeds, which h11 accepts, has no CRLF CRLF).
        end = -1 if found is None else found.start() - (self._head_scan[found.start() - 1 : found.start()] == b"\r")
        head_size = len(self._head_scan) if end < 0 else end
        if head_size > self.limits.max_header_bytes:
            return ProtocolFailure(431, ErrorCode.HEADERS_TOO_LARGE, "request headers are too large")
        if end < 0:
            return None
        head = bytes(self._head_scan[: end + 2])
        if any(fold in head for fold in _OBSOLETE_FOLD):
            return ProtocolFailure(400, ErrorCode.INVALID_REQUEST, "obsolete line folding is not accepted")
        # h11 folds repeated or listed identical Content-Length values into one; either is ambiguous framing.
        lowered = head.lower()
        length_at = lowered.find(b"\ncontent-length:")
        if length_at >= 0:
            if lowered.find(b"\ncontent-length:", length_at + 1) >= 0:
                return ProtocolFailure(
                    400, ErrorCode.INVALID_REQUEST, "ambiguous request framing: repeated Content-Length"
                )
            line_end = lowered.find(b"\n", length_at + 1)
            if b"," in lowered[length_at:line_end]:
                return ProtocolFailure(
                    400, ErrorCode.INVALID_REQUEST, "ambiguous request framing: Content-Length is a list"
                )
        return None

    def _events(self) -> list[Event]:
        events: list[Event] = []
        while True:
            try:
                event = self._h11.next_event()
            except h11.RemoteProtocolError as error:
                status = error.error_status_hint
                code = ErrorCode.HEADERS_TOO_LARGE if status == 431 else ErrorCode.INVALID_REQUEST
                return [*events, self._fail(ProtocolFailure(status, code, f"malformed request: {error}"))]
            if event is h11.NEED_DATA or event is h11.PAUSED or isinstance(event, h11.ConnectionClosed):
                return events
            failure = self._accept(event)
            if failure is not None:
                return [*events, self._fail(failure)]
            if isinstance(event, h11.EndOfMessage):
                assert self._head is not None
                events.append(RequestReceived(_request_of(self._head, bytes(self._body))))

    def _accept(self, event: object) -> ProtocolFailure | None:
        if isinstance(event, h11.Request):
            return self._accept_head(event)
        if isinstance(event, h11.Data):
            self._body += event.data
            if len(self._body) > self.limits.max_body_bytes:
                return ProtocolFailure(413, ErrorCode.PAYLOAD_TOO_LARGE, "request body is too large")
        return None

    def _accept_head(self, head: h11.Request) -> ProtocolFailure | None:
        self._head = head
        self._head_scan.clear()
        if len(head.headers) > self.limits.max_header_count:
            return ProtocolFailure(431, ErrorCode.HEADERS_TOO_LARGE, "too many request headers")
        problem = _framing_problem(head) or _host_problem(head)
        if problem is not None:
            return ProtocolFailure(400, ErrorCode.INVALID_REQUEST, f"malformed request: {problem}")
        if any(name == b"transfer-encoding" for name, _ in head.headers):
            self._chunked = True
            # Only chunk-size lines and trailers wait for a line end from here on; they get a small bound.
            self._h11._max_incomplete_event_size = MAX_CHUNK_LINE_BYTES
        declared = next((value for name, value in head.headers if name == b"content-length"), None)
        if declared is not None and int(declared) > self.limits.max_body_bytes:
            return ProtocolFailure(413, ErrorCode.PAYLOAD_TOO_LARGE, "request body is too large")
        return None

    def _fail(self, failure: ProtocolFailure) -> ProtocolFailure:
        self.failed = True
        return failure

    @property
    def response_started(self) -> bool:
        """Whether the head of the current response has been produced."""
        if self._fast is not None:
            return self._fast.state != "idle"
        return self._h11.our_state is not h11.IDLE and self._h11.our_state is not h11.SEND_RESPONSE

    def send_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> bytes:
        """The status line and headers; without content-length the body goes chunked."""
        if self._fast is None:
            return self._h11.send(h11.Response(status_code=status, headers=headers, reason=_reason(status))) or b""
        return self._fast_head(self._fast, status, headers)

    def _fast_head(self, fast: _FastCycle, status: int, headers: list[tuple[bytes, bytes]]) -> bytes:
        """What h11 writes for this response to a plain HTTP/1.1 GET-like request (and what it refuses)."""
        if fast.state != "idle" or not fast.received:
            fast.state = "error"
            raise h11.LocalProtocolError("can't send a response head now")
        if not 200 <= status < 1000:
            raise h11.LocalProtocolError(f"Response status_code should be in range [200, 1000), not {status}")
        items = _checked_headers(headers)
        lowered = [(name, value) for _, name, value in items]
        fast.chunked = False
        fast.body_left = 0
        if status not in (204, 304):
            lengths = _comma_values(lowered, b"content-length")
            if _comma_values(lowered, b"transfer-encoding") or not lengths:
                fast.chunked = True
                items = [item for item in items if item[1] not in (b"content-length", b"transfer-encoding")]
                items.append((b"Transfer-Encoding", b"transfer-encoding", b"chunked"))
            else:
                fast.body_left = int(lengths[0])
        if not fast.keep_alive:
            connection = set(_comma_values(lowered, b"connection"))
            connection.discard(b"keep-alive")
            connection.add(b"close")
            items = [item for item in items if item[1] != b"connection"]
            items += [(b"Connection", b"connection", value) for value in sorted(connection)]
        elif b"close" in _comma_values(lowered, b"connection"):
            fast.keep_alive = False
        lines = [b"HTTP/1.1 %d %s\r\n" % (status, _reason(status))]
        lines += [b"%s: %s\r\n" % (raw, value) for raw, name, value in items if name == b"host"]
        lines += [b"%s: %s\r\n" % (raw, value) for raw, name, value in items if name != b"host"]
        lines.append(b"\r\n")
        fast.state = "body"
        return b"".join(lines)

    def send_data(self, data: bytes) -> bytes:
        """One piece of the response body."""
        fast = self._fast
        if fast is None:
            return self._h11.send(h11.Data(data=data)) or b""
        if fast.state != "body":
            fast.state = "error"
            raise h11.LocalProtocolError("can't send data now")
        if fast.chunked:
            return b"%x\r\n%s\r\n" % (len(data), data) if data else b""
        fast.body_left -= len(data)
        if fast.body_left < 0:
            fast.state = "error"
            raise h11.LocalProtocolError("Too much data for declared Content-Length")
        return bytes(data)

    def send_end(self) -> bytes:
        """The end of the response body."""
        fast = self._fast
        if fast is None:
            return self._h11.send(h11.EndOfMessage()) or b""
        if fast.state != "body" or (not fast.chunked and fast.body_left != 0):
            fast.state = "error"
            raise h11.LocalProtocolError("Too little data for declared Content-Length")
        fast.state = "done"
        return b"0\r\n\r\n" if fast.chunked else b""

    def send_response(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> bytes:
        """A whole response with a content-length."""
        headers = [*headers, (b"content-length", str(len(body)).encode())]
        return self.send_head(status, headers) + (self.send_data(body) if body else b"") + self.send_end()

    def next_cycle(self) -> bool:
        """After a response: True (and ready for the next request) when the connection can be kept alive."""
        fast = self._fast
        if fast is not None:
            if fast.state != "done" or not fast.keep_alive:
                return False
            self._fast = None
            self._carry = (bytes(fast.pending), fast.eof)
            return True
        if self._h11.our_state is not h11.DONE or self._h11.their_state is not h11.DONE:
            return False
        self._h11.start_next_cycle()
        if self._chunked:
            self._chunked = False
            self._h11._max_incomplete_event_size = self.limits.max_header_bytes + 1024
        self._head = None
        self._body = bytearray()
        return True

    @property
    def target_path(self) -> str:
        """The path of the request being received or answered, as far as it is known ("" before its request
        line)."""
        if self._fast is not None:
            return self._fast.request.path
        if self._head is not None:
            target = self._head.target
        else:
            line_end = self._head_scan.find(b"\n")
            if line_end < 0:
                return ""
            parts = bytes(self._head_scan[:line_end]).split(b" ")
            target = parts[1] if len(parts) > 1 else b""
        return target.partition(b"?")[0].decode("latin-1")

    def pending_events(self) -> list[Event]:
        """Events completed by bytes that arrived during the previous response (pipelining)."""
        if self._carry is not None:
            pipelined, eof = self._carry
            self._carry = None
            if eof:
                self._h11_fed = True
                self._h11.receive_data(pipelined)
                self._h11.receive_data(b"")
                self._head_scan = bytearray(pipelined)
                problem = self._scan_head(b"")
                if problem is not None:
                    return [self._fail(problem)]
                return self._events()
            if not pipelined:
                return []
            self._head_scan = bytearray()
            return self.receive(pipelined)
        pipelined = self._h11.trailing_data[0]
        if not pipelined:
            return []
        self._head_scan = bytearray(pipelined)
        problem = self._scan_head(b"")
        if problem is not None:
            return [self._fail(problem)]
        return self._events()


@functools.cache
def _reason(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


def _checked_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes, bytes]]:
    """(raw name, lower-case name, value) of response headers, validated and normalised as h11's
    `normalize_and_validate` does (names and values by its grammar, one Content-Length, only chunked
    Transfer-Encoding), without building h11's event; names seen before are not matched again."""
    items: list[tuple[bytes, bytes, bytes]] = []
    length: bytes | None = None
    chunked = False
    for raw, value in headers:
        name = _CHECKED_NAMES.get(raw)
        if name is None:
            name = _checked_name(raw)
        if _FIELD_VALUE.fullmatch(value) is None:
            raise h11.LocalProtocolError(f"Illegal header value {value!r}")
        if name == b"content-length":
            value = _content_length(value)
            if length is not None:
                if length != value:
                    raise h11.LocalProtocolError("conflicting Content-Length headers")
                continue
            length = value
        elif name == b"transfer-encoding":
            if chunked:
                raise h11.LocalProtocolError("multiple Transfer-Encoding headers", 501)
            value = value.lower()
            if value != b"chunked":
                raise h11.LocalProtocolError("Only Transfer-Encoding: chunked is supported", 501)
            chunked = True
        items.append((raw, name, value))
    return items


def _checked_name(raw: bytes) -> bytes:
    if _FIELD_NAME.fullmatch(raw) is None:
        raise h11.LocalProtocolError(f"Illegal header name {raw!r}")
    name = raw.lower()
    if len(_CHECKED_NAMES) < _CHECKED_NAMES_MAX:
        _CHECKED_NAMES[raw] = name
    return name


def _content_length(value: bytes) -> bytes:
    lengths = {length.strip() for length in value.split(b",")}
    if len(lengths) != 1:
        raise h11.LocalProtocolError("conflicting Content-Length headers")
    length = lengths.pop()
    if _DIGITS.fullmatch(length) is None or len(length) > 20:
        raise h11.LocalProtocolError("bad Content-Length")
    return length


def failure_response(
    failure: ProtocolFailure, request_id: str, protocol: Protocol = Protocol.VENDOR_A, extra_headers: str = ""
) -> bytes:
    """The raw bytes of a closing error response; written without h11, whose state may be broken.
    `extra_headers` are whole header lines, each ending in CRLF."""
    body = orjson.dumps(error_body(protocol, failure.code.value, failure.message, failure.status))
    head = (
        f"HTTP/1.1 {failure.status} {_reason(failure.status).decode()}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\nx-request-id: {request_id}\r\n{extra_headers}\r\n"
    )
    return head.encode() + body

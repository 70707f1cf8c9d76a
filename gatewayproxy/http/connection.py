"""A sans-IO server connection over h11: bytes in, complete requests or protocol failures out, bytes back.

It adds what h11 leaves to its user: header size and count limits (431), a body limit answered from
Content-Length before the body is read (413), and refusal of ambiguous framing (400).
"""

from __future__ import annotations

from dataclasses import dataclass
from http import HTTPStatus

import h11
import orjson

from gatewayproxy.errors import ErrorCode, Protocol, error_body

_HEAD_END = b"\r\n\r\n"
_OBSOLETE_FOLD = (b"\r\n ", b"\r\n\t")


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
        return "both Content-Length and Transfer-Encoding"
    return None


class ServerConnection:
    """One client connection's HTTP state: feed bytes with `receive`, write what the `send_*` methods return."""

    def __init__(self, limits: HttpLimits) -> None:
        self.limits = limits
        # h11's own limit only applies to incomplete events; the head check below enforces ours.
        self._h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=limits.max_header_bytes + 1024)
        self._head: h11.Request | None = None
        self._body = bytearray()
        self._head_scan = bytearray()
        self.failed = False

    @property
    def waiting_for_request(self) -> bool:
        """True while no request of the current cycle has started arriving."""
        return self._head is None and not self._head_scan

    def receive(self, data: bytes) -> list[Event]:
        """Feed bytes from the peer (b"" at end of stream); returns the events they complete."""
        if self.failed:
            return []
        if self._head is None:
            problem = self._scan_head(data)
            if problem is not None:
                return [self._fail(problem)]
        self._h11.receive_data(data)
        return self._events()

    def _scan_head(self, data: bytes) -> ProtocolFailure | None:
        self._head_scan += data
        end = self._head_scan.find(_HEAD_END)
        head_size = len(self._head_scan) if end < 0 else end
        if head_size > self.limits.max_header_bytes:
            return ProtocolFailure(431, ErrorCode.HEADERS_TOO_LARGE, "request headers are too large")
        if end < 0:
            return None
        head = bytes(self._head_scan[:end + 2])
        if any(fold in head for fold in _OBSOLETE_FOLD):
            return ProtocolFailure(400, ErrorCode.INVALID_REQUEST, "obsolete line folding is not accepted")
        # h11 folds repeated identical Content-Length headers into one; a repeat is still ambiguous framing.
        if head.lower().count(b"\ncontent-length:") > 1:
            return ProtocolFailure(400, ErrorCode.INVALID_REQUEST, "ambiguous request framing: repeated "
                                                                   "Content-Length")
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
        problem = _framing_problem(head)
        if problem is not None:
            return ProtocolFailure(400, ErrorCode.INVALID_REQUEST, f"ambiguous request framing: {problem}")
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
        return self._h11.our_state is not h11.IDLE and self._h11.our_state is not h11.SEND_RESPONSE

    def send_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> bytes:
        """The status line and headers; without content-length the body goes chunked."""
        return self._h11.send(h11.Response(status_code=status, headers=headers, reason=_reason(status))) or b""

    def send_data(self, data: bytes) -> bytes:
        """One piece of the response body."""
        return self._h11.send(h11.Data(data=data)) or b""

    def send_end(self) -> bytes:
        """The end of the response body."""
        return self._h11.send(h11.EndOfMessage()) or b""

    def send_response(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> bytes:
        """A whole response with a content-length."""
        headers = [*headers, (b"content-length", str(len(body)).encode())]
        return self.send_head(status, headers) + (self.send_data(body) if body else b"") + self.send_end()

    def next_cycle(self) -> bool:
        """After a response: True (and ready for the next request) when the connection can be kept alive."""
        if self._h11.our_state is not h11.DONE or self._h11.their_state is not h11.DONE:
            return False
        self._h11.start_next_cycle()
        self._head = None
        self._body = bytearray()
        return True

    def pending_events(self) -> list[Event]:
        """Events completed by bytes that arrived during the previous response (pipelining)."""
        pipelined = self._h11.trailing_data[0]
        if not pipelined:
            return []
        self._head_scan = bytearray(pipelined)
        problem = self._scan_head(b"")
        if problem is not None:
            return [self._fail(problem)]
        return self._events()


def _reason(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


def failure_response(failure: ProtocolFailure, request_id: str, protocol: Protocol = Protocol.VENDOR_A) -> bytes:
    """The raw bytes of a closing error response; written without h11, whose state may be broken."""
    body = orjson.dumps(error_body(protocol, failure.code.value, failure.message, failure.status))
    head = (f"HTTP/1.1 {failure.status} {_reason(failure.status).decode()}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\nx-request-id: {request_id}\r\n\r\n")
    return head.encode() + body

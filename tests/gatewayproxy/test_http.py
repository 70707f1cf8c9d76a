"""Sans-IO tests of the h11 connection wrapper and the SSE codec: bytes in, events and bytes out."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import h11
import pytest

from gatewayproxy.errors import ErrorCode
from gatewayproxy.http.connection import (
    HttpLimits,
    ProtocolFailure,
    RequestReceived,
    ServerConnection,
    failure_response,
)
from gatewayproxy.http.sse import SseDecoder, SseEvent, encode_event
from gatewayproxy.server.upstream import UpstreamError, serialize_request

LIMITS = HttpLimits(max_header_bytes=1024, max_header_count=10, max_body_bytes=100)
REQUEST = b"POST /v1/messages?beta=true HTTP/1.1\r\nHost: gw\r\nX-A: 1\r\nX-A: 2\r\nContent-Length: 2\r\n\r\n{}"


def feed(*chunks: bytes) -> list[RequestReceived | ProtocolFailure]:
    connection = ServerConnection(LIMITS)
    events: list[RequestReceived | ProtocolFailure] = []
    for chunk in chunks:
        events += connection.receive(chunk)
    return events


def test_complete_request_byte_by_byte() -> None:
    events = feed(*[REQUEST[i : i + 1] for i in range(len(REQUEST))])
    assert len(events) == 1 and isinstance(events[0], RequestReceived)
    request = events[0].request
    assert (request.method, request.path, request.query, request.body) == ("POST", "/v1/messages", "beta=true", b"{}")
    assert request.headers["x-a"] == "1, 2" and request.headers["host"] == "gw"


def test_chunked_body_is_assembled() -> None:
    (event,) = feed(b"POST / HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n")
    assert isinstance(event, RequestReceived) and event.request.body == b"{}"


@pytest.mark.parametrize(
    ("raw", "status", "code"),
    [
        (b"GET / HTTP/1.1\r\nHost: gw\r\nX: " + b"a" * 2000 + b"\r\n\r\n", 431, ErrorCode.HEADERS_TOO_LARGE),
        (b"GET / HTTP/1.1\r\nHost: gw\r\nX: " + b"a" * 2000, 431, ErrorCode.HEADERS_TOO_LARGE),
        (b"GET / HTTP/1.1\r\n" + b"X: 1\r\n" * 11 + b"Host: gw\r\n\r\n", 431, ErrorCode.HEADERS_TOO_LARGE),
        (b"POST / HTTP/1.1\r\nHost: gw\r\nContent-Length: 101\r\n\r\n", 413, ErrorCode.PAYLOAD_TOO_LARGE),
        (
            b"POST / HTTP/1.1\r\nHost: gw\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n{",
            400,
            ErrorCode.INVALID_REQUEST,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: gw\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            400,
            ErrorCode.INVALID_REQUEST,
        ),
        (b"GET / HTTP/1.1\r\nHost: gw\r\nX: a\r\n\tb\r\n\r\n", 400, ErrorCode.INVALID_REQUEST),
        (b"GET / HTTP/1.1\r\nHost gw\r\n\r\n", 400, ErrorCode.INVALID_REQUEST),
    ],
)
def test_protocol_failures(raw: bytes, status: int, code: ErrorCode) -> None:
    (event,) = feed(raw)
    assert isinstance(event, ProtocolFailure) and (event.status, event.code) == (status, code)


def test_declared_oversized_body_fails_without_reading_it() -> None:
    connection = ServerConnection(LIMITS)
    (event,) = connection.receive(b"POST / HTTP/1.1\r\nHost: gw\r\nContent-Length: 5000\r\n\r\n")
    assert isinstance(event, ProtocolFailure) and event.status == 413
    assert connection.receive(b"x" * 5000) == []


def test_streamed_body_over_the_limit_fails_as_it_arrives() -> None:
    connection = ServerConnection(LIMITS)
    assert connection.receive(b"POST / HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n") == []
    (event,) = connection.receive(b"80\r\n" + b"a" * 128 + b"\r\n")
    assert isinstance(event, ProtocolFailure) and event.status == 413


def test_response_keep_alive_and_pipelined_request() -> None:
    connection = ServerConnection(LIMITS)
    (first,) = connection.receive(REQUEST + b"GET /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n")
    assert isinstance(first, RequestReceived)
    data = connection.send_response(200, [(b"content-type", b"application/json")], b"{}")
    assert data.startswith(b"HTTP/1.1 200 OK\r\n") and b"content-length: 2" in data and data.endswith(b"{}")
    assert connection.next_cycle()
    (second,) = connection.pending_events()
    assert isinstance(second, RequestReceived) and second.request.path == "/v1/models"


def test_streamed_response_is_chunked() -> None:
    connection = ServerConnection(LIMITS)
    connection.receive(REQUEST)
    data = connection.send_head(200, [(b"content-type", b"text/event-stream")]) + connection.send_data(b"abc")
    data += connection.send_end()
    assert b"transfer-encoding: chunked" in data.lower() and data.endswith(b"3\r\nabc\r\n0\r\n\r\n")


def test_connection_close_request_is_not_kept_alive() -> None:
    connection = ServerConnection(LIMITS)
    connection.receive(b"GET / HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
    connection.send_response(200, [], b"")
    assert not connection.next_cycle()


def test_failure_response_bytes() -> None:
    raw = failure_response(ProtocolFailure(431, ErrorCode.HEADERS_TOO_LARGE, "big"), "req_1")
    head, body = raw.split(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 Request Header Fields Too Large")
    assert b"x-request-id: req_1" in head and b"connection: close" in head
    assert body == b'{"error":{"message":"big","type":"invalid_request_error","code":"headers_too_large","param":null}}'


def test_sse_encode() -> None:
    assert encode_event(b'{"a":1}') == b'data: {"a":1}\n\n'
    assert encode_event(b"{}", "ping") == b"event: ping\ndata: {}\n\n"


def test_sse_decoder_handles_any_split_and_line_ending() -> None:
    stream = b": comment\r\nevent: one\r\ndata: a\r\ndata: b\r\n\r\ndata: [DONE]\n\nevent: three\rdata: c\r\r\n"
    for size in (1, 2, 3, 7, len(stream)):
        decoder = SseDecoder()
        events = [event for i in range(0, len(stream), size) for event in decoder.feed(stream[i : i + size])]
        assert events == [SseEvent("one", "a\nb"), SseEvent("", "[DONE]"), SseEvent("three", "c")]


def test_sse_decoder_keeps_characters_split_between_chunks() -> None:
    stream = 'data: {"t":"héllo ✓"}\n\ndata:no-space\n\n\ndata: ✓\n\n'.encode()
    for size in (1, 2, 5):
        decoder = SseDecoder()
        events = [event for i in range(0, len(stream), size) for event in decoder.feed(stream[i : i + size])]
        assert events == [SseEvent("", '{"t":"héllo ✓"}'), SseEvent("", "no-space"), SseEvent("", "✓")]


def test_response_started_tracks_the_head() -> None:
    connection = ServerConnection(LIMITS)
    connection.receive(REQUEST)
    assert not connection.response_started
    connection.send_head(200, [])
    assert connection.response_started


PARITY_REQUESTS = [
    REQUEST,
    b"GET /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n",
    b"GET /v1/models HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n",
    b"GET /v1/models HTTP/1.1\r\nHost: gw\r\nConnection: Keep-Alive, Close\r\n\r\n",
    b"POST /a?b=c&d HTTP/1.1\r\nhost:gw  \r\nContent-Length: 0\r\nX-Obs: caf\xe9 \x01\r\nX-Empty:\r\n\r\n",
    b"POST /a?b=c&d HTTP/1.1\r\nhost:gw  \r\nContent-Length: 0\r\nX-Obs: caf\xe9  x\r\nX-Empty:\r\nX-A: 1\r\n"
    b"x-a: 2\r\n\r\n",
    b"HEAD / HTTP/1.1\r\nHost: gw\r\n\r\n",
    b"GET / HTTP/1.0\r\n\r\n",
    b"GET / HTTP/1.1\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    b"GET / HTTP/1.1\nHost: gw\n\n",
    b"GET / HTTP/1.1\r\nHost: gw\r\nX: a\x0bb\r\n\r\n",
    b"GET /\xe9 HTTP/1.1\r\nHost: gw\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: gzip\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: gw\r\nContent-Length: 101\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: gw\r\nContent-Length: 3\r\n\r\nab",
    b"OPTIONS * HTTP/1.1\r\nHost: gw\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: gw\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}",
    b"CONNECT gw:443 HTTP/1.1\r\nHost: gw\r\n\r\n",
]
PARITY_RESPONSES: list[tuple[int, list[tuple[bytes, bytes]], list[bytes] | bytes]] = [
    (200, [(b"Content-Type", b"application/json"), (b"X-Request-Id", b"r")], b'{"a":1}'),
    (204, [], b""),
    (304, [(b"ETag", b"x")], b""),
    (404, [(b"host", b"h"), (b"connection", b"keep-alive")], b"nope"),
    (200, [(b"connection", b"close")], b"x"),
    (200, [(b"content-type", b"text/event-stream")], [b"a", b"", b"bc"]),
    (200, [(b"Transfer-Encoding", b"chunked"), (b"x", b"y")], [b"abc"]),
    (200, [(b"Content-Length", b"3")], [b"ab", b"c"]),
    (200, [(b"Content-Length", b"3")], [b"abcd"]),
    (200, [(b"Content-Length", b"3")], [b"ab"]),
    (299, [(b"x", b"bad\r\nvalue")], b""),
    (200, [(b"x", b" edge")], b""),
    (200, [(b"bad name", b"v")], b""),
    (200, [(b"Content-Length", b"2"), (b"content-length", b"2, 2")], [b"ab"]),
    (200, [(b"Content-Length", b"2"), (b"content-length", b"3")], [b"ab"]),
    (200, [(b"Content-Length", b"x")], [b"ab"]),
    (200, [(b"Transfer-Encoding", b"gzip")], [b"ab"]),
    (200, [(b"Transfer-Encoding", b"chunked"), (b"Transfer-Encoding", b"chunked")], [b"ab"]),
    (200, [(b"Transfer-Encoding", b"Chunked"), (b"Content-Length", b"2")], [b"ab"]),
    (200, [(b"X-Obs", b"caf\xe9\tx")], [b"ab"]),
    (799, [], b""),
    (101, [], b""),
]


def _exchange(
    connection: ServerConnection,
    raw: bytes,
    status: int,
    headers: list[tuple[bytes, bytes]],
    body: list[bytes] | bytes,
    size: int,
) -> list[object]:
    """Everything observable about one exchange: events, bytes written, errors, keep-alive, pipelining."""
    seen: list[object] = []
    for i in range(0, len(raw), size):
        tail = b"GET /next HTTP/1.1\r\nHost: gw\r\n\r\n" if i + size >= len(raw) else b""
        seen.append(repr(connection.receive(raw[i : i + size] + tail)))
    seen.append(connection.waiting_for_request)
    if connection.failed or not any("RequestReceived" in str(item) for item in seen):
        return seen
    steps: list[Callable[[], bytes]]
    if isinstance(body, bytes):
        steps = [lambda: connection.send_response(status, headers, body)]
    else:
        steps = [lambda: connection.send_head(status, headers)]
        steps += [lambda chunk=chunk: connection.send_data(chunk) for chunk in body]  # type: ignore[misc]
        steps.append(connection.send_end)
    for step in steps:
        try:
            seen.append(step())
        except h11.LocalProtocolError as error:
            seen.append(("error", str(error)))
            seen.append(connection.response_started)
            return seen
        seen.append(connection.response_started)
    kept = connection.next_cycle()
    seen.append(kept)
    if kept:
        seen.append(repr(connection.pending_events()))
    return seen


@pytest.mark.parametrize("raw", PARITY_REQUESTS)
def test_fast_path_matches_h11(raw: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    for (status, headers, body), size in itertools.product(PARITY_RESPONSES, (7, len(raw))):
        fast = _exchange(ServerConnection(LIMITS), raw, status, headers, body, size)
        with monkeypatch.context() as patched:
            patched.setattr(ServerConnection, "_try_fast", lambda self: None)
            slow = _exchange(ServerConnection(LIMITS), raw, status, headers, body, size)
        assert fast == slow, (raw, status, headers, body, size)


def test_fast_path_is_taken_for_plain_requests() -> None:
    taken = []
    for raw in PARITY_REQUESTS:
        connection = ServerConnection(LIMITS)
        connection.receive(raw)
        taken.append(connection._fast is not None)
    assert taken == [True] * 4 + [False, True] + [False] * 9 + [True] + [False] * 3


def test_upstream_requests_refuse_headers_that_could_split_them() -> None:
    assert serialize_request(b"POST", b"/v1/x", [(b"a", b"1"), (b"B", b"two words")], b"{}") == (
        b"POST /v1/x HTTP/1.1\r\na: 1\r\nB: two words\r\n\r\n{}"
    )
    assert serialize_request(b"GET", b"/", [], b"") == b"GET / HTTP/1.1\r\n\r\n"
    for unsafe in ((b"x", b"1\r\nInjected: yes"), (b"x", b"1\n"), (b"x", b"1\r"), (b"na:me", b"1"), (b"x\n", b"1")):
        with pytest.raises(UpstreamError, match="unsafe upstream header"):
            serialize_request(b"GET", b"/", [(b"ok", b"1"), unsafe], b"")

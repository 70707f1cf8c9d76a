"""Sans-IO tests of the h11 connection wrapper and the SSE codec: bytes in, events and bytes out."""

from __future__ import annotations

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

LIMITS = HttpLimits(max_header_bytes=1024, max_header_count=10, max_body_bytes=100)
REQUEST = b"POST /v1/messages?beta=true HTTP/1.1\r\nHost: gw\r\nX-A: 1\r\nX-A: 2\r\nContent-Length: 2\r\n\r\n{}"


def feed(*chunks: bytes) -> list[RequestReceived | ProtocolFailure]:
    connection = ServerConnection(LIMITS)
    events: list[RequestReceived | ProtocolFailure] = []
    for chunk in chunks:
        events += connection.receive(chunk)
    return events


def test_complete_request_byte_by_byte() -> None:
    events = feed(*[REQUEST[i:i + 1] for i in range(len(REQUEST))])
    assert len(events) == 1 and isinstance(events[0], RequestReceived)
    request = events[0].request
    assert (request.method, request.path, request.query, request.body) == ("POST", "/v1/messages", "beta=true", b"{}")
    assert request.headers["x-a"] == "1, 2" and request.headers["host"] == "gw"


def test_chunked_body_is_assembled() -> None:
    (event,) = feed(b"POST / HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n")
    assert isinstance(event, RequestReceived) and event.request.body == b"{}"


@pytest.mark.parametrize(("raw", "status", "code"), [
    (b"GET / HTTP/1.1\r\nHost: gw\r\nX: " + b"a" * 2000 + b"\r\n\r\n", 431, ErrorCode.HEADERS_TOO_LARGE),
    (b"GET / HTTP/1.1\r\nHost: gw\r\nX: " + b"a" * 2000, 431, ErrorCode.HEADERS_TOO_LARGE),
    (b"GET / HTTP/1.1\r\n" + b"X: 1\r\n" * 11 + b"Host: gw\r\n\r\n", 431, ErrorCode.HEADERS_TOO_LARGE),
    (b"POST / HTTP/1.1\r\nHost: gw\r\nContent-Length: 101\r\n\r\n", 413, ErrorCode.PAYLOAD_TOO_LARGE),
    (b"POST / HTTP/1.1\r\nHost: gw\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n{", 400, ErrorCode.INVALID_REQUEST),
    (b"POST / HTTP/1.1\r\nHost: gw\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400,
     ErrorCode.INVALID_REQUEST),
    (b"GET / HTTP/1.1\r\nHost: gw\r\nX: a\r\n\tb\r\n\r\n", 400, ErrorCode.INVALID_REQUEST),
    (b"GET / HTTP/1.1\r\nHost gw\r\n\r\n", 400, ErrorCode.INVALID_REQUEST),
])
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
    first, = connection.receive(REQUEST + b"GET /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n")
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
        events = [event for i in range(0, len(stream), size) for event in decoder.feed(stream[i:i + size])]
        assert events == [SseEvent("one", "a\nb"), SseEvent("", "[DONE]"), SseEvent("three", "c")]


def test_response_started_tracks_the_head() -> None:
    connection = ServerConnection(LIMITS)
    connection.receive(REQUEST)
    assert not connection.response_started
    connection.send_head(200, [])
    assert connection.response_started

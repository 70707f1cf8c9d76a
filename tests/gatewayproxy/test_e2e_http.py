"""End to end over raw sockets: malformed and oversized requests, keep-alive, pipelining, timeouts,
and backpressure toward a client that stops reading a stream."""

from __future__ import annotations

import math
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from fakes.waiting import wait_until
from tests.support.gateway.documents import destination, one_destination
from tests.support.gateway.provider import BIG_STREAM_FRAMES, BIG_STREAM_TEXT, FakeProvider
from tests.support.gateway.thread import GatewayFactory, GatewayThread

pytestmark = pytest.mark.e2e
CHAT_BODY = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'


@pytest.fixture(scope="module")
def gateway(module_gateway_factory: GatewayFactory, primary: FakeProvider) -> GatewayThread:
    limits = {
        "max_header_bytes": 2048,
        "max_header_count": 20,
        "max_body_bytes": 4096,
        "header_read_timeout_ms": 400,
        "idle_timeout_ms": 600,
    }
    upstream = destination("vendor_a", f"{primary.url}/v1")
    return module_gateway_factory(one_destination(upstream, server={"limits": limits}))


def connect(gateway: GatewayThread) -> socket.socket:
    assert gateway.gateway.data is not None
    sock = socket.create_connection(("127.0.0.1", gateway.gateway.data.port), timeout=5)
    return sock


def read_response(sock: socket.socket) -> bytes:
    """Read until the peer closes."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def exchange(gateway: GatewayThread, raw: bytes) -> bytes:
    with connect(gateway) as sock:
        sock.sendall(raw)
        return read_response(sock)


def chat_request(extra_headers: bytes = b"", body: bytes = CHAT_BODY) -> bytes:
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
        + extra_headers
        + b"Content-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )


@pytest.mark.parametrize(
    "raw",
    [
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"0\r\n\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
        b"GET /v1/models HTTP/1.1\r\nHost: gw\r\nX-Folded: a\r\n b\r\n\r\n",
        b"NOT HTTP AT ALL\r\n\r\n",
    ],
    ids=["conflicting-length", "duplicate-length", "length-and-chunked", "bad-chunk", "obs-fold", "garbage"],
)
def test_malformed_requests_get_400_and_close(gateway: GatewayThread, raw: bytes) -> None:
    response = exchange(gateway, raw)
    assert response.startswith(b"HTTP/1.1 400 ")
    assert b"connection: close" in response.lower()
    assert b"x-request-id: req_" in response
    assert b'"code":"invalid_request"' in response


def test_oversized_headers_get_431(gateway: GatewayThread) -> None:
    response = exchange(gateway, chat_request(b"X-Big: " + b"a" * 3000 + b"\r\n"))
    assert response.startswith(b"HTTP/1.1 431 ") and b'"code":"headers_too_large"' in response


def test_too_many_headers_get_431(gateway: GatewayThread) -> None:
    headers = b"".join(b"X-H%d: v\r\n" % index for index in range(30))
    assert exchange(gateway, chat_request(headers)).startswith(b"HTTP/1.1 431 ")


def test_declared_oversized_body_gets_413_before_it_is_sent(gateway: GatewayThread) -> None:
    with connect(gateway) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 999999\r\n\r\n")
        response = read_response(sock)
    assert response.startswith(b"HTTP/1.1 413 ") and b'"code":"payload_too_large"' in response


def test_chunked_body_over_the_limit_gets_413(gateway: GatewayThread) -> None:
    chunk = b"a" * 3000
    raw = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n"
        + (b"%x\r\n" % len(chunk) + chunk + b"\r\n") * 2
        + b"0\r\n\r\n"
    )
    assert exchange(gateway, raw).startswith(b"HTTP/1.1 413 ")


def test_keep_alive_and_pipelining(gateway: GatewayThread) -> None:
    with connect(gateway) as sock:
        sock.sendall(chat_request() + chat_request())
        data = b""
        while data.count(b"HTTP/1.1 200 ") < 2:
            data += sock.recv(65536)
        sock.sendall(chat_request())
        data = b""
        while b"Hello from primary" not in data:
            data += sock.recv(65536)
    assert data.startswith(b"HTTP/1.1 200 ")


def test_a_request_pipelined_behind_a_stream_waits_its_turn(gateway: GatewayThread, primary: FakeProvider) -> None:
    """Reading goes on while a response streams (to notice a departed client); a request that arrives meanwhile is
    held and answered after the stream, on the same connection."""
    primary.reset("big_stream")
    body = b'{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}'
    with connect(gateway) as sock:
        sock.sendall(chat_request(body=body))
        data = read_until(sock, b"data: ")
        sock.sendall(chat_request())
        data += read_until(sock, b"Hello from primary")
    streamed, _, answered = data.partition(b"data: [DONE]")
    assert streamed.count(BIG_STREAM_TEXT.encode()) == BIG_STREAM_FRAMES
    assert b"HTTP/1.1 200 " in answered and b"Hello from primary" in answered


def test_slow_request_is_cut_off(gateway: GatewayThread) -> None:
    with connect(gateway) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n")
        started = time.monotonic()
        response = read_response(sock)
    assert response.startswith(b"HTTP/1.1 408 ")
    assert time.monotonic() - started < 3


def test_idle_connection_is_closed(gateway: GatewayThread) -> None:
    with connect(gateway) as sock:
        started = time.monotonic()
        assert read_response(sock) == b""
    assert 0.4 < time.monotonic() - started < 3


def answered_keep_alive(gateway: GatewayThread) -> socket.socket:
    """A connection whose first request has just been answered (its idle timer now runs)."""
    sock = connect(gateway)
    sock.sendall(chat_request())
    data = b""
    while b"Hello from primary" not in data:
        data += sock.recv(65536)
    return sock


def test_each_timeout_of_a_kept_alive_connection_counts_from_its_own_start(gateway: GatewayThread) -> None:
    """The idle timeout (600 ms) runs from the answer, not from the connection's first timer (400 ms); a head
    that starts later gets the whole header timeout (400 ms) from its first byte."""
    with answered_keep_alive(gateway) as sock:
        answered = time.monotonic()
        assert read_response(sock) == b""
        assert 0.55 < time.monotonic() - answered < 3
    with answered_keep_alive(gateway) as sock:
        time.sleep(0.3)
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n")
        started = time.monotonic()
        assert read_response(sock).startswith(b"HTTP/1.1 408 ")
        assert 0.35 < time.monotonic() - started < 3


def test_unknown_path_and_wrong_method(gateway: GatewayThread) -> None:
    assert exchange(gateway, b"GET /nope HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n").startswith(
        b"HTTP/1.1 404 "
    )
    response = exchange(gateway, b"GET /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
    assert response.startswith(b"HTTP/1.1 405 ")


def test_agent_sessions_are_not_implemented(gateway: GatewayThread) -> None:
    for path in (b"/v1/agent/sessions", b"/v1/agent/sessions/s1/steps"):
        response = exchange(
            gateway, b"POST " + path + b" HTTP/1.1\r\nHost: gw\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}"
        )
        assert response.startswith(b"HTTP/1.1 501 ") and b'"code":"not_implemented"' in response


def test_invalid_json_is_400_in_the_path_protocol(gateway: GatewayThread) -> None:
    response = exchange(
        gateway, b"POST /v1/messages HTTP/1.1\r\nHost: gw\r\nConnection: close\r\nContent-Length: 3\r\n\r\n{x}"
    )
    assert response.startswith(b"HTTP/1.1 400 ") and b'"type":"error"' in response


def stalled(provider: FakeProvider, quiet: float = 0.3) -> Callable[[], int]:
    """A condition: the bytes the provider streamed, once some were and none more for `quiet` seconds."""
    seen = {"bytes": -1, "since": time.monotonic()}

    def check() -> int:
        now = provider.streamed_bytes
        if now != seen["bytes"]:
            seen.update(bytes=now, since=time.monotonic())
            return 0
        return now if now > 0 and time.monotonic() - seen["since"] >= quiet else 0

    return check


def kernel_buffering_bound() -> int:
    """The most the kernel may hold between the provider and a stalled client: the gateway's upstream
    receive buffer and the provider's send buffer (both autotuned up to the system maxima), the gateway's send
    buffer to the client, and the client's receive buffer."""
    receive_max = int(Path("/proc/sys/net/ipv4/tcp_rmem").read_text().split()[2])
    send_max = int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2])
    return receive_max + 2 * send_max + 65536


def test_stream_to_a_reader_that_stalls_is_bounded(gateway: GatewayThread, primary: FakeProvider) -> None:
    """While the client reads nothing, the gateway stops reading the upstream: the provider gets stuck before
    more than the kernel's buffers and the gateway's bounded read-ahead (well under 2 MB) have left it, short of
    a stream half again as long as that; once the client reads, everything arrives."""
    bound = kernel_buffering_bound() + 2 * 1024 * 1024
    frames = math.ceil(1.5 * bound / len(BIG_STREAM_TEXT))
    primary.reset("big_stream")
    primary.big_stream_frames = frames
    body = b'{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}'
    try:
        with connect(gateway) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            sock.sendall(chat_request(body=body))
            stalled_at = wait_until(stalled(primary), what="the provider's stream to stall")
            data = read_until(sock, b"data: [DONE]")
    finally:
        primary.big_stream_frames = BIG_STREAM_FRAMES
    assert 0 < stalled_at < bound
    assert data.count(BIG_STREAM_TEXT.encode()) == frames


def read_until(sock: socket.socket, marker: bytes) -> bytes:
    """Read until `marker` arrives (or the peer closes)."""
    data = bytearray()
    while marker not in data[-200:]:
        chunk = sock.recv(1 << 20)
        if not chunk:
            break
        data += chunk
    return bytes(data)

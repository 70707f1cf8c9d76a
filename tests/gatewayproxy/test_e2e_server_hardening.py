"""Gateway hardening end to end: deadlines, client disconnects, overload, HTTP/1.1 strictness at the edge."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from fakes.waiting import wait_until
from tests.support.gateway.documents import destination, one_destination
from tests.support.gateway.stalling import StallingUpstream
from tests.support.gateway.thread import GatewayFactory, GatewayThread
from tests.support.serving import served

pytestmark = pytest.mark.e2e
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
MESSAGES = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
REQUEST_TIMEOUT_MS = 600
STREAM_IDLE_MS = 400


@pytest.fixture(scope="module")
def stalling() -> Iterator[StallingUpstream]:
    yield from served(StallingUpstream().start())


def _document(upstream_url: str, server: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    server = {
        "request_timeout_ms": REQUEST_TIMEOUT_MS,
        "stream_idle_timeout_ms": STREAM_IDLE_MS,
        "limits": {"header_read_timeout_ms": 300, "max_body_bytes": 4096, "max_header_bytes": 2048},
        **(server or {}),
    }
    upstream = destination("vendor_a_compatible", f"{upstream_url}/v1", "static", **fields)
    return one_destination(upstream, name="up", vault="static", match={}, server=server)


Holding = Callable[..., contextlib.AbstractContextManager[GatewayThread]]


@pytest.fixture
def holding(gateway_factory: GatewayFactory, stalling: StallingUpstream) -> Holding:
    """`holding(server, **destination)`: a gateway of its own (`server` and `destination`: more fields of its
    sections) before the upstream, which holds every request until released; released and stopped at the end of
    the block, whatever happened."""

    @contextlib.contextmanager
    def hold(server: dict[str, Any], **destination: Any) -> Iterator[GatewayThread]:
        thread = gateway_factory(_document(stalling.url, server, **destination))
        try:
            stalling.reset("hold")
            yield thread
        finally:
            stalling.release()
            thread.stop()

    return hold


def _pool_limited(
    holding: Holding, connections: int, *, wait_ms: int
) -> contextlib.AbstractContextManager[GatewayThread]:
    """`holding` with at most `connections` upstream connections, a request waiting `wait_ms` for one."""
    limits = {"max_connections": connections, "max_connections_wait_ms": wait_ms}
    return holding({"request_timeout_ms": 20000}, **limits)


@pytest.fixture(scope="module")
def gateway(module_gateway_factory: GatewayFactory, stalling: StallingUpstream) -> GatewayThread:
    return module_gateway_factory(_document(stalling.url))


def _in_flight(gateway: GatewayThread) -> int:
    runtime = gateway.gateway.runtime
    assert runtime is not None
    return runtime.in_flight.count(runtime.state)


# Deadlines


@pytest.mark.parametrize("behaviour", ["stall_after_head", "never"])
def test_a_stalled_non_streamed_request_ends_in_504_at_the_deadline(
    gateway: GatewayThread, stalling: StallingUpstream, behaviour: str
) -> None:
    stalling.reset(behaviour)
    started = time.monotonic()
    response = httpx.post(f"{gateway.url}/v1/chat/completions", json=CHAT, timeout=10)
    elapsed = time.monotonic() - started
    assert response.status_code == 504
    assert response.json()["error"]["code"] == "upstream_timeout"
    # The body's read timeout (the stream idle timeout) or the request deadline, whichever comes first.
    assert min(REQUEST_TIMEOUT_MS, STREAM_IDLE_MS) / 1000 <= elapsed < REQUEST_TIMEOUT_MS / 1000 + 1
    wait_until(lambda: stalling.open_connections == 0, timeout=5)
    wait_until(lambda: _in_flight(gateway) == 0, timeout=5)


def test_the_deadline_answers_in_the_protocol_of_the_path(gateway: GatewayThread, stalling: StallingUpstream) -> None:
    stalling.reset("never")
    response = httpx.post(f"{gateway.url}/v1/messages", json=MESSAGES, timeout=10)
    assert response.status_code == 504
    assert response.json()["type"] == "error"
    assert response.json()["error"]["code"] == "upstream_timeout"


def test_a_stream_that_never_starts_ends_in_504_at_the_deadline(
    gateway: GatewayThread, stalling: StallingUpstream
) -> None:
    stalling.reset("stall_after_head")
    started = time.monotonic()
    response = httpx.post(f"{gateway.url}/v1/chat/completions", json={**CHAT, "stream": True}, timeout=10)
    assert response.status_code == 504
    assert time.monotonic() - started < REQUEST_TIMEOUT_MS / 1000 + 1


def test_a_stream_that_goes_silent_ends_with_an_error_event_after_the_idle_timeout(
    gateway: GatewayThread, stalling: StallingUpstream
) -> None:
    stalling.reset("stall_after_first_event")
    started = time.monotonic()
    with httpx.stream("POST", f"{gateway.url}/v1/chat/completions", json={**CHAT, "stream": True}, timeout=10) as r:
        assert r.status_code == 200
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    elapsed = time.monotonic() - started
    assert STREAM_IDLE_MS / 1000 <= elapsed < STREAM_IDLE_MS / 1000 + 1
    last = json.loads(lines[-1].removeprefix("data: ")) if lines[-1] != "data: [DONE]" else None
    assert last is not None and "error" in last, lines
    wait_until(lambda: stalling.open_connections == 0, timeout=5)
    wait_until(lambda: _in_flight(gateway) == 0, timeout=5)


def test_a_slow_stream_outlives_the_request_deadline(gateway: GatewayThread, stalling: StallingUpstream) -> None:
    """The request deadline stops at the first byte of a stream; only the idle timeout applies after it."""
    stalling.reset("ok")
    with httpx.stream("POST", f"{gateway.url}/v1/chat/completions", json={**CHAT, "stream": True}, timeout=10) as r:
        body = r.read().decode()
    assert "[DONE]" in body


# Cancellation


def _raw_request(url: str, path: str, body: dict[str, Any]) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    data = json.dumps(body).encode()
    sock.sendall(
        b"POST %s HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
        % (path.encode(), len(data), data)
    )
    return sock


def test_a_client_gone_mid_request_closes_the_upstream_connection_at_once(
    gateway: GatewayThread, stalling: StallingUpstream
) -> None:
    stalling.reset("never")
    sock = _raw_request(gateway.url, "/v1/chat/completions", CHAT)
    wait_until(lambda: stalling.requests == 1, timeout=5)
    left = time.monotonic()
    sock.close()
    wait_until(lambda: stalling.open_connections == 0, timeout=2)
    closed_at = stalling.connections[0].closed_at
    assert closed_at is not None and closed_at - left < 0.1
    wait_until(lambda: _in_flight(gateway) == 0, timeout=5)
    assert 'status="499"' in gateway.metrics_text


def test_a_client_gone_mid_stream_closes_the_upstream_connection_at_once(
    gateway: GatewayThread, stalling: StallingUpstream
) -> None:
    stalling.reset("stall_after_first_event")
    sock = _raw_request(gateway.url, "/v1/chat/completions", {**CHAT, "stream": True})
    assert sock.recv(65536).startswith(b"HTTP/1.1 200")
    left = time.monotonic()
    sock.close()
    wait_until(lambda: stalling.open_connections == 0, timeout=2)
    closed_at = stalling.connections[0].closed_at
    assert closed_at is not None and closed_at - left < 0.1
    wait_until(lambda: _in_flight(gateway) == 0, timeout=5)


# Overload


def _rss_kb() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def _post_status(url: str) -> tuple[int, dict[str, str]]:
    """A request on its own connection, read with a plain socket (200 httpx clients would dwarf the gateway's
    memory in this process)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(_post(b"host: gw\r\nconnection: close\r\ncontent-length: %d\r\n" % len(BODY)))
        answer = _read_all(sock, 20)
    head = answer.split(b"\r\n\r\n", 1)[0].decode().split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in head[1:])
    return int(head[0].split(" ")[1]), headers


def test_requests_beyond_max_concurrent_requests_are_refused_with_503(
    holding: Holding, stalling: StallingUpstream
) -> None:
    with holding({"max_concurrent_requests": 50, "request_timeout_ms": 20000}) as thread:
        rss_before = _rss_kb()
        with concurrent.futures.ThreadPoolExecutor(200) as pool:
            futures = [pool.submit(_post_status, thread.url) for _ in range(200)]
            wait_until(lambda: sum(future.done() for future in futures) == 150, timeout=20)
            assert stalling.requests == 50
            refused = [future.result() for future in futures if future.done()]
            assert {status for status, _ in refused} == {503}
            assert all(headers["retry-after"] == "1" for _, headers in refused)
            stalling.release()
            statuses = [future.result()[0] for future in futures]
        assert statuses.count(200) == 50 and statuses.count(503) == 150
        assert _rss_kb() - rss_before < 100 * 1024
        wait_until(lambda: _in_flight(thread) == 0, timeout=5)
        stalling.reset("ok")
        assert httpx.post(f"{thread.url}/v1/chat/completions", json=CHAT).status_code == 200


def test_an_overloaded_gateway_answers_without_reading_the_body(holding: Holding, stalling: StallingUpstream) -> None:
    with holding({"max_concurrent_requests": 1, "request_timeout_ms": 20000}) as thread:
        busy = _raw_request(thread.url, "/v1/messages", MESSAGES)
        wait_until(lambda: stalling.requests == 1, timeout=5)
        host, port = thread.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(b"POST /v1/messages HTTP/1.1\r\nhost: gw\r\ncontent-length: 1000000\r\n\r\n")
            answer = _read_all(sock)
        assert answer.startswith(b"HTTP/1.1 503 ")
        assert b"retry-after: 1\r\n" in answer
        assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["type"] == "overloaded_error"
        stalling.release()
        busy.close()


def test_a_full_upstream_pool_answers_503_after_the_wait(holding: Holding, stalling: StallingUpstream) -> None:
    with (
        _pool_limited(holding, 2, wait_ms=200) as thread,
        concurrent.futures.ThreadPoolExecutor(3) as pool,
    ):
        held = [pool.submit(_post_status, thread.url) for _ in range(2)]
        wait_until(lambda: stalling.requests == 2, timeout=5)
        started = time.monotonic()
        status, headers = _post_status(thread.url)
        assert status == 503 and headers["retry-after"] == "1"
        assert 0.2 <= time.monotonic() - started < 2
        assert len(stalling.connections) == 2
        stalling.release()
        assert [future.result()[0] for future in held] == [200, 200]


def test_a_request_waiting_for_a_pooled_connection_gets_the_next_one_freed(
    holding: Holding, stalling: StallingUpstream
) -> None:
    with (
        _pool_limited(holding, 1, wait_ms=5000) as thread,
        concurrent.futures.ThreadPoolExecutor(2) as pool,
    ):
        futures = [pool.submit(_post_status, thread.url) for _ in range(2)]
        wait_until(lambda: stalling.requests == 1, timeout=5)
        stalling.release()
        assert [future.result()[0] for future in futures] == [200, 200]
        assert len(stalling.connections) == 1


# HTTP/1.1 strictness at the edge


def _read_all(sock: socket.socket, timeout: float = 5) -> bytes:
    sock.settimeout(timeout)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def _exchange(gateway: GatewayThread, raw: bytes) -> bytes:
    host, port = gateway.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(raw)
        return _read_all(sock)


BODY = json.dumps(CHAT).encode()
CHUNKED_BODY = b"%x\r\n%s\r\n0\r\n\r\n" % (len(BODY), BODY)


def _post(headers: bytes, body: bytes = BODY, version: bytes = b"1.1", path: bytes = b"/v1/chat/completions") -> bytes:
    return b"POST %s HTTP/%s\r\n%s\r\n%s" % (path, version, headers, body)


REFUSED = {
    "transfer-encoding in HTTP/1.0": _post(b"host: gw\r\ntransfer-encoding: chunked\r\n", CHUNKED_BODY, b"1.0"),
    "obs-fold after CRLF": _post(b"host: gw\r\nx-a: 1\r\n 2\r\ncontent-length: %d\r\n" % len(BODY)),
    "obs-fold after bare LF": b"POST /v1/chat/completions HTTP/1.1\nhost: gw\nx-a: 1\n\t2\ncontent-length: %d\n\n%s"
    % (len(BODY), BODY),
    "missing Host": _post(b"content-length: %d\r\n" % len(BODY)),
    "repeated Host": _post(b"host: gw\r\nhost: gw\r\ncontent-length: %d\r\n" % len(BODY)),
    "malformed Host": _post(b"host: gw/evil\r\ncontent-length: %d\r\n" % len(BODY)),
    "malformed Host on HTTP/1.0": _post(b"host: a@b c\r\ncontent-length: %d\r\n" % len(BODY), version=b"1.0"),
    "Content-Length list of equal values": _post(b"host: gw\r\ncontent-length: %d, %d\r\n" % (len(BODY), len(BODY))),
    "repeated Content-Length": _post(b"host: gw\r\ncontent-length: %d\r\ncontent-length: %d\r\n" % ((len(BODY),) * 2)),
    "long chunk extension": _post(
        b"host: gw\r\ntransfer-encoding: chunked\r\n",
        b"%x;%s\r\n%s\r\n0\r\n\r\n" % (len(BODY), b"e" * 4000, BODY),
    ),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_ambiguous_requests_are_refused_and_never_reach_an_upstream(
    gateway: GatewayThread, stalling: StallingUpstream, name: str
) -> None:
    stalling.reset("ok")
    answer = _exchange(gateway, REFUSED[name])
    status = int(answer.split(b" ", 2)[1])
    assert status in ((400, 431) if "chunk" in name else (400,)), answer
    assert b"connection: close" in answer
    assert stalling.requests == 0


def test_a_long_chunk_extension_is_refused_before_it_is_buffered(
    gateway: GatewayThread, stalling: StallingUpstream
) -> None:
    stalling.reset("ok")
    host, port = gateway.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(_post(b"host: gw\r\ntransfer-encoding: chunked\r\n", b"10;" + b"e" * 3000))
        answer = _read_all(sock)
    assert answer.split(b" ", 2)[1] in (b"400", b"431")
    assert stalling.requests == 0


def test_the_same_requests_done_right_are_served(gateway: GatewayThread, stalling: StallingUpstream) -> None:
    stalling.reset("ok")
    chunked = b"%x;ext=1\r\n%s\r\n0\r\n\r\n" % (len(BODY), BODY)
    for raw in (
        _post(b"host: gw\r\nconnection: close\r\ncontent-length: %d\r\n" % len(BODY)),
        _post(b"host: gw:8080\r\nconnection: close\r\ntransfer-encoding: chunked\r\n", chunked),
        _post(b"content-length: %d\r\n" % len(BODY), version=b"1.0"),
        _post(b"host: [::1]:80\r\nconnection: close\r\ncontent-length: %d\r\n" % len(BODY)),
    ):
        answer = _exchange(gateway, raw)
        assert answer.startswith(b"HTTP/1.1 200 "), answer
    assert stalling.requests == 4


def test_a_connection_that_sends_nothing_is_closed_by_the_header_timeout(gateway: GatewayThread) -> None:
    host, port = gateway.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        started = time.monotonic()
        assert _read_all(sock) == b""
    assert time.monotonic() - started < 2


@pytest.mark.parametrize(
    ("path", "check"),
    [
        ("/v1/messages", lambda body: body["type"] == "error"),
        ("/v1/chat/completions", lambda body: "code" in body["error"] and "param" in body["error"]),
        ("/v1/mcp", lambda body: body["jsonrpc"] == "2.0"),
    ],
)
@pytest.mark.parametrize("status", [413, 431, 400])
def test_errors_before_routing_speak_the_protocol_of_the_path(
    gateway: GatewayThread, stalling: StallingUpstream, path: str, check: Callable[[Any], bool], status: int
) -> None:
    stalling.reset("ok")
    headers = {
        413: b"host: gw\r\ncontent-length: 100000\r\n",
        431: b"host: gw\r\nx-big: %s\r\n" % (b"a" * 4000),
        400: b"host: gw\r\nhost: other\r\ncontent-length: 2\r\n",
    }[status]
    answer = _exchange(gateway, _post(headers, b"{}", path=path.encode()))
    assert answer.startswith(b"HTTP/1.1 %d " % status), answer
    assert check(json.loads(answer.split(b"\r\n\r\n", 1)[1]))
    assert stalling.requests == 0


def test_a_pipelined_fast_path_request_still_works(gateway: GatewayThread, stalling: StallingUpstream) -> None:
    """Reading stays on while a request is served; bytes of the next request wait for the answer."""
    stalling.reset("ok")
    host, port = gateway.url.removeprefix("http://").split(":")
    one = _post(b"host: gw\r\ncontent-length: %d\r\n" % len(BODY))
    two = _post(b"host: gw\r\nconnection: close\r\ncontent-length: %d\r\n" % len(BODY))
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(one + two)
        answer = _read_all(sock)
    assert answer.count(b"HTTP/1.1 200 ") == 2

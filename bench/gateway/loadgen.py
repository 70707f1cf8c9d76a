"""A cheap keep-alive load generator on raw asyncio: N connections, each sending one request at a time and
reading the whole response (content-length or chunked); records latency and time to first body byte."""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass, field

from gatewayproxy.server.tls_reads import SharedTlsReads


@dataclass
class Results:
    """Per-request latencies and first-byte times, in seconds."""

    latencies: list[float] = field(default_factory=list)
    first_bytes: list[float] = field(default_factory=list)
    errors: int = 0
    elapsed: float = 0.0

    def percentile(self, values: list[float], fraction: float) -> float:
        """A percentile of `values` in milliseconds."""
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] * 1000

    @property
    def throughput(self) -> float:
        """Completed requests per second."""
        return len(self.latencies) / self.elapsed if self.elapsed else 0.0


class Client(asyncio.Protocol):
    """One keep-alive connection that parses just enough HTTP/1.1 to find the end of each response."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.done: asyncio.Future[tuple[float, int]] | None = None
        self.first_byte = 0.0
        self.status = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, request: bytes) -> asyncio.Future[tuple[float, int]]:
        assert self.transport is not None
        self.done = asyncio.get_running_loop().create_future()
        self.buffer = b""
        self.first_byte = 0.0
        self.transport.write(request)
        return self.done

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        if not self.first_byte and len(self.buffer) > end + 4:
            self.first_byte = time.perf_counter()
        head = self.buffer[:end].lower()
        self.status = int(head[9:12])
        marker = head.find(b"content-length:")
        if marker >= 0:
            line_end = head.find(b"\r\n", marker)
            length = int(head[marker + 15 : line_end if line_end > 0 else None])
            complete = len(self.buffer) >= end + 4 + length
        else:
            complete = self.buffer.endswith(b"\r\n0\r\n\r\n")
        if complete and self.done is not None and not self.done.done():
            self.done.set_result((self.first_byte or time.perf_counter(), self.status))

    def connection_lost(self, exc: Exception | None) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionError("closed"))


class TlsClient(Client, SharedTlsReads):
    """`Client` over TLS, reading as the gateway does (a fresh 256 KiB bytes object per TLS read would cost
    the load generator an mmap, mremap and munmap per response, counted as the server's latency)."""


def build_request(port: int, path: str, body: bytes) -> bytes:
    """A keep-alive POST."""
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer bench\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


async def run_load(
    port: int,
    path: str,
    body: bytes,
    concurrency: int,
    *,
    requests: int = 0,
    seconds: float = 0.0,
    tls: ssl.SSLContext | None = None,
) -> Results:
    """Drive the server with `concurrency` connections for `requests` requests or `seconds` seconds (over
    TLS when `tls` is given: one handshake per connection, then keep-alive)."""
    loop = asyncio.get_running_loop()

    async def connect() -> Client:
        if tls is None:
            return (await loop.create_connection(Client, "127.0.0.1", port))[1]
        return (await loop.create_connection(TlsClient, "127.0.0.1", port, ssl=tls, server_hostname="localhost"))[1]

    clients = [await connect() for _ in range(concurrency)]
    request = build_request(port, path, body)
    results = Results()
    remaining = [requests]
    deadline = time.perf_counter() + seconds if seconds else float("inf")

    async def worker(client: Client) -> None:
        while time.perf_counter() < deadline and (not requests or remaining[0] > 0):
            remaining[0] -= 1
            started = time.perf_counter()
            try:
                first_byte, status = await client.send(request)
            except ConnectionError:
                # The server dropped a kept-alive connection: count it and carry on with a fresh one.
                results.errors += 1
                client = await connect()
                clients.append(client)
                continue
            finished = time.perf_counter()
            if status != 200:
                results.errors += 1
                continue
            results.latencies.append(finished - started)
            results.first_bytes.append(first_byte - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker(client) for client in clients))
    results.elapsed = time.perf_counter() - started
    for client in clients:
        if client.transport is not None:
            client.transport.close()
    return results

"""`python -m bench.webhooks.receiver --ports P1,P2,... --secrets S1,S2,... --out FILE`: the benchmark's webhook
receivers, one per port, in one process (uvloop + httptools, one `asyncio.Protocol` per connection) so that they
are not what limits the sender.

Each request is answered `200 ok` at once; its arrival (`time.time()`), port index and `webhook-id` are kept in
memory, and every tenth request's signature is checked with `standardwebhooks` against its port's secret.
SIGTERM writes `index webhook-id arrival` lines to FILE, then a last line `# rejected N`, and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import time
from pathlib import Path

import httptools
import uvloop
from standardwebhooks import Webhook

ANSWER = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-type: text/plain\r\n\r\nok"
CHECK_EVERY = 10


class Log:
    """What arrived, shared by every connection of the process."""

    def __init__(self, secrets: list[str]) -> None:
        self.arrivals: list[tuple[int, str, float]] = []
        self.signers = [Webhook(secret) for secret in secrets]
        self.rejected = 0


class Receiver(asyncio.Protocol):
    """One connection: parse requests as they stream in, answer each as soon as it is complete."""

    def __init__(self, index: int, log: Log) -> None:
        self.index = index
        self.log = log
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.headers: dict[str, str] = {}
        self.body = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is a Transport in all but name

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.close()

    # httptools callbacks
    def on_message_begin(self) -> None:
        self.headers = {}
        self.body = bytearray()

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode().lower()] = value.decode()

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        webhook_id = self.headers.get("webhook-id", "")
        arrivals = self.log.arrivals
        arrivals.append((self.index, webhook_id, time.time()))
        if len(arrivals) % CHECK_EVERY == 0:
            try:
                self.log.signers[self.index].verify(bytes(self.body), self.headers)
            except Exception:  # counted, reported in the output's last line
                self.log.rejected += 1
        assert self.transport is not None
        self.transport.write(ANSWER)


async def serve(ports: list[int], log: Log, out: Path) -> None:
    loop = asyncio.get_running_loop()
    servers = [
        await loop.create_server(lambda index=index: Receiver(index, log), "127.0.0.1", port, backlog=1024)
        for index, port in enumerate(ports)
    ]
    stopped = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stopped.set)
    print("receiving", flush=True)
    await stopped.wait()
    for server in servers:
        server.close()
    lines = [f"{index} {webhook_id} {arrival:.6f}" for index, webhook_id, arrival in log.arrivals]
    out.write_text("\n".join([*lines, f"# rejected {log.rejected}"]) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ports", required=True)
    parser.add_argument("--secrets", required=True)
    parser.add_argument("--out", required=True, type=Path)
    arguments = parser.parse_args()
    ports = [int(port) for port in arguments.ports.split(",")]
    log = Log(arguments.secrets.split(","))
    uvloop.run(serve(ports, log, arguments.out))


if __name__ == "__main__":
    main()

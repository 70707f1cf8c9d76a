"""A webhook receiver on loopback for tests: a real HTTP server in a thread that checks every request as a client
would (the reference client's `beta.webhooks.unwrap` with the endpoint's secret) and records what arrived, in
order. It can be told to answer with any status and body, slowly, to hold requests open until released, to close
the connection without answering, and to go down and come back on the same port; with a chain, it serves TLS.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anthropic
from anthropic.types.beta.beta_webhook_event import BetaWebhookEvent

HOLD_LIMIT_SECONDS = 60.0  # a held request is answered after this at the latest (a test that forgot to release)


@dataclass
class Arrival:
    """One verified request: its `webhook-id`, the parsed event, headers (lower-case names), body, arrival time
    (`time.time()`), and the status it was answered with (None while held, or when the answer could not be
    written: the sender had gone)."""

    webhook_id: str
    event: BetaWebhookEvent
    headers: dict[str, str]
    body: bytes
    at: float
    status: int | None = None


@dataclass(frozen=True)
class Answer:
    """How the receiver answers: `status` with `body` and `headers` after `delay` seconds; `hold` keeps the
    request open until `release()`; `close` drops the connection without a word."""

    status: int = 200
    body: bytes = b"ok"
    headers: tuple[tuple[str, str], ...] = ()
    delay: float = 0.0
    hold: bool = False
    close: bool = False


class ReceiverHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as senders expect
    server: ReceiverServer

    def do_POST(self) -> None:
        receiver = self.server.receiver
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        headers = {name.lower(): value for name, value in self.headers.items()}
        answer = receiver.answer_now
        arrival = receiver.check(body, headers)
        if answer.close:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if answer.hold:
            receiver.released.wait(HOLD_LIMIT_SECONDS)
            answer = receiver.answer_now if not receiver.answer_now.hold else Answer()
        if answer.delay:
            time.sleep(answer.delay)
        try:
            self.send_response(answer.status if arrival is not None else 400)
            for name, value in answer.headers:
                self.send_header(name, value)
            self.send_header("content-length", str(len(answer.body)))
            self.end_headers()
            self.wfile.write(answer.body)
            self.wfile.flush()
        except OSError:
            return  # the sender went away (killed, or timed out)
        if arrival is not None:
            arrival.status = answer.status

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


class ReceiverServer(ThreadingHTTPServer):
    """The listening socket; the open connections are tracked so that `down()` can cut them."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], receiver: WebhookReceiver) -> None:
        self.receiver = receiver
        self.open: set[socket.socket] = set()
        self.open_lock = threading.Lock()
        super().__init__(address, ReceiverHandler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.open_lock:
            self.open.add(request)
            self.receiver.connections += 1
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.open_lock:
            self.open.discard(request)
        super().shutdown_request(request)

    def cut(self) -> None:
        with self.open_lock:
            connections = list(self.open)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A sender that went away mid-request is part of these tests."""


class WebhookReceiver:
    """A receiver at `url` (`http://<host>:<port>/hook`) checking signatures with `secret`; `arrivals` holds the
    verified requests in arrival order, `rejected` why others were refused (answered 400), `connections` counts
    the connections it accepted."""

    def __init__(
        self, secret: str, *, host: str = "127.0.0.1", port: int = 0, path: str = "/hook", chain: Path | None = None
    ) -> None:
        self.secret = secret
        self.tls = None
        if chain is not None:
            self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.tls.load_cert_chain(chain)
        self.host = host
        self.path = path
        self.arrivals: list[Arrival] = []
        self.rejected: list[str] = []
        self.connections = 0
        self.lock = threading.Lock()
        self.answer_now = Answer()
        self.released = threading.Event()
        self.client = anthropic.Anthropic(api_key="unused", base_url="http://127.0.0.1:9")
        self.server: ReceiverServer | None = None
        self.port = port
        self.up()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}{self.path}"

    # -- what it does --------------------------------------------------------------------------------------
    def answer(self, status: int = 200, body: bytes = b"ok", **options: Any) -> WebhookReceiver:
        """Answer from now on as `Answer(status, body, **options)` says; a hold in force is released unless the
        new answer holds too."""
        self.answer_now = Answer(status, body, **options)
        if self.answer_now.hold:
            self.released.clear()
        else:
            self.released.set()
        return self

    def release(self) -> None:
        """Answer the held requests (and those to come) with 200."""
        self.answer()

    def down(self) -> None:
        """Stop listening and cut every open connection: connections are refused until `up()`."""
        server, self.server = self.server, None
        if server is not None:
            server.shutdown()
            server.server_close()
            server.cut()

    def up(self) -> WebhookReceiver:
        """Listen (again) on the same port."""
        if self.server is None:
            self.server = ReceiverServer((self.host, self.port), self)
            self.port = self.server.server_address[1]
            if self.tls is not None:
                self.server.socket = self.tls.wrap_socket(self.server.socket, server_side=True)
            threading.Thread(target=self.server.serve_forever, name=f"receiver-{self.port}", daemon=True).start()
        return self

    def stop(self) -> None:
        self.released.set()
        self.down()
        self.client.close()

    # -- what it saw ---------------------------------------------------------------------------------------
    def check(self, body: bytes, headers: dict[str, str]) -> Arrival | None:
        """Verify and parse as the reference client does; record the arrival (or the refusal)."""
        try:
            event = self.client.beta.webhooks.unwrap(body.decode(), headers=headers, key=self.secret)
        except Exception as error:  # any refusal is recorded and answered 400
            with self.lock:
                self.rejected.append(f"{type(error).__name__}: {error}")
            return None
        arrival = Arrival(headers["webhook-id"], event, headers, body, time.time())
        with self.lock:
            self.arrivals.append(arrival)
        return arrival

    def ids(self) -> list[str]:
        """The `webhook-id` of every verified request, in arrival order (repeats included)."""
        with self.lock:
            return [arrival.webhook_id for arrival in self.arrivals]

    def delivered(self) -> list[str]:
        """The ids of the requests answered with a 2xx, in arrival order (repeats included)."""
        with self.lock:
            return [arrival.webhook_id for arrival in self.arrivals if arrival.status and 200 <= arrival.status < 300]

"""The HTTP server every threaded stand-in is built on: a `ThreadingHTTPServer` on 127.0.0.1 serving from a
daemon thread, and a quiet request handler that answers whole bodies in one call."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


class QuietHandler(BaseHTTPRequestHandler):
    """Logs nothing (test output is for assertions); `owner` is the `LoopbackHttpServer` it serves for."""

    server: ThreadingHTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""

    @property
    def owner(self) -> Any:
        return self.server.owner  # type: ignore[attr-defined]

    def reply(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        """The whole answer: status, `headers`, a content-length, then `body`."""
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def reply_json(self, status: int, document: Any, headers: dict[str, str] | None = None) -> None:
        """`document` as a JSON answer."""
        self.reply(status, json.dumps(document).encode(), {"content-type": "application/json", **(headers or {})})


class LoopbackHttpServer:
    """`handler` served on 127.0.0.1 (`port`, or one the kernel picks) from a daemon thread once `start()` is
    called; each request's handler reaches this object as `owner`. `stop()` shuts it down."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], *, port: int = 0, name: str | None = None) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.server.daemon_threads = True
        self.server.owner = self  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.server.serve_forever, name=name, daemon=True)

    def start(self) -> Self:
        """Serve from the thread."""
        self.thread.start()
        return self

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def url(self) -> str:
        """The root URL."""
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        """Stop serving and release the port."""
        self.server.shutdown()
        self.server.server_close()

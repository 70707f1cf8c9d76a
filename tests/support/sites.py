"""Plain HTTP servers on the host's loopback answering GETs from a route function, and one that switches
protocols (HTTP `Upgrade`) and then echoes whatever it receives."""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Callable, Generator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Route = Callable[[str], tuple[bytes, str]]  # request path -> (body, content type)


def loopback_sites() -> Generator[Callable[[Route], str], None, None]:
    """Starts HTTP servers on 127.0.0.1 answering GETs with `route(path)`; yields a starter of root URLs
    and shuts them all down when closed (use it as a fixture's body)."""
    servers: list[ThreadingHTTPServer] = []

    def start(route: Route) -> str:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body, content_type = route(self.path)
                self.send_response(200)
                self.send_header("content-type", content_type)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                """Quiet."""

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


class UpgradeEchoHandler(socketserver.StreamRequestHandler):
    """Answers any request with 101 Switching Protocols, then echoes every byte back."""

    def handle(self) -> None:
        while self.rfile.readline() not in (b"\r\n", b""):
            pass
        self.wfile.write(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
        while data := self.request.recv(65536):
            self.request.sendall(data)


def upgrade_echo_site() -> Iterator[int]:
    """A protocol-switching echo server on 127.0.0.1; yields its port (use it as a fixture's body)."""
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), UpgradeEchoHandler) as server:
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        yield server.server_address[1]
        server.shutdown()

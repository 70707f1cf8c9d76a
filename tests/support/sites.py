"""Plain HTTP servers on the host's loopback answering GETs from a route function."""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator
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

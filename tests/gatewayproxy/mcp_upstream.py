"""A stateful MCP server built with the `mcp` SDK, served over Streamable HTTP by uvicorn on loopback.

It records the `Authorization` and `Mcp-Session-Id` headers of every HTTP request it receives.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer

from tests.support.waiting import wait_until


class RecordingMcpServer:
    """A `notes` server with `echo` and `add` tools; stateful, so each request needs its session id."""

    def __init__(self) -> None:
        self.requests: list[dict[str, str | None]] = []
        server = MCPServer("notes")

        @server.tool()
        def echo(text: str) -> str:
            """Repeat the text."""
            return f"echo: {text}"

        @server.tool()
        def add(a: int, b: int) -> int:
            """Add two numbers."""
            return a + b

        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        config = uvicorn.Config(
            self._recording(server.streamable_http_app()), log_level="warning", ws="none", lifespan="on"
        )
        self.uvicorn = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.uvicorn.run, kwargs={"sockets": [self.listener]}, daemon=True)

    def start(self) -> RecordingMcpServer:
        """Serve, and wait until uvicorn is up."""
        self.thread.start()
        wait_until(lambda: self.uvicorn.started, timeout=10, what="uvicorn to start")
        return self

    def _recording(self, app: Any) -> Any:
        async def recorded(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                headers = {name.decode(): value.decode() for name, value in scope["headers"]}
                self.requests.append(
                    {
                        "method": scope["method"],
                        "authorization": headers.get("authorization"),
                        "session": headers.get("mcp-session-id"),
                    }
                )
            await app(scope, receive, send)

        return recorded

    @property
    def url(self) -> str:
        """The Streamable HTTP endpoint."""
        host, port = self.listener.getsockname()
        return f"http://{host}:{port}/mcp"

    def stop(self) -> None:
        """Stop uvicorn and release the port."""
        self.uvicorn.should_exit = True
        self.thread.join(timeout=10)
        self.listener.close()

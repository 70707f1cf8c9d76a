"""MCP servers built with the `mcp` SDK, served over Streamable HTTP on loopback by uvicorn, each recording the
HTTP requests it receives: `notes` (the gateway's MCP upstream) and `shop` (the runtime's tools, which record
every call, so tests can tell a call that ran from one that was denied)."""

from __future__ import annotations

import socket
import threading
from typing import Any, Self

import uvicorn
from mcp.server.mcpserver import MCPServer

from fakes.waiting import wait_until


class McpServerThread:
    """`server` (an `MCPServer` with its tools) served by uvicorn from a daemon thread once `start()` is called;
    `recorded(headers, scope)` sees every HTTP request's lower-case headers first."""

    def __init__(self, server: MCPServer) -> None:
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        config = uvicorn.Config(
            self._recording(server.streamable_http_app()), log_level="warning", ws="none", lifespan="on"
        )
        self.uvicorn = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.uvicorn.run, kwargs={"sockets": [self.listener]}, daemon=True)

    def start(self) -> Self:
        """Serve, and wait until uvicorn is up."""
        self.thread.start()
        wait_until(lambda: self.uvicorn.started, timeout=10, what="uvicorn to start")
        return self

    def recorded(self, headers: dict[str, str], scope: dict[str, Any]) -> None:
        """Called with each HTTP request's headers before it is served."""

    def _recording(self, app: Any) -> Any:
        async def recorded(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                self.recorded({name.decode(): value.decode() for name, value in scope["headers"]}, scope)
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


class RecordingMcpServer(McpServerThread):
    """A `notes` server with `echo` and `add` tools; stateful, so each request needs its session id. `requests`
    holds every HTTP request's method, `Authorization` and `Mcp-Session-Id`."""

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

        super().__init__(server)

    def recorded(self, headers: dict[str, str], scope: dict[str, Any]) -> None:
        authorization, session = headers.get("authorization"), headers.get("mcp-session-id")
        self.requests.append({"method": scope["method"], "authorization": authorization, "session": session})


class ShopMcpServer(McpServerThread):
    """A `shop` server with `lookup_order` (works) and `cancel_order` (always fails); `calls` holds the tool
    calls, `authorizations` each HTTP request's `Authorization` header."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, str]]] = []
        self.authorizations: list[str | None] = []
        server = MCPServer("shop")

        @server.tool()
        def lookup_order(order_id: str) -> str:
            """Look up an order's shipping status."""
            self.calls.append(("lookup_order", {"order_id": order_id}))
            return f"order {order_id}: shipped"

        @server.tool()
        def cancel_order(order_id: str) -> str:
            """Cancel an order."""
            self.calls.append(("cancel_order", {"order_id": order_id}))
            raise ValueError("orders cannot be cancelled")

        super().__init__(server)

    def recorded(self, headers: dict[str, str], scope: dict[str, Any]) -> None:
        self.authorizations.append(headers.get("authorization"))

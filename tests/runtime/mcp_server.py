"""An MCP server built with the `mcp` SDK, served over Streamable HTTP on loopback by uvicorn.

Its tools record every call, so tests can tell a call that ran from one that was denied.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer

from tests.support.waiting import wait_until


class ShopMcpServer:
    """A `shop` server with `lookup_order` (works) and `cancel_order` (always fails)."""

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

        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        config = uvicorn.Config(
            self._recording(server.streamable_http_app()), log_level="warning", ws="none", lifespan="on"
        )
        self.uvicorn = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.uvicorn.run, kwargs={"sockets": [self.listener]}, daemon=True)
        self.thread.start()
        wait_until(lambda: self.uvicorn.started, timeout=10, what="uvicorn to start")

    def _recording(self, app: Any) -> Any:
        """Wrap the ASGI app to record each HTTP request's Authorization header."""

        async def recorded(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                headers = dict(scope["headers"])
                authorization = headers.get(b"authorization")
                self.authorizations.append(authorization.decode() if authorization else None)
            await app(scope, receive, send)

        return recorded

    @property
    def url(self) -> str:
        host, port = self.listener.getsockname()
        return f"http://{host}:{port}/mcp"

    def stop(self) -> None:
        self.uvicorn.should_exit = True
        self.thread.join(timeout=10)
        self.listener.close()

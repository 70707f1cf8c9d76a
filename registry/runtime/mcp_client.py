"""Calls to an agent's MCP servers with the `mcp` SDK client over Streamable HTTP.

The worker is synchronous, so each call runs its own short event loop. Direct calls send a bearer
token from the session's vaults (registry.runtime.credentials) as `Authorization: Bearer`, and only
to public addresses (registry.core.egress). With `REGISTRY_MCP_VIA_GATEWAY` every call goes to the
gateway's `/v1/mcp` instead, with the session's model-call token and the server's name in
`x-mcp-server`; the gateway's destination and its credentials then decide where it goes.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import httpx
import mcp_types
from django.conf import settings
from mcp import Client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

from registry.core.egress import EgressRefused, check_url

# The header that names the agent's MCP server to the gateway's MCP plane (routes match on it).
MCP_SERVER_HEADER = "x-mcp-server"


class McpUnavailable(Exception):
    """An MCP server could not be reached, refused our credentials, or answered with a protocol error.

    `kind` is the `session.error` type: `mcp_authentication_failed_error` for a 401/403 answer,
    `mcp_connection_failed_error` otherwise.
    """

    def __init__(self, message: str, kind: str = "mcp_connection_failed_error") -> None:
        super().__init__(message)
        self.kind, self.message = kind, message


@dataclass(frozen=True)
class McpTool:
    """A tool one of the agent's MCP servers offers."""

    server_name: str
    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True)
class McpToolOutcome:
    """What an MCP tool call returned, as session content blocks."""

    content: list[dict[str, Any]]
    is_error: bool


@dataclass(frozen=True)
class McpRoute:
    """How to reach one MCP server: straight to its URL (with the session's vault token), or through
    the gateway's MCP plane (`REGISTRY_MCP_VIA_GATEWAY`), which picks the destination by `x-mcp-server`."""

    server_name: str
    url: str
    headers: dict[str, str]
    direct: bool

    @classmethod
    def of(cls, *, server_name: str, url: str, bearer: str | None, gateway_auth: dict[str, str]) -> McpRoute:
        if settings.REGISTRY_MCP_VIA_GATEWAY:
            gateway = settings.REGISTRY_MODEL_BASE_URL.rstrip("/") + "/v1/mcp"
            return cls(server_name, gateway, {**gateway_auth, MCP_SERVER_HEADER: server_name}, direct=False)
        return cls(server_name, url, {"Authorization": f"Bearer {bearer}"} if bearer else {}, direct=True)

    def transport(self) -> Any:
        if self.direct:
            _check_destination(self.server_name, self.url)
        if not self.headers:
            return self.url
        return streamable_http_client(self.url, http_client=create_mcp_http_client(headers=self.headers))


def list_tools(route: McpRoute, *, timeout: float) -> list[McpTool]:
    """Every tool the server lists, across pages."""
    return _run(_list_tools(route.server_name, route.transport(), timeout), route.server_name, timeout)


def call_tool(route: McpRoute, *, name: str, arguments: dict[str, Any], timeout: float) -> McpToolOutcome:
    return _run(_call_tool(route.transport(), name, arguments, timeout), route.server_name, timeout)


def _check_destination(server_name: str, url: str) -> None:
    """The agent's MCP URLs are the client's: loopback, private and metadata addresses are refused.

    The message is the same whatever listens there, so it reveals nothing about the address.
    """
    try:
        check_url(url)
    except EgressRefused:
        raise McpUnavailable(
            f"MCP server {server_name!r} cannot be reached: its address is not one the runtime may connect to."
        ) from None


def _run(coroutine: Any, server_name: str, timeout: float) -> Any:
    try:
        return asyncio.run(asyncio.wait_for(coroutine, timeout=timeout))
    except Exception as error:  # the SDK raises transport, protocol and validation errors alike
        if _refused_credentials(error):
            message = f"MCP server {server_name!r} refused the session's credentials."
            raise McpUnavailable(message, "mcp_authentication_failed_error") from error
        raise McpUnavailable(f"MCP server {server_name!r} failed: {_describe(error)}") from error


def _refused_credentials(error: BaseException) -> bool:
    if isinstance(error, BaseExceptionGroup):
        return any(_refused_credentials(inner) for inner in error.exceptions)
    if isinstance(error, httpx.HTTPStatusError):
        return error.response.status_code in (401, 403)
    return error.__cause__ is not None and _refused_credentials(error.__cause__)


def _describe(error: BaseException) -> str:
    """The innermost causes of an error; the SDK wraps transport errors in exception groups."""
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(_describe(inner) for inner in error.exceptions)
    return f"{type(error).__name__}: {error}"


async def _list_tools(server_name: str, server: Any, timeout: float) -> list[McpTool]:
    tools: list[McpTool] = []
    async with Client(server, read_timeout_seconds=timeout) as client:
        cursor: str | None = None
        while True:
            page = await client.list_tools(cursor=cursor)
            tools.extend(
                McpTool(server_name, tool.name, tool.description or "", dict(tool.input_schema)) for tool in page.tools
            )
            cursor = page.next_cursor
            if not cursor:
                return tools


async def _call_tool(server: Any, name: str, arguments: dict[str, Any], timeout: float) -> McpToolOutcome:
    async with Client(server, read_timeout_seconds=timeout) as client:
        result = await client.call_tool(name, arguments)
    return McpToolOutcome(content=[content_block(item) for item in result.content], is_error=bool(result.is_error))


def content_block(item: Any) -> dict[str, Any]:
    """An MCP content item as a session content block: text and images map; others become JSON text."""
    if isinstance(item, mcp_types.TextContent):
        return {"type": "text", "text": item.text}
    if isinstance(item, mcp_types.ImageContent):
        return {"type": "image", "source": {"type": "base64", "media_type": item.mime_type, "data": item.data}}
    dumped = item.model_dump(mode="json", by_alias=True, exclude_none=True)
    return {"type": "text", "text": json.dumps(dumped)}

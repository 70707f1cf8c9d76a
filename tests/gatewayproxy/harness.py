"""Runs a real gateway (uvloop, both listeners on free loopback ports) in a background thread for tests, and
waits for one started as a process to become ready."""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
from typing import Any

import anthropic
import httpx
import openai
import uvloop

from gatewayproxy.app import Gateway
from gatewayproxy.config.loader import validate_document


def loopback_config(document: dict[str, Any]) -> dict[str, Any]:
    """`document` with both listeners on free loopback ports."""
    server = {"listen": "127.0.0.1:0", "admin_listen": "127.0.0.1:0", **document.get("server", {})}
    return {**document, "server": server}


def wait_ready(admin: str, process: subprocess.Popen[Any], timeout: float = 20) -> None:
    """Wait until the gateway process answers `readyz` on its admin root `admin`; fail with its output if it
    exits first, or after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            output = process.communicate()[0]
            raise AssertionError(output.decode() if isinstance(output, bytes) else output)
        try:
            if httpx.get(f"{admin}/readyz").status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.05)
    raise AssertionError("gateway did not become ready")


class GatewayThread:
    """A gateway serving from its own event loop thread."""

    def __init__(self, document: dict[str, Any], base_dir: str | None = None) -> None:
        self.loaded = validate_document(loopback_config(document), base_dir=base_dir)
        self.loop = uvloop.new_event_loop()
        self.gateway = Gateway(self.loaded)
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._openai: openai.OpenAI | None = None
        self._anthropic: anthropic.Anthropic | None = None

    @property
    def openai(self) -> openai.OpenAI:
        """An official vendor-A client pointed at the data plane (closed with the gateway)."""
        if self._openai is None:
            self._openai = openai.OpenAI(base_url=f"{self.url}/v1", api_key="client-key", max_retries=0)
        return self._openai

    @property
    def anthropic(self) -> anthropic.Anthropic:
        """An official vendor-B client pointed at the data plane (closed with the gateway)."""
        if self._anthropic is None:
            self._anthropic = anthropic.Anthropic(base_url=self.url, api_key="client-key", max_retries=0)
        return self._anthropic

    def start(self) -> GatewayThread:
        """Start the loop and the gateway."""
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.gateway.start(), self.loop).result(timeout=10)
        return self

    def stop(self) -> None:
        """Close the clients, drain, stop the loop and join the thread."""
        for client in (self._openai, self._anthropic):
            if client is not None:
                client.close()
        asyncio.run_coroutine_threadsafe(self.gateway.shutdown(), self.loop).result(timeout=30)

        async def cancel_rest() -> None:
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(cancel_rest(), self.loop).result(timeout=5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()

    @property
    def url(self) -> str:
        """The data-plane root."""
        assert self.gateway.data is not None
        return f"http://127.0.0.1:{self.gateway.data.port}"

    @property
    def admin_url(self) -> str:
        """The admin-plane root."""
        assert self.gateway.admin is not None
        return f"http://127.0.0.1:{self.gateway.admin.port}"

    @property
    def metrics_text(self) -> str:
        """The current metrics exposition."""
        assert self.gateway.runtime is not None
        return self.gateway.runtime.metrics.exposition().decode()

"""Runs a real gateway (uvloop, both listeners on free loopback ports) in a background thread for tests; the one
way a gateway test starts such gateways (`GatewayFactory`, behind the `gateway_factory` fixtures); and the wait
for one started as a process to become ready."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
import uvloop

from fakes.waiting import wait_until
from gatewayproxy.app import Gateway
from gatewayproxy.config.loader import validate_document
from tests.support.clients import vendor_a_client, vendor_b_client


def loopback_config(document: dict[str, Any]) -> dict[str, Any]:
    """`document` with both listeners on free loopback ports."""
    server = {"listen": "127.0.0.1:0", "admin_listen": "127.0.0.1:0", **document.get("server", {})}
    return {**document, "server": server}


def wait_ready(admin: str, process: subprocess.Popen[Any], timeout: float = 20) -> None:
    """Wait until the gateway process answers `readyz` on its admin root `admin`; fail with its output if it
    exits first, or after `timeout` seconds."""

    def ready() -> bool:
        if process.poll() is not None:
            output = process.communicate()[0]
            raise AssertionError(output.decode() if isinstance(output, bytes) else output)
        try:
            return httpx.get(f"{admin}/readyz").status_code == 200
        except httpx.TransportError:
            return False

    wait_until(ready, timeout=timeout, what="the gateway to become ready")


@contextlib.contextmanager
def vault_keys(**keys: str) -> Iterator[None]:
    """Credentials of the `keys` env vault in the environment (`a="..."` sets VAULT__KEYS__A) until the end."""
    patch = pytest.MonkeyPatch()
    for credential_id, value in keys.items():
        patch.setenv(f"VAULT__KEYS__{credential_id.upper()}", value)
    try:
        yield
    finally:
        patch.undo()


class GatewayThread:
    """A gateway serving from its own event loop thread."""

    def __init__(self, document: dict[str, Any], base_dir: str | None = None) -> None:
        self.loaded = validate_document(loopback_config(document), base_dir=base_dir)
        self._serve(Gateway(self.loaded))

    def _serve(self, gateway: Gateway) -> None:
        self.loop = uvloop.new_event_loop()
        self.gateway = gateway
        self.stopped = False
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._openai: openai.OpenAI | None = None
        self._anthropic: anthropic.Anthropic | None = None

    @classmethod
    def around(cls, gateway: Gateway) -> GatewayThread:
        """A thread serving a gateway the caller built (database-backed, or from a legacy document)."""
        thread = cls.__new__(cls)
        thread._serve(gateway)
        return thread

    @property
    def openai(self) -> openai.OpenAI:
        """An official vendor-A client pointed at the data plane (closed with the gateway)."""
        if self._openai is None:
            self._openai = vendor_a_client(self.url)
        return self._openai

    @property
    def anthropic(self) -> anthropic.Anthropic:
        """An official vendor-B client pointed at the data plane (closed with the gateway)."""
        if self._anthropic is None:
            self._anthropic = vendor_b_client(self.url)
        return self._anthropic

    def start(self) -> GatewayThread:
        """Start the loop and the gateway."""
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.gateway.start(), self.loop).result(timeout=10)
        return self

    def stop(self) -> None:
        """Close the clients, drain, stop the loop and join the thread (once: later calls do nothing)."""
        if self.stopped:
            return
        self.stopped = True
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


class GatewayFactory:
    """Starts gateways serving documents (`factory(document, base_dir=...)`, or `factory.around(gateway)` for one
    the caller built) and stops every one it started, last first, at `stop()`: a fixture's scope owns them."""

    def __init__(self) -> None:
        self.started: list[GatewayThread] = []

    def __call__(self, document: dict[str, Any], *, base_dir: str | Path | None = None) -> GatewayThread:
        """A started gateway serving `document` (relative file paths in it resolve from `base_dir`)."""
        return self._started(GatewayThread(document, None if base_dir is None else str(base_dir)))

    def around(self, gateway: Gateway) -> GatewayThread:
        """`gateway`, built by the caller, served and started."""
        return self._started(GatewayThread.around(gateway))

    def _started(self, thread: GatewayThread) -> GatewayThread:
        self.started.append(thread.start())
        return thread

    def stop(self) -> None:
        while self.started:
            self.started.pop().stop()

"""Runs a real gateway (uvloop, both listeners on free loopback ports) in a background thread for tests, and
waits for one started as a process to become ready."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
import uvloop

from gatewayproxy.app import Gateway
from gatewayproxy.config.loader import validate_document
from tests.support.clients import vendor_a_client, vendor_b_client
from tests.support.waiting import wait_until

KEYS_VAULT = {"name": "keys", "resolver": "env"}


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


def keyed_destination(kind: str, base_url: str, credential_id: str, **extra: Any) -> dict[str, Any]:
    """A destination of `kind` at `base_url` whose key is `credential_id` in the `keys` env vault (KEYS_VAULT)."""
    credentials = {"vault": "keys", "credential_id": credential_id}
    return {"kind": kind, "base_url": base_url, "credentials": credentials, **extra}


def fallback_route(name: str, match: str | dict[str, Any], destination: str, **extra: Any) -> dict[str, Any]:
    """A route to one destination; `match` is a model glob or a whole match block."""
    targets = [{"destination": destination}]
    matched = {"model": match} if isinstance(match, str) else match
    return {"name": name, "match": matched, "strategy": {"mode": "fallback", "targets": targets}, **extra}


def two_shapes(primary_url: str, secondary_url: str, **shape_b: Any) -> dict[str, Any]:
    """Models `a-*` to `shape_a`, chat-shaped at `primary_url`; `b-*` to `shape_b`, messages-shaped at
    `secondary_url` (with `shape_b` as more destination fields); keys `a` and `b` of the `keys` env vault."""
    return {
        "vaults": [KEYS_VAULT],
        "destinations": {
            "shape_a": keyed_destination("vendor_a", f"{primary_url}/v1", "a"),
            "shape_b": keyed_destination("vendor_b", secondary_url, "b", **shape_b),
        },
        "routes": [fallback_route("to_a", "a-*", "shape_a"), fallback_route("to_b", "b-*", "shape_b")],
    }


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
        self.loop = uvloop.new_event_loop()
        self.gateway = Gateway(self.loaded)
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._openai: openai.OpenAI | None = None
        self._anthropic: anthropic.Anthropic | None = None

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

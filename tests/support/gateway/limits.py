"""Helpers of the limit, spend and pricing tests: config documents, concurrent request bursts, polls and error
codes."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import httpx

from fakes.waiting import wait_until
from tests.support.gateway.provider import FakeProvider

HI = [{"role": "user", "content": "hi"}]
CHAT = {"model": "m", "messages": HI}
# Fake-provider usage of a chat completion: 11 prompt and 7 completion tokens.
CHAT_TOKENS = 18


def document(
    provider: FakeProvider,
    *,
    rate_limits: list[dict[str, Any]],
    spend: dict[str, Any] | None = None,
    plugins: dict[str, Any] | None = None,
    pricing: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A gateway in front of `provider` whose callers pick their scope with `x-scope-team` / `x-scope-user`."""
    destination: dict[str, Any] = {"kind": "vendor_a", "base_url": f"{provider.url}/v1", "credentials": {"vault": "v"}}
    if pricing is not None:
        destination["pricing"] = pricing
    return {
        "identity": {"scope_dims": ["team", "user"]},
        "vaults": [{"name": "v", "resolver": "env", "env_var": "PATH"}],
        "destinations": {"one": destination},
        "routes": [{"name": "all", "strategy": {"mode": "fallback", "targets": [{"destination": "one"}]}}],
        "rate_limits": rate_limits,
        "spend": {"trusted_header_dims": ["team", "user"], **(spend or {})},
        "plugins": plugins or {},
    }


def redis_limiter(url: str, failure_mode: str = "deny", *, timeout_ms: int | None = None) -> dict[str, Any]:
    """A `redis_window` rate limiter with a key prefix of its own (`timeout_ms`: per Redis call, when a
    test's burst must not read a loaded machine's slow answer as an outage)."""
    limiter = {
        "name": "shared",
        "kind": "redis_window",
        "url": url,
        "key_prefix": f"test:{uuid.uuid4().hex}:",
        "failure_mode": failure_mode,
        "retry_interval_ms": 50,
    }
    if timeout_ms is not None:
        limiter["timeout_ms"] = timeout_ms
    return {"rate_limiter": limiter}


def chat(url: str, **headers: str) -> httpx.Response:
    """One chat completion through the gateway at `url`."""
    return httpx.post(f"{url}/v1/chat/completions", json=CHAT, headers=headers, timeout=10)


def burst(url: str, count: int, body: dict[str, Any] | None = None) -> list[httpx.Response]:
    """`count` chat completions sent at once."""

    async def fire() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=count)
        async with httpx.AsyncClient(timeout=30, limits=limits) as client:
            return list(
                await asyncio.gather(
                    *(client.post(f"{url}/v1/chat/completions", json=body or CHAT) for _ in range(count))
                )
            )

    return asyncio.run(fire())


def poll(check: Callable[[], Any], timeout: float = 10.0) -> Any:
    """The first truthy result of `check`, retried until `timeout` (then the wait fails)."""
    return wait_until(check, timeout=timeout)


def error_code(response: httpx.Response) -> str:
    """The machine-readable code of a vendor-A error body."""
    return str(response.json()["error"]["code"])

"""The official SDK clients pointed at a live server: the registry through the vendor-B client (workspace key in
`x-api-key`), and the gateway's data plane through the vendor-A and vendor-B clients. No retries, so a test sees
the first answer."""

from __future__ import annotations

import anthropic
import httpx2
import openai


def registry_client(url: str, api_key: str, *, timeout: float = 30) -> anthropic.Anthropic:
    """The reference client of the registry at `url`, authenticated with a workspace API key."""
    return anthropic.Anthropic(
        base_url=url,
        api_key=None,
        auth_token=None,
        default_headers={"x-api-key": api_key},
        max_retries=0,
        timeout=timeout,
    )


def vendor_a_client(
    url: str, api_key: str = "client-key", *, http_client: httpx2.Client | None = None
) -> openai.OpenAI:
    """The vendor-A client against a gateway's data plane root `url` (its API under `/v1`)."""
    return openai.OpenAI(base_url=f"{url}/v1", api_key=api_key, http_client=http_client, max_retries=0)


def vendor_b_client(
    url: str, api_key: str = "client-key", *, http_client: httpx2.Client | None = None
) -> anthropic.Anthropic:
    """The vendor-B client against a gateway's data plane root `url`."""
    return anthropic.Anthropic(base_url=url, api_key=api_key, http_client=http_client, max_retries=0)

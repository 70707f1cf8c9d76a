"""Reading token usage from each shape's JSON usage object, summing it, and writing it back as a chat usage object."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from gatewayproxy.context import Usage


def _int(value: Any) -> int:
    return value if isinstance(value, int) else 0


def _details(usage: dict, key: str, field: str) -> int:
    details = usage.get(key)
    return _int(details.get(field)) if isinstance(details, dict) else 0


def _detailed_usage(
    usage: Any, input_key: str, input_details: str, output_key: str, output_details: str
) -> Usage | None:
    """Usage from token counts each detailed by an object beside it (cached input, reasoning output)."""
    if not isinstance(usage, dict):
        return None
    return Usage(
        input_tokens=_int(usage.get(input_key)),
        output_tokens=_int(usage.get(output_key)),
        cache_read_tokens=_details(usage, input_details, "cached_tokens"),
        reasoning_tokens=_details(usage, output_details, "reasoning_tokens"),
    )


def chat_usage(usage: Any) -> Usage | None:
    """Usage of a chat-completions or embeddings response."""
    return _detailed_usage(
        usage, "prompt_tokens", "prompt_tokens_details", "completion_tokens", "completion_tokens_details"
    )


def messages_usage(usage: Any) -> Usage | None:
    """Usage of a messages response (or the merged usage of its stream)."""
    if not isinstance(usage, dict):
        return None
    return Usage(
        input_tokens=_int(usage.get("input_tokens")),
        output_tokens=_int(usage.get("output_tokens")),
        cache_read_tokens=_int(usage.get("cache_read_input_tokens")),
        cache_write_tokens=_int(usage.get("cache_creation_input_tokens")),
        cache_write_1h_tokens=_details(usage, "cache_creation", "ephemeral_1h_input_tokens"),
    )


def responses_usage(usage: Any) -> Usage | None:
    """Usage of a responses-API response."""
    return _detailed_usage(usage, "input_tokens", "input_tokens_details", "output_tokens", "output_tokens_details")


def summed(usages: list[Usage]) -> Usage:
    """The usage of several calls that answer one request together (a fan-out)."""
    return Usage(**{each.name: sum(getattr(usage, each.name) for usage in usages) for each in fields(Usage)})


def usage_to_chat(usage: Usage) -> dict[str, Any]:
    """The chat usage object of a usage (cached and cache-written input count as prompt tokens there)."""
    prompt = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
    details: dict[str, Any] = {"cached_tokens": usage.cache_read_tokens}
    if usage.cache_write_tokens:
        details["cache_write_tokens"] = usage.cache_write_tokens
    return {
        "prompt_tokens": prompt,
        "completion_tokens": usage.output_tokens,
        "total_tokens": prompt + usage.output_tokens,
        "prompt_tokens_details": details,
    }

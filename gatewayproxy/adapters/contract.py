"""The translation contract: which request fields and content blocks of one shape the other shape can carry.

A field the target cannot carry is refused (400 `unsupported_parameter` naming it) before any upstream call, or,
on a `translation: lenient` route, dropped and named in `x-gateway-dropped-params`. The README's translation table
says, field by field, what is carried, emulated or refused; this module is that table's refusal half.
"""

from __future__ import annotations

from typing import Any

from gatewayproxy.errors import ErrorCode, GatewayError

# Chat-completions fields a messages-shaped target has no counterpart for.
REFUSED_TOWARDS_MESSAGES = (
    "seed",
    "logprobs",
    "top_logprobs",
    "frequency_penalty",
    "presence_penalty",
    "logit_bias",
    "audio",
    "modalities",
    "prediction",
    "functions",
    "function_call",
    "web_search_options",
    "service_tier",
    "store",
    "metadata",
)
# Chat-completions fields carried or emulated towards a messages-shaped target (everything else is refused).
CARRIED_TOWARDS_MESSAGES = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "stream",
        "stream_options",
        "stop",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "user",
        "reasoning_effort",
        "response_format",
        "n",
    }
)
# Messages fields a chat-shaped target has no counterpart for.
REFUSED_TOWARDS_CHAT = ("top_k", "container", "mcp_servers", "service_tier")
CARRIED_TOWARDS_CHAT = frozenset(
    {
        "model",
        "messages",
        "system",
        "max_tokens",
        "temperature",
        "top_p",
        "stream",
        "stop_sequences",
        "tools",
        "tool_choice",
        "metadata",
        "thinking",
    }
)
# `n` towards a messages-shaped target is one upstream call per choice, at most this many.
MAX_FAN_OUT = 16
# Content parts of chat messages that have no messages-shaped block.
REFUSED_CHAT_PARTS = {"input_audio": "input_audio"}


def _part_problems(body: dict[str, Any]) -> list[tuple[str, str]]:
    """(name, path) of chat content parts a messages-shaped target cannot carry."""
    found = []
    for position, message in enumerate(body.get("messages") or []):
        content = message.get("content") if isinstance(message, dict) else None
        for index, part in enumerate(content if isinstance(content, list) else []):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind in REFUSED_CHAT_PARTS:
                found.append((REFUSED_CHAT_PARTS[kind], f"messages[{position}].content[{index}]"))
            elif kind == "file" and not str((part.get("file") or {}).get("file_data", "")).startswith("data:"):
                found.append(("file_id", f"messages[{position}].content[{index}].file.file_id"))
    return found


def _block_problems(body: dict[str, Any]) -> list[tuple[str, str]]:
    """(name, path) of messages blocks a chat-shaped target cannot carry: URL documents (the gateway never
    fetches a client's URL itself, and chat file parts take only inline data)."""
    found = []
    for position, message in enumerate(body.get("messages") or []):
        content = message.get("content") if isinstance(message, dict) else None
        for index, block in enumerate(content if isinstance(content, list) else []):
            if not isinstance(block, dict):
                continue
            source: dict = block["source"] if isinstance(block.get("source"), dict) else {}
            if block.get("type") == "document" and source.get("type") not in ("base64", "text"):
                found.append(("document", f"messages[{position}].content[{index}].source"))
    return found


def refusals(body: dict[str, Any], towards_messages: bool) -> list[tuple[str, str]]:
    """(name, path) of every field of `body` the other shape cannot carry, in body order."""
    carried = CARRIED_TOWARDS_MESSAGES if towards_messages else CARRIED_TOWARDS_CHAT
    # A field left at its "off" value (null, false) asks for nothing and passes.
    found = [(key, key) for key in body if key not in carried and body[key] is not None and body[key] is not False]
    if towards_messages:
        if body.get("n") not in (None, 1) and body.get("stream") is True:
            found.append(("n", "n"))  # n > 1 is fanned out for JSON answers only; a stream carries one choice
        found += _part_problems(body)
    else:
        found += _block_problems(body)
    return found


def choices_wanted(body: dict[str, Any]) -> int:
    """The `n` of a chat request towards a messages-shaped target: that many upstream calls answer it (fan-out).
    Not an integer from 1 to MAX_FAN_OUT is 400."""
    n = body.get("n")
    if n is None:
        return 1
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise GatewayError(ErrorCode.INVALID_REQUEST, "`n` must be a positive integer")
    if n > MAX_FAN_OUT:
        raise GatewayError(
            ErrorCode.UNSUPPORTED_PARAMETER,
            f"`n` above {MAX_FAN_OUT} cannot be carried to a messages-shaped destination (one call per choice)",
            param="n",
        )
    return n


def refuse_background(body: dict[str, Any]) -> None:
    """`background: true` on the responses API is refused: the gateway accounts a response's tokens when it answers
    the create, and a background response has none yet (they would surface only on a later fetch)."""
    if body.get("background") not in (None, False):
        raise GatewayError(
            ErrorCode.UNSUPPORTED_PARAMETER,
            "`background` responses are not supported through the gateway",
            param="background",
        )


def _without_parts(body: dict[str, Any], towards_messages: bool) -> dict[str, Any]:
    """`body` with the refused content parts dropped (lenient routes)."""
    messages = []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            kept = [part for part in content if not _refused_part(part, towards_messages)]
            message = {**message, "content": kept}
        messages.append(message)
    return {**body, "messages": messages}


def _refused_part(part: Any, towards_messages: bool) -> bool:
    if not isinstance(part, dict):
        return False
    if towards_messages:
        if part.get("type") in REFUSED_CHAT_PARTS:
            return True
        return part.get("type") == "file" and not str((part.get("file") or {}).get("file_data", "")).startswith("data:")
    source: dict = part["source"] if isinstance(part.get("source"), dict) else {}
    return part.get("type") == "document" and source.get("type") not in ("base64", "text")


def enforce(body: dict[str, Any], towards_messages: bool, lenient: bool) -> tuple[dict[str, Any], list[str]]:
    """`body` ready for translation and the names dropped from it; raises `unsupported_parameter` on a strict
    route for the first field that cannot be carried."""
    found = refusals(body, towards_messages)
    if not found:
        return body, []
    if not lenient:
        path = found[0][1]
        target = "messages" if towards_messages else "chat-completions"
        raise GatewayError(
            ErrorCode.UNSUPPORTED_PARAMETER,
            f"`{path}` cannot be carried to a {target}-shaped destination",
            param=path,
        )
    top_level = {path for _, path in found if path in body}
    kept = {key: value for key, value in body.items() if key not in top_level}
    if len(top_level) < len(found):
        kept = _without_parts(kept, towards_messages)
    return kept, list(dict.fromkeys(name for name, _ in found))

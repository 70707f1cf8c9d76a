"""The translation contract: which request fields and content blocks of one shape the other shape can carry.

A field the target cannot carry is refused (400 `unsupported_parameter` naming it) before any upstream call, or,
on a `translation: lenient` route, dropped and named in `x-gateway-dropped-params`. The README's translation table
says, field by field, what is carried, emulated or refused; this module is that table's refusal half.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any, NamedTuple

from gatewayproxy.adapters.translate import CHAT_TO_MESSAGES_EFFORT, MESSAGES_TO_CHAT_EFFORT
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
        "output_config",
    }
)
# `n` towards a messages-shaped target is one upstream call per choice, at most this many.
MAX_FAN_OUT = 16
# Content parts of chat messages that have no messages-shaped block.
REFUSED_CHAT_PARTS = frozenset({"input_audio"})
# The path of one content part, at the start of the path of anything refused inside it.
PART_PATH = re.compile(r"messages\[\d+\]\.content\[\d+\]")


class Refusal(NamedTuple):
    """A field the other shape cannot carry: its `name` (as `x-gateway-dropped-params` lists it), its `path` in the
    body (the error's `param`), and what it is, for the error message (`an input_audio part`)."""

    name: str
    path: str
    what: str = ""


def _part_problems(body: dict[str, Any]) -> list[Refusal]:
    """Chat content parts a messages-shaped target cannot carry."""
    found = []
    for position, message in enumerate(body.get("messages") or []):
        content = message.get("content") if isinstance(message, dict) else None
        for index, part in enumerate(content if isinstance(content, list) else []):
            kind = part.get("type") if isinstance(part, dict) else None
            path = f"messages[{position}].content[{index}]"
            if kind in REFUSED_CHAT_PARTS:
                found.append(Refusal(str(kind), path, f"an {kind} part"))
            elif kind == "file" and not str((part.get("file") or {}).get("file_data", "")).startswith("data:"):
                found.append(Refusal("file_id", f"{path}.file.file_id", "a file part by file_id"))
    return found


def _block_problems(body: dict[str, Any]) -> list[Refusal]:
    """Messages blocks a chat-shaped target cannot carry: documents by URL or file id (the gateway never fetches a
    client's URL itself, and chat file parts take only inline data)."""
    found = []
    for position, message in enumerate(body.get("messages") or []):
        content = message.get("content") if isinstance(message, dict) else None
        for index, block in enumerate(content if isinstance(content, list) else []):
            if not isinstance(block, dict) or block.get("type") != "document":
                continue
            source: dict = block["source"] if isinstance(block.get("source"), dict) else {}
            kind = source.get("type")
            if kind not in ("base64", "text"):
                what = f"a document block with a {kind} source" if kind else "a document block without a source"
                found.append(Refusal("document", f"messages[{position}].content[{index}].source", what))
    return found


def _level_problem(path: str, value: Any, levels: Collection[str]) -> list[Refusal]:
    """An effort level with no counterpart in the other shape (none when it is absent or has one)."""
    if value is None or (isinstance(value, str) and value in levels):
        return []
    return [Refusal(path, path, f"the level {value!r}, not one of {', '.join(levels)}")]


def _output_config_problems(body: dict[str, Any]) -> list[Refusal]:
    """What of a messages `output_config` a chat-shaped target cannot carry: anything but a mapped `effort`."""
    config = body.get("output_config")
    if config is None:
        return []
    if not isinstance(config, dict):
        return [Refusal("output_config", "output_config", "not an object")]
    found = [
        Refusal(f"output_config.{key}", f"output_config.{key}")
        for key, value in config.items()
        if key != "effort" and value is not None
    ]
    return found + _level_problem("output_config.effort", config.get("effort"), MESSAGES_TO_CHAT_EFFORT)


def refusals(body: dict[str, Any], towards_messages: bool) -> list[Refusal]:
    """Every field of `body` the other shape cannot carry, in body order."""
    carried = CARRIED_TOWARDS_MESSAGES if towards_messages else CARRIED_TOWARDS_CHAT
    # A field left at its "off" value (null, false) asks for nothing and passes.
    found = [
        Refusal(key, key) for key in body if key not in carried and body[key] is not None and body[key] is not False
    ]
    if towards_messages:
        found += _level_problem("reasoning_effort", body.get("reasoning_effort"), CHAT_TO_MESSAGES_EFFORT)
        found += _part_problems(body)
    else:
        found += _output_config_problems(body)
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


def _without(body: dict[str, Any], paths: set[str]) -> dict[str, Any]:
    """`body` without the fields, `output_config` entries and content parts at `paths` (lenient routes)."""
    kept = {key: value for key, value in body.items() if key not in paths}
    if isinstance(kept.get("output_config"), dict):
        config = kept["output_config"]
        kept["output_config"] = {key: value for key, value in config.items() if f"output_config.{key}" not in paths}
    parts = {found.group(0) for path in paths if (found := PART_PATH.match(path))}
    if not parts:
        return kept
    messages = []
    for position, message in enumerate(kept.get("messages") or []):
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            content = [
                part for index, part in enumerate(content) if f"messages[{position}].content[{index}]" not in parts
            ]
            message = {**message, "content": content}
        messages.append(message)
    return {**kept, "messages": messages}


def enforce(body: dict[str, Any], towards_messages: bool, lenient: bool) -> tuple[dict[str, Any], list[str]]:
    """`body` ready for translation and the names dropped from it; raises `unsupported_parameter` on a strict
    route for the first field that cannot be carried."""
    found = refusals(body, towards_messages)
    if not found:
        return body, []
    if not lenient:
        first = found[0]
        target = "messages" if towards_messages else "chat-completions"
        what = f" ({first.what})" if first.what else ""
        raise GatewayError(
            ErrorCode.UNSUPPORTED_PARAMETER,
            f"`{first.path}`{what} cannot be carried to a {target}-shaped destination",
            param=first.path,
        )
    kept = _without(body, {refusal.path for refusal in found})
    return kept, list(dict.fromkeys(refusal.name for refusal in found))

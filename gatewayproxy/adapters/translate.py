"""Whole-body translation between the chat-completions shape (vendor A) and the messages shape (vendor B):
requests both ways, responses both ways, and error envelopes. What is refused lives in `contract`; the README's
translation table says what each field becomes."""

from __future__ import annotations

import json
import time
from typing import Any

from gatewayproxy.adapters.bodies import arguments_of, text_of

CHAT_TO_MESSAGES_STOP = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}
MESSAGES_TO_CHAT_STOP = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
    "pause_turn": "stop",
}


# `response_format` towards a messages-shaped target is emulated by this forced tool; its input is the answer.
RESPONSE_FORMAT_TOOL = "gateway_response_format"
# `reasoning_effort` and the thinking budget it stands for (tokens), both ways.
EFFORT_BUDGETS = {"minimal": 1024, "low": 1024, "medium": 4096, "high": 16384, "xhigh": 16384, "max": 16384}
# `reasoning_effort` (chat) as `output_config.effort` (messages), the closest level; `none` asks for nothing.
CHAT_TO_MESSAGES_EFFORT: dict[str, str | None] = {
    "none": None,
    "minimal": "low",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "xhigh",
    "max": "max",
}
# `output_config.effort` (messages) as `reasoning_effort` (chat): every level has its namesake there.
MESSAGES_TO_CHAT_EFFORT = {"low": "low", "medium": "medium", "high": "high", "xhigh": "xhigh", "max": "max"}


def _effort_of(budget: Any) -> str:
    budget = budget if isinstance(budget, int) else 0
    return "low" if budget <= 2048 else "medium" if budget <= 8192 else "high"


def _cached(target: dict, source: dict) -> dict:
    """`target` with the `cache_control` marker of `source`, when it has one."""
    if isinstance(source, dict) and source.get("cache_control"):
        target["cache_control"] = source["cache_control"]
    return target


# Chat-completions request -> messages request.


def _image_block(url: str) -> dict:
    if url.startswith("data:") and ";base64," in url:
        media_type, _, data = url.removeprefix("data:").partition(";base64,")
        return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _document_block(part: dict) -> dict:
    file = part.get("file") or {}
    media_type, _, data = str(file.get("file_data", "")).removeprefix("data:").partition(";base64,")
    block: dict[str, Any] = {"type": "document", "source": {"type": "base64", "media_type": media_type, "data": data}}
    if file.get("filename"):
        block["title"] = file["filename"]
    return block


def _user_blocks(content: Any) -> list[dict]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    blocks = []
    for part in content or []:
        if part.get("type") == "text":
            blocks.append(_cached({"type": "text", "text": part.get("text", "")}, part))
        elif part.get("type") == "image_url":
            image = part.get("image_url")
            blocks.append(_cached(_image_block(image.get("url", "") if isinstance(image, dict) else str(image)), part))
        elif part.get("type") == "file":
            blocks.append(_cached(_document_block(part), part))
    return blocks


def _assistant_blocks(message: dict) -> list[dict]:
    # Thinking comes first and goes back signed, as a messages-shaped target checks it on tool-use turns.
    blocks = [dict(block) for block in message.get("thinking_blocks") or [] if isinstance(block, dict)]
    blocks += [{"type": "text", "text": text} for text in [text_of(message.get("content"))] if text]
    for call in message.get("tool_calls") or []:
        function = call.get("function", {})
        blocks.append(
            {
                "type": "tool_use",
                "id": call.get("id", ""),
                "name": function.get("name", ""),
                "input": arguments_of(function.get("arguments")),
            }
        )
    return blocks


def _tool_result_block(message: dict) -> dict:
    return {
        "type": "tool_result",
        "tool_use_id": message.get("tool_call_id", ""),
        "content": text_of(message.get("content")),
    }


def _append(messages: list[dict], role: str, blocks: list[dict]) -> None:
    """Consecutive turns of one role merge, as the messages shape alternates roles."""
    if messages and messages[-1]["role"] == role:
        messages[-1]["content"].extend(blocks)
    else:
        messages.append({"role": role, "content": blocks})


def _chat_tool(tool: dict) -> dict:
    function = tool.get("function", {})
    converted = {"name": function.get("name", ""), "input_schema": function.get("parameters") or {"type": "object"}}
    if function.get("description"):
        converted["description"] = function["description"]
    return _cached(converted, tool)


def _response_format_tool(response_format: Any) -> dict | None:
    """The forced tool that emulates `response_format` (json_schema or json_object); None for text."""
    if not isinstance(response_format, dict) or response_format.get("type") not in ("json_schema", "json_object"):
        return None
    schema = (response_format.get("json_schema") or {}).get("schema") or {"type": "object"}
    return {"name": RESPONSE_FORMAT_TOOL, "description": "Answer with this JSON.", "input_schema": schema}


def _system_of(parts: list[Any]) -> Any:
    """System text, or blocks when a part carries a `cache_control` marker."""
    if not any(isinstance(part, dict) and part.get("cache_control") for part in parts):
        return "\n\n".join(text_of(part.get("text", "")) if isinstance(part, dict) else str(part) for part in parts)
    return [
        _cached({"type": "text", "text": part.get("text", "") if isinstance(part, dict) else str(part)}, part)
        for part in parts
    ]


def _chat_tool_choice(choice: Any, parallel: Any) -> dict | None:
    if choice is None and parallel is not False:
        return None
    if isinstance(choice, dict):
        converted: dict[str, Any] = {"type": "tool", "name": choice.get("function", {}).get("name", "")}
    else:
        converted = {"type": {"required": "any", "none": "none"}.get(choice or "auto", "auto")}
    if parallel is False and converted["type"] != "none":
        converted["disable_parallel_tool_use"] = True
    return converted


def chat_to_messages_request(body: dict, default_max_tokens: int) -> dict:
    """A messages request equivalent to a chat-completions request."""
    system: list[Any] = []
    messages: list[dict] = []
    for message in body.get("messages") or []:
        role = message.get("role")
        if role in ("system", "developer"):
            content = message.get("content")
            system += content if isinstance(content, list) else [{"type": "text", "text": text_of(content)}]
        elif role == "assistant":
            _append(messages, "assistant", _assistant_blocks(message))
        elif role == "tool":
            _append(messages, "user", [_tool_result_block(message)])
        else:
            _append(messages, "user", _user_blocks(message.get("content")))
    converted: dict[str, Any] = {
        "model": body.get("model"),
        "messages": messages,
        "max_tokens": body.get("max_completion_tokens") or body.get("max_tokens") or default_max_tokens,
    }
    if system:
        converted["system"] = _system_of(system)
    for key in ("temperature", "top_p", "stream"):
        if key in body:
            converted[key] = body[key]
    stop = body.get("stop")
    if stop:
        converted["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    if body.get("tools"):
        converted["tools"] = [_chat_tool(tool) for tool in body["tools"] if tool.get("type", "function") == "function"]
    tool_choice = _chat_tool_choice(body.get("tool_choice"), body.get("parallel_tool_calls"))
    if tool_choice is not None and body.get("tools"):
        converted["tool_choice"] = tool_choice
    format_tool = _response_format_tool(body.get("response_format"))
    if format_tool is not None:
        converted["tools"] = [*converted.get("tools", []), format_tool]
        converted["tool_choice"] = {"type": "tool", "name": RESPONSE_FORMAT_TOOL}
    if body.get("user"):
        converted["metadata"] = {"user_id": body["user"]}
    _add_reasoning(converted, body.get("reasoning_effort"))
    return converted


def _add_reasoning(converted: dict[str, Any], effort: Any) -> None:
    """`reasoning_effort` as a thinking budget (inside `max_tokens` there) and as `output_config.effort`."""
    if not isinstance(effort, str):
        return
    if effort in EFFORT_BUDGETS:
        budget = EFFORT_BUDGETS[effort]
        converted["thinking"] = {"type": "enabled", "budget_tokens": budget}
        if converted["max_tokens"] <= budget:
            converted["max_tokens"] += budget  # the budget is part of max_tokens there
    level = CHAT_TO_MESSAGES_EFFORT.get(effort)
    if level is not None:
        converted["output_config"] = {"effort": level}


# Messages request -> chat-completions request.


def _image_part(block: dict) -> dict:
    source = block.get("source", {})
    if source.get("type") == "base64":
        url = f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
    else:
        url = source.get("url", "")
    return {"type": "image_url", "image_url": {"url": url}}


def _file_part(block: dict) -> dict:
    source = block.get("source", {})
    if source.get("type") == "text":
        return {"type": "text", "text": source.get("data", "")}
    data_url = f"data:{source.get('media_type', 'application/pdf')};base64,{source.get('data', '')}"
    return {"type": "file", "file": {"filename": block.get("title") or "document", "file_data": data_url}}


def _tool_result_text(block: dict) -> str:
    """A tool result's text; an error result is marked, as the chat shape has no error flag for it."""
    text = text_of(block.get("content"))
    return f"Error: {text}" if block.get("is_error") else text


def _user_messages(content: Any) -> list[dict]:
    """Tool results become `tool` messages (first, as the chat shape wants them); the rest stays a user turn."""
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    tools, parts = [], []
    for block in content or []:
        kind = block.get("type")
        if kind == "tool_result":
            tools.append(
                {
                    "role": "tool",
                    "tool_call_id": block.get("tool_use_id", ""),
                    "content": _tool_result_text(block),
                }
            )
        elif kind == "text":
            parts.append({"type": "text", "text": block.get("text", "")})
        elif kind == "image":
            parts.append(_image_part(block))
        elif kind == "document":
            parts.append(_file_part(block))
    if parts:
        tools.append({"role": "user", "content": parts})
    return tools


def _assistant_message(content: Any) -> dict:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    text = "".join(block.get("text", "") for block in content or [] if block.get("type") == "text")
    calls = [
        {
            "id": block.get("id", ""),
            "type": "function",
            "function": {"name": block.get("name", ""), "arguments": json.dumps(block.get("input") or {})},
        }
        for block in content or []
        if block.get("type") == "tool_use"
    ]
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = calls
    return message


def _messages_tool_choice(choice: dict) -> Any:
    kind = choice.get("type")
    if kind == "tool":
        return {"type": "function", "function": {"name": choice.get("name", "")}}
    return {"any": "required", "none": "none"}.get(kind or "auto", "auto")


def messages_to_chat_request(body: dict) -> dict:
    """A chat-completions request equivalent to a messages request."""
    messages: list[dict] = []
    system = text_of(body.get("system"))
    if system:
        messages.append({"role": "system", "content": system})
    for message in body.get("messages") or []:
        if message.get("role") == "assistant":
            messages.append(_assistant_message(message.get("content")))
        else:
            messages.extend(_user_messages(message.get("content")))
    converted: dict[str, Any] = {"model": body.get("model"), "messages": messages}
    for key in ("max_tokens", "temperature", "top_p", "stream"):
        if key in body:
            converted[key] = body[key]
    if body.get("stop_sequences"):
        converted["stop"] = list(body["stop_sequences"])
    if body.get("tools"):
        converted["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": tool.get("name", ""),
                    "description": tool.get("description", ""),
                    "parameters": tool.get("input_schema") or {"type": "object"},
                },
            }
            for tool in body["tools"]
        ]
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and body.get("tools"):
        converted["tool_choice"] = _messages_tool_choice(choice)
        if choice.get("disable_parallel_tool_use"):
            converted["parallel_tool_calls"] = False
    user = (body.get("metadata") or {}).get("user_id")
    if user:
        converted["user"] = user
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive"):
        converted["reasoning_effort"] = _effort_of(thinking.get("budget_tokens") or 16384)
    output_config = body.get("output_config")
    effort = output_config.get("effort") if isinstance(output_config, dict) else None
    if isinstance(effort, str) and effort in MESSAGES_TO_CHAT_EFFORT:
        converted["reasoning_effort"] = MESSAGES_TO_CHAT_EFFORT[effort]  # the explicit level over the budget's
    return converted


# Responses both ways.


def messages_to_chat_response(response: dict) -> dict:
    """A chat-completions response equivalent to a messages response."""
    content = response.get("content") or []
    text = "".join(block.get("text", "") for block in content if block.get("type") == "text")
    emulated = [
        block for block in content if block.get("type") == "tool_use" and block.get("name") == RESPONSE_FORMAT_TOOL
    ]
    if emulated:
        text += json.dumps(emulated[0].get("input") or {})
        content = [block for block in content if block not in emulated]
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    thinking = [block for block in content if block.get("type") in ("thinking", "redacted_thinking")]
    if thinking:
        message["reasoning_content"] = "".join(block.get("thinking", "") for block in thinking)
        message["thinking_blocks"] = thinking
    calls = [
        {
            "id": block.get("id", ""),
            "type": "function",
            "function": {"name": block.get("name", ""), "arguments": json.dumps(block.get("input") or {})},
        }
        for block in content
        if block.get("type") == "tool_use"
    ]
    if calls:
        message["tool_calls"] = calls
    return {
        "id": response.get("id", ""),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": response.get("model", ""),
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "stop"
                if emulated
                else MESSAGES_TO_CHAT_STOP.get(response.get("stop_reason") or "", "stop"),
            }
        ],
        "usage": messages_usage_to_chat(response.get("usage") or {}),
    }


def messages_usage_to_chat(usage: dict) -> dict:
    """Chat usage fields from messages usage (cached input counts as prompt tokens there)."""
    cached = usage.get("cache_read_input_tokens") or 0
    written = usage.get("cache_creation_input_tokens") or 0
    prompt = (usage.get("input_tokens") or 0) + cached + written
    completion = usage.get("output_tokens") or 0
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached, **({"cache_write_tokens": written} if written else {})},
    }


def chat_usage_to_messages(usage: dict) -> dict:
    """Messages usage fields from chat usage."""
    details = usage.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens") or 0
    written = details.get("cache_write_tokens") or 0
    converted = {
        "input_tokens": (usage.get("prompt_tokens") or 0) - cached - written,
        "output_tokens": usage.get("completion_tokens") or 0,
        "cache_read_input_tokens": cached,
    }
    if written:
        converted["cache_creation_input_tokens"] = written
    return converted


def messages_answer(
    message_id: str, role: str, model: str, content: list[dict], stop_reason: str | None, usage: dict
) -> dict:
    """A messages-shaped answer."""
    return {
        "id": message_id,
        "type": "message",
        "role": role,
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage,
    }


def message_start(message_id: str, role: str, model: str) -> dict:
    """The body of a stream's `message_start` event: the answer with no content, stop reason or usage yet."""
    return {"message": messages_answer(message_id, role, model, [], None, {"input_tokens": 0, "output_tokens": 0})}


def chat_to_messages_response(response: dict) -> dict:
    """A messages response equivalent to a chat-completions response."""
    choice = (response.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    blocks = _assistant_blocks(message)
    if message.get("reasoning_content") and not message.get("thinking_blocks"):
        blocks.insert(0, {"type": "thinking", "thinking": message["reasoning_content"], "signature": ""})
    return messages_answer(
        response.get("id", ""),
        "assistant",
        response.get("model", ""),
        blocks,
        CHAT_TO_MESSAGES_STOP.get(choice.get("finish_reason") or "", "end_turn"),
        chat_usage_to_messages(response.get("usage") or {}),
    )


def error_message_of(body: Any) -> str:
    """The human message inside a provider error body of either shape."""
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return str(body["error"].get("message", ""))
    return ""

"""Cloud vendor D's unified conversation API (`Converse` / `ConverseStream`) spoken in the messages shape:
messages requests to conversation requests, conversation answers and stream events back to messages documents
and events, and the vendor's embedding models (InvokeModel bodies) to and from the embeddings shape."""

from __future__ import annotations

import base64
import uuid
from typing import Any

import orjson

from gatewayproxy.adapters.bodies import json_or_none
from gatewayproxy.adapters.translate import message_start, messages_answer
from gatewayproxy.errors import ErrorCode, GatewayError
from gatewayproxy.http.sse import SseEvent

IMAGE_FORMATS = {
    "image/png": "png",
    "image/jpeg": "jpeg",
    "image/jpg": "jpeg",
    "image/gif": "gif",
    "image/webp": "webp",
}
DOCUMENT_FORMATS = {
    "application/pdf": "pdf",
    "text/csv": "csv",
    "application/msword": "doc",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "application/vnd.ms-excel": "xls",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
    "text/html": "html",
    "text/plain": "txt",
    "text/markdown": "md",
}
STOP_REASONS = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "guardrail_intervened": "refusal",
    "content_filtered": "refusal",
    "model_context_window_exceeded": "max_tokens",
}
CACHE_POINT = {"cachePoint": {"type": "default"}}


def _refused(path: str, what: str) -> GatewayError:
    return GatewayError(
        ErrorCode.UNSUPPORTED_PARAMETER, f"`{path}` cannot be carried to the conversation API: {what}", param=path
    )


def _cached(blocks: list[dict], source: Any) -> list[dict]:
    """`blocks`, followed by a cache point when `source` carries a `cache_control` marker."""
    if isinstance(source, dict) and source.get("cache_control"):
        return [*blocks, CACHE_POINT]
    return blocks


def _image(block: dict, path: str) -> dict:
    source = block.get("source") or {}
    if source.get("type") != "base64":
        raise _refused(path, "images are taken inline (base64) only")
    media_type = str(source.get("media_type", "image/png"))
    if media_type not in IMAGE_FORMATS:
        raise _refused(path, f"image type {media_type!r}")
    return {"image": {"format": IMAGE_FORMATS[media_type], "source": {"bytes": source.get("data", "")}}}


def _document(block: dict, path: str, position: int) -> dict:
    source = block.get("source") or {}
    if source.get("type") == "text":
        data, document_format = base64.b64encode(str(source.get("data", "")).encode()).decode(), "txt"
    elif source.get("type") == "base64":
        media_type = str(source.get("media_type", "application/pdf"))
        if media_type not in DOCUMENT_FORMATS:
            raise _refused(path, f"document type {media_type!r}")
        data, document_format = source.get("data", ""), DOCUMENT_FORMATS[media_type]
    else:
        raise _refused(path, "documents are taken inline only")
    # Names allow letters, digits, spaces, hyphens, parentheses and brackets.
    name = "".join(c for c in str(block.get("title") or f"document {position}") if c.isalnum() or c in " -()[]")
    return {"document": {"format": document_format, "name": name or f"document {position}", "source": {"bytes": data}}}


def _tool_result(block: dict, path: str) -> dict:
    content = block.get("content")
    parts: list[dict] = []
    if isinstance(content, str):
        parts.append({"text": content})
    for index, item in enumerate(content if isinstance(content, list) else []):
        if item.get("type") == "text":
            parts.append({"text": item.get("text", "")})
        elif item.get("type") == "image":
            parts.append(_image(item, f"{path}.content[{index}]"))
        elif item.get("type") == "document":
            parts.append(_document(item, f"{path}.content[{index}]", index))
    result: dict[str, Any] = {"toolUseId": block.get("tool_use_id", ""), "content": parts or [{"text": ""}]}
    result["status"] = "error" if block.get("is_error") else "success"
    return {"toolResult": result}


def _content(content: Any, path: str) -> list[dict]:
    if isinstance(content, str):
        return [{"text": content}]
    blocks: list[dict] = []
    for index, block in enumerate(content or []):
        where = f"{path}[{index}]"
        kind = block.get("type")
        if kind == "text":
            converted = [{"text": block.get("text", "")}]
        elif kind == "image":
            converted = [_image(block, where)]
        elif kind == "document":
            converted = [_document(block, where, index)]
        elif kind == "tool_use":
            converted = [
                {
                    "toolUse": {
                        "toolUseId": block.get("id", ""),
                        "name": block.get("name", ""),
                        "input": block.get("input") or {},
                    }
                }
            ]
        elif kind == "tool_result":
            converted = [_tool_result(block, where)]
        elif kind == "thinking":
            reasoning = {"text": block.get("thinking", "")}
            if block.get("signature"):
                reasoning["signature"] = block["signature"]
            converted = [{"reasoningContent": {"reasoningText": reasoning}}]
        elif kind == "redacted_thinking":
            converted = [{"reasoningContent": {"redactedContent": block.get("data", "")}}]
        else:
            raise _refused(where, f"content blocks of type {kind!r}")
        blocks += _cached(converted, block)
    return blocks


def _system(system: Any) -> list[dict]:
    if isinstance(system, str):
        return [{"text": system}] if system else []
    blocks: list[dict] = []
    for block in system or []:
        blocks += _cached([{"text": block.get("text", "")}], block)
    return blocks


def _tool_config(body: dict) -> dict | None:
    tools = []
    for tool in body.get("tools") or []:
        spec: dict[str, Any] = {
            "name": tool.get("name", ""),
            "inputSchema": {"json": tool.get("input_schema") or {"type": "object"}},
        }
        if tool.get("description"):
            spec["description"] = tool["description"]
        tools += _cached([{"toolSpec": spec}], tool)
    if not tools:
        return None
    config: dict[str, Any] = {"tools": tools}
    choice = body.get("tool_choice") or {}
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "none":
        return None  # the conversation API has no "none": offering no tools is the same
    if kind == "any":
        config["toolChoice"] = {"any": {}}
    elif kind == "tool":
        config["toolChoice"] = {"tool": {"name": choice.get("name", "")}}
    elif kind == "auto":
        config["toolChoice"] = {"auto": {}}
    return config


def converse_request(body: dict) -> dict:
    """A conversation request equivalent to a messages request (model and stream live in the path)."""
    request: dict[str, Any] = {
        "messages": [
            {
                "role": message.get("role", "user"),
                "content": _content(message.get("content"), f"messages[{position}].content"),
            }
            for position, message in enumerate(body.get("messages") or [])
        ]
    }
    system = _system(body.get("system"))
    if system:
        request["system"] = system
    inference: dict[str, Any] = {}
    for source, target in (("max_tokens", "maxTokens"), ("temperature", "temperature"), ("top_p", "topP")):
        if body.get(source) is not None:
            inference[target] = body[source]
    if body.get("stop_sequences"):
        inference["stopSequences"] = list(body["stop_sequences"])
    if inference:
        request["inferenceConfig"] = inference
    tool_config = _tool_config(body)
    if tool_config is not None:
        request["toolConfig"] = tool_config
    extra = {key: body[key] for key in ("top_k", "thinking") if body.get(key) is not None}
    if extra:
        request["additionalModelRequestFields"] = extra
    user = (body.get("metadata") or {}).get("user_id")
    if user:
        request["requestMetadata"] = {"user_id": str(user)}
    return request


def _messages_usage(usage: Any) -> dict:
    usage = usage if isinstance(usage, dict) else {}
    converted = {"input_tokens": usage.get("inputTokens") or 0, "output_tokens": usage.get("outputTokens") or 0}
    if usage.get("cacheReadInputTokens"):
        converted["cache_read_input_tokens"] = usage["cacheReadInputTokens"]
    if usage.get("cacheWriteInputTokens"):
        converted["cache_creation_input_tokens"] = usage["cacheWriteInputTokens"]
    return converted


def _message_block(block: dict) -> dict | None:
    if "text" in block:
        return {"type": "text", "text": block["text"]}
    if "toolUse" in block:
        use = block["toolUse"]
        return {
            "type": "tool_use",
            "id": use.get("toolUseId", ""),
            "name": use.get("name", ""),
            "input": use.get("input") or {},
        }
    reasoning = block.get("reasoningContent")
    if isinstance(reasoning, dict):
        if "redactedContent" in reasoning:
            return {"type": "redacted_thinking", "data": reasoning["redactedContent"]}
        text = reasoning.get("reasoningText") or {}
        return {"type": "thinking", "thinking": text.get("text", ""), "signature": text.get("signature", "")}
    return None


def message_id() -> str:
    """A messages-shaped id for an answer the conversation API does not name."""
    return "msg_bdrk_" + uuid.uuid4().hex[:24]


def messages_response(document: dict, model: str) -> dict:
    """A messages response equivalent to a conversation answer."""
    message = (document.get("output") or {}).get("message") or {}
    blocks = [converted for block in message.get("content") or [] if (converted := _message_block(block))]
    return messages_answer(
        message_id(),
        "assistant",
        model,
        blocks,
        STOP_REASONS.get(str(document.get("stopReason")), "end_turn"),
        _messages_usage(document.get("usage")),
    )


def error_document(status: int, body: bytes) -> bytes:
    """The vendor's `{"message"}` error body in the messages error envelope."""
    document = json_or_none(body)
    if not isinstance(document, dict) or "error" in document:
        return body
    kind = {400: "invalid_request_error", 404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error"}
    message = str(document.get("message") or document.get("Message") or "upstream error")
    return orjson.dumps({"type": "error", "error": {"type": kind.get(status, "api_error"), "message": message}})


class ConverseEvents:
    """ConverseStream events (already unframed: event type and JSON payload) re-spoken as messages events.

    The conversation stream reports its stop reason before its usage (`messageStop`, then `metadata`), so
    `message_delta` and `message_stop` go out once the usage is in.
    """

    def __init__(self, model: str) -> None:
        self._model = model
        self._open: dict[int, str] = {}
        self._stop_reason = "end_turn"

    @staticmethod
    def _event(kind: str, body: dict) -> SseEvent:
        return SseEvent(kind, orjson.dumps({"type": kind, **body}).decode())

    def event(self, kind: str, payload: dict) -> list[SseEvent]:
        """Messages events for one conversation event."""
        handler = getattr(self, "_on_" + kind, None)
        return handler(payload) if handler is not None else []

    def _on_messageStart(self, payload: dict) -> list[SseEvent]:
        return [
            self._event("message_start", message_start(message_id(), payload.get("role", "assistant"), self._model))
        ]

    def _start(self, index: int, block: dict) -> list[SseEvent]:
        self._open[index] = block["type"]
        return [self._event("content_block_start", {"index": index, "content_block": block})]

    def _on_contentBlockStart(self, payload: dict) -> list[SseEvent]:
        index = int(payload.get("contentBlockIndex", 0))
        use = (payload.get("start") or {}).get("toolUse")
        if not isinstance(use, dict):
            return []
        return self._start(
            index, {"type": "tool_use", "id": use.get("toolUseId", ""), "name": use.get("name", ""), "input": {}}
        )

    def _on_contentBlockDelta(self, payload: dict) -> list[SseEvent]:
        index = int(payload.get("contentBlockIndex", 0))
        delta = payload.get("delta") or {}
        events: list[SseEvent] = []
        if "text" in delta:
            if index not in self._open:
                events += self._start(index, {"type": "text", "text": ""})
            return [
                *events,
                self._event(
                    "content_block_delta", {"index": index, "delta": {"type": "text_delta", "text": delta["text"]}}
                ),
            ]
        if "toolUse" in delta:
            partial = (delta.get("toolUse") or {}).get("input", "")
            return [
                self._event(
                    "content_block_delta",
                    {"index": index, "delta": {"type": "input_json_delta", "partial_json": partial}},
                )
            ]
        reasoning = delta.get("reasoningContent")
        if isinstance(reasoning, dict):
            if "redactedContent" in reasoning:
                return self._start(index, {"type": "redacted_thinking", "data": reasoning["redactedContent"]})
            if index not in self._open:
                events += self._start(index, {"type": "thinking", "thinking": "", "signature": ""})
            if "text" in reasoning:
                converted = {"type": "thinking_delta", "thinking": reasoning["text"]}
            else:
                converted = {"type": "signature_delta", "signature": reasoning.get("signature", "")}
            events.append(self._event("content_block_delta", {"index": index, "delta": converted}))
        return events

    def _on_contentBlockStop(self, payload: dict) -> list[SseEvent]:
        index = int(payload.get("contentBlockIndex", 0))
        if index not in self._open:
            return []
        return [self._event("content_block_stop", {"index": index})]

    def _on_messageStop(self, payload: dict) -> list[SseEvent]:
        self._stop_reason = STOP_REASONS.get(str(payload.get("stopReason")), "end_turn")
        return []

    def _on_metadata(self, payload: dict) -> list[SseEvent]:
        delta = {"stop_reason": self._stop_reason, "stop_sequence": None}
        return [
            self._event("message_delta", {"delta": delta, "usage": _messages_usage(payload.get("usage"))}),
            self._event("message_stop", {}),
        ]


# Embedding models behind InvokeModel.


def _inputs(body: dict) -> list[str]:
    value = body.get("input")
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return list(value)
    raise _refused("input", "embedding inputs are text (a string or a list of strings)")


def is_cohere(model: str) -> bool:
    """Whether an embedding model takes the batch (`texts`) body."""
    return "cohere." in model


def embedding_request(body: dict, model: str) -> dict:
    """The InvokeModel body of an embeddings request for a Titan or Cohere embedding model."""
    texts = _inputs(body)
    if is_cohere(model):
        return {"texts": texts, "input_type": "search_document", "embedding_types": ["float"]}
    if len(texts) != 1:
        raise _refused("input", "this embedding model takes one text per request")
    request: dict[str, Any] = {"inputText": texts[0]}
    if body.get("dimensions"):
        request["dimensions"] = body["dimensions"]
    return request


def embeddings_document(vectors: list[list[float]], model: str, tokens: int) -> dict:
    """An embeddings-shaped answer (float vectors whatever `encoding_format` asked: the request is gone by the
    time the answer is read, and the official clients take floats either way)."""
    return {
        "object": "list",
        "data": [{"object": "embedding", "index": index, "embedding": vector} for index, vector in enumerate(vectors)],
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def embeddings_response(document: dict, model: str) -> dict:
    """The embeddings-shaped answer of a Titan (`embedding`) or Cohere (`embeddings`) body."""
    if "embedding" in document:
        return embeddings_document([document["embedding"]], model, int(document.get("inputTextTokenCount") or 0))
    vectors = document.get("embeddings")
    if isinstance(vectors, dict):
        vectors = vectors.get("float")
    return embeddings_document(list(vectors or []), model, 0)

"""Cloud vendor E's own model family (the generate-content shape) spoken in the chat-completions shape: chat
requests to generate-content requests, answers and streamed chunks back to chat completions and chunks (several
candidates as several choices), and the vendor's embedding models (the predict API) to and from the embeddings
shape."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import orjson

from gatewayproxy.adapters.bodies import arguments_of, json_or_none, text_of
from gatewayproxy.adapters.translate import EFFORT_BUDGETS
from gatewayproxy.errors import ErrorCode, GatewayError
from gatewayproxy.http.sse import SseDecoder, SseEvent

# Chat fields the generate-content shape has no counterpart for.
REFUSED = ("logit_bias", "audio", "modalities", "prediction", "functions", "function_call", "web_search_options")
FINISH_REASONS = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter",
    "MALFORMED_FUNCTION_CALL": "stop",
}
MIME_BY_SUFFIX = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".pdf": "application/pdf",
}


def _refused(path: str, what: str) -> GatewayError:
    return GatewayError(
        ErrorCode.UNSUPPORTED_PARAMETER, f"`{path}` cannot be carried to a generate-content model: {what}", param=path
    )


def _media(url: str) -> dict:
    if url.startswith("data:") and ";base64," in url:
        mime_type, _, data = url.removeprefix("data:").partition(";base64,")
        return {"inlineData": {"mimeType": mime_type, "data": data}}
    suffix = "." + url.rsplit(".", 1)[-1].lower() if "." in url else ""
    return {"fileData": {"mimeType": MIME_BY_SUFFIX.get(suffix, "image/jpeg"), "fileUri": url}}


def _user_parts(content: Any, path: str) -> list[dict]:
    if isinstance(content, str):
        return [{"text": content}]
    parts = []
    for index, part in enumerate(content or []):
        kind = part.get("type")
        if kind == "text":
            parts.append({"text": part.get("text", "")})
        elif kind == "image_url":
            image = part.get("image_url")
            parts.append(_media(image.get("url", "") if isinstance(image, dict) else str(image)))
        elif kind == "file" and str((part.get("file") or {}).get("file_data", "")).startswith("data:"):
            parts.append(_media(part["file"]["file_data"]))
        else:
            raise _refused(f"{path}[{index}]", f"content parts of type {kind!r}")
    return parts


def _append(contents: list[dict], role: str, parts: list[dict]) -> None:
    """Consecutive turns of one role merge (function responses answer their calls in one turn)."""
    if contents and contents[-1]["role"] == role:
        contents[-1]["parts"].extend(parts)
    else:
        contents.append({"role": role, "parts": parts})


def _tools(body: dict) -> list[dict]:
    declarations = []
    for tool in body.get("tools") or []:
        if tool.get("type", "function") != "function":
            raise _refused("tools", f"tools of type {tool.get('type')!r}")
        function = tool.get("function") or {}
        declaration: dict[str, Any] = {"name": function.get("name", "")}
        if function.get("description"):
            declaration["description"] = function["description"]
        if function.get("parameters"):
            declaration["parametersJsonSchema"] = function["parameters"]
        declarations.append(declaration)
    return [{"functionDeclarations": declarations}] if declarations else []


def _tool_config(choice: Any) -> dict | None:
    if choice is None:
        return None
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name", "")
        return {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": [name]}}
    mode = {"none": "NONE", "required": "ANY"}.get(str(choice), "AUTO")
    return {"functionCallingConfig": {"mode": mode}}


def _generation_config(body: dict) -> dict:
    config: dict[str, Any] = {}
    pairs = (
        ("temperature", "temperature"),
        ("top_p", "topP"),
        ("seed", "seed"),
        ("n", "candidateCount"),
        ("presence_penalty", "presencePenalty"),
        ("frequency_penalty", "frequencyPenalty"),
        ("logprobs", "responseLogprobs"),
        ("top_logprobs", "logprobs"),
    )
    for source, target in pairs:
        if body.get(source) is not None:
            config[target] = body[source]
    maximum = body.get("max_completion_tokens") or body.get("max_tokens")
    if maximum:
        config["maxOutputTokens"] = maximum
    stop = body.get("stop")
    if stop:
        config["stopSequences"] = [stop] if isinstance(stop, str) else list(stop)
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") in ("json_object", "json_schema"):
        config["responseMimeType"] = "application/json"
        schema = (response_format.get("json_schema") or {}).get("schema")
        if schema:
            config["responseJsonSchema"] = schema
    effort = body.get("reasoning_effort")
    if effort in EFFORT_BUDGETS:
        config["thinkingConfig"] = {"thinkingBudget": EFFORT_BUDGETS[effort], "includeThoughts": True}
    return config


def generate_request(body: dict) -> dict:
    """A generate-content request equivalent to a chat-completions request (model and stream live in the path)."""
    for field in REFUSED:
        if body.get(field) not in (None, False):
            raise _refused(field, "no counterpart")
    system: list[dict] = []
    contents: list[dict] = []
    names: dict[str, str] = {}  # tool call id -> function name, as function responses are matched by name
    for position, message in enumerate(body.get("messages") or []):
        role = message.get("role")
        if role in ("system", "developer"):
            system.append({"text": text_of(message.get("content"))})
        elif role == "assistant":
            parts: list[dict] = []
            text = text_of(message.get("content"))
            if text:
                parts.append({"text": text})
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                names[call.get("id", "")] = function.get("name", "")
                parts.append(
                    {
                        "functionCall": {
                            "name": function.get("name", ""),
                            "args": arguments_of(function.get("arguments")),
                        }
                    }
                )
            _append(contents, "model", parts or [{"text": ""}])
        elif role == "tool":
            name = names.get(message.get("tool_call_id", ""), message.get("name") or "")
            answer = {"name": name, "response": {"content": text_of(message.get("content"))}}
            _append(contents, "user", [{"functionResponse": answer}])
        else:
            _append(contents, "user", _user_parts(message.get("content"), f"messages[{position}].content"))
    request: dict[str, Any] = {"contents": contents}
    if system:
        request["systemInstruction"] = {"parts": system}
    config = _generation_config(body)
    if config:
        request["generationConfig"] = config
    tools = _tools(body)
    if tools:
        request["tools"] = tools
        tool_config = _tool_config(body.get("tool_choice"))
        if tool_config is not None:
            request["toolConfig"] = tool_config
    return request


def chat_usage(metadata: Any) -> dict:
    """Chat usage from `usageMetadata` (thinking counts as completion tokens, as reasoning tokens do)."""
    metadata = metadata if isinstance(metadata, dict) else {}
    prompt = metadata.get("promptTokenCount") or 0
    thoughts = metadata.get("thoughtsTokenCount") or 0
    completion = (metadata.get("candidatesTokenCount") or 0) + thoughts
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": metadata.get("cachedContentTokenCount") or 0},
        "completion_tokens_details": {"reasoning_tokens": thoughts},
    }


def _call(part: dict, position: int) -> dict:
    call = part["functionCall"]
    return {
        "id": call.get("id") or f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": call.get("name", ""), "arguments": json.dumps(call.get("args") or {})},
        **({"index": position} if position >= 0 else {}),
    }


def _finish(candidate: dict, has_calls: bool) -> str | None:
    reason = candidate.get("finishReason")
    if not reason:
        return None
    if has_calls and reason == "STOP":
        return "tool_calls"
    return FINISH_REASONS.get(str(reason), "stop")


def chat_response(document: dict, model: str) -> dict:
    """A chat completion equivalent to a generate-content answer (one choice per candidate)."""
    choices = []
    for position, candidate in enumerate(document.get("candidates") or []):
        parts = (candidate.get("content") or {}).get("parts") or []
        text = "".join(part.get("text", "") for part in parts if "text" in part and not part.get("thought"))
        thinking = "".join(part.get("text", "") for part in parts if part.get("thought"))
        calls = [_call(part, -1) for part in parts if "functionCall" in part]
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if thinking:
            message["reasoning_content"] = thinking
        if calls:
            message["tool_calls"] = calls
        choices.append(
            {
                "index": candidate.get("index", position),
                "message": message,
                "logprobs": None,
                "finish_reason": _finish(candidate, bool(calls)) or "stop",
            }
        )
    return {
        "id": document.get("responseId") or f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": document.get("modelVersion") or model,
        "choices": choices,
        "usage": chat_usage(document.get("usageMetadata")),
    }


def error_document(status: int, body: bytes) -> bytes:
    """The vendor's `{"error": {"code", "message", "status"}}` in the chat error envelope."""
    document = json_or_none(body)
    if isinstance(document, list) and document:
        document = document[0]  # some of the vendor's errors come as a one-element list
    error = document.get("error") if isinstance(document, dict) else None
    if not isinstance(error, dict):
        return body
    kind = "invalid_request_error" if 400 <= status < 500 else "api_error"
    message = str(error.get("message") or "upstream error")
    return orjson.dumps({"error": {"message": message, "type": kind, "code": error.get("status"), "param": None}})


class GenerateStreamDecoder:
    """The vendor's SSE stream of partial answers to chat-completion chunk events, ending with a usage chunk and
    `[DONE]` once every candidate has a finish reason."""

    def __init__(self, model: str) -> None:
        self._sse = SseDecoder()
        self._model = model
        self._id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        self._created = int(time.time())
        self._started: set[int] = set()
        self._finished: set[int] = set()
        self._calls: dict[int, int] = {}
        self._usage: Any = None
        self._done = False

    def _chunk(self, choices: list[dict], **extra: Any) -> SseEvent:
        chunk = {
            "id": self._id,
            "object": "chat.completion.chunk",
            "created": self._created,
            "model": self._model,
            "choices": choices,
            **extra,
        }
        return SseEvent("", orjson.dumps(chunk).decode())

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """Chat chunk events completed by `chunk`."""
        events: list[SseEvent] = []
        for event in self._sse.feed(chunk):
            if self._done:
                continue
            document = orjson.loads(event.data)  # a frame that is not JSON is the dispatcher's malformed answer
            if isinstance(document, dict) and isinstance(document.get("error"), dict):
                error = document["error"]
                events.append(
                    SseEvent(
                        "", orjson.dumps({"error": {"message": error.get("message", ""), "type": "api_error"}}).decode()
                    )
                )
                continue
            events += self._answer(document if isinstance(document, dict) else {})
        return events

    def _answer(self, document: dict) -> list[SseEvent]:
        self._id = document.get("responseId") or self._id
        self._model = document.get("modelVersion") or self._model
        if document.get("usageMetadata"):
            self._usage = document["usageMetadata"]
        events = []
        for position, candidate in enumerate(document.get("candidates") or []):
            index = candidate.get("index", position)
            delta: dict[str, Any] = {}
            if index not in self._started:
                self._started.add(index)
                delta["role"] = "assistant"
            parts = (candidate.get("content") or {}).get("parts") or []
            text = "".join(part.get("text", "") for part in parts if "text" in part and not part.get("thought"))
            thinking = "".join(part.get("text", "") for part in parts if part.get("thought"))
            if text or "role" in delta:
                delta["content"] = text
            if thinking:
                delta["reasoning_content"] = thinking
            calls = []
            for part in parts:
                if "functionCall" in part:
                    self._calls[index] = self._calls.get(index, -1) + 1
                    calls.append(_call(part, self._calls[index]))
            if calls:
                delta["tool_calls"] = calls
            finish = _finish(candidate, index in self._calls)
            if finish:
                self._finished.add(index)
            choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
            if delta or finish:
                events.append(self._chunk([choice]))
        if self._started and self._finished >= self._started:
            self._done = True
            events += [self._chunk([], usage=chat_usage(self._usage)), SseEvent("", "[DONE]")]
        return events

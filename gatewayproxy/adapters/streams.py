"""Streams, event by event: passthrough with usage accounting, and translation between the chat-completions
chunk stream and the messages event stream. A stream that breaks ends with an error event in the client's
protocol, never with a silent clean end."""

from __future__ import annotations

import time
import uuid
from typing import Any

import orjson

from gatewayproxy.adapters.bodies import json_or_none
from gatewayproxy.adapters.translate import (
    CHAT_TO_MESSAGES_STOP,
    MESSAGES_TO_CHAT_STOP,
    RESPONSE_FORMAT_TOOL,
    chat_usage_to_messages,
    message_start,
)
from gatewayproxy.adapters.usage import chat_usage, messages_usage, responses_usage, summed, usage_to_chat
from gatewayproxy.context import Usage
from gatewayproxy.errors import ErrorCode, Protocol, error_body
from gatewayproxy.http.sse import SseEvent, encode_event

DONE = b"data: [DONE]\n\n"
TRUNCATED = "the upstream stream ended before completing"


def error_frame(protocol: Protocol, message: str, code: str = ErrorCode.UPSTREAM_ERROR.value) -> bytes:
    """A mid-stream failure as its client expects it."""
    if protocol is Protocol.VENDOR_B:
        return encode_event(orjson.dumps(error_body(Protocol.VENDOR_B, code, message, 502)), "error")
    return encode_event(orjson.dumps(error_body(Protocol.VENDOR_A, code, message, 502)))


class StreamTranslator:
    """Base of the per-pair translators: `feed` each upstream event, then `finish` or `fail`.

    With `collect_text` set (some stage inspects output), the text deltas fed so far are kept for `take_text`;
    either way `text_chars` counts them, so a stream that ends early is accounted from what was relayed. A
    passthrough may `_defer` counting a frame it relays untouched: deferred frames are parsed only when the
    count is asked for, or once they hold `DEFERRED_BYTES` (a stream that completes with its usage frame is
    then never parsed frame by frame).
    """

    client_protocol = Protocol.VENDOR_A
    DEFERRED_BYTES = 65536

    def __init__(self) -> None:
        self.usage: Usage | None = None
        self.completed = False
        self.failed = False
        self.collect_text = False
        self._text_chars = 0
        self._text: list[str] = []
        self._deferred: list[str] = []
        self._deferred_bytes = 0

    @property
    def text_chars(self) -> int:
        """Characters of text relayed so far."""
        self._count_deferred()
        return self._text_chars

    def _defer(self, data: str) -> None:
        self._deferred.append(data)
        self._deferred_bytes += len(data)
        if self._deferred_bytes >= self.DEFERRED_BYTES:
            self._count_deferred()

    def _count_deferred(self) -> None:
        deferred, self._deferred, self._deferred_bytes = self._deferred, [], 0
        for data in deferred:
            self._count_frame(data)

    def _count_frame(self, data: str) -> None:
        """Count the text of one deferred frame (subclasses that defer know their frame's shape)."""

    def take_text(self) -> str:
        """The text deltas collected since the last call."""
        text, self._text = "".join(self._text), []
        return text

    def _collect(self, text: Any) -> None:
        if isinstance(text, str) and text:
            self._text_chars += len(text)
            if self.collect_text:
                self._text.append(text)

    def usage_so_far(self) -> Usage | None:
        """The usage the upstream's frames reported so far (for a stream that ended before its last frame)."""
        return self.usage

    def feed(self, event: SseEvent) -> list[bytes]:
        """Client frames for one upstream event."""
        raise NotImplementedError

    def finish(self) -> list[bytes]:
        """Frames after the upstream ended; an unfinished stream gets an error event."""
        if self.completed or self.failed:
            return []
        return self.fail(TRUNCATED)

    def fail(self, message: str, code: str = ErrorCode.UPSTREAM_ERROR.value) -> list[bytes]:
        """Frames reporting a failure after the first byte."""
        self.failed = True
        return [error_frame(self.client_protocol, message, code)]


class ChatPassthrough(StreamTranslator):
    """Chat chunks to a chat client; strips the usage chunk the gateway asked for on the client's behalf."""

    def __init__(self, client_wants_usage: bool) -> None:
        super().__init__()
        self._client_wants_usage = client_wants_usage

    def feed(self, event: SseEvent) -> list[bytes]:
        if event.data == "[DONE]":
            self.completed = True
            return [DONE]
        if '"usage"' not in event.data and '"error"' not in event.data:
            # Content chunks pass through as they came; they are parsed only to count (or collect) their text.
            if self.collect_text:
                self._collect_chunk(json_or_none(event.data))
            else:
                self._defer(event.data)
            return [encode_event(event.data.encode())]
        chunk = json_or_none(event.data)
        if not isinstance(chunk, dict):
            return []
        self._collect_chunk(chunk)
        if chunk.get("error"):
            self.failed = True
        elif chunk.get("usage"):
            self.usage = chat_usage(chunk["usage"])
            if not self._client_wants_usage:
                if not chunk.get("choices"):
                    return []
                chunk.pop("usage")
                return [encode_event(orjson.dumps(chunk))]
        return [encode_event(event.data.encode())]

    def _collect_chunk(self, chunk: Any) -> None:
        for choice in (chunk.get("choices") or []) if isinstance(chunk, dict) else []:
            self._collect((choice.get("delta") or {}).get("content"))

    def _count_frame(self, data: str) -> None:
        self._collect_chunk(json_or_none(data))


class MessagesPassthrough(StreamTranslator):
    """Messages events to a messages client, accounting usage from `message_start` and `message_delta`."""

    client_protocol = Protocol.VENDOR_B

    def __init__(self) -> None:
        super().__init__()
        self._usage: dict[str, Any] = {}

    # Only these events carry what the passthrough accounts for; the rest are forwarded unparsed.
    ACCOUNTED = frozenset({"message_start", "message_delta", "message_stop", "error", ""})

    def feed(self, event: SseEvent) -> list[bytes]:
        wanted = event.event in self.ACCOUNTED or event.event == "content_block_delta"
        parsed = json_or_none(event.data) if wanted else None
        payload: dict[str, Any] = parsed if isinstance(parsed, dict) else {}
        kind = payload.get("type") or event.event
        if kind == "content_block_delta":
            self._collect((payload.get("delta") or {}).get("text"))
        elif kind == "message_start":
            self._usage.update(payload.get("message", {}).get("usage") or {})
        elif kind == "message_delta":
            self._usage.update({k: v for k, v in (payload.get("usage") or {}).items() if v is not None})
        elif kind == "message_stop":
            self.completed = True
            self.usage = messages_usage(self._usage)
        elif kind == "error":
            self.failed = True
        return [encode_event(event.data.encode(), event.event or kind)]

    def usage_so_far(self) -> Usage | None:
        return self.usage or (messages_usage(self._usage) if self._usage else None)


class ResponsesPassthrough(StreamTranslator):
    """Responses-API events to their client, accounting usage from the terminal event."""

    TERMINAL = ("response.completed", "response.failed", "response.incomplete")
    TEXT_DELTA = "response.output_text.delta"

    def feed(self, event: SseEvent) -> list[bytes]:
        parse = event.event in self.TERMINAL or event.event in ("error", "") or event.event == self.TEXT_DELTA
        parsed = json_or_none(event.data) if parse else None
        payload: dict[str, Any] = parsed if isinstance(parsed, dict) else {}
        kind = payload.get("type") or event.event
        if kind == self.TEXT_DELTA:
            self._collect(payload.get("delta"))
        elif kind in self.TERMINAL:
            self.completed = True
            self.usage = responses_usage((payload.get("response") or {}).get("usage"))
        elif kind == "error":
            self.failed = True
        return [encode_event(event.data.encode(), event.event or kind)]

    def fail(self, message: str, code: str = ErrorCode.UPSTREAM_ERROR.value) -> list[bytes]:
        self.failed = True
        body = {
            "type": "error",
            "code": code,
            "message": message,
            "param": None,
            "error": {"type": "api_error", "code": code, "message": message},
        }
        return [encode_event(orjson.dumps(body), "error")]


class MessagesToChat(StreamTranslator):
    """A messages event stream re-spoken as chat-completions chunks; its chunks carry choice index `choice` and,
    when given, the id `completion_id` rather than the upstream message's (a fanned-out `n`: `ChoicesToChat`)."""

    def __init__(self, client_wants_usage: bool, model: str, choice: int = 0, completion_id: str = "") -> None:
        super().__init__()
        self._client_wants_usage = client_wants_usage
        self._choice = choice
        self._id = completion_id
        self._model = model
        self._created = int(time.time())
        self._usage: dict[str, Any] = {}
        self._tool_index = -1
        self._block_is_tool: dict[int, bool] = {}
        self._answer_block: int | None = None  # the emulated `response_format` tool, streamed as content
        self._thinking = ""

    def _envelope(self, choices: list[dict], **extra: Any) -> bytes:
        chunk = {
            "id": self._id,
            "object": "chat.completion.chunk",
            "created": self._created,
            "model": self._model,
            "choices": choices,
            **extra,
        }
        return encode_event(orjson.dumps(chunk))

    def _chunk(self, delta: dict, finish_reason: str | None = None) -> bytes:
        return self._envelope(
            [{"index": self._choice, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]
        )

    def usage_chunk(self, usage: Usage) -> bytes:
        """The stream's last chunk before `[DONE]`: no choices, the usage (asked for by `include_usage`)."""
        return self._envelope([], usage=usage_to_chat(usage))

    def feed(self, event: SseEvent) -> list[bytes]:
        payload = json_or_none(event.data)
        if not isinstance(payload, dict):
            return []
        handler = getattr(self, "_on_" + str(payload.get("type")), None)
        return handler(payload) if handler is not None else []

    def _on_message_start(self, payload: dict) -> list[bytes]:
        message = payload.get("message") or {}
        self._id = self._id or message.get("id", "")
        self._model = message.get("model") or self._model
        self._usage.update(message.get("usage") or {})
        return [self._chunk({"role": "assistant", "content": ""})]

    def _on_content_block_start(self, payload: dict) -> list[bytes]:
        block = payload.get("content_block") or {}
        is_tool = block.get("type") == "tool_use"
        self._block_is_tool[payload.get("index", 0)] = is_tool
        if block.get("type") == "thinking":
            self._thinking = ""
        if block.get("type") == "redacted_thinking":
            return [self._chunk({"thinking_blocks": [block]})]
        if is_tool and block.get("name") == RESPONSE_FORMAT_TOOL:
            self._answer_block = payload.get("index", 0)
            return []
        if not is_tool:
            return []
        self._tool_index += 1
        call = {
            "index": self._tool_index,
            "id": block.get("id", ""),
            "type": "function",
            "function": {"name": block.get("name", ""), "arguments": ""},
        }
        return [self._chunk({"tool_calls": [call]})]

    def _on_content_block_delta(self, payload: dict) -> list[bytes]:
        delta = payload.get("delta") or {}
        if delta.get("type") == "text_delta":
            self._collect(delta.get("text"))
            return [self._chunk({"content": delta.get("text", "")})]
        if delta.get("type") == "input_json_delta":
            if payload.get("index", 0) == self._answer_block:
                self._collect(delta.get("partial_json"))
                return [self._chunk({"content": delta.get("partial_json", "")})]
            call = {"index": self._tool_index, "function": {"arguments": delta.get("partial_json", "")}}
            return [self._chunk({"tool_calls": [call]})]
        if delta.get("type") == "thinking_delta":
            self._thinking += delta.get("thinking", "")
            return [self._chunk({"reasoning_content": delta.get("thinking", "")})]
        if delta.get("type") == "signature_delta":
            block = {"type": "thinking", "thinking": self._thinking, "signature": delta.get("signature", "")}
            return [self._chunk({"thinking_blocks": [block]})]
        return []

    def _on_message_delta(self, payload: dict) -> list[bytes]:
        self._usage.update({k: v for k, v in (payload.get("usage") or {}).items() if v is not None})
        stop = (payload.get("delta") or {}).get("stop_reason")
        if self._answer_block is not None:
            stop = "end_turn"  # the forced answer tool is the emulated `response_format`, not a tool call
        return [self._chunk({}, MESSAGES_TO_CHAT_STOP.get(stop or "", "stop"))]

    def _on_message_stop(self, payload: dict) -> list[bytes]:
        self.completed = True
        self.usage = usage = messages_usage(self._usage) or Usage()
        return [self.usage_chunk(usage), DONE] if self._client_wants_usage else [DONE]

    def usage_so_far(self) -> Usage | None:
        return self.usage or (messages_usage(self._usage) if self._usage else None)

    def _on_error(self, payload: dict) -> list[bytes]:
        error = payload.get("error") or {}
        return self.fail(str(error.get("message", "upstream error")))


class ChoicesToChat(StreamTranslator):
    """The messages event streams of a fanned-out `n`, one choice each, re-spoken as one chat-completions chunk
    stream: `feed_choice` each stream's events; every chunk carries its choice's index and one id. The stream ends
    once every choice has, with one usage chunk of the summed usage when the client asked; an error event of any
    choice fails it."""

    def __init__(self, choices: int, client_wants_usage: bool, model: str) -> None:
        super().__init__()
        self._client_wants_usage = client_wants_usage
        completion_id = "chatcmpl-" + uuid.uuid4().hex
        self._choices = [MessagesToChat(False, model, choice, completion_id) for choice in range(choices)]
        for translator in self._choices:
            translator.collect_text = True  # taken into this stream's own text as it comes

    def feed_choice(self, choice: int, event: SseEvent) -> list[bytes]:
        """Client frames for one upstream event of choice `choice`."""
        translator = self._choices[choice]
        frames = [frame for frame in translator.feed(event) if frame != DONE]  # the merged stream ends once
        self._collect(translator.take_text())
        if translator.failed:
            self.failed = True
        elif not self.completed and all(each.completed for each in self._choices):
            frames += self._end()
        return frames

    def _end(self) -> list[bytes]:
        self.completed = True
        self.usage = usage = summed([translator.usage or Usage() for translator in self._choices])
        return [self._choices[0].usage_chunk(usage), DONE] if self._client_wants_usage else [DONE]

    def usage_so_far(self) -> Usage | None:
        so_far = [usage for translator in self._choices if (usage := translator.usage_so_far()) is not None]
        return self.usage or (summed(so_far) if so_far else None)


class ChatToMessages(StreamTranslator):
    """A chat-completions chunk stream re-spoken as messages events."""

    client_protocol = Protocol.VENDOR_B

    def __init__(self, model: str) -> None:
        super().__init__()
        self._model = model
        self._started = False
        self._open_block: int | None = None
        self._next_block = 0
        self._tool_blocks: dict[int, int] = {}
        self._thinking_block: int | None = None
        self._stop_reason: str | None = None
        self._usage: dict[str, Any] = {}

    def usage_so_far(self) -> Usage | None:
        return self.usage or (messages_usage(self._usage) if self._usage else None)

    @staticmethod
    def _event(kind: str, body: dict) -> bytes:
        return encode_event(orjson.dumps({"type": kind, **body}), kind)

    def feed(self, event: SseEvent) -> list[bytes]:
        if event.data == "[DONE]":
            return self._end()
        chunk = json_or_none(event.data)
        if not isinstance(chunk, dict):
            return []
        if chunk.get("error"):
            return self.fail(str(chunk["error"].get("message", "upstream error")))
        frames = self._start(chunk)
        if chunk.get("usage"):
            self._usage = chat_usage_to_messages(chunk["usage"])
        for choice in chunk.get("choices") or []:
            frames += self._delta(choice.get("delta") or {})
            if choice.get("finish_reason"):
                self._stop_reason = CHAT_TO_MESSAGES_STOP.get(choice["finish_reason"], "end_turn")
                frames += self._close_block()
        return frames

    def _start(self, chunk: dict) -> list[bytes]:
        if self._started:
            return []
        self._started = True
        self._model = chunk.get("model") or self._model
        return [self._event("message_start", message_start(chunk.get("id", ""), "assistant", self._model))]

    def _close_block(self) -> list[bytes]:
        if self._open_block is None:
            return []
        index, self._open_block = self._open_block, None
        return [self._event("content_block_stop", {"index": index})]

    def _open(self, block: dict) -> list[bytes]:
        frames = self._close_block()
        self._open_block = self._next_block
        self._next_block += 1
        return [*frames, self._event("content_block_start", {"index": self._open_block, "content_block": block})]

    def _delta(self, delta: dict) -> list[bytes]:
        frames: list[bytes] = []
        reasoning = delta.get("reasoning_content")
        if reasoning:
            if self._open_block is None or self._open_block != self._thinking_block:
                frames += self._open({"type": "thinking", "thinking": "", "signature": ""})
                self._thinking_block = self._open_block
            frames.append(
                self._event(
                    "content_block_delta",
                    {"index": self._open_block, "delta": {"type": "thinking_delta", "thinking": reasoning}},
                )
            )
        text = delta.get("content")
        if text:
            self._collect(text)
            if (
                self._open_block is None
                or self._open_block in self._tool_blocks.values()
                or self._open_block == self._thinking_block
            ):
                frames += self._open({"type": "text", "text": ""})
            frames.append(
                self._event(
                    "content_block_delta", {"index": self._open_block, "delta": {"type": "text_delta", "text": text}}
                )
            )
        for call in delta.get("tool_calls") or []:
            frames += self._tool_delta(call)
        return frames

    def _tool_delta(self, call: dict) -> list[bytes]:
        frames: list[bytes] = []
        position = call.get("index", 0)
        function = call.get("function") or {}
        if position not in self._tool_blocks:
            frames += self._open(
                {"type": "tool_use", "id": call.get("id", ""), "name": function.get("name", ""), "input": {}}
            )
            assert self._open_block is not None
            self._tool_blocks[position] = self._open_block
        if function.get("arguments"):
            frames.append(
                self._event(
                    "content_block_delta",
                    {
                        "index": self._tool_blocks[position],
                        "delta": {"type": "input_json_delta", "partial_json": function["arguments"]},
                    },
                )
            )
        return frames

    def _end(self) -> list[bytes]:
        self.completed = True
        self.usage = messages_usage(self._usage)
        frames = self._start({}) + self._close_block()
        usage = {
            "output_tokens": self._usage.get("output_tokens", 0),
            "input_tokens": self._usage.get("input_tokens", 0),
        }
        frames.append(
            self._event(
                "message_delta",
                {"delta": {"stop_reason": self._stop_reason or "end_turn", "stop_sequence": None}, "usage": usage},
            )
        )
        frames.append(self._event("message_stop", {}))
        return frames

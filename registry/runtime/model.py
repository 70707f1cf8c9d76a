"""The model client: `POST {REGISTRY_MODEL_BASE_URL}/v1/messages` in the vendor-B messages shape.

Streaming responses are parsed from Server-Sent Events into one complete response; an observer sees
blocks start and text arrive, so previews can be published while the model writes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from registry.runtime.config import RuntimeSettings

API_VERSION = "2023-06-01"
USAGE_KEYS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
# Stream `error` events the provider may recover from on a new request.
RETRYABLE_STREAM_ERRORS = {"overloaded_error", "api_error", "rate_limit_error", "timeout_error"}


class ModelError(Exception):
    """A model call failed; `kind` is the `session.error` type, `retryable` says whether to try again."""

    def __init__(self, kind: str, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.kind, self.message, self.retryable = kind, message, retryable


def error_for_status(status: int, detail: str) -> ModelError:
    """Map an HTTP error answer: 429 and 529 and 5xx are worth a retry; other 4xx are not."""
    message = f"The model answered HTTP {status}: {detail[:500]}"
    if status == 429:
        return ModelError("model_rate_limited_error", message, retryable=True)
    if status == 529:
        return ModelError("model_overloaded_error", message, retryable=True)
    return ModelError("model_request_failed_error", message, retryable=status >= 500 or status == 408)


class StreamObserver(Protocol):
    """Told about a streaming response as it arrives; `checkpoint` may raise to abandon the stream."""

    def block_started(self, index: int, block_type: str) -> None: ...

    def text_arrived(self, index: int, text: str) -> None: ...

    def checkpoint(self) -> None: ...


@dataclass
class ModelResponse:
    """A complete response: vendor-B content blocks, the stop reason and the token usage."""

    content: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    # Ids reserved for the events of content blocks (by position) whose previews already went out.
    event_ids: dict[int, str] = field(default_factory=dict)

    def add_usage(self, usage: dict[str, Any] | None) -> None:
        for key in USAGE_KEYS:
            if (usage or {}).get(key) is not None:
                self.usage[key] = int(usage[key])  # type: ignore[index]

    def text(self) -> str:
        return "".join(block.get("text", "") for block in self.content if block.get("type") == "text")


def sse_events(lines: Iterable[str]) -> Iterator[tuple[str, str]]:
    """(event name, data) pairs from Server-Sent Event lines; comments and ids are ignored."""
    name, data = "message", list[str]()
    for line in lines:
        if not line:
            if data:
                yield name, "\n".join(data)
            name, data = "message", list[str]()
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    if data:
        yield name, "\n".join(data)


class StreamAccumulator:
    """Builds a `ModelResponse` from stream events, telling the observer as blocks start and grow."""

    def __init__(self, observer: StreamObserver) -> None:
        self.observer = observer
        self.response = ModelResponse()
        self.blocks: dict[int, dict[str, Any]] = {}
        self.tool_input: dict[int, str] = {}
        self.finished = False

    def feed(self, name: str, payload: dict[str, Any]) -> None:
        kind = payload.get("type", name)
        if kind == "message_start":
            self.response.add_usage(payload.get("message", {}).get("usage"))
        elif kind == "content_block_start":
            self._start_block(payload["index"], dict(payload["content_block"]))
        elif kind == "content_block_delta":
            self._grow_block(payload["index"], payload["delta"])
        elif kind == "content_block_stop":
            self._finish_block(payload["index"])
        elif kind == "message_delta":
            self.response.stop_reason = payload.get("delta", {}).get("stop_reason") or self.response.stop_reason
            self.response.add_usage(payload.get("usage"))
        elif kind == "message_stop":
            self.finished = True
        elif kind == "error":
            error = payload.get("error") or {}
            retryable = error.get("type") in RETRYABLE_STREAM_ERRORS
            overloaded = error.get("type") == "overloaded_error"
            error_kind = "model_overloaded_error" if overloaded else "model_request_failed_error"
            raise ModelError(error_kind, f"The model stream failed: {error.get('message', error)}", retryable=retryable)

    def _start_block(self, index: int, block: dict[str, Any]) -> None:
        if block["type"] == "tool_use":
            self.tool_input[index] = ""
        self.blocks[index] = block
        self.observer.block_started(index, block["type"])

    def _grow_block(self, index: int, delta: dict[str, Any]) -> None:
        block = self.blocks[index]
        kind = delta.get("type")
        if kind == "text_delta":
            block["text"] = block.get("text", "") + delta["text"]
            self.observer.text_arrived(index, delta["text"])
        elif kind == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + delta["thinking"]
        elif kind == "signature_delta":
            block["signature"] = delta["signature"]
        elif kind == "input_json_delta":
            self.tool_input[index] += delta.get("partial_json", "")

    def _finish_block(self, index: int) -> None:
        block = self.blocks[index]
        if block["type"] == "tool_use" and self.tool_input.get(index):
            block["input"] = parse_tool_input(self.tool_input[index])

    def result(self) -> ModelResponse:
        if not self.finished:
            raise ModelError("model_request_failed_error", "The model stream ended early.", retryable=True)
        self.response.content = [self.blocks[index] for index in sorted(self.blocks)]
        return self.response


def parse_tool_input(raw: str) -> dict[str, Any]:
    """A tool call's JSON input; a truncated or non-object input becomes an empty object."""
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


class ModelClient:
    """One HTTP client for a worker's model calls."""

    def __init__(self, *, base_url: str, api_key: str, config: RuntimeSettings) -> None:
        self.url = base_url.rstrip("/") + "/v1/messages"
        self.headers = {"content-type": "application/json", "anthropic-version": API_VERSION}
        if api_key:
            self.headers["authorization"] = f"Bearer {api_key}"
        timeout = httpx.Timeout(config.model_timeout_seconds, connect=10.0)
        self.http = httpx.Client(timeout=timeout)

    def close(self) -> None:
        self.http.close()

    def stream(self, body: dict[str, Any], observer: StreamObserver) -> ModelResponse:
        """A streaming call; the observer's checkpoint runs after every stream event."""
        accumulator = StreamAccumulator(observer)
        try:
            with self.http.stream("POST", self.url, json={**body, "stream": True}, headers=self.headers) as answer:
                if answer.status_code >= 400:
                    raise error_for_status(answer.status_code, answer.read().decode(errors="replace"))
                for name, data in sse_events(answer.iter_lines()):
                    if data.strip() and name != "ping":
                        accumulator.feed(name, json.loads(data))
                    observer.checkpoint()
        except httpx.HTTPError as error:
            raise transport_error(error) from error
        except json.JSONDecodeError as error:
            raise ModelError(
                "model_request_failed_error", f"Unreadable stream event: {error}", retryable=True
            ) from None
        return accumulator.result()

    def create(self, body: dict[str, Any]) -> ModelResponse:
        """A non-streaming call (the outcome grader's)."""
        try:
            answer = self.http.post(self.url, json={**body, "stream": False}, headers=self.headers)
        except httpx.HTTPError as error:
            raise transport_error(error) from error
        if answer.status_code >= 400:
            raise error_for_status(answer.status_code, answer.text)
        try:
            payload = answer.json()
        except ValueError:
            raise ModelError("model_request_failed_error", "The model answered non-JSON.", retryable=True) from None
        response = ModelResponse(content=list(payload.get("content") or []), stop_reason=payload.get("stop_reason"))
        response.add_usage(payload.get("usage"))
        return response


def transport_error(error: httpx.HTTPError) -> ModelError:
    return ModelError("model_request_failed_error", f"The model could not be reached: {error!r}", retryable=True)

"""The model client: `POST {REGISTRY_MODEL_BASE_URL}/v1/messages` in the vendor-B messages shape.

Streaming responses are parsed from Server-Sent Events into one complete response; an observer sees
blocks start and text arrive, so previews can be published while the model writes. Each call is a
`model.call` span whose W3C `traceparent` goes to the gateway, which continues the trace.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx
from opentelemetry.trace import Span

from registry.core import tracing
from registry.runtime.config import RuntimeSettings

API_VERSION = "2023-06-01"
USAGE_KEYS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
# Stream `error` events the provider may recover from on a new request.
RETRYABLE_STREAM_ERRORS = {"overloaded_error", "api_error", "rate_limit_error", "timeout_error"}


class ModelError(Exception):
    """A model call failed; `kind` is the `session.error` type, `retryable` says whether to try again."""

    def __init__(self, kind: str, message: str, *, retryable: bool, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.kind, self.message, self.retryable, self.retry_after = kind, message, retryable, retry_after


# `retry-after` longer than this is not waited for in one go (the retry budget ends the turn instead).
MAX_RETRY_AFTER_SECONDS = 300.0


def retry_after_seconds(value: str | None) -> float | None:
    """The `retry-after` header in seconds (delta-seconds only; an HTTP date is ignored)."""
    try:
        return min(max(float(value), 0.0), MAX_RETRY_AFTER_SECONDS) if value else None
    except ValueError:
        return None


def error_for_status(status: int, detail: str, retry_after: str | None = None) -> ModelError:
    """Map an HTTP error answer: 429 and 529 and 5xx are worth a retry; other 4xx are not."""
    message = f"The model answered HTTP {status}: {detail[:500]}"
    wait = retry_after_seconds(retry_after)
    if status == 429:
        return ModelError("model_rate_limited_error", message, retryable=True, retry_after=wait)
    if status == 529:
        return ModelError("model_overloaded_error", message, retryable=True, retry_after=wait)
    return ModelError("model_request_failed_error", message, retryable=status >= 500 or status == 408)


# Beta headers a request needs for the agent's model settings.
FAST_MODE_BETA = "fast-mode-2026-02-01"
API_DEFAULT_EFFORT = "high"


def request_options(model: dict[str, Any]) -> dict[str, Any]:
    """The agent's model settings as the messages API takes them (`output_config.effort`, `speed`,
    `inference_geo`); defaults the API already applies are left out, so older models accept them."""
    options: dict[str, Any] = {}
    effort = (model.get("effort") or {}).get("type")
    if effort and effort != API_DEFAULT_EFFORT:
        options["output_config"] = {"effort": effort}
    if model.get("speed") == "fast":
        options["speed"] = "fast"
    if model.get("inference_geo"):
        options["inference_geo"] = model["inference_geo"]
    return options


def beta_headers(body: dict[str, Any]) -> dict[str, str]:
    return {"anthropic-beta": FAST_MODE_BETA} if body.get("speed") == "fast" else {}


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
    stop_details: dict[str, Any] | None = None  # why the model refused, when it did and says
    usage: dict[str, int] = field(default_factory=dict)
    # Ids reserved for the events of content blocks (by position) whose previews already went out.
    event_ids: dict[int, str] = field(default_factory=dict)

    def add_usage(self, usage: dict[str, Any] | None) -> None:
        for key in USAGE_KEYS:
            if (usage or {}).get(key) is not None:
                self.usage[key] = int(usage[key])  # type: ignore[index]

    def text(self) -> str:
        return "".join(block.get("text", "") for block in self.content if block.get("type") == "text")

    def cut_in_tool_call(self) -> bool:
        """A tool call whose input did not arrive whole (max_tokens, or unreadable JSON): never run it."""
        return any(block.get("type") == "tool_use" and block.get("incomplete") for block in self.content) or (
            self.stop_reason == "max_tokens" and bool(self.content) and self.content[-1].get("type") == "tool_use"
        )


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
        self.stopped: set[int] = set()
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
            delta = payload.get("delta", {})
            self.response.stop_reason = delta.get("stop_reason") or self.response.stop_reason
            self.response.stop_details = delta.get("stop_details") or self.response.stop_details
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
        self.stopped.add(index)
        block = self.blocks[index]
        if block["type"] == "tool_use" and self.tool_input.get(index):
            parsed = parse_tool_input(self.tool_input[index])
            block["input"] = parsed if parsed is not None else {}
            if parsed is None:
                block["incomplete"] = True

    def result(self) -> ModelResponse:
        if not self.finished:
            raise ModelError("model_request_failed_error", "The model stream ended early.", retryable=True)
        for index, block in self.blocks.items():
            if block["type"] == "tool_use" and index not in self.stopped:
                block["incomplete"] = True  # the block never stopped
        self.response.content = [self.blocks[index] for index in sorted(self.blocks)]
        return self.response


def parse_tool_input(raw: str) -> dict[str, Any] | None:
    """A tool call's JSON input; None when it is truncated or not an object."""
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


MODEL_SPAN = "model.call"


def trace_headers() -> dict[str, str]:
    """The current span's `traceparent` (the `model.call` span; the carried context when not recording)."""
    traceparent = tracing.current_traceparent()
    return {"traceparent": traceparent} if traceparent else {}


def traced_call(body: dict[str, Any]) -> AbstractContextManager[Span]:
    """The `model.call` span of one request, a client span under the turn's."""
    attributes = {"gen_ai.request.model": str(body.get("model", "")), "gen_ai.operation.name": "chat"}
    return tracing.child(MODEL_SPAN, service=tracing.RUNTIME_SERVICE, kind=tracing.CLIENT, attributes=attributes)


def record_outcome(span: Span, response: ModelResponse) -> None:
    if span.is_recording():
        span.set_attribute("gen_ai.usage.input_tokens", response.usage.get("input_tokens", 0))
        span.set_attribute("gen_ai.usage.output_tokens", response.usage.get("output_tokens", 0))
        if response.stop_reason:
            span.set_attribute("gen_ai.response.finish_reasons", [response.stop_reason])


class ModelClient:
    """One HTTP client for a worker's model calls."""

    def __init__(self, *, base_url: str, config: RuntimeSettings, pool_size: int = 10) -> None:
        self.url = base_url.rstrip("/") + "/v1/messages"
        self.headers = {"content-type": "application/json", "anthropic-version": API_VERSION}
        timeout = httpx.Timeout(config.model_timeout_seconds, connect=10.0)
        # No cap on connections: concurrent calls are bounded by the sessions a worker runs and their threads
        # (REGISTRY_SESSION_MAX_THREADS each); a cap would queue a session's threads behind each other.
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=pool_size)
        self.http = httpx.Client(timeout=timeout, limits=limits)

    def close(self) -> None:
        self.http.close()

    def stream(self, body: dict[str, Any], observer: StreamObserver, auth: dict[str, str]) -> ModelResponse:
        """A streaming call; the observer's checkpoint runs after every stream event. `auth`: the
        session's credential headers (registry.runtime.identity)."""
        with traced_call(body) as span:
            response = self._stream(body, observer, auth)
            record_outcome(span, response)
            return response

    def _stream(self, body: dict[str, Any], observer: StreamObserver, auth: dict[str, str]) -> ModelResponse:
        accumulator = StreamAccumulator(observer)
        try:
            headers = {**self.headers, **beta_headers(body), **auth, **trace_headers()}
            with self.http.stream("POST", self.url, json={**body, "stream": True}, headers=headers) as answer:
                if answer.status_code >= 400:
                    detail = answer.read().decode(errors="replace")
                    raise error_for_status(answer.status_code, detail, answer.headers.get("retry-after"))
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

    def create(self, body: dict[str, Any], auth: dict[str, str]) -> ModelResponse:
        """A non-streaming call (the outcome grader's, compaction summaries)."""
        with traced_call(body) as span:
            response = self._create(body, auth)
            record_outcome(span, response)
            return response

    def _create(self, body: dict[str, Any], auth: dict[str, str]) -> ModelResponse:
        try:
            headers = {**self.headers, **beta_headers(body), **auth, **trace_headers()}
            answer = self.http.post(self.url, json={**body, "stream": False}, headers=headers)
        except httpx.HTTPError as error:
            raise transport_error(error) from error
        if answer.status_code >= 400:
            raise error_for_status(answer.status_code, answer.text, answer.headers.get("retry-after"))
        try:
            payload = answer.json()
        except ValueError:
            raise ModelError("model_request_failed_error", "The model answered non-JSON.", retryable=True) from None
        response = ModelResponse(
            content=list(payload.get("content") or []),
            stop_reason=payload.get("stop_reason"),
            stop_details=payload.get("stop_details"),
        )
        response.add_usage(payload.get("usage"))
        return response


def transport_error(error: httpx.HTTPError) -> ModelError:
    return ModelError("model_request_failed_error", f"The model could not be reached: {error!r}", retryable=True)

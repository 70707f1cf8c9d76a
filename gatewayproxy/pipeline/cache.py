"""The response cache (`plugins.cache`): exact-match answers kept by a cache backend and served without an
upstream call.

The key is a digest of the canonical request: the operation, the route, the destinations and upstream models
of the route's targets, the body (keys sorted; `stream` and `stream_options` left out) and, unless the plugin is
`shared: true`, every scope dimension of the caller, so one tenant never gets another's answer. Only 2xx answers
are kept. One entry serves streamed and non-streamed requests alike: an answer that was streamed is assembled
into its whole-document form before it is kept, and a hit on a streamed request is replayed as a stream in the
client's protocol. `cache-control: no-cache` skips the lookup and keeps the fresh answer; `no-store` neither
reads nor keeps. Every model response says `x-gateway-cache: hit|miss|bypass`. A hit costs nothing: its usage
is zero tokens and `cost_usd` 0 (the usage record says `cache_hit: true`). Entries are written off the request
path; a backend failure is a miss, never an error.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson

from gatewayproxy.context import Operation, RequestContext, Usage
from gatewayproxy.http.sse import SseDecoder, encode_event
from gatewayproxy.pipeline.deps import StageDeps
from gatewayproxy.pipeline.dispatch import JSON_CONTENT, SSE_CONTENT, Finish
from gatewayproxy.pipeline.stages import Stage
from gatewayproxy.plugins.cache import CacheBackend, MemoryExactCache, build_cache
from gatewayproxy.server.protocol import Response

HEADER = b"x-gateway-cache"
HIT, MISS, BYPASS = "hit", "miss", "bypass"
NOTE = "cache"  # `context.notes[NOTE]`: what the cache did for the request (hit, miss, bypass)
NO_USAGE = Usage()
UNKEYED = frozenset({"stream", "stream_options"})
CACHED_OPERATIONS = frozenset({Operation.CHAT, Operation.MESSAGES, Operation.EMBEDDINGS, Operation.RESPONSES})
Run = Callable[[], Awaitable[Response]]


def cache_hit(context: RequestContext) -> bool:
    """Whether the request was answered from the cache."""
    return context.notes.get(NOTE) == HIT


def cache_key(context: RequestContext, shared: bool) -> str:
    """The digest of the canonical request (see the module's docstring)."""
    targets = []
    adapters = context.state.adapters
    if context.plan is not None:
        for target in context.plan.targets:
            adapter = adapters.get(target.destination)
            upstream = adapter.upstream_model(context.model) if adapter is not None else context.model
            targets.append((target.destination, upstream))
    body = {key: value for key, value in context.body.items() if key not in UNKEYED}
    scope = None if shared else sorted(context.principal.scope.items())
    canonical = orjson.dumps(
        [context.operation.value, context.route, sorted(targets), scope, body], option=orjson.OPT_SORT_KEYS
    )
    return hashlib.sha256(canonical).hexdigest()


def encode_entry(status: int, body: bytes) -> bytes:
    """An entry: the status line, then the client's body as sent."""
    return b"%d\n" % status + body


def decode_entry(entry: bytes) -> tuple[int, bytes] | None:
    """The status and body of an entry (None when it is not one)."""
    head, newline, body = entry.partition(b"\n")
    if not newline or not head.isdigit():
        return None
    return int(head), body


def _cache_control(context: RequestContext) -> str:
    return context.request.headers.get("cache-control", "").lower()


# Replaying a whole answer as a stream in the client's protocol.


def chat_frames(document: dict[str, Any], wants_usage: bool) -> list[bytes]:
    """A chat completion as the chunks of a stream (one content delta per choice)."""
    base = {
        "id": document.get("id", ""),
        "object": "chat.completion.chunk",
        "created": document.get("created", 0),
        "model": document.get("model", ""),
    }

    def chunk(choices: list[Any], **extra: Any) -> bytes:
        return encode_event(orjson.dumps({**base, "choices": choices, **extra}))

    frames = []
    for choice in document.get("choices") or []:
        index = choice.get("index", 0)
        message = choice.get("message") or {}
        frames.append(chunk([{"index": index, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]))
        if message.get("content"):
            frames.append(chunk([{"index": index, "delta": {"content": message["content"]}, "finish_reason": None}]))
        calls = [
            {"index": position, **{key: call[key] for key in ("id", "type", "function") if key in call}}
            for position, call in enumerate(message.get("tool_calls") or [])
        ]
        if calls:
            frames.append(chunk([{"index": index, "delta": {"tool_calls": calls}, "finish_reason": None}]))
        frames.append(chunk([{"index": index, "delta": {}, "finish_reason": choice.get("finish_reason") or "stop"}]))
    if wants_usage and document.get("usage") is not None:
        frames.append(chunk([], usage=document["usage"]))
    frames.append(encode_event(b"[DONE]"))
    return frames


def _event(kind: str, body: dict[str, Any]) -> bytes:
    return encode_event(orjson.dumps({"type": kind, **body}), kind)


def _block_frames(index: int, block: dict[str, Any]) -> list[bytes]:
    kind = block.get("type")
    start: dict[str, Any]
    delta: dict[str, Any]
    if kind == "text":
        start, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": block.get("text", "")}
    elif kind == "tool_use":
        start = {key: block[key] for key in ("type", "id", "name") if key in block} | {"input": {}}
        delta = {"type": "input_json_delta", "partial_json": orjson.dumps(block.get("input", {})).decode()}
    elif kind == "thinking":
        start, delta = {"type": "thinking", "thinking": ""}, {"type": "thinking_delta", "thinking": block["thinking"]}
    else:
        start, delta = block, {}
    frames = [_event("content_block_start", {"index": index, "content_block": start})]
    if delta:
        frames.append(_event("content_block_delta", {"index": index, "delta": delta}))
    if kind == "thinking" and block.get("signature"):
        signature = {"type": "signature_delta", "signature": block["signature"]}
        frames.append(_event("content_block_delta", {"index": index, "delta": signature}))
    frames.append(_event("content_block_stop", {"index": index}))
    return frames


def messages_frames(document: dict[str, Any]) -> list[bytes]:
    """A message as the events of a stream (one delta per content block)."""
    usage = dict(document.get("usage") or {})
    start = {
        **document,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": 0},
    }
    frames = [_event("message_start", {"message": start})]
    for index, block in enumerate(document.get("content") or []):
        if isinstance(block, dict):
            frames += _block_frames(index, block)
    delta = {"stop_reason": document.get("stop_reason"), "stop_sequence": document.get("stop_sequence")}
    frames.append(_event("message_delta", {"delta": delta, "usage": {"output_tokens": usage.get("output_tokens", 0)}}))
    frames.append(_event("message_stop", {}))
    return frames


# Assembling a streamed answer (as the client got it) into its whole-document form, to keep it.


class ChatAssembler:
    """Chat completion chunks into a chat completion."""

    def __init__(self) -> None:
        self.head: dict[str, Any] = {}
        self.choices: dict[int, dict[str, Any]] = {}
        self.usage: Any = None
        self.broken = False

    def feed(self, data: str) -> None:
        if data == "[DONE]":
            return
        chunk = orjson.loads(data)
        if not isinstance(chunk, dict) or "error" in chunk:
            self.broken = True
            return
        for key in ("id", "created", "model", "system_fingerprint"):
            if key in chunk:
                self.head.setdefault(key, chunk[key])
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            state = self.choices.setdefault(choice.get("index", 0), {"content": [], "calls": {}, "finish": None})
            delta = choice.get("delta") or {}
            if delta.get("content"):
                state["content"].append(delta["content"])
            for call in delta.get("tool_calls") or []:
                known = state["calls"].setdefault(call.get("index", 0), {"type": "function", "arguments": []})
                function = call.get("function") or {}
                known.update({key: call[key] for key in ("id", "type") if call.get(key)})
                if function.get("name"):
                    known["name"] = function["name"]
                known["arguments"].append(function.get("arguments") or "")
            if choice.get("finish_reason"):
                state["finish"] = choice["finish_reason"]

    def document(self, usage: Usage | None) -> dict[str, Any]:
        choices = []
        for index, state in sorted(self.choices.items()):
            message: dict[str, Any] = {"role": "assistant", "content": "".join(state["content"]) or None}
            if state["calls"]:
                message["tool_calls"] = [
                    {
                        "id": call.get("id", ""),
                        "type": call["type"],
                        "function": {"name": call.get("name", ""), "arguments": "".join(call["arguments"])},
                    }
                    for _, call in sorted(state["calls"].items())
                ]
            choices.append({"index": index, "message": message, "finish_reason": state["finish"]})
        if self.usage is None and usage is not None:
            total = usage.input_tokens + usage.output_tokens
            self.usage = {
                "prompt_tokens": usage.input_tokens,
                "completion_tokens": usage.output_tokens,
                "total_tokens": total,
            }
        return {**self.head, "object": "chat.completion", "choices": choices, "usage": self.usage}


class MessagesAssembler:
    """Message stream events into a message."""

    def __init__(self) -> None:
        self.message: dict[str, Any] | None = None
        self.blocks: dict[int, dict[str, Any]] = {}
        self.partial: dict[int, list[str]] = {}
        self.broken = False

    def feed(self, data: str) -> None:
        event = orjson.loads(data)
        kind = event.get("type") if isinstance(event, dict) else None
        if kind == "message_start":
            self.message = dict(event.get("message") or {})
        elif kind == "content_block_start":
            self.blocks[event["index"]] = dict(event.get("content_block") or {})
        elif kind == "content_block_delta":
            self._delta(event["index"], event.get("delta") or {})
        elif kind == "content_block_stop":
            index = event["index"]
            if index in self.partial:
                text = "".join(self.partial.pop(index))
                self.blocks[index]["input"] = orjson.loads(text) if text else {}
        elif kind == "message_delta" and self.message is not None:
            self.message.update(event.get("delta") or {})
            self.message["usage"] = {**(self.message.get("usage") or {}), **(event.get("usage") or {})}
        elif kind == "error":
            self.broken = True

    def _delta(self, index: int, delta: dict[str, Any]) -> None:
        block = self.blocks.setdefault(index, {})
        kind = delta.get("type")
        if kind == "text_delta":
            block["text"] = block.get("text", "") + delta.get("text", "")
        elif kind == "input_json_delta":
            self.partial.setdefault(index, []).append(delta.get("partial_json", ""))
        elif kind == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
        elif kind == "signature_delta":
            block["signature"] = delta.get("signature", "")

    def document(self, usage: Usage | None) -> dict[str, Any] | None:
        if self.message is None:
            return None
        return {**self.message, "content": [block for _, block in sorted(self.blocks.items())]}


class CacheStage(Stage):
    """Answers from the cache, or runs the request and keeps its answer (`serve`); zeroes a hit's cost in
    `settle` (it settles first, before the limits and the records)."""

    name = "cache"

    def __init__(self, backend: CacheBackend) -> None:
        self.backend = backend
        self.shared = backend.options.shared
        self.max_body_bytes = backend.options.max_body_bytes
        self._writes: set[asyncio.Task[None]] = set()

    async def close(self) -> None:
        if self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)
        await self.backend.close()

    def settle(self, context: RequestContext) -> None:
        if cache_hit(context):
            context.cost_usd = 0.0

    async def serve(self, context: RequestContext, run: Run, finish: Finish) -> Response:
        """The request's response: a hit, or `run()`'s response (kept when it is a 2xx)."""
        control = _cache_control(context)
        cacheable = context.operation in CACHED_OPERATIONS and not (
            context.operation is Operation.RESPONSES and context.stream
        )
        if not cacheable or "no-store" in control:
            return await self._run_as(context, run, BYPASS)
        key = cache_key(context, self.shared)
        if "no-cache" in control:
            return self._keep(context, key, await self._run_as(context, run, BYPASS))
        entry = await self.backend.get(key)
        decoded = decode_entry(entry) if entry is not None else None
        if decoded is not None:
            response = self._hit(context, *decoded, finish)
            if response is not None:
                return response
        return self._keep(context, key, await self._run_as(context, run, MISS))

    @staticmethod
    async def _run_as(context: RequestContext, run: Run, outcome: str) -> Response:
        context.notes[NOTE] = outcome
        context.response_headers.append((HEADER, outcome.encode()))
        return await run()

    def _hit(self, context: RequestContext, status: int, body: bytes, finish: Finish) -> Response | None:
        frames: list[bytes] | None = None
        if context.stream and context.operation is not Operation.EMBEDDINGS:
            try:
                document = orjson.loads(body)
            except orjson.JSONDecodeError:
                return None
            if not isinstance(document, dict):
                return None
            frames = (
                messages_frames(document)
                if context.operation is Operation.MESSAGES
                else chat_frames(document, _wants_usage(context))
            )
        context.notes[NOTE] = HIT
        context.response_headers.append((HEADER, HIT.encode()))
        context.usage = NO_USAGE
        if frames is None:
            return Response(status, JSON_CONTENT, body)

        async def replay() -> AsyncIterator[bytes]:
            try:
                yield b"".join(frames)
            finally:
                context.status = status
                finish(context)

        return Response(status, SSE_CONTENT, stream=replay(), first_chunk_ready=True)

    def _keep(self, context: RequestContext, key: str, response: Response) -> Response:
        if not 200 <= response.status < 300:
            return response
        if response.stream is None:
            if len(response.body) <= self.max_body_bytes:
                self._put(key, encode_entry(response.status, response.body))
            return response
        if context.operation not in (Operation.CHAT, Operation.MESSAGES):
            return response
        response.stream = self._recorded(context, key, response.status, response.stream)
        return response

    async def _recorded(
        self, context: RequestContext, key: str, status: int, stream: AsyncIterator[bytes]
    ) -> AsyncIterator[bytes]:
        """Relay a stream while assembling its whole form; keep it once it ended well."""
        decoder = SseDecoder()
        assembler = MessagesAssembler() if context.operation is Operation.MESSAGES else ChatAssembler()
        size = 0
        intact = True
        try:
            async for chunk in stream:
                yield chunk
                if not intact:
                    continue
                size += len(chunk)
                try:
                    for event in decoder.feed(chunk):
                        if event.data:
                            assembler.feed(event.data)
                except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
                    intact = False
                intact = intact and size <= self.max_body_bytes
        finally:
            await stream.aclose()  # type: ignore[attr-defined]
        if not intact or assembler.broken or context.status != 200:
            return
        document = assembler.document(context.usage)
        if document is not None:
            self._put(key, encode_entry(status, orjson.dumps(document)))

    def _put(self, key: str, entry: bytes) -> None:
        """Keep an entry without holding the request up."""
        if isinstance(self.backend, MemoryExactCache):
            self.backend.put_now(key, entry)
            return
        task = asyncio.get_running_loop().create_task(self.backend.put(key, entry))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)


def _wants_usage(context: RequestContext) -> bool:
    options = context.body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def build(deps: StageDeps) -> list[Stage]:
    """The cache stage, when `plugins.cache` is configured."""
    instance = deps.config.plugins.cache
    return [] if instance is None else [CacheStage(build_cache(instance))]

"""Running a route's plan: shape the body for each target, call it, and retry or fall back until one answers.

Before the first byte reaches the client a failed attempt is retried or falls back; once a stream has
started, a failure becomes an error event in the client's protocol.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import aclosing
from dataclasses import dataclass, replace
from email.utils import parsedate_to_datetime
from typing import Any

import orjson

from gatewayproxy.adapters import contract, streams, translate
from gatewayproxy.adapters.base import Adapter, Shape, StreamDecoder
from gatewayproxy.adapters.headers import with_request_headers
from gatewayproxy.adapters.usage import chat_usage, messages_usage, responses_usage
from gatewayproxy.context import Operation, Plan, RequestContext, Usage
from gatewayproxy.errors import ErrorCode, GatewayError, Protocol, error_body
from gatewayproxy.http.connection import Request
from gatewayproxy.http.sse import SseEvent
from gatewayproxy.metrics import GatewayMetrics
from gatewayproxy.pipeline.routing import shape_params
from gatewayproxy.plugins.decisions import BackendError
from gatewayproxy.server.outliers import Outliers
from gatewayproxy.server.protocol import Response
from gatewayproxy.server.upstream import UpstreamError, UpstreamIdle, UpstreamPool, UpstreamResponse
from gatewayproxy.vaults.resolvers import VaultError, VaultUnavailable

JSON_CONTENT = [(b"content-type", b"application/json")]
SSE_CONTENT = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]
Finish = Callable[[RequestContext], None]
Feed = Callable[[SseEvent], list[bytes]]  # a stream translator's client frames for one upstream event
Batches = AsyncGenerator[list[bytes], None]  # a stream's client frames, batch by batch
Events = AsyncGenerator[list[SseEvent], None]  # an upstream stream's events, chunk by chunk
Opened = tuple[list[bytes], Events]  # an upstream stream's first client frames, and its events after them
# Failures that count toward a destination's ejection: connection errors, 5xx and malformed answers (`5xx`),
# timeouts, and refusals of the gateway's own key (`auth`); not 429, not the client's 4xx, not a vault outage.
OUTLIER_KINDS = frozenset({"5xx", "timeout", "auth"})
CHARS_PER_TOKEN = 4  # output of a stream that ended early, estimated from the text relayed
BACKOFF_JITTER = (0.5, 1.5)  # backoff is multiplied by a factor drawn from this range
CLIENT_CLOSED_REQUEST = 499


@dataclass(frozen=True)
class Failure:
    """A failed attempt: `kind` is the retry trigger it counts as (`5xx`, `429`, `timeout`; `auth` and `vault` are
    never retried on the same target); `code` is the gateway's error when it is the plan's last failure."""

    kind: str
    message: str
    retry_after: bytes | None = None
    code: ErrorCode = ErrorCode.UPSTREAM_ERROR


def retry_after_seconds(value: bytes | None) -> float:
    """An upstream `retry-after` (delay seconds or an HTTP date) in seconds; 0 when absent or unreadable."""
    if not value:
        return 0.0
    text = value.decode("latin-1").strip()
    try:
        return max(float(text), 0.0)
    except ValueError:
        pass
    try:
        return max(parsedate_to_datetime(text).timestamp() - time.time(), 0.0)
    except (TypeError, ValueError, IndexError, OverflowError):
        return 0.0


def _malformed(adapter: Adapter, what: str) -> Failure:
    return Failure("5xx", f"destination {adapter.name!r} sent a malformed answer: {what}")


def client_shape(operation: Operation) -> Shape:
    """The shape a client of an operation speaks."""
    return Shape.MESSAGES if operation is Operation.MESSAGES else Shape.CHAT


def serves(adapter: Adapter, operation: Operation, has_shaping: bool) -> bool:
    """Whether a destination can answer an operation (translating between shapes where needed)."""
    if operation in (Operation.CHAT, Operation.MESSAGES):
        return True
    if operation is Operation.EMBEDDINGS:
        return operation in adapter.operations
    return adapter.destination.kind == "vendor_a" and not adapter.destination.model_map and not has_shaping


DROPPED_HEADER = b"x-gateway-dropped-params"


def _lenient(context: RequestContext) -> bool:
    """Whether the request's route drops (rather than refuses) what translation cannot carry."""
    route = next((route for route in context.state.router.routes if route.name == context.route), None)
    return route is not None and route.route.translation == "lenient"


def _translatable(context: RequestContext, towards_messages: bool) -> dict[str, Any]:
    """The client's body with what the target cannot carry refused (raises) or, on lenient routes, dropped and
    named in `x-gateway-dropped-params`."""
    body, dropped = contract.enforce(context.body, towards_messages, _lenient(context))
    context.response_headers = [(name, value) for name, value in context.response_headers if name != DROPPED_HEADER]
    if dropped:
        context.response_headers.append((DROPPED_HEADER, ",".join(dropped).encode()))
    return body


def native_body(context: RequestContext, adapter: Adapter, default_max_tokens: int) -> dict[str, Any]:
    """The client's body re-shaped for the destination (before model mapping and parameter shaping)."""
    operation, body = context.operation, context.body
    shape = adapter.shape_for(operation, context.model)
    if operation not in (Operation.CHAT, Operation.MESSAGES):
        return dict(body)
    if client_shape(operation) is shape:
        body = dict(body)
    elif shape is Shape.MESSAGES:
        body = translate.chat_to_messages_request(_translatable(context, True), default_max_tokens)
    else:
        body = translate.messages_to_chat_request(_translatable(context, False))
    if shape is Shape.CHAT and context.stream:
        body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
    return body


def attempt_body(context: RequestContext, target: Any, adapter: Adapter) -> dict[str, Any]:
    """Count a new attempt at `adapter` and give the body it sends: re-shaped for the destination, its model the
    upstream's name, the target's parameters applied."""
    context.attempts += 1
    context.destination = adapter.name
    body = native_body(context, adapter, context.state.config.spend.admission.default_max_output_tokens)
    body["model"] = adapter.upstream_model(body.get("model"))
    return shape_params(body, target)


def upstream_operation(context: RequestContext, adapter: Adapter) -> Operation:
    """The operation in the destination's own terms."""
    shape = adapter.shape_for(context.operation, context.model)
    if context.operation in (Operation.CHAT, Operation.MESSAGES):
        return Operation.MESSAGES if shape is Shape.MESSAGES else Operation.CHAT
    return context.operation


def _client_wants_usage(context: RequestContext) -> bool:
    options = context.body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def stream_translator(context: RequestContext, adapter: Adapter) -> streams.StreamTranslator:
    """The event translator between a destination's stream and the client's."""
    shape = adapter.shape_for(context.operation, context.model)
    model = context.model or ""
    if context.operation is Operation.RESPONSES:
        return streams.ResponsesPassthrough()
    if context.operation is Operation.MESSAGES:
        return streams.MessagesPassthrough() if shape is Shape.MESSAGES else streams.ChatToMessages(model)
    wants_usage = _client_wants_usage(context)
    if shape is Shape.CHAT:
        return streams.ChatPassthrough(wants_usage)
    return streams.MessagesToChat(wants_usage, model)


def choices_translator(context: RequestContext, choices: int) -> streams.ChoicesToChat:
    """The event translator of a chat client's fanned-out `n`: `choices` messages streams of one choice each."""
    return streams.ChoicesToChat(choices, _client_wants_usage(context), context.model or "")


def _usage_of(operation: Operation, shape: Shape, document: dict[str, Any]) -> Usage | None:
    if operation is Operation.RESPONSES:
        return responses_usage(document.get("usage"))
    if shape is Shape.MESSAGES:
        return messages_usage(document.get("usage"))
    return chat_usage(document.get("usage"))


def response_text(shape: Shape, document: Any) -> str:
    """The text content of a chat or messages response document (tool calls aside)."""
    if not isinstance(document, dict):
        return ""
    if shape is Shape.MESSAGES:
        return "".join(
            block.get("text") or ""
            for block in document.get("content") or []
            if isinstance(block, dict) and block.get("type") == "text"
        )
    return "".join(
        (choice.get("message") or {}).get("content") or ""
        for choice in document.get("choices") or []
        if isinstance(choice, dict)
    )


def _translated_success(context: RequestContext, adapter: Adapter, body: bytes, collect_text: bool) -> bytes:
    """The client's body of a 2xx answer; reads its usage and, for output inspectors, its text."""
    shape = adapter.shape_for(context.operation, context.model)
    document = orjson.loads(body)
    context.usage = _usage_of(context.operation, shape, document)
    if collect_text and context.operation in (Operation.CHAT, Operation.MESSAGES):
        context.output_text = response_text(shape, document)
    if context.operation not in (Operation.CHAT, Operation.MESSAGES) or client_shape(context.operation) is shape:
        return body
    if shape is Shape.MESSAGES:
        return orjson.dumps(translate.messages_to_chat_response(document))
    return orjson.dumps(translate.chat_to_messages_response(document))


def _client_error(context: RequestContext, adapter: Adapter, status: int, body: bytes) -> Response:
    """A provider 4xx passes back as sent; across shapes only its envelope is re-spoken."""
    shape = adapter.shape_for(context.operation, context.model)
    speaks_client_protocol = client_shape(context.operation) is shape
    if speaks_client_protocol:
        return Response(status, JSON_CONTENT, body)
    try:
        message = translate.error_message_of(orjson.loads(body))
    except orjson.JSONDecodeError:
        message = body.decode("utf-8", "replace")[:500]
    document = error_body(context.protocol, ErrorCode.INVALID_REQUEST.value, message or "upstream refused", status)
    return Response(status, JSON_CONTENT, orjson.dumps(document))


class Dispatch:
    """One request's walk through its plan; `governed=False` (a guardrail's own model call) skips the output
    inspectors, so a check never inspects itself."""

    def __init__(
        self,
        pool: UpstreamPool,
        metrics: GatewayMetrics,
        context: RequestContext,
        plan: Plan,
        finish: Finish,
        governed: bool = True,
        outliers: Outliers | None = None,
    ) -> None:
        self.pool = pool
        self.context = context
        self.plan = plan
        self.finish = finish
        self.metrics = metrics
        self.inspectors = context.state.output_inspectors if governed else []
        self.outliers = outliers

    def _candidates(self) -> list[tuple[Any, Adapter]]:
        adapters = self.context.state.adapters
        candidates = []
        for target in self.plan.targets:
            adapter = adapters.get(target.destination)
            shaping = bool(target.default_params or target.override_params or target.drop_params)
            if adapter is not None and serves(adapter, self.context.operation, shaping):
                candidates.append((target, adapter))
        return self._unejected(candidates)

    def _unejected(self, candidates: list[tuple[Any, Adapter]]) -> list[tuple[Any, Adapter]]:
        """The candidates outlier detection lets through (all of them when every one is ejected: panic)."""
        if self.outliers is None or not candidates:
            return candidates
        chosen = self.outliers.choose(adapter.name for _, adapter in candidates)
        return candidates if chosen is None else [candidate for candidate in candidates if candidate[1].name in chosen]

    async def run(self) -> Response:
        """The response of the first target that answers; raises the mapped final failure."""
        candidates = self._candidates()
        if not candidates:
            raise GatewayError(
                ErrorCode.NO_ROUTE,
                f"route {self.plan.route!r} has no destination that serves {self.context.request.path}",
            )
        failure = Failure("5xx", "no attempt was made")
        for position, (target, adapter) in enumerate(candidates):
            if position:
                self.metrics.child(self.metrics.fallbacks, self.plan.route).inc()
            outcome = await self._try_target(target, adapter)
            if isinstance(outcome, Response):
                if self.inspectors and outcome.stream is None and outcome.status == 200:
                    await self._inspect(self.context.output_text, complete=True)
                return outcome
            failure = outcome
        raise _final_error(failure)

    async def _try_target(self, target: Any, adapter: Adapter) -> Response | Failure:
        attempts = self.plan.attempts
        outcome: Response | Failure = Failure("5xx", "no attempt was made")
        for attempt in range(attempts.max_attempts):
            if attempt:
                assert isinstance(outcome, Failure)
                delay = self._backoff(outcome)
                if delay is None:
                    return outcome
                self.metrics.child(self.metrics.retries, self.plan.route).inc()
                await asyncio.sleep(delay)
            outcome = await self._attempt(target, adapter)
            outcome_label = "ok" if isinstance(outcome, Response) else outcome.kind
            self.metrics.child(self.metrics.attempts, adapter.name, outcome_label).inc()
            self._observe(adapter, outcome)
            if isinstance(outcome, Response) or outcome.kind not in attempts.triggers:
                return outcome
        return outcome

    def _backoff(self, failure: Failure) -> float | None:
        """Seconds to wait before the next attempt: the backoff with jitter, never shorter than the upstream's
        `retry-after`; None when that wait would pass the request's deadline."""
        delay = self.plan.attempts.backoff_ms / 1000 * random.uniform(*BACKOFF_JITTER)
        delay = max(delay, retry_after_seconds(failure.retry_after))
        deadline = self.context.state.config.server.request_timeout_ms / 1000
        if time.perf_counter() - self.context.started + delay >= deadline:
            return None
        return delay

    def _observe(self, adapter: Adapter, outcome: Response | Failure) -> None:
        """Outlier detection of the destination: a success clears its record, a counted failure adds to it. A
        stream is judged when it ends (`_relay`): one the upstream cuts mid-way is a failure, not a success."""
        if self.outliers is None:
            return
        if isinstance(outcome, Response):
            if outcome.stream is None:
                self.outliers.succeeded(adapter.name)
        else:
            self._failed(adapter, outcome.kind)

    def _failed(self, adapter: Adapter, kind: str) -> None:
        detection = adapter.destination.outlier_detection
        if self.outliers is None or detection is None or kind not in OUTLIER_KINDS:
            return
        if self.outliers.failed(adapter.name, detection):
            outliers, name = self.outliers, adapter.name
            self.metrics.child(self.metrics.destination_ejected, name).set_function(
                lambda: 1.0 if outliers.ejected(name) else 0.0
            )

    async def _attempt(self, target: Any, adapter: Adapter) -> Response | Failure:
        context = self.context
        body = attempt_body(context, target, adapter)

        async def call() -> Response | Failure:
            built = await adapter.build(upstream_operation(context, adapter), body, context.stream, context.scope)
            request = context.request
            built = with_request_headers(built, adapter, request.headers, request.request_id, context.trace)
            upstream = await self.pool.request(built.origin, built.method, built.path, built.headers, built.body)
            return await self._answer(adapter, upstream)

        return await self._timed(adapter, call)

    async def _timed(self, adapter: Adapter, call: Callable[[], Awaitable[Response | Failure]]) -> Response | Failure:
        """One attempt under the plan's per-attempt timeout, its failures mapped, its time counted."""
        context = self.context
        started = time.perf_counter()
        timeout = self.plan.attempts.timeout_seconds
        try:
            if timeout is None:  # the request's deadline still applies
                return await call()
            async with asyncio.timeout(timeout):
                return await call()
        except TimeoutError:
            return Failure("timeout", f"destination {adapter.name!r} did not answer in time")
        except VaultUnavailable as error:
            return Failure("vault", f"destination {adapter.name!r}: {error}", code=ErrorCode.VAULT_UNAVAILABLE)
        except (UpstreamError, VaultError, OSError) as error:
            return Failure("5xx", f"destination {adapter.name!r}: {error}")
        finally:
            context.upstream_seconds += time.perf_counter() - started

    async def _answer(self, adapter: Adapter, upstream: UpstreamResponse) -> Response | Failure:
        status = upstream.status
        if status == 200 and self.context.stream:
            return await self._start_stream(adapter, upstream)
        body = adapter.decode_answer(self.context.operation, self.context.model, status, await upstream.read())
        if 200 <= status < 300:
            try:
                translated = _translated_success(self.context, adapter, body, bool(self.inspectors))
            except (orjson.JSONDecodeError, AttributeError, TypeError, KeyError):
                return _malformed(adapter, f"a {status} body that is not a JSON document")
            return Response(status, JSON_CONTENT, translated)
        if status == 429:
            return Failure("429", f"destination {adapter.name!r} is rate limited", upstream.header(b"retry-after"))
        if status >= 500:
            return Failure("5xx", f"destination {adapter.name!r} answered {status}")
        if status in (401, 403):
            self.metrics.child(self.metrics.upstream_auth_failures, adapter.name).inc()
            return Failure(
                "auth",
                f"destination {adapter.name!r} refused the gateway's credential ({status})",
                code=ErrorCode.UPSTREAM_AUTH_FAILED,
            )
        return _client_error(self.context, adapter, status, body)

    async def _start_stream(self, adapter: Adapter, upstream: UpstreamResponse) -> Response | Failure:
        translator = stream_translator(self.context, adapter)
        translator.collect_text = bool(self.inspectors)
        opened = await self._opened(adapter, upstream, translator.feed)
        if isinstance(opened, Failure):
            return opened
        return self._streamed(adapter, _batches(*opened, translator.feed), translator, [upstream])

    async def _opened(self, adapter: Adapter, upstream: UpstreamResponse, feed: Feed) -> Opened | Failure:
        """An upstream stream read and fed until its events make a first client frame (the first byte goes out as
        soon as one event makes a frame): those frames, and the stream's events after them, as they come. A stream
        that ends or cannot be read before then is a failed attempt (its upstream released)."""
        decoder = adapter.stream_decoder(self.context.operation, self.context.model)
        chunks = upstream.chunks()
        frames: list[bytes] = []
        rest: Iterator[SseEvent] = iter(())
        try:
            while not frames:
                rest = iter(decoder.feed(await anext(chunks)))
                for event in rest:
                    if event.data != "[DONE]":
                        orjson.loads(event.data)  # a frame that is not JSON before the first byte: try elsewhere
                    frames += feed(event)
                    if frames:
                        break
        except StopAsyncIteration:
            upstream.release()
            return Failure("5xx", f"destination {adapter.name!r} ended the stream before any event")
        except ValueError as error:
            upstream.release()
            return _malformed(adapter, f"an event-stream frame that cannot be read ({error})")
        except BaseException:
            upstream.release()
            raise
        return frames, _events(rest, chunks, decoder)

    def _streamed(
        self,
        adapter: Adapter,
        batches: Batches,
        translator: streams.StreamTranslator,
        upstreams: list[UpstreamResponse],
    ) -> Response | Failure:
        """The client's stream of opened upstream streams, unless an error event came first (a failed attempt)."""
        if translator.failed:
            for upstream in upstreams:
                upstream.release()
            return Failure("5xx", f"destination {adapter.name!r} failed before the first event")
        relay = self._relay(adapter, batches, translator, upstreams)
        return Response(200, SSE_CONTENT, stream=relay, first_chunk_ready=not self.inspectors)

    async def _relay(
        self,
        adapter: Adapter,
        batches: Batches,
        translator: streams.StreamTranslator,
        upstreams: list[UpstreamResponse],
    ) -> AsyncIterator[bytes]:
        context = self.context
        status = CLIENT_CLOSED_REQUEST  # unless the relay gets to decide otherwise, the client left
        try:
            try:
                async with aclosing(batches):
                    async for frames in batches:
                        if frames:
                            yield await self._released(frames, translator)
                tail = translator.finish()
                status = 502 if translator.failed else 200
                if translator.failed:  # ended without completing, or with an error event of its own
                    self._failed(adapter, "5xx")
            except (TimeoutError, UpstreamIdle) as error:
                status = 504
                self._failed(adapter, "timeout")
                tail = translator.fail(f"the upstream stream went idle: {error}", ErrorCode.UPSTREAM_TIMEOUT.value)
            except (UpstreamError, OSError, ValueError) as error:
                status = 502
                self._failed(adapter, "5xx")
                tail = translator.fail(f"the upstream stream broke: {error}")
            except GatewayError as error:
                status = error.status
                tail = translator.fail(error.message, error.code.value)
            if tail:
                yield b"".join(tail)
        finally:
            for upstream in upstreams:
                upstream.release()
            context.status = status
            if status == 200 and self.outliers is not None:
                self.outliers.succeeded(adapter.name)
            if status == 200:
                context.usage = translator.usage
            else:
                context.partial = True
                context.usage = self._received_usage(translator)
            self.finish(context)

    def _received_usage(self, translator: streams.StreamTranslator) -> Usage:
        """The usage of a stream that ended early: the usage frames seen, with output at least the tokens of the
        text relayed, and input from the request when no frame said."""
        usage = translator.usage or translator.usage_so_far() or Usage()
        output = max(usage.output_tokens, math.ceil(translator.text_chars / CHARS_PER_TOKEN))
        input_tokens = usage.input_tokens or math.ceil(len(self.context.request.body) / CHARS_PER_TOKEN)
        return replace(usage, input_tokens=input_tokens, output_tokens=output)

    async def _released(self, frames: list[bytes], translator: streams.StreamTranslator) -> bytes:
        """A batch of frames, once the output inspectors have seen its text (they raise to block it)."""
        if self.inspectors:
            text = translator.take_text()
            if text or translator.completed:
                self.context.output_text += text
                await self._inspect(text, complete=translator.completed)
        return b"".join(frames)

    async def _inspect(self, text: str, complete: bool) -> None:
        self.context.output_complete = complete
        for stage in self.inspectors:
            await stage.inspect_output(self.context, text)


def _translated(feed: Feed, events: Iterable[SseEvent]) -> list[bytes]:
    """The client frames of a batch of upstream events."""
    return [frame for event in events for frame in feed(event)]


async def _events(rest: Iterator[SseEvent], chunks: AsyncIterator[bytes], decoder: StreamDecoder) -> Events:
    """An opened stream's events after its first frame: those left in the chunk that made it, then chunk by chunk."""
    yield list(rest)
    async for chunk in chunks:
        yield decoder.feed(chunk)


async def _batches(first: list[bytes], events: Events, feed: Feed) -> Batches:
    """An opened stream's client frames, batch by batch."""
    yield first
    async with aclosing(events):
        async for batch in events:
            yield _translated(feed, batch)


def _final_error(failure: Failure) -> GatewayError:
    """The last failure of an exhausted plan, as the gateway's own error."""
    if failure.kind == "timeout":
        return GatewayError(ErrorCode.UPSTREAM_TIMEOUT, failure.message)
    if failure.kind == "429":
        return GatewayError(
            ErrorCode.UPSTREAM_RATE_LIMITED, failure.message, headers=((b"retry-after", failure.retry_after or b"1"),)
        )
    return GatewayError(failure.code, failure.message)


def error_response(protocol: Protocol, error: GatewayError, rpc_id: str | int | None = None) -> Response:
    """A gateway error in the protocol of its path (`rpc_id`: the JSON-RPC id it answers, on MCP paths)."""
    body = orjson.dumps(error_body(protocol, error.code.value, error.message, error.status, rpc_id, error.param))
    return Response(error.status, [*JSON_CONTENT, *error.headers], body)


class ModelAsker:
    """The pipeline's "ask the model" for plugins (an `llm_evaluator`'s call): a chat request routed by the
    snapshot of the request it is made for, dispatched in-process without the governance stages."""

    PATH = "/v1/chat/completions"

    def __init__(self, pool: UpstreamPool, metrics: GatewayMetrics) -> None:
        self.pool = pool
        self.metrics = metrics

    async def __call__(self, context: RequestContext, body: dict[str, Any]) -> str:
        request = Request(
            method="POST", path=self.PATH, query="", headers={}, body=b"", request_id=context.request.request_id
        )
        evaluation = RequestContext(
            request=request,
            operation=Operation.CHAT,
            protocol=Protocol.VENDOR_A,
            state=context.state,
            body=body,
            principal=context.principal,
        )
        route = context.state.router.match(evaluation)
        if route is None:
            raise BackendError(f"no route serves the evaluator model {body.get('model')!r}")
        evaluation.route = route.name
        try:
            response = await Dispatch(
                self.pool, self.metrics, evaluation, route.plan(evaluation), _unaccounted, governed=False
            ).run()
        except GatewayError as error:
            raise BackendError(f"the evaluator model failed: {error.code.value}") from None
        if response.status != 200:
            raise BackendError(f"the evaluator model answered HTTP {response.status}")
        return _completion_text(response.body)


def _unaccounted(context: RequestContext) -> None:
    """Evaluator calls are part of the request they judge; they are not accounted on their own."""


def _completion_text(body: bytes) -> str:
    try:
        content = orjson.loads(body)["choices"][0]["message"]["content"]
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
        raise BackendError("the evaluator model's answer is not a chat completion") from None
    if not isinstance(content, str):
        raise BackendError("the evaluator model answered without text")
    return content

"""Fan-out: a request one upstream call cannot answer, sent as several calls at once and answered as one.

`n > 1` towards a messages-shaped destination (one choice per call): `n` calls whose choices come back indexed 0 to
n-1 with their usage summed; streamed, the `n` streams are interleaved into one chunk stream, each chunk carrying
its choice's index (`streams.ChoicesToChat`). A list of embedding inputs to a model that takes one text per call
(`Adapter.embeds_one_text_per_call`): one call per text, the vectors in input order. At most `CONCURRENT_CALLS`
calls are in flight at once. The calls are one attempt: any of them failing fails the attempt with that call's
error, and the attempt is retried or falls back as a whole. Everything else takes the plain path.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from functools import partial
from typing import Any

import orjson

from gatewayproxy.adapters import contract, streams
from gatewayproxy.adapters.base import Adapter, Shape, UpstreamCall
from gatewayproxy.adapters.headers import with_request_headers
from gatewayproxy.adapters.usage import summed, usage_to_chat
from gatewayproxy.context import Operation, Usage
from gatewayproxy.http.sse import SseEvent
from gatewayproxy.pipeline.dispatch import (
    JSON_CONTENT,
    Batches,
    Dispatch,
    Events,
    Failure,
    Opened,
    attempt_body,
    choices_translator,
    upstream_operation,
)
from gatewayproxy.server.protocol import Response
from gatewayproxy.server.upstream import UpstreamResponse

CONCURRENT_CALLS = contract.MAX_FAN_OUT  # calls of one fan-out in flight at once (every choice of a stream)


def wants_fan_out(operation: Operation, body: dict[str, Any]) -> bool:
    """Whether a request may need fan-out (a chat request asking for more than one choice, or several embedding
    inputs); cheap, for the data plane to pick the dispatch."""
    if operation is Operation.EMBEDDINGS:
        inputs = body.get("input")
        return isinstance(inputs, list) and len(inputs) > 1
    return operation is Operation.CHAT and body.get("n") not in (None, 1)


@dataclass(frozen=True)
class _Answer:
    """One call's answer: its body in the client's shape, and the usage and text read from it."""

    body: bytes
    usage: Usage
    text: str


class FanOutDispatch(Dispatch):
    """A dispatch that answers a request by several upstream calls where one call cannot answer it."""

    async def _attempt(self, target: Any, adapter: Adapter) -> Response | Failure:
        context = self.context
        calls = self._calls_wanted(adapter)
        if calls == 1:
            return await super()._attempt(target, adapter)
        body = attempt_body(context, target, adapter)

        async def fanned_out() -> Response | Failure:
            built = await self._built(adapter, body, calls)
            if context.stream and context.operation is Operation.CHAT:
                return await self._interleaved_streams(adapter, built)
            return await self._merged_answers(adapter, built)

        return await self._timed(adapter, fanned_out)

    def _calls_wanted(self, adapter: Adapter) -> int:
        """How many upstream calls answer the request at `adapter` (1: the plain path)."""
        context = self.context
        if context.operation is Operation.EMBEDDINGS:
            inputs = context.body.get("input")
            if not isinstance(inputs, list) or not all(isinstance(text, str) for text in inputs):
                return 1  # not texts: one call, which refuses them
            return len(inputs) if adapter.embeds_one_text_per_call(context.model) else 1
        n = contract.choices_wanted(context.body)
        return n if adapter.shape_for(context.operation, context.model) is Shape.MESSAGES else 1

    async def _built(self, adapter: Adapter, body: dict[str, Any], calls: int) -> list[UpstreamCall]:
        """The upstream calls: one per embedding input, else `calls` of the one body. Every call is a child of the
        gateway's span, and all carry the one request id."""
        context = self.context
        operation = upstream_operation(context, adapter)
        if context.operation is Operation.EMBEDDINGS:
            built = [
                await adapter.build(operation, {**body, "input": text}, False, context.scope)
                for text in context.body["input"]
            ]
        else:
            built = [await adapter.build(operation, body, context.stream, context.scope)] * calls
        headers, request_id = context.request.headers, context.request.request_id
        return [with_request_headers(each, adapter, headers, request_id, context.trace) for each in built]

    async def _send(self, call: UpstreamCall) -> UpstreamResponse:
        return await self.pool.request(call.origin, call.method, call.path, call.headers, call.body)

    async def _merged_answers(self, adapter: Adapter, calls: list[UpstreamCall]) -> Response | Failure:
        """One JSON answer of every call's answer (`_merged`), its usage the sum of theirs."""
        answers = await self._answers(adapter, calls)
        if not isinstance(answers, list):
            return answers
        context = self.context
        context.usage = summed([answer.usage for answer in answers])
        context.output_text = "".join(answer.text for answer in answers)
        documents = [orjson.loads(answer.body) for answer in answers]
        return Response(200, JSON_CONTENT, orjson.dumps(_merged(context.operation, documents, context.usage)))

    async def _answers(self, adapter: Adapter, calls: list[UpstreamCall]) -> list[_Answer] | Response | Failure:
        """Every call's answer, read, judged and translated, in call order; once one fails no further call is sent,
        and the first failure is the outcome (a call that raises raises)."""
        limit = asyncio.Semaphore(CONCURRENT_CALLS)
        failures: list[Response | Failure] = []
        stopped = False

        async def one(call: UpstreamCall) -> _Answer | None:
            nonlocal stopped
            async with limit:
                if stopped:
                    return None
                try:
                    outcome = await self._answer(adapter, await self._send(call))
                except BaseException:
                    stopped = True
                    raise
                if not isinstance(outcome, Response) or outcome.status != 200:
                    stopped = True
                    failures.append(outcome)
                    return None
                # `_answer` has just set the context's usage and text from this answer; no other call ran since.
                return _Answer(outcome.body, self.context.usage or Usage(), self.context.output_text)

        answers = await asyncio.gather(*(one(call) for call in calls), return_exceptions=True)
        _raise_any(answers, [])
        if failures:
            return failures[0]
        return [answer for answer in answers if isinstance(answer, _Answer)]

    async def _interleaved_streams(self, adapter: Adapter, calls: list[UpstreamCall]) -> Response | Failure:
        """One chunk stream of the calls' streams, once every call has answered and sent its first frame; a call
        refused, or a stream that cannot start, fails the attempt."""
        heads = await asyncio.gather(*(self._send(call) for call in calls), return_exceptions=True)
        sent = [head for head in heads if isinstance(head, UpstreamResponse)]
        _raise_any(heads, sent)
        refused = next((upstream for upstream in sent if upstream.status != 200), None)
        if refused is not None:
            _release([upstream for upstream in sent if upstream is not refused])
            return await self._answer(adapter, refused)
        translator = choices_translator(self.context, len(sent))
        translator.collect_text = bool(self.inspectors)
        opened = await asyncio.gather(
            *(
                self._opened(adapter, upstream, partial(translator.feed_choice, choice))
                for choice, upstream in enumerate(sent)
            ),
            return_exceptions=True,
        )
        _raise_any(opened, sent)
        failure = next((each for each in opened if isinstance(each, Failure)), None)
        if failure is not None:
            _release(sent)
            return failure
        started = [each for each in opened if not isinstance(each, (Failure, BaseException))]
        merge = _in_choice_order if self.inspectors else _interleaved
        return self._streamed(adapter, merge(started, translator), translator, sent)


def _release(upstreams: list[UpstreamResponse]) -> None:
    for upstream in upstreams:
        upstream.release()


def _raise_any(results: list[Any], upstreams: list[UpstreamResponse]) -> None:
    """Raise the first exception among gathered results, once `upstreams` are released."""
    broken = next((each for each in results if isinstance(each, BaseException)), None)
    if broken is not None:
        _release(upstreams)
        raise broken


Arrival = tuple[int, list[SseEvent] | None]  # a batch of one choice's events, or (None) the end of its stream


async def _arrivals(opened: list[Opened]) -> AsyncGenerator[Arrival, None]:
    """The choices' batches of events after their first frames, as they come, and the end of each choice's stream;
    a stream that raises raises here. At most one batch per choice waits to be taken."""
    queue: asyncio.Queue[Arrival | Exception] = asyncio.Queue(maxsize=len(opened))

    async def pump(events: Events, choice: int) -> None:
        try:
            async with aclosing(events):
                async for batch in events:
                    await queue.put((choice, batch))
        except Exception as error:
            await queue.put(error)
        else:
            await queue.put((choice, None))

    pumps = [asyncio.create_task(pump(events, choice)) for choice, (_, events) in enumerate(opened)]
    try:
        running = len(pumps)
        while running:
            item = await queue.get()
            if isinstance(item, Exception):
                raise item
            if item[1] is None:
                running -= 1
            yield item
    finally:
        for task in pumps:
            task.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)


def _first_frames(opened: list[Opened]) -> list[bytes]:
    return [frame for first, _ in opened for frame in first]


def _fed(translator: streams.ChoicesToChat, choice: int, batches: list[list[SseEvent]]) -> list[bytes]:
    return [frame for batch in batches for event in batch for frame in translator.feed_choice(choice, event)]


async def _interleaved(opened: list[Opened], translator: streams.ChoicesToChat) -> Batches:
    """The choices' client frames as their events come (so the stream's last frame is last), until every stream has
    ended or one choice's error event has failed them all."""
    yield _first_frames(opened)
    async with aclosing(_arrivals(opened)) as arrivals:
        async for choice, batch in arrivals:
            if batch is not None:
                yield _fed(translator, choice, [batch])
            if translator.failed:
                return


async def _in_choice_order(opened: list[Opened], translator: streams.ChoicesToChat) -> Batches:
    """The choices' client frames, each choice's after every frame of the choice before it (the streams still run
    at once): output inspectors then read each choice's text whole, never one choice's words between another's."""
    yield _first_frames(opened)
    held: list[list[list[SseEvent]]] = [[] for _ in opened]
    ended = [False] * len(opened)
    current = 0
    async with aclosing(_arrivals(opened)) as arrivals:
        async for choice, batch in arrivals:
            if batch is None:
                ended[choice] = True
            else:
                held[choice].append(batch)
            while current < len(opened):
                frames, held[current] = _fed(translator, current, held[current]), []
                yield frames
                if translator.failed:
                    return
                if not ended[current]:
                    break
                current += 1


def _merged(operation: Operation, documents: list[dict[str, Any]], usage: Usage) -> dict[str, Any]:
    """One answer of the calls' answers: the first's, with every answer's choices (or vectors) in call order,
    indexed from 0, and the summed usage."""
    key = "data" if operation is Operation.EMBEDDINGS else "choices"
    items = [item for document in documents for item in document.get(key) or []]
    first = documents[0]
    template = first.get("usage") or {}
    if operation is Operation.EMBEDDINGS:
        totals = {**template, "prompt_tokens": usage.input_tokens, "total_tokens": usage.input_tokens}
    else:
        totals = {**template, **usage_to_chat(usage)}
    return {**first, key: [{**item, "index": index} for index, item in enumerate(items)], "usage": totals}

"""`n > 1` towards a messages-shaped destination, which answers one choice per call: the request is sent `n` times
at once and the answers come back as one chat completion with `n` choices (indexes 0 to n-1, usage summed).

Only JSON answers are fanned out; a streamed `n > 1` towards such a target is refused before any call
(`contract.refusals`). The `n` calls are one attempt: any of them failing fails the attempt, which is retried or
falls back as a whole. Chat-shaped targets carry `n` themselves and take the plain path.
"""

from __future__ import annotations

import asyncio
from dataclasses import fields
from typing import Any

import orjson

from gatewayproxy.adapters import contract
from gatewayproxy.adapters.base import Adapter, Shape, UpstreamCall
from gatewayproxy.adapters.headers import with_request_headers
from gatewayproxy.context import Operation, Usage
from gatewayproxy.pipeline.dispatch import JSON_CONTENT, Dispatch, Failure, attempt_body, upstream_operation
from gatewayproxy.server.protocol import Response
from gatewayproxy.server.upstream import UpstreamResponse


def wants_fan_out(operation: Operation, body: dict[str, Any]) -> bool:
    """Whether a request may need fan-out (a chat request asking for more than one choice); cheap, for the data
    plane to pick the dispatch."""
    return operation is Operation.CHAT and body.get("n") not in (None, 1)


def _summed(usages: list[Usage]) -> Usage:
    return Usage(**{each.name: sum(getattr(usage, each.name) for usage in usages) for each in fields(Usage)})


class FanOutDispatch(Dispatch):
    """A dispatch that answers a chat request's `n` choices from a messages-shaped target by `n` calls."""

    async def _attempt(self, target: Any, adapter: Adapter) -> Response | Failure:
        context = self.context
        n = contract.choices_wanted(context.body)
        if n == 1 or context.stream or adapter.shape_for(context.operation, context.model) is not Shape.MESSAGES:
            return await super()._attempt(target, adapter)
        body = attempt_body(context, target, adapter)

        async def calls() -> Response | Failure:
            built = await adapter.build(upstream_operation(context, adapter), body, False, context.scope)
            headers, request_id = context.request.headers, context.request.request_id
            # Every call a child of the gateway's span; one request id for all of them.
            each = [with_request_headers(built, adapter, headers, request_id, context.trace) for _ in range(n)]
            return await self._fan_out(adapter, each)

        return await self._timed(adapter, calls)

    async def _fan_out(self, adapter: Adapter, calls: list[UpstreamCall]) -> Response | Failure:
        sent = await asyncio.gather(
            *(self.pool.request(call.origin, call.method, call.path, call.headers, call.body) for call in calls),
            return_exceptions=True,
        )
        broken = next((each for each in sent if isinstance(each, BaseException)), None)
        if broken is not None:
            for each in sent:
                if isinstance(each, UpstreamResponse):
                    each.release()
            raise broken
        context = self.context
        choices: list[dict[str, Any]] = []
        usages: list[Usage] = []
        texts: list[str] = []
        first: dict[str, Any] | None = None
        failed: Response | Failure | None = None
        for upstream in sent:
            assert isinstance(upstream, UpstreamResponse)
            if failed is not None:
                upstream.release()  # the attempt has already failed: the rest is not read
                continue
            outcome = await self._answer(adapter, upstream)  # reads, judges and translates one answer
            if not isinstance(outcome, Response) or outcome.status != 200:
                failed = outcome
                continue
            document = orjson.loads(outcome.body)
            first = first or document
            for choice in document.get("choices") or []:
                choices.append({**choice, "index": len(choices)})
            usages.append(context.usage or Usage())
            texts.append(context.output_text)
        if failed is not None:
            return failed
        assert first is not None
        context.usage = _summed(usages)
        context.output_text = "".join(texts)
        merged = {**first, "choices": choices, "usage": _chat_usage(context.usage, first.get("usage") or {})}
        return Response(200, JSON_CONTENT, orjson.dumps(merged))


def _chat_usage(usage: Usage, template: dict[str, Any]) -> dict[str, Any]:
    """The chat usage object of the summed usage."""
    prompt = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
    details: dict[str, Any] = {"cached_tokens": usage.cache_read_tokens}
    if usage.cache_write_tokens:
        details["cache_write_tokens"] = usage.cache_write_tokens
    return {
        **template,
        "prompt_tokens": prompt,
        "completion_tokens": usage.output_tokens,
        "total_tokens": prompt + usage.output_tokens,
        "prompt_tokens_details": details,
    }

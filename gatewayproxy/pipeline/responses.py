"""The responses API: `POST /v1/responses` on `vendor_a` and `cloud_vendor_c` destinations, and a stored response
read (`GET`) or deleted (`DELETE`) at `/v1/responses/{id}`, routed like any other path.

`background: true` is refused (400 `unsupported_parameter` naming `background`): the gateway accounts a response
when it answers the create, and a background response has no usage until a later fetch. So a `GET` never streams
(`stream` in its query is refused too), and reads and deletes carry no tokens. A response lives with the provider
that made it: the route that serves the path decides where a `GET` goes (a 404 there passes back as sent).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl

from gatewayproxy.adapters import contract
from gatewayproxy.adapters.base import Adapter
from gatewayproxy.adapters.headers import with_request_headers
from gatewayproxy.adapters.vendor_a import VendorAAdapter
from gatewayproxy.errors import ErrorCode, GatewayError
from gatewayproxy.pipeline.dispatch import Dispatch, Failure
from gatewayproxy.server.protocol import Response

RESPONSES_KINDS = ("vendor_a", "cloud_vendor_c")
ITEM_PREFIX = "/v1/responses/"
ITEM_METHODS = ("GET", "DELETE")
RESPONSE_ID = re.compile(r"^[A-Za-z0-9_-]{1,200}$")


def response_id_of(path: str) -> str | None:
    """The id in `/v1/responses/{id}`, or None for any other path."""
    if not path.startswith(ITEM_PREFIX):
        return None
    found = path.removeprefix(ITEM_PREFIX)
    return found if RESPONSE_ID.match(found) else None


def serves_responses(adapter: Adapter, target: Any) -> bool:
    """A destination that answers the responses API as sent: `vendor_a` without model mapping or parameter
    shaping, or `cloud_vendor_c` (whose `model_map` names deployments, which the responses API takes as `model`)."""
    kind = adapter.destination.kind
    if kind not in RESPONSES_KINDS or not isinstance(adapter, VendorAAdapter):
        return False
    shaping = bool(target.default_params or target.override_params or target.drop_params)
    return kind == "cloud_vendor_c" or (not adapter.destination.model_map and not shaping)


class ResponsesDispatch(Dispatch):
    """The dispatch of responses-API requests: creates as the base dispatch sends them, and reads and deletes of a
    stored response."""

    def _candidates(self) -> list[tuple[Any, Adapter]]:
        adapters = self.context.state.adapters
        candidates = []
        for target in self.plan.targets:
            adapter = adapters.get(target.destination)
            if adapter is not None and serves_responses(adapter, target):
                candidates.append((target, adapter))
        return self._unejected(candidates)

    async def run(self) -> Response:
        request = self.context.request
        if request.method == "POST":
            contract.refuse_background(self.context.body)
        elif any(name == "stream" and value not in ("", "false") for name, value in parse_qsl(request.query)):
            raise GatewayError(
                ErrorCode.UNSUPPORTED_PARAMETER,
                "`stream` reads only background responses, which the gateway does not create",
                param="stream",
            )
        return await super().run()

    async def _attempt(self, target: Any, adapter: Adapter) -> Response | Failure:
        context = self.context
        request = context.request
        if request.method == "POST":
            return await super()._attempt(target, adapter)
        response_id = response_id_of(request.path)
        assert response_id is not None and isinstance(adapter, VendorAAdapter)
        context.attempts += 1
        context.destination = adapter.name

        async def call() -> Response | Failure:
            built = await adapter.build_response_call(request.method, response_id, request.query, context.scope)
            built = with_request_headers(built, adapter, request.headers, request.request_id, context.trace)
            upstream = await self.pool.request(built.origin, built.method, built.path, built.headers, built.body)
            outcome = await self._answer(adapter, upstream)
            context.usage = None  # a read or a delete uses no tokens (the response's usage was its create's)
            return outcome

        return await self._timed(adapter, call)

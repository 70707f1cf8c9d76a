"""The governance stages without sockets: a snapshot built from a config (`build_state`, nothing started, no
upstream), and request contexts fed straight into its StageRunner's `admit` and `settle`, as the data plane does
between routing and dispatch. A refusal is the GatewayError's code and the stage named in `refused_by`."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gatewayproxy.config.loader import validate_document
from gatewayproxy.context import Operation, Principal, RequestContext, Usage
from gatewayproxy.errors import ErrorCode, GatewayError, Protocol
from gatewayproxy.http.connection import Request
from gatewayproxy.metrics import GatewayMetrics
from gatewayproxy.server.upstream import UpstreamPool
from gatewayproxy.state import GatewayState, SharedParts, build_state

DEAR = {"input_per_1m": 1.0, "output_per_1m": 1000.0}  # 1,000 output tokens cost 1 USD


def config(**sections: Any) -> dict[str, Any]:
    """One vendor-A destination (never called) behind one route, plus `sections`."""
    destination = {"kind": "vendor_a", "base_url": "http://upstream.invalid/v1", "credentials": {"vault": "v"}}
    return {
        "identity": {"scope_dims": ["team"]},
        "vaults": [{"name": "v", "resolver": "env", "env_var": "PATH"}],
        "destinations": {"one": {**destination, "pricing": DEAR}},
        "routes": [{"name": "all", "strategy": {"mode": "fallback", "targets": [{"destination": "one"}]}}],
        **sections,
    }


@pytest.fixture
def snapshot() -> Iterator[Any]:
    """Builds the snapshot of a config document; the upstream pools are closed at the end (none was used)."""
    pools: list[UpstreamPool] = []

    def build(document: dict[str, Any]) -> GatewayState:
        pools.append(UpstreamPool())
        return build_state(validate_document(document), pools[-1], SharedParts(), GatewayMetrics())

    yield build
    for pool in pools:
        pool.close()


def request(
    state: GatewayState,
    content: str = "hi",
    *,
    principal: str = "alice",
    team: str = "red",
    path: str = "/v1/chat/completions",
    model: str = "m",
    max_tokens: int = 100,
) -> RequestContext[GatewayState]:
    """A routed chat request of `principal`, as the data plane hands it to the runner after routing."""
    body = {"model": model, "max_tokens": max_tokens, "messages": [{"role": "user", "content": content}]}
    context: RequestContext[GatewayState] = RequestContext(
        request=Request(method="POST", path=path, query="", headers={}, body=b""),
        operation=Operation.CHAT,
        protocol=Protocol.VENDOR_A,
        state=state,
        body=body,
        principal=Principal(principal, {"team": team}),
    )
    route = state.router.match(context)
    assert route is not None
    context.route = route.name
    context.plan = route.plan(context)
    context.destination = context.plan.targets[0].destination
    return context


async def refusal(state: GatewayState, context: RequestContext[GatewayState]) -> str | None:
    """The code `admit` refused with (the stage in `refused_by`), or None when admitted."""
    try:
        await state.runner.admit(context)
    except GatewayError as error:
        assert context.refused_by is not None
        return error.code.value
    return None


async def settled(state: GatewayState, context: RequestContext[GatewayState], **usage: int) -> None:
    """Settle a served request with this usage, and let the stages' write-backs run."""
    context.status, context.usage = 200, Usage(**usage)
    state.runner.settle(context)
    pending = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    await asyncio.gather(*pending)


def test_a_rate_limit_refuses_the_request_beyond_its_quota(snapshot: Any) -> None:
    async def scenario() -> None:
        state = snapshot(config(rate_limits=[{"name": "per_team", "qpm": 3}]))
        admitted = [await refusal(state, request(state)) for _ in range(3)]
        beyond = request(state)
        assert admitted == [None, None, None]
        assert await refusal(state, beyond) == ErrorCode.RATE_LIMITED.value
        assert beyond.refused_by == "limits"
        # A bucket per scope: another team still has its quota.
        assert await refusal(state, request(state, team="blue")) is None

    asyncio.run(scenario())


def test_a_spend_budget_refuses_once_settlement_charged_the_real_cost(snapshot: Any) -> None:
    async def scenario() -> None:
        spend = {"admission": {"default_max_output_tokens": 100}}
        state = snapshot(config(rate_limits=[{"name": "spend", "budget_usd_per_month": 1.5}], spend=spend))
        first, second = request(state), request(state)
        # Each reserves its worst case (100 output tokens: ~0.1 USD), well under the budget.
        assert await refusal(state, first) is None
        assert await refusal(state, second) is None
        # The first really cost 1.45 USD: settlement charges the difference, and the budget is now spent.
        await settled(state, first, input_tokens=10, output_tokens=1450)
        third = request(state)
        assert await refusal(state, third) == ErrorCode.BUDGET_EXCEEDED.value
        assert third.refused_by == "limits"

    asyncio.run(scenario())


def test_a_pii_regex_guardrail_blocks_the_input(snapshot: Any) -> None:
    async def scenario() -> None:
        guardrail = {"name": "pii", "kind": "pii_regex", "builtins": ["email"], "phases": ["input"]}
        state = snapshot(config(plugins={"guardrails": [guardrail]}))
        assert await refusal(state, request(state, "the plan, in short")) is None
        blocked = request(state, "mail bob@example.com the plan")
        assert await refusal(state, blocked) == ErrorCode.GUARDRAIL_BLOCKED_INPUT.value
        assert blocked.refused_by == "guardrails"

    asyncio.run(scenario())


def test_a_yaml_acl_authorizer_allows_and_denies(snapshot: Any, tmp_path: Path) -> None:
    async def scenario() -> None:
        rules = [
            {"name": "alice", "principal": "alice", "models": ["a-*"]},
            {"name": "blue-team", "scope": {"team": "blue"}, "paths": ["/v1/messages"]},
        ]
        (tmp_path / "acl.yaml").write_text(yaml.safe_dump({"rules": rules}))
        authorizer = {"name": "acl", "kind": "yaml_acl", "file": str(tmp_path / "acl.yaml")}
        state = snapshot(config(plugins={"authorizers": [authorizer]}))
        outcomes = {
            "alice a-model": await refusal(state, request(state, model="a-large")),
            "alice other model": await refusal(state, request(state, model="b-small")),
            "blue messages": await refusal(state, request(state, principal="bob", team="blue", path="/v1/messages")),
            "blue chat": await refusal(state, request(state, principal="bob", team="blue")),
            "stranger": await refusal(state, request(state, principal="carol")),
        }
        forbidden = ErrorCode.FORBIDDEN.value
        assert outcomes == {
            "alice a-model": None,
            "alice other model": forbidden,
            "blue messages": None,
            "blue chat": forbidden,
            "stranger": forbidden,
        }

    asyncio.run(scenario())

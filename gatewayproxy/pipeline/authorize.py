"""Authorizers (`plugins.authorizers`): who may make a request; every configured authorizer must allow it, before
anything is spent, or it is 403 `forbidden`."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter

from gatewayproxy.context import TOOLS_CALL, Operation, RequestContext
from gatewayproxy.errors import ErrorCode, GatewayError
from gatewayproxy.pipeline.deps import StageDeps
from gatewayproxy.pipeline.stages import Stage, plugin_stage
from gatewayproxy.plugins.authorizers import Authorizer, Decision, build_authorizer
from gatewayproxy.plugins.decisions import BackendError, failure_passes, passed_failures_counter


class AuthorizerMetrics:
    """Decisions by outcome, and backend failures passed under `allow` or `log_only`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.decisions = Counter(
            "gateway_authorizer_decisions",
            "Authorizer decisions by outcome.",
            ["authorizer", "outcome"],
            registry=registry,
        )
        self.passed_failures = passed_failures_counter(registry, "authorizer")


def authorization_input(context: RequestContext) -> dict[str, Any]:
    """The facts an authorizer judges (the `input` sent to OPA and external processors)."""
    request = context.request
    facts: dict[str, Any] = {
        "request_id": request.request_id,
        "principal": context.principal.id,
        "scope": context.scope,
        "operation": context.operation.value,
        "method": request.method,
        "path": request.path,
        "route": context.route,
        "destination": context.destination,
        "model": None,
        "mcp": None,
    }
    if context.operation is Operation.MCP:
        method = context.body.get("method")
        params = context.body.get("params")
        tool = params.get("name") if method == TOOLS_CALL and isinstance(params, dict) else None
        facts["mcp"] = {"method": method, "tool": tool if isinstance(tool, str) else None}
    elif context.operation is not Operation.NATIVE:
        facts["model"] = context.model
    return facts


class AuthorizeStage(Stage):
    """Asks each authorizer in config order; the first denial refuses the request."""

    name = "authorize"

    def __init__(self, authorizers: list[Authorizer], metrics: AuthorizerMetrics) -> None:
        self.authorizers = authorizers
        self.metrics = metrics

    async def admit(self, context: RequestContext) -> None:
        facts = authorization_input(context)
        for authorizer in self.authorizers:
            decision = await self._decision(authorizer, facts)
            if not decision.allowed:
                reason = f": {decision.reason}" if decision.reason else ""
                raise GatewayError(ErrorCode.FORBIDDEN, f"authorizer {authorizer.name!r} denied the request{reason}")

    async def _decision(self, authorizer: Authorizer, facts: dict[str, Any]) -> Decision:
        """The authorizer's decision; a failed backend denies under `deny` and allows otherwise."""
        try:
            decision = await authorizer.decide(facts)
        except BackendError as error:
            passed = self.metrics.passed_failures.labels(authorizer.name, authorizer.failure_mode)
            if failure_passes(
                authorizer.failure_mode, f"authorizer {authorizer.name}", facts["request_id"], error, passed
            ):
                return Decision(True)
            self.metrics.decisions.labels(authorizer.name, "backend_error").inc()
            return Decision(False, "its backend is unavailable")
        self.metrics.decisions.labels(authorizer.name, "allowed" if decision.allowed else "denied").inc()
        return decision


def build(deps: StageDeps) -> list[Stage]:
    """The authorize stage of a snapshot; none when no authorizer is configured."""
    return plugin_stage(deps, "authorizers", build_authorizer, AuthorizeStage, AuthorizerMetrics)

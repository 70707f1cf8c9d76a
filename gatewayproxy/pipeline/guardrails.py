"""Payload guardrails (`plugins.guardrails`): the request's text at `input` (or an MCP call's arguments at
`tool_call`) in `admit`, the response's text at `output` (or an MCP tool result at `tool_result`) in
`inspect_output`; a block is 400 `guardrail_blocked_input` / `guardrail_blocked_output`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from gatewayproxy.context import TOOLS_CALL, Operation, RequestContext
from gatewayproxy.errors import ErrorCode, GatewayError
from gatewayproxy.pipeline.deps import StageDeps
from gatewayproxy.pipeline.stages import Stage, plugin_stage
from gatewayproxy.plugins.decisions import BackendError, failure_passes, passed_failures_counter
from gatewayproxy.plugins.guardrails import PHASES, Guardrail, Phase, PiiRegex, Verdict, build_guardrail

MODEL_OPERATIONS = (Operation.CHAT, Operation.MESSAGES, Operation.EMBEDDINGS)
Rewrite = Callable[[str], str]


class GuardrailMetrics:
    """Checks by outcome, and backend failures passed under `allow` or `log_only`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.checks = Counter(
            "gateway_guardrail_checks",
            "Payload guardrail checks by outcome.",
            ["guardrail", "phase", "outcome"],
            registry=registry,
        )
        self.passed_failures = passed_failures_counter(registry, "guardrail")


def _rewrite_content(content: Any, rewrite: Rewrite) -> Any:
    """A message `content`: a string, or blocks whose `text` (and tool results' content) are rewritten."""
    if isinstance(content, str):
        return rewrite(content)
    if not isinstance(content, list):
        return content
    blocks = []
    for block in content:
        if isinstance(block, dict) and isinstance(block.get("text"), str):
            block = {**block, "text": rewrite(block["text"])}
        if isinstance(block, dict) and block.get("type") == "tool_result":
            block = {**block, "content": _rewrite_content(block.get("content"), rewrite)}
        blocks.append(block)
    return blocks


def _rewrite_strings(value: Any, rewrite: Rewrite) -> Any:
    """Every string inside a JSON value (an MCP call's arguments)."""
    if isinstance(value, str):
        return rewrite(value)
    if isinstance(value, list):
        return [_rewrite_strings(item, rewrite) for item in value]
    if isinstance(value, dict):
        return {key: _rewrite_strings(item, rewrite) for key, item in value.items()}
    return value


def rewrite_input(context: RequestContext, rewrite: Rewrite) -> dict[str, Any]:
    """The request body with `rewrite` applied to each of its texts: messages and system prompts, embedding
    inputs, an MCP `tools/call`'s arguments."""
    body = dict(context.body)
    if context.operation is Operation.MCP:
        params = body.get("params")
        if isinstance(params, dict):
            body["params"] = {**params, "arguments": _rewrite_strings(params.get("arguments"), rewrite)}
        return body
    if context.operation is Operation.EMBEDDINGS:
        body["input"] = _rewrite_strings(body.get("input"), rewrite)
        return body
    if "system" in body:
        body["system"] = _rewrite_content(body["system"], rewrite)
    if isinstance(body.get("messages"), list):
        body["messages"] = [
            {**message, "content": _rewrite_content(message.get("content"), rewrite)}
            if isinstance(message, dict)
            else message
            for message in body["messages"]
        ]
    return body


def input_text(context: RequestContext) -> str:
    """Every text of the request body, one per line."""
    texts: list[str] = []

    def collect(text: str) -> str:
        texts.append(text)
        return text

    rewrite_input(context, collect)
    return "\n".join(texts)


class GuardrailStage(Stage):
    """Runs the configured guardrails, in config order, at the phases each names."""

    name = "guardrails"
    # A stream check by a regex re-reads this much already-checked text, for matches split across deltas.
    STREAM_OVERLAP_CHARS = PiiRegex.STREAM_OVERLAP_CHARS

    def __init__(self, guardrails: list[Guardrail], metrics: GuardrailMetrics) -> None:
        self.guardrails = guardrails
        self.metrics = metrics
        self.by_phase: dict[Phase, list[Guardrail]] = {
            phase: [guardrail for guardrail in guardrails if phase in guardrail.phases] for phase in PHASES
        }

    async def admit(self, context: RequestContext) -> None:
        operation = context.operation
        if operation is Operation.RESPONSES:
            self._uninspectable(context)
            return
        if operation is Operation.MCP:
            if context.body.get("method") == TOOLS_CALL:
                await self._check_input(context, "tool_call")
            return
        if operation in MODEL_OPERATIONS:
            await self._check_input(context, "input")

    def _uninspectable(self, context: RequestContext) -> None:
        """Native responses carry no content guardrails (interface.md); each guardrail's `failure_mode` decides
        whether they pass unread, so `/v1/responses` is no silent way around a guardrail."""
        for guardrail in self.guardrails:
            if guardrail.phases & {"input", "output"}:
                if guardrail.failure_mode == "deny":
                    raise GatewayError(
                        ErrorCode.GUARDRAIL_BLOCKED_INPUT,
                        f"guardrail {guardrail.name!r} cannot inspect native responses and denies them",
                    )
                passed = self.metrics.passed_failures.labels(guardrail.name, guardrail.failure_mode)
                failure_passes(
                    guardrail.failure_mode,
                    f"guardrail {guardrail.name}",
                    context.request.request_id,
                    BackendError("native responses are not inspected"),
                    passed,
                )

    async def _check_input(self, context: RequestContext, phase: Phase) -> None:
        for guardrail in self.by_phase[phase]:
            text = input_text(context)
            if not text:
                return
            verdict = await self._verdict(guardrail, phase, text, context)
            if verdict.allowed:
                continue
            if guardrail.redacts:
                context.body = rewrite_input(context, guardrail.redact)
                self.metrics.checks.labels(guardrail.name, phase, "redacted").inc()
                continue
            raise GatewayError(ErrorCode.GUARDRAIL_BLOCKED_INPUT, _blocked_message(guardrail, verdict, "request"))

    async def inspect_output(self, context: RequestContext, text: str) -> None:
        operation = context.operation
        phase: Phase = "tool_result" if operation is Operation.MCP else "output"
        if operation not in MODEL_OPERATIONS and operation is not Operation.MCP:
            return
        output = context.output_text
        if not output:
            return
        checked: dict[str, int] = context.notes.setdefault(self.name, {})
        for guardrail in self.by_phase[phase]:
            seen = checked.get(guardrail.name, 0)
            if not context.output_complete and len(output) - seen < max(guardrail.stream_check_chars, 1):
                continue
            checked[guardrail.name] = len(output)
            window = output if guardrail.whole_text else output[max(seen - self.STREAM_OVERLAP_CHARS, 0) :]
            verdict = await self._verdict(guardrail, phase, window, context)
            if not verdict.allowed:
                # Output already generated is judged, never rewritten: a redacting guardrail blocks it too.
                raise GatewayError(ErrorCode.GUARDRAIL_BLOCKED_OUTPUT, _blocked_message(guardrail, verdict, "response"))

    async def _verdict(self, guardrail: Guardrail, phase: Phase, text: str, context: RequestContext) -> Verdict:
        """The guardrail's verdict; a failed backend is a block under `deny`, a pass otherwise."""
        try:
            verdict = await guardrail.check(phase, text, context)
        except BackendError as error:
            passed = self.metrics.passed_failures.labels(guardrail.name, guardrail.failure_mode)
            if failure_passes(
                guardrail.failure_mode,
                f"guardrail {guardrail.name} at {phase}",
                context.request.request_id,
                error,
                passed,
            ):
                return Verdict(True)
            self.metrics.checks.labels(guardrail.name, phase, "backend_error").inc()
            return Verdict(False, "its backend is unavailable")
        self.metrics.checks.labels(guardrail.name, phase, "allowed" if verdict.allowed else "blocked").inc()
        return verdict


def _blocked_message(guardrail: Guardrail, verdict: Verdict, what: str) -> str:
    return f"guardrail {guardrail.name!r} blocked the {what}" + (f": {verdict.reason}" if verdict.reason else "")


def build(deps: StageDeps) -> list[Stage]:
    """The guardrail stage of a snapshot; none when no guardrail is configured."""
    return plugin_stage(deps, "guardrails", build_guardrail, GuardrailStage, GuardrailMetrics)

"""Policy guardrails (`guardrail_source`, `guardrail_state`, `guardrails_policy`): session bundles, verdicts.

`admit` judges `llm_request` (model paths, the native proxy) and `tool_call` (MCP `tools/call`); `inspect_output`
judges `llm_response` and `tool_result`; `settle` counts every request in the guardrail state. `observe` logs and
counts what `enforce` would refuse with 403 `policy_guardrail_denied`.
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import orjson
from prometheus_client import Counter

from gatewayproxy.config.loader import ConfigError
from gatewayproxy.config.models import GatewayConfig, GuardrailSource, GuardrailsPolicy
from gatewayproxy.context import Operation, RequestContext
from gatewayproxy.errors import ErrorCode, GatewayError
from gatewayproxy.pipeline.deps import StageDeps
from gatewayproxy.pipeline.stages import Stage
from gatewayproxy.policy.bundle import Bundle
from gatewayproxy.policy.counters import (
    DEFAULT_TTLS,
    MemoryState,
    RedisState,
    StateStore,
    StateWriteBack,
    Tally,
    day_key,
)
from gatewayproxy.policy.rules import Facts, RuleError, evaluate
from gatewayproxy.policy.sources import FileSource, RegistrySource, Resolution, Session

logger = logging.getLogger("gatewayproxy.policy")
STAGE_NAME = "policy"
SESSION_HEADER = "x-session-id"
TURN_HEADER = "x-turn-id"
MODEL_OPERATIONS = frozenset(
    {Operation.CHAT, Operation.MESSAGES, Operation.EMBEDDINGS, Operation.RESPONSES, Operation.NATIVE}
)
# Where request text lives in the vendor shapes the data plane accepts.
REQUEST_TEXT_KEYS = ("messages", "input", "system", "prompt", "instructions")


@dataclass(frozen=True)
class PolicyMetrics:
    """The stage's counters, registered once per process."""

    decisions: Counter
    alerts: Counter
    rejected_bundles: Counter


def _metrics(deps: StageDeps) -> PolicyMetrics:
    registry = deps.metrics.registry
    return deps.shared.get(
        "policy.metrics",
        lambda: PolicyMetrics(
            decisions=Counter(
                "gateway_policy_decisions",
                "Policy guardrail decisions by phase and outcome (allow, deny, would_deny, alert).",
                ["phase", "outcome"],
                registry=registry,
            ),
            alerts=Counter(
                "gateway_policy_alerts",
                "Policy alerts (soft allows, alert rules, skipped types).",
                ["phase"],
                registry=registry,
            ),
            rejected_bundles=Counter(
                "gateway_policy_bundles_rejected",
                "Policy bundles refused by a file source.",
                ["reason"],
                registry=registry,
            ),
        ),
    )


@dataclass
class Decision:
    """What a phase decided: `allow`, `alert` (allow, logged and counted) or `deny`, with the reasons."""

    action: str
    reasons: list[str] = field(default_factory=list)


def _collect_strings(value: Any, into: list[str]) -> None:
    if isinstance(value, str):
        into.append(value)
    elif isinstance(value, dict):
        for item in value.values():
            _collect_strings(item, into)
    elif isinstance(value, list):
        for item in value:
            _collect_strings(item, into)


def request_text(body: dict[str, Any]) -> str:
    """Every string of a request's prompt parts (messages, input, system, prompt, instructions)."""
    strings: list[str] = []
    for key in REQUEST_TEXT_KEYS:
        _collect_strings(body.get(key), strings)
    return "\n".join(strings)


def request_phase(context: RequestContext) -> str | None:
    """The phase `admit` judges: `llm_request` on model paths, `tool_call` on an MCP `tools/call`."""
    if context.operation in MODEL_OPERATIONS:
        return "llm_request"
    if context.operation is Operation.MCP and context.body.get("method") == "tools/call":
        return "tool_call"
    return None


def request_session(context: RequestContext, trust_header: bool = False) -> Session | None:
    """The registry session of a request: the verified `workspace` and `session` scope dimensions (not ones a
    trusted `x-scope-*` header filled); without a verified session, the `x-session-id` header only when
    `trust_header` (the guardrail source's `trust_session_header`)."""
    principal = context.principal
    verified = {dim: value for dim, value in principal.scope.items() if dim not in principal.header_dims}
    workspace = verified.get("workspace")
    session = verified.get("session") or (context.request.headers.get(SESSION_HEADER) if trust_header else None)
    return Session(workspace, session) if workspace and session else None


class PolicyStage(Stage):
    """Resolves the request's bundle, evaluates its rules at each active phase, and counts settled requests."""

    name = STAGE_NAME

    def __init__(
        self,
        policy: GuardrailsPolicy,
        source: FileSource | RegistrySource,
        store: StateStore,
        timezone: str,
        metrics: PolicyMetrics,
        trust_session_header: bool = False,
    ) -> None:
        self.policy = policy
        self.trust_session_header = trust_session_header
        self.phases = frozenset(policy.phases)
        self.source = source
        self.store = store
        self.timezone = ZoneInfo(timezone)
        self.metrics = metrics

    async def start(self) -> None:
        if isinstance(self.source, FileSource):
            await self.source.attach()
        await self.store.start()

    async def close(self) -> None:
        await self.store.close()
        if isinstance(self.source, FileSource):
            await self.source.detach()

    def cached(self, session_id: str) -> Bundle | None:
        """The bundle in force for a session without fetching: the file's, or the registry's cached one."""
        if isinstance(self.source, FileSource):
            return self.source.current
        entry = self.source.cached(session_id)
        return entry.bundle if entry is not None else None

    async def admit(self, context: RequestContext) -> None:
        phase = request_phase(context)
        if phase is None:
            return
        context.notes[self.name] = resolution = await self._resolve(context)
        if phase not in self.phases:
            return
        await self._judge(context, phase, resolution, self._facts(context, phase))

    async def inspect_output(self, context: RequestContext, text: str) -> None:
        phase = "tool_result" if context.operation is Operation.MCP else "llm_response"
        resolution = context.notes.get(self.name)
        if phase not in self.phases or resolution is None:
            return
        facts = Facts(phase=phase, subject=context.principal.id, model=context.model, text=context.output_text)
        await self._judge(context, phase, resolution, facts)

    def settle(self, context: RequestContext) -> None:
        now = datetime.now(self.timezone)
        self.store.record(
            Tally(
                subject=context.principal.id,
                day=now.strftime("%Y-%m-%d"),
                minute=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M"),
                cost_usd=context.cost_usd or 0.0,
                session=request_session(context, self.trust_session_header),
                turn=context.request.headers.get(TURN_HEADER),
            )
        )

    async def _resolve(self, context: RequestContext) -> Resolution:
        if isinstance(self.source, FileSource):
            return self.source.resolve()
        session = request_session(context, self.trust_session_header)
        return await self.source.resolve(session) if session is not None else Resolution()

    def _facts(self, context: RequestContext, phase: str) -> Facts:
        subject = context.principal.id
        if phase == "tool_call":
            params = context.body.get("params") or {}
            return Facts(
                phase=phase,
                subject=subject,
                tool=str(params.get("name")),
                text=orjson.dumps(params.get("arguments") or {}).decode(),
            )
        today = datetime.now(self.timezone).strftime("%Y-%m-%d")

        async def spent_today() -> float:
            return await self.store.spent(day_key(subject, today))

        return Facts(
            phase=phase, subject=subject, model=context.model, text=request_text(context.body), spent_today=spent_today
        )

    async def _judge(self, context: RequestContext, phase: str, resolution: Resolution, facts: Facts) -> None:
        try:
            decision = await self._decide(phase, resolution, facts)
        except RuleError as error:
            action = "deny" if phase == "tool_call" else self.policy.failure_mode.llm_request
            decision = self._configured(action, f"policy evaluation failed: {error}")
        self._apply(context, phase, decision)

    async def _decide(self, phase: str, resolution: Resolution, facts: Facts) -> Decision:
        if resolution.refusal is not None:
            return Decision("deny", [resolution.refusal])
        bundle = resolution.bundle
        if bundle is None:
            return self._configured(self.policy.on_missing, "no policy bundle is available")
        alerts = []
        if self._expired(bundle):
            on_expired = self.policy.on_expired
            expired = self._configured(
                "deny" if phase == "tool_call" and on_expired != "allow" else on_expired,
                "the policy bundle is past its expiry and the staleness allowance",
            )
            if expired.action == "deny":
                return expired
            alerts += expired.reasons
        findings = await evaluate(bundle, facts, self.policy.on_unsupported_guardrail)
        denials = [f"guardrail {finding.rule!r}: {finding.reason}" for finding in findings if finding.action == "deny"]
        if denials:
            return Decision("deny", denials)
        alerts += [f"guardrail {finding.rule!r}: {finding.reason}" for finding in findings]
        return Decision("alert" if alerts else "allow", alerts)

    def _expired(self, bundle: Bundle) -> bool:
        if bundle.expires_at is None:
            return False
        return datetime.now(UTC) > bundle.expires_at + timedelta(seconds=self.policy.max_staleness_secs)

    @staticmethod
    def _configured(action: str, reason: str) -> Decision:
        """A configured policy action as a decision: `soft_allow_with_alert` allows with an alert."""
        if action == "allow":
            return Decision("allow")
        return Decision("deny" if action == "deny" else "alert", [reason])

    def _apply(self, context: RequestContext, phase: str, decision: Decision) -> None:
        request_id = context.request.request_id
        outcome = decision.action
        if outcome == "alert":
            self.metrics.alerts.labels(phase).inc()
            logger.warning("policy alert at %s for request %s: %s", phase, request_id, "; ".join(decision.reasons))
        elif outcome == "deny" and self.policy.mode == "observe":
            outcome = "would_deny"
            logger.warning(
                "policy would deny at %s request %s (observe mode): %s", phase, request_id, "; ".join(decision.reasons)
            )
        self.metrics.decisions.labels(phase, outcome).inc()
        if outcome == "deny":
            logger.info("policy denied at %s request %s: %s", phase, request_id, "; ".join(decision.reasons))
            raise GatewayError(ErrorCode.POLICY_GUARDRAIL_DENIED, "; ".join(decision.reasons))


def _resolved_source(source: GuardrailSource, base_dir: str | None) -> GuardrailSource:
    """A file source's `path` relative to the config file's directory."""
    if source.kind != "file" or base_dir is None or source.path is None or os.path.isabs(source.path):
        return source
    return source.model_copy(update={"path": os.path.join(base_dir, source.path)})


def _source(deps: StageDeps, source: GuardrailSource, metrics: PolicyMetrics) -> FileSource | RegistrySource:
    """The snapshot's bundle source; its state (the file's accepted bundle, the registry cache) outlives swaps."""
    try:
        if source.kind == "file":
            return deps.shared.get(
                f"policy.file_source:{source.model_dump_json()}",
                lambda: FileSource(source, lambda reason: metrics.rejected_bundles.labels(reason).inc()),
            )
        cache: OrderedDict = deps.shared.get(f"policy.registry_cache:{source.base_url}", OrderedDict)
        return RegistrySource(source, deps.fetch, cache, deps.config.guardrails_policy.refresh_interval_secs)
    except (OSError, ValueError) as error:
        raise ConfigError([f"guardrail_source.verification: cannot load the public keys: {error}"]) from None


def _store(deps: StageDeps) -> StateStore:
    config, source = deps.config.guardrail_state, deps.config.guardrail_source
    if config is None or config.kind == "memory":
        ttls = config or DEFAULT_TTLS
        return deps.shared.get("policy.memory_state", lambda: MemoryState(ttls))
    write_back = None
    if source is not None and source.kind == "registry":
        write_back = StateWriteBack(source, config, deps.pool)
    return RedisState(config, write_back)


def build(deps: StageDeps) -> list[Stage]:
    """The policy stage, unless `guardrails_policy.mode` is `off`."""
    config = deps.config
    if config.guardrails_policy.mode == "off" or config.guardrail_source is None:
        return []
    metrics = _metrics(deps)
    source = _source(deps, _resolved_source(config.guardrail_source, deps.base_dir), metrics)
    if isinstance(source, FileSource) and source.signed and not source.keys:
        raise ConfigError(["guardrail_source.verification: no PEM public key found"])
    policy, trust_header = config.guardrails_policy, config.guardrail_source.trust_session_header
    return [PolicyStage(policy, source, _store(deps), config.spend.budget_timezone, metrics, trust_header)]


async def effective_bundle(config: GatewayConfig, stages: list[Stage], query: dict[str, str]) -> dict[str, Any]:
    """`GET /admin/v1/guardrails/effective`: the bundle a snapshot (its config and stages) already cached for a
    verified session."""
    if config.guardrails_policy.mode == "off":
        raise GatewayError(ErrorCode.GUARDRAILS_UNAVAILABLE, "policy guardrails are off")
    session_id = query.get("session_id")
    if not session_id:
        raise GatewayError(ErrorCode.INVALID_REQUEST, "`session_id` is required")
    stage = next((stage for stage in stages if isinstance(stage, PolicyStage)), None)
    bundle = stage.cached(session_id) if stage is not None else None
    if bundle is None:
        raise GatewayError(ErrorCode.NOT_FOUND, "no policy bundle is cached for that session")
    return {"session_id": session_id, "bundle": bundle.document}

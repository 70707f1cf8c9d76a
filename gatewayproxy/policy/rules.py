"""Evaluating a bundle's guardrails at one phase: the rule types the gateway can check, and what each found.

Types (the registry's policy catalog): `model_allowlist` (`models` globs), `tool_denylist` (`tools`),
`blocked_terms` (`terms`, case-insensitive), `pii_regex` (`patterns`; a match is a hit, redaction is not done
here), `user_daily_cost_budget` (`usd` per subject per day). Any other type is unsupported.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from gatewayproxy.policy.bundle import Bundle, Rule

# The phases a rule checks when the bundle names none (the registry catalog's own defaults).
DEFAULT_PHASES: dict[str, tuple[str, ...]] = {
    "model_allowlist": ("llm_request",),
    "tool_denylist": ("tool_call",),
    "user_daily_cost_budget": ("llm_request",),
    "blocked_terms": ("llm_request", "llm_response", "tool_call", "tool_result"),
    "pii_regex": ("llm_request", "llm_response", "tool_call", "tool_result"),
}


class RuleError(Exception):
    """A rule could not be evaluated (bad rule config, state store down): the phase's failure mode decides."""


@dataclass(frozen=True)
class Facts:
    """What a phase knows about the request: the model, the text to check, the tool, and the subject's spend."""

    phase: str
    subject: str
    model: str | None = None
    text: str = ""
    tool: str | None = None
    spent_today: Callable[[], Awaitable[float]] | None = None


@dataclass(frozen=True)
class Finding:
    """A rule that hit: `deny` refuses (in enforce mode), `alert` only logs and counts."""

    rule: str
    action: str
    reason: str


def _strings(config: dict[str, Any], key: str, rule: Rule) -> list[str]:
    values = config.get(key)
    if not isinstance(values, list) or not all(isinstance(value, str) for value in values):
        raise RuleError(f"guardrail {rule.name!r} needs `config.{key}` as a list of strings")
    return values


async def _model_allowlist(rule: Rule, facts: Facts) -> str | None:
    globs = _strings(rule.config, "models", rule)
    if facts.model is None or any(fnmatch.fnmatchcase(facts.model, glob) for glob in globs):
        return None
    return f"model {facts.model!r} is not allowed"


async def _tool_denylist(rule: Rule, facts: Facts) -> str | None:
    if facts.tool is not None and facts.tool in _strings(rule.config, "tools", rule):
        return f"tool {facts.tool!r} is denied"
    return None


async def _blocked_terms(rule: Rule, facts: Facts) -> str | None:
    text = facts.text.casefold()
    found = next((term for term in _strings(rule.config, "terms", rule) if term.casefold() in text), None)
    return None if found is None else "the payload contains a blocked term"


async def _pii_regex(rule: Rule, facts: Facts) -> str | None:
    try:
        hit = any(re.search(pattern, facts.text) for pattern in _strings(rule.config, "patterns", rule))
    except re.error as error:
        raise RuleError(f"guardrail {rule.name!r} has an invalid pattern: {error}") from None
    return "the payload matches a PII pattern" if hit else None


async def _user_daily_cost_budget(rule: Rule, facts: Facts) -> str | None:
    budget = rule.config.get("usd")
    if not isinstance(budget, int | float) or isinstance(budget, bool) or budget <= 0:
        raise RuleError(f"guardrail {rule.name!r} needs `config.usd` greater than zero")
    if facts.spent_today is None:
        return None
    try:
        spent = await facts.spent_today()
    except Exception as error:
        raise RuleError(f"cannot read the daily spend: {error}") from error
    return f"the daily budget of {budget} USD is spent" if spent >= budget else None


CHECKS: dict[str, Callable[[Rule, Facts], Awaitable[str | None]]] = {
    "model_allowlist": _model_allowlist,
    "tool_denylist": _tool_denylist,
    "blocked_terms": _blocked_terms,
    "pii_regex": _pii_regex,
    "user_daily_cost_budget": _user_daily_cost_budget,
}


def applies(rule: Rule, phase: str) -> bool:
    """Whether `rule` checks `phase` (its own phases, else its type's defaults, else every phase)."""
    phases = rule.phases or DEFAULT_PHASES.get(rule.guardrail_type, ())
    return not phases or phase in phases


async def evaluate(bundle: Bundle, facts: Facts, on_unsupported: str) -> list[Finding]:
    """Every finding of the bundle's rules at `facts.phase`; raises `RuleError` when a rule cannot be evaluated."""
    findings = []
    for rule in bundle.rules:
        if not applies(rule, facts.phase):
            continue
        check = CHECKS.get(rule.guardrail_type)
        if check is None:
            action = "deny" if on_unsupported == "deny" else "alert"
            findings.append(Finding(rule.name, action, f"unsupported guardrail type {rule.guardrail_type!r}"))
            continue
        reason = await check(rule, facts)
        if reason is not None:
            findings.append(Finding(rule.name, "alert" if rule.action == "alert" else "deny", reason))
    return findings

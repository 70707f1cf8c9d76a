"""Payload guardrail kinds (`plugins.guardrails[]`): `pii_regex`, `llm_evaluator` and `ext_proc`, each judging
one text at one phase and answering a `Verdict`; a backend that fails raises `BackendError`."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Literal

import orjson
from pydantic import Field, field_validator, model_validator
from stdnum import luhn

from gatewayproxy.config.models import FilePath, PluginInstance
from gatewayproxy.context import RequestContext
from gatewayproxy.plugins.decisions import BackendError, PluginOptions, plugin_options, post_json
from gatewayproxy.plugins.deps import AskModel, PluginDeps

Phase = Literal["input", "output", "tool_call", "tool_result"]
PHASES: tuple[Phase, ...] = ("input", "output", "tool_call", "tool_result")
BuiltinPattern = Literal["email", "phone", "credit_card", "us_ssn", "ipv4", "api_key"]
NonNegativeInt = Annotated[int, Field(ge=0)]
PositiveInt = Annotated[int, Field(gt=0)]

BUILTIN_PATTERNS: dict[str, str] = {
    "email": r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}",
    "phone": r"(?<![\w+])(?:\+\d{1,3}[ .-]?)?(?:\(\d{3}\)|\d{3})[ .-]?\d{3}[ .-]?\d{4}(?!\w)",
    "credit_card": r"(?<!\d)\d(?:[ -]?\d){12,18}(?!\d)",
    "us_ssn": r"(?<!\d)(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?!\d)",
    "ipv4": r"(?<![\d.])(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)(?!\.?\d)",
    # Common provider and platform key shapes: `sk-`/`pk-`/`rk-` secrets, cloud access key ids, repository and
    # chat tokens, cloud API keys.
    "api_key": r"\b(?:(?:sk|pk|rk)[-_][A-Za-z0-9_-]{16,}|AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{36}"
    r"|xox[abprs]-[A-Za-z0-9-]{10,}|AIza[0-9A-Za-z_-]{35})\b",
}
DEFAULT_EVALUATOR_INSTRUCTIONS = (
    "You are a content safety classifier for an AI gateway. Decide whether the text below may pass. "
    'Answer with one JSON object and nothing else: {"allowed": true|false, "reason": "<short reason>"}.'
)


@dataclass(frozen=True)
class Verdict:
    """A guardrail's judgement of one text; `reason` never repeats the matched content."""

    allowed: bool
    reason: str = ""


def _luhn_valid(match: str) -> bool:
    return luhn.is_valid(re.sub(r"[ -]", "", match))


# Extra checks a builtin match must pass (a card number must carry a valid Luhn check digit).
MATCH_CHECKS: dict[str, Callable[[str], bool]] = {"credit_card": _luhn_valid}


class Guardrail:
    """Base of the kinds: its name, phases and failure mode, and how it reads a stream."""

    # Whether `check` needs the whole output so far (a classifier) or only the new text plus an overlap (a regex).
    whole_text = True
    redacts = False

    def __init__(self, instance: PluginInstance, phases: list[Phase], stream_check_chars: int) -> None:
        self.name = instance.name
        self.failure_mode = instance.failure_mode
        self.phases = frozenset(phases)
        self.stream_check_chars = stream_check_chars

    async def check(self, phase: Phase, text: str, context: RequestContext) -> Verdict:
        """Judge `text` seen at `phase`; raises `BackendError` when the judgement cannot be made."""
        raise NotImplementedError

    def redact(self, text: str) -> str:
        """`text` with what this guardrail finds replaced (kinds that redact only)."""
        return text


class PiiRegexOptions(PluginOptions):
    """Options of `pii_regex`."""

    builtins: list[BuiltinPattern] = list(BUILTIN_PATTERNS)  # type: ignore[arg-type]
    patterns: dict[str, str] = {}
    action: Literal["block", "redact"] = "block"
    replacement: str = "[REDACTED:{name}]"
    phases: list[Phase] = list(PHASES)

    @field_validator("patterns")
    @classmethod
    def _compiles(cls, patterns: dict[str, str]) -> dict[str, str]:
        for name, pattern in patterns.items():
            try:
                re.compile(pattern)
            except re.error as error:
                raise ValueError(f"pattern {name!r} is not a valid regular expression: {error}") from None
        return patterns

    @model_validator(mode="after")
    def _detects_something(self) -> PiiRegexOptions:
        if not self.builtins and not self.patterns:
            raise ValueError("give at least one of `builtins` and `patterns`")
        return self


class PiiRegex(Guardrail):
    """Finds personal data and secrets with regular expressions; blocks, or redacts input."""

    whole_text = False
    # How far back a stream check re-reads, so a match split across deltas is still found.
    STREAM_OVERLAP_CHARS = 256

    def __init__(self, instance: PluginInstance, options: PiiRegexOptions) -> None:
        super().__init__(instance, options.phases, stream_check_chars=0)
        named = {name: BUILTIN_PATTERNS[name] for name in options.builtins} | options.patterns
        self.patterns = [(name, re.compile(pattern), MATCH_CHECKS.get(name)) for name, pattern in named.items()]
        self.redacts = options.action == "redact"
        self.replacement = options.replacement

    def _found(self, text: str) -> str | None:
        for name, pattern, extra_check in self.patterns:
            for match in pattern.finditer(text):
                if extra_check is None or extra_check(match.group()):
                    return name
        return None

    async def check(self, phase: Phase, text: str, context: RequestContext) -> Verdict:
        found = self._found(text)
        return Verdict(True) if found is None else Verdict(False, f"{found} detected")

    def redact(self, text: str) -> str:
        for name, pattern, extra_check in self.patterns:
            replacement = self.replacement.format(name=name)

            def replace(
                match: re.Match[str], check: Callable[[str], bool] | None = extra_check, value: str = replacement
            ) -> str:
                return value if check is None or check(match.group()) else match.group()

            text = pattern.sub(replace, text)
        return text


class LlmEvaluatorOptions(PluginOptions):
    """Options of `llm_evaluator`."""

    model: str
    instructions: str = DEFAULT_EVALUATOR_INSTRUCTIONS
    timeout_ms: PositiveInt = 5000
    max_chars: PositiveInt = 20000
    stream_check_chars: NonNegativeInt = 0
    phases: list[Phase] = list(PHASES)


def parse_verdict(answer: str) -> Verdict:
    """The evaluator's answer: a JSON object `{"allowed": bool, "reason": str}` (surrounding prose or code fences
    tolerated), or an answer starting with the word ALLOW or BLOCK."""
    start, end = answer.find("{"), answer.rfind("}")
    if 0 <= start < end:
        try:
            document = orjson.loads(answer[start : end + 1])
        except orjson.JSONDecodeError:
            document = None
        if isinstance(document, dict) and isinstance(document.get("allowed"), bool):
            return Verdict(document["allowed"], str(document.get("reason") or ""))
    words = answer.split(maxsplit=1)
    word = words[0].strip(".:!,").upper() if words else ""
    if word in ("ALLOW", "BLOCK"):
        return Verdict(word == "ALLOW", words[1].strip() if len(words) > 1 else "")
    raise BackendError("the evaluator's answer is not a verdict")


class LlmEvaluator(Guardrail):
    """Asks a model, through this snapshot's own routes (the `ask_model` it is given), whether a text may pass.

    The call is dispatched in-process without the governance stages, so an evaluator never evaluates itself.
    """

    def __init__(self, instance: PluginInstance, options: LlmEvaluatorOptions, ask_model: AskModel) -> None:
        super().__init__(instance, options.phases, options.stream_check_chars)
        self.options = options
        self.ask_model = ask_model

    async def check(self, phase: Phase, text: str, context: RequestContext) -> Verdict:
        try:
            async with asyncio.timeout(self.options.timeout_ms / 1000):
                answer = await self._ask(phase, text[-self.options.max_chars :], context)
        except TimeoutError:
            raise BackendError(f"the evaluator did not answer within {self.options.timeout_ms} ms") from None
        return parse_verdict(answer)

    async def _ask(self, phase: Phase, text: str, context: RequestContext) -> str:
        body = {
            "model": self.options.model,
            "messages": [
                {"role": "system", "content": self.options.instructions},
                {"role": "user", "content": f"Phase: {phase}\nText:\n{text}"},
            ],
        }
        return await self.ask_model(context, body)


class ExtProcOptions(PluginOptions):
    """Options of the `ext_proc` guardrail."""

    url: Annotated[str, Field(pattern=r"^https?://")]
    timeout_ms: PositiveInt = 1000
    bearer_token_file: FilePath | None = None
    stream_check_chars: NonNegativeInt = 0
    phases: list[Phase] = list(PHASES)


class ExtProcGuardrail(Guardrail):
    """Posts `{phase, text, request_id, principal, route, model}` to an external processor, which answers
    `{"action": "allow"|"block", "reason": ...}`."""

    def __init__(self, instance: PluginInstance, options: ExtProcOptions, deps: PluginDeps) -> None:
        super().__init__(instance, options.phases, options.stream_check_chars)
        self.options = options
        self.pool = deps.pool

    async def check(self, phase: Phase, text: str, context: RequestContext) -> Verdict:
        document = {
            "phase": phase,
            "text": text,
            "request_id": context.request.request_id,
            "principal": context.principal.id,
            "route": context.route,
            "model": context.model,
        }
        answer = await post_json(
            self.pool, self.options.url, document, self.options.timeout_ms / 1000, self.options.bearer_token_file
        )
        action = answer.get("action") if isinstance(answer, dict) else None
        if action not in ("allow", "block"):
            raise BackendError("the processor's answer has no `action` of allow or block")
        return Verdict(action == "allow", str(answer.get("reason") or ""))


def build_guardrail(instance: PluginInstance, key: str, deps: PluginDeps) -> Guardrail:
    """The guardrail of one plugin instance, its options validated (a bad one fails boot naming `key`)."""
    if instance.kind == "pii_regex":
        return PiiRegex(instance, plugin_options(PiiRegexOptions, instance, key, deps.base_dir))
    if instance.kind == "llm_evaluator":
        return LlmEvaluator(instance, plugin_options(LlmEvaluatorOptions, instance, key, deps.base_dir), deps.ask_model)
    return ExtProcGuardrail(instance, plugin_options(ExtProcOptions, instance, key, deps.base_dir), deps)

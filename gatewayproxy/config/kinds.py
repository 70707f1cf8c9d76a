"""The plugin kinds this gateway supports in each slot, their aliases, and the boot-time kind check."""

from __future__ import annotations

SUPPORTED_KINDS: dict[str, tuple[str, ...]] = {
    "rate_limiter": ("token_bucket_local", "redis_window"),
    "cache": ("redis_exact", "memory_exact"),
    "cost_model": ("seed", "static_table", "http_refresh", "registry", "layered"),
    "guardrails": ("pii_regex", "llm_evaluator", "ext_proc"),
    "authorizers": ("yaml_acl", "opa_http", "ext_proc", "allow_all"),
    "usage_sinks": ("stdout", "kafka", "postgres", "registry"),
    "audit_sinks": ("noop", "stdout", "file", "kafka", "ext_proc"),
    "trace_exporters": ("otlp", "signed_tape"),
    "signers": ("ed25519_local",),
}
KIND_ALIASES: dict[str, dict[str, str]] = {"rate_limiter": {"token_bucket": "token_bucket_local"}}
SINGLE_INSTANCE_SLOTS = ("rate_limiter", "cache", "cost_model")
LIST_SLOTS = tuple(slot for slot in SUPPORTED_KINDS if slot not in SINGLE_INSTANCE_SLOTS)


class UnsupportedKindError(ValueError):
    """A plugin kind that this build cannot run; the message lists the available kinds."""


def canonical_kind(slot: str, kind: str) -> str:
    """The registered name of `kind` in `slot`, resolving aliases; raises naming the available kinds."""
    resolved = KIND_ALIASES.get(slot, {}).get(kind, kind)
    if resolved not in SUPPORTED_KINDS[slot]:
        available = ", ".join(SUPPORTED_KINDS[slot] + tuple(KIND_ALIASES.get(slot, {})))
        raise UnsupportedKindError(f"unsupported kind {kind!r} in slot {slot!r}; available kinds: {available}")
    return resolved

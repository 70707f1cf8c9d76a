"""Tunables of the session runtime: Django settings, else environment variables, else defaults.

A field is read from the Django setting `REGISTRY_RUNTIME_<FIELD>` (tests set these), else from the
environment variable of the same name, or the one its metadata names (`REGISTRY_TURN_MAX_MODEL_CALLS`
...), else its default, so none is required.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings


def _env(name: str) -> dict[str, str]:
    return {"env": name}


@dataclass(frozen=True)
class RuntimeSettings:
    """Concurrency, leases, waits, retries, per-turn limits and the model's context budget."""

    concurrency: int = 32
    lease_seconds: float = 30.0
    # The safety-net poll; LISTEN/NOTIFY (PostgreSQL) or an in-process signal wakes a worker at once.
    poll_seconds: float = 5.0
    # How often a running turn re-reads its session when nothing told it to (interrupts, archival).
    check_seconds: float = 2.0
    max_attempts: int = 3
    model_attempts: int = 4
    backoff_seconds: float = 1.0
    backoff_max_seconds: float = 30.0
    model_timeout_seconds: float = 300.0
    max_tokens: int = 8192
    mcp_timeout_seconds: float = 60.0
    turn_max_model_calls: int = field(default=100, metadata=_env("REGISTRY_TURN_MAX_MODEL_CALLS"))
    turn_max_tool_calls: int = field(default=200, metadata=_env("REGISTRY_TURN_MAX_TOOL_CALLS"))
    # 0: the per-model table of `registry.runtime.context` decides.
    context_tokens: int = field(default=0, metadata=_env("REGISTRY_MODEL_CONTEXT_TOKENS"))
    tool_result_max_chars: int = field(default=50_000, metadata=_env("REGISTRY_TOOL_RESULT_MAX_CHARS"))
    # Compactions in a row, without the model producing a message or a tool call in between.
    max_compactions: int = 3
    # Multi-agent sessions: child threads per session, and how deep threads may spawn threads.
    session_max_threads: int = field(default=32, metadata=_env("REGISTRY_SESSION_MAX_THREADS"))
    thread_max_depth: int = field(default=3, metadata=_env("REGISTRY_THREAD_MAX_DEPTH"))

    @classmethod
    def from_settings(cls, **overrides: Any) -> RuntimeSettings:
        """Each field from its setting or environment variable; keyword overrides win when not None."""
        values: dict[str, Any] = {}
        for item in dataclasses.fields(cls):
            name = item.metadata.get("env", f"REGISTRY_RUNTIME_{item.name.upper()}")
            value = getattr(settings, f"REGISTRY_RUNTIME_{item.name.upper()}", None)
            if value is None and os.environ.get(name, "") != "":
                value = os.environ[name]
            if value is not None:
                values[item.name] = type(item.default)(value)  # type: ignore[misc]
        values.update({name: value for name, value in overrides.items() if value is not None})
        return cls(**values)

    def backoff(self, attempt: int) -> float:
        """The wait before retry number `attempt` (1-based): exponential, capped."""
        return float(min(self.backoff_seconds * 2 ** (attempt - 1), self.backoff_max_seconds))

"""Tunables of the session runtime, read from Django settings with defaults, so none is required."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from django.conf import settings


@dataclass(frozen=True)
class RuntimeSettings:
    """How long leases last, how often to poll, and how model calls are retried."""

    lease_seconds: float = 30.0
    poll_seconds: float = 0.3
    # How often a running turn looks for `user.interrupt` and archival between stream chunks.
    check_seconds: float = 0.2
    model_attempts: int = 4
    backoff_seconds: float = 1.0
    backoff_max_seconds: float = 30.0
    model_timeout_seconds: float = 300.0
    max_tokens: int = 8192
    mcp_timeout_seconds: float = 60.0

    @classmethod
    def from_settings(cls, **overrides: Any) -> RuntimeSettings:
        """Each field from `REGISTRY_RUNTIME_<FIELD>` when set; keyword overrides win when not None."""
        values: dict[str, Any] = {
            field.name: getattr(settings, f"REGISTRY_RUNTIME_{field.name.upper()}", field.default)
            for field in dataclasses.fields(cls)
        }
        values.update({name: value for name, value in overrides.items() if value is not None})
        return cls(**values)

    def backoff(self, attempt: int) -> float:
        """The wait before retry number `attempt` (1-based): exponential, capped."""
        return float(min(self.backoff_seconds * 2 ** (attempt - 1), self.backoff_max_seconds))

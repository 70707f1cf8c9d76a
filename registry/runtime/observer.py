"""Hooks the turn loop calls as it works, so metrics (and anything else that watches turns) attach from
outside instead of by overriding the loop's methods."""

from __future__ import annotations

from typing import Any

# How a turn ended when it did not reach an idle stop reason.
LEFT = "left"  # the worker is stopping: the turn is left to the next worker
LEASE_LOST = "lease_lost"
FAILED = "failed"


class TurnObserver:
    """Watches one worker's turns; this base ignores everything."""

    def turn_started(self) -> None:
        """A turn starts or resumes."""

    def turn_ended(self, outcome: str, seconds: float) -> None:
        """A turn ended: its idle stop reason's type, or `LEFT`, `LEASE_LOST`, `FAILED`."""

    def event_written(self, event_type: str, body: dict[str, Any]) -> None:
        """A visible event was written (called inside its transaction)."""

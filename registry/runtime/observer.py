"""Hooks the turn loop calls as it works, so what watches turns (metrics, tracing) attaches from outside
instead of living in the loop or overriding its methods.

`turn` and `tool` wrap a turn and a tool call; what the loop learns inside (how the turn ended, whether
the tool failed) is left on the `TurnWatch` / `ToolWatch` it passes in, for the observer to read as
the block ends. `event_written` is told of each visible event, inside its transaction.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from registry.core import tracing

# How a turn ended when it did not reach an idle stop reason.
LEFT = "left"  # the worker is stopping: the turn is left to the next worker
LEASE_LOST = "lease_lost"
FAILED = "failed"
ERROR_STOP_REASONS = ("retries_exhausted",)


@dataclass
class TurnWatch:
    """How the turn ended: its idle stop reason's type, or `LEFT`, `LEASE_LOST`, `FAILED`."""

    outcome: str = FAILED


@dataclass
class ToolWatch:
    is_error: bool = False


class TurnObserver:
    """Watches one worker's turns; this base ignores everything."""

    @contextmanager
    def turn(self, session_id: str, traceparent: str | None, watch: TurnWatch) -> Iterator[None]:
        """Around a turn (started or resumed); `traceparent` is the user event's that started it."""
        yield

    @contextmanager
    def tool(self, name: str, watch: ToolWatch) -> Iterator[None]:
        """Around a tool call the runtime runs (built-in or MCP)."""
        yield

    def event_written(self, event_type: str, body: dict[str, Any]) -> None:
        """A visible event was written (called inside its transaction)."""


class TracingObserver(TurnObserver):
    """A `session.turn` span continuing the trace of the user event that started the turn, and a
    `tool.<name>` span under it for each tool call."""

    @contextmanager
    def turn(self, session_id: str, traceparent: str | None, watch: TurnWatch) -> Iterator[None]:
        attributes = {"session.id": session_id}
        with tracing.continuing(
            traceparent, "session.turn", service=tracing.RUNTIME_SERVICE, attributes=attributes
        ) as span:
            yield
            span.set_attribute("registry.stop_reason", watch.outcome)
            if watch.outcome in ERROR_STOP_REASONS:
                span.set_status(tracing.ERROR)

    @contextmanager
    def tool(self, name: str, watch: ToolWatch) -> Iterator[None]:
        with tracing.child(f"tool.{name}", service=tracing.RUNTIME_SERVICE) as span:
            yield
            if watch.is_error:
                span.set_status(tracing.ERROR)


class Observers(TurnObserver):
    """Several observers; the first one's blocks enclose the others'."""

    def __init__(self, *observers: TurnObserver) -> None:
        self.observers = observers

    @contextmanager
    def turn(self, session_id: str, traceparent: str | None, watch: TurnWatch) -> Iterator[None]:
        with ExitStack() as blocks:
            for observer in self.observers:
                blocks.enter_context(observer.turn(session_id, traceparent, watch))
            yield

    @contextmanager
    def tool(self, name: str, watch: ToolWatch) -> Iterator[None]:
        with ExitStack() as blocks:
            for observer in self.observers:
                blocks.enter_context(observer.tool(name, watch))
            yield

    def event_written(self, event_type: str, body: dict[str, Any]) -> None:
        for observer in self.observers:
            observer.event_written(event_type, body)

"""A turn's writes: every event, status, usage and evaluation goes to `registry.sessions.log` carrying
the lease's fence, and is told to the turn's observer."""

from __future__ import annotations

import logging
from decimal import Decimal
from typing import Any

from registry.runtime.lease import Fence, Lease, LeaseLost
from registry.runtime.observer import TurnObserver
from registry.sessions import log, selectors
from registry.sessions.models import Session, SessionEvent

logger = logging.getLogger(__name__)

Status = Session.Status


def error_body(kind: str, message: str, retry: str, **fields: Any) -> dict[str, Any]:
    return {"error": {"type": kind, "message": message, "retry_status": {"type": retry}, **fields}}


def span_usage(usage: dict[str, int]) -> dict[str, int]:
    keys = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    return {key: int(usage.get(key) or 0) for key in keys}


class TurnLog:
    """The fenced writer of one held session."""

    def __init__(self, fence: Fence, observer: TurnObserver, status: str) -> None:
        self.fence = fence
        self.session_id = fence.session_id
        self.observer = observer
        self.status = status  # as this runner last wrote (or read) it

    def emit(
        self, event_type: str, body: dict[str, Any], event_id: str | None = None, *, flush: bool = True
    ) -> SessionEvent:
        event = log.emit(
            session_id=self.session_id, type=event_type, body=body, event_id=event_id, fence=self.fence, flush=flush
        )
        self.observer.event_written(event_type, body)
        return event

    def error(self, kind: str, message: str, *, retry: str, **fields: Any) -> None:
        self.emit("session.error", error_body(kind, message, retry, **fields))

    def set_status(
        self, status: str, stop_reason: dict[str, Any] | None = None, stop_details: dict[str, Any] | None = None
    ) -> None:
        """A transition; staying `running` writes nothing, so it costs no transaction either (an archive
        meanwhile is refused by the next fenced write, which comes before any side effect)."""
        if status == Status.RUNNING == self.status:
            return
        log.transition(
            session_id=self.session_id,
            status=status,
            stop_reason=stop_reason,
            stop_details=stop_details,
            fence=self.fence,
        )
        self.status = status

    def acknowledge(self, events: list[SessionEvent]) -> None:
        log.acknowledge(session_id=self.session_id, event_ids=[event.id for event in events], fence=self.fence)

    def add_usage(
        self, usage: dict[str, int], *, active_seconds: float = 0.0, list_cost_usd: Decimal = log.ZERO
    ) -> None:
        log.add_usage(
            session_id=self.session_id,
            usage=usage,
            active_seconds=active_seconds,
            list_cost_usd=list_cost_usd,
            fence=self.fence,
        )

    def record_evaluation(self, evaluation: dict[str, Any]) -> None:
        log.record_evaluation(session_id=self.session_id, evaluation=evaluation, fence=self.fence)

    def tool_result(self, call: SessionEvent, content: list[dict[str, Any]], *, is_error: bool) -> None:
        """The answer to a built-in or MCP tool call."""
        self.emit(*result_event(call, content, is_error=is_error))


def result_event(call: SessionEvent, content: list[dict[str, Any]], *, is_error: bool) -> tuple[str, dict[str, Any]]:
    """The type and body of the runtime's answer to a built-in or MCP tool call."""
    if call.type == "agent.tool_use":
        return "agent.tool_result", {"tool_use_id": call.id, "content": content, "is_error": is_error}
    return "agent.mcp_tool_result", {"mcp_tool_use_id": call.id, "content": content, "is_error": is_error}


def fail_turn(lease: Lease, message: str, *, retry: str) -> None:
    """End the session's turn with `session.error` and idle (an abandoned or crashed turn).

    Its pending user events are acknowledged with it, so the failure is not claimed again at once.
    """
    turn = TurnLog(lease.fence, TurnObserver(), Status.RUNNING)
    try:
        turn.acknowledge(selectors.pending_events(lease.session_id))
        turn.error("unknown_error", message, retry=retry)
        turn.set_status(Status.IDLE, {"type": "retries_exhausted"})
    except LeaseLost:
        logger.info("session %s moved on before its failure could be recorded", lease.session_id)
    except Exception:
        logger.exception("could not record the failure of session %s", lease.session_id)

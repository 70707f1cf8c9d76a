"""The tool-call timeline of a session's admin page: each call from its `tool_use` to its result, with the
confirmation it waited for, placed on one time axis (the latest calls only)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from django.utils import timezone

from registry.sessions.events import TOOL_ANSWER_FIELDS, TOOL_CALL_TYPES
from registry.sessions.models import SessionEvent
from registry.sessions.selectors import answers_to

CALLS_SHOWN = 100
MIN_WIDTH_PERCENT = 0.5  # an instant call is still a visible mark


@dataclass(frozen=True)
class Call:
    """One tool call as its events tell it: when it was made, confirmed and answered."""

    id: str
    name: str
    asked: bool
    started_at: datetime
    confirmation: str | None = None  # allow or deny
    confirmed_at: datetime | None = None
    finished_at: datetime | None = None
    is_error: bool = False

    @property
    def state(self) -> str:
        if self.finished_at is not None:
            return "error" if self.is_error else "done"
        return "awaiting confirmation" if self.asked and self.confirmation is None else "running"


@dataclass(frozen=True)
class Row:
    """A call on the axis: its offset and width in percent of the whole span, its duration in seconds."""

    call: Call
    seconds: float
    offset_percent: float
    width_percent: float


def _made(event: SessionEvent) -> Call:
    assert event.processed_at is not None
    asked = event.body.get("evaluated_permission") == "ask"
    return Call(event.id, str(event.body.get("name")), asked, event.processed_at)


def _answered(call: Call, answer: SessionEvent) -> Call:
    if answer.type == "user.tool_confirmation":
        return replace(call, confirmation=answer.body.get("result"), confirmed_at=answer.processed_at)
    return replace(call, finished_at=answer.processed_at, is_error=bool(answer.body.get("is_error")))


def calls(session_id: str) -> list[Call]:
    """The latest tool calls of the session, oldest first, each with what answered it."""
    made = SessionEvent.objects.filter(session_id=session_id, type__in=TOOL_CALL_TYPES).exclude(processed_at=None)
    found = {event.id: _made(event) for event in list(made.order_by("-seq")[:CALLS_SHOWN])[::-1]}
    for answer in answers_to(session_id, list(found)):
        call_id = answer.body.get(TOOL_ANSWER_FIELDS[answer.type])
        if call_id in found:
            found[call_id] = _answered(found[call_id], answer)
    return list(found.values())


def timeline(session_id: str, now: datetime | None = None) -> list[Row]:
    """The calls placed on one axis, from the first call's start to the last answer (or now)."""
    found = calls(session_id)
    if not found:
        return []
    now = now or timezone.now()
    start = found[0].started_at
    ends = [call.finished_at or now for call in found]
    span = max((max(ends) - start).total_seconds(), 0.001)
    return [_placed(call, end, start, span) for call, end in zip(found, ends, strict=True)]


def _placed(call: Call, end: datetime, start: datetime, span: float) -> Row:
    seconds = max((end - call.started_at).total_seconds(), 0.0)
    offset = min((call.started_at - start).total_seconds() / span * 100, 100 - MIN_WIDTH_PERCENT)
    width = min(max(seconds / span * 100, MIN_WIDTH_PERCENT), 100 - offset)
    return Row(call, seconds, round(offset, 2), round(width, 2))

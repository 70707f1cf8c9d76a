"""The model step: the next messages request (the agent's settings, the system prompt, cache
breakpoints, the tools), the streamed answer written as events, retries with backoff, the turn's call
limits and budget, and compaction when the transcript outgrows the context window."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from registry.runtime import context
from registry.runtime.checkpoints import Checkpoints, TurnEnded, TurnInterrupted
from registry.runtime.config import RuntimeSettings
from registry.runtime.dispatch import ToolDispatch
from registry.runtime.model import ModelClient, ModelError, ModelResponse, request_options
from registry.runtime.previews import PreviewPublisher
from registry.runtime.running import RunningSession
from registry.runtime.sandboxing import SandboxUse
from registry.runtime.transcript import TOOL_USE_TYPES, build_messages, latest_compaction, turn_boundary
from registry.runtime.writer import TurnLog, span_usage
from registry.sessions import log
from registry.sessions.models import Session, SessionEvent

Status = Session.Status
CUT_TOOL_CALL = "The model's answer was cut off by max_tokens in the middle of a tool call twice; the call was not run."


@dataclass(kw_only=True)
class ModelStep:
    """The model's part of one held session's turns."""

    session: RunningSession
    config: RuntimeSettings
    model: ModelClient
    auth: Callable[[], dict[str, str]]
    turn: TurnLog
    checkpoints: Checkpoints
    tools: ToolDispatch
    sandbox: SandboxUse
    # A child thread's id: its previews are its streams'; None for the primary thread (the session's).
    thread_id: str | None = None

    def messages(self, events: list[SessionEvent]) -> list[dict[str, Any]]:
        return build_messages(events, tool_result_limit=self.config.tool_result_max_chars)

    def request(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """The messages request of the next step, with the agent's model settings and cache breakpoints."""
        session = self.session
        catalog = self.tools.catalog()
        model_settings = session.agent["model"] if isinstance(session.agent["model"], dict) else {}
        body: dict[str, Any] = {
            "model": session.model_id,
            "max_tokens": context.output_budget(session.window, self.config.max_tokens),
            **request_options(model_settings),
        }
        system = "\n\n".join(part for part in (session.agent.get("system"), *self.sandbox.prompt_sections) if part)
        if system:
            body["system"] = [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]
        body["messages"] = with_cache_breakpoint(session.files.resolve(messages))
        if tools := catalog.model_tools():
            body["tools"] = tools
        return body

    def enforce_limits(self, events: list[SessionEvent]) -> None:
        """Before a model call: the turn's model and tool call counts, and the session's budget."""
        turn = events[turn_boundary(events) + 1 :]
        model_calls = sum(1 for event in turn if event.type == "span.model_request_start")
        tool_calls = sum(1 for event in turn if event.type in TOOL_USE_TYPES)
        limits = self.config
        if model_calls >= limits.turn_max_model_calls or tool_calls >= limits.turn_max_tool_calls:
            message = (
                f"The turn reached its limit of {limits.turn_max_model_calls} model calls or "
                f"{limits.turn_max_tool_calls} tool calls ({model_calls} and {tool_calls} made)."
            )
            self.turn.error("tool_use_limit_reached_error", message, retry="exhausted")
            raise TurnEnded({"type": "retries_exhausted"})
        if self.session.budget.reached():
            raise TurnEnded({"type": "budget_reached"})

    def speak(self, request: dict[str, Any]) -> bool:
        """Let the model speak; False when it said nothing at all. A refusal ends the turn with it."""
        response = self.call(lambda: self._stream(request))
        if response.cut_in_tool_call():
            # Ask again with room to finish the call; a second cut ends the turn (the call never runs).
            retry = {**request, "max_tokens": min(request["max_tokens"] * 2, self.session.window // 2)}
            response = self.call(lambda: self._stream(retry))
            if response.cut_in_tool_call():
                raise ModelError("model_request_failed_error", CUT_TOOL_CALL, retryable=False)
        spoken = self._record(response)
        if response.stop_reason == "refusal":
            raise TurnEnded({"type": "refusal"}, response.stop_details)
        return spoken > 0

    def _stream(self, request: dict[str, Any]) -> ModelResponse:
        """The streamed answer, read in a thread this one watches (`Checkpoints.wait_for`): an interrupt, an
        archive or a halt stops the turn at once, even while the model has sent nothing yet. The abandoned
        read stops at its next stream event."""
        abandoned = threading.Event()

        def abandon_if_left() -> None:
            if abandoned.is_set():
                raise TurnInterrupted([])

        previews = PreviewPublisher(self.session.session_id, abandon_if_left, self.thread_id)
        auth = self.auth()  # may read the signing key: before the connection is given back
        try:
            response = self.checkpoints.wait_for(lambda: self.model.stream(request, previews, auth))
        finally:
            abandoned.set()
        response.event_ids = previews.event_ids
        return response

    def create(self, request: dict[str, Any]) -> ModelResponse:
        """A non-streaming model call that an interrupt abandons (compaction summaries, the grader)."""
        return self.call(lambda: self._create_once(request), model=request["model"])

    def _create_once(self, request: dict[str, Any]) -> ModelResponse:
        auth = self.auth()
        return self.checkpoints.wait_for(lambda: self.model.create(request, auth))

    def call(self, attempt: Callable[[], ModelResponse], *, model: str | None = None) -> ModelResponse:
        """One model call with retries and backoff (status `rescheduling` while waiting to retry); its cost
        is priced at `model` (the thread's by default)."""
        for number in range(1, self.config.model_attempts + 1):
            self.checkpoints.lease.check()
            start = self.turn.emit("span.model_request_start", {}, flush=False)
            try:
                response = attempt()
            except TurnInterrupted:
                self._end_span(start, {}, is_error=True)
                raise
            except ModelError as failure:
                self._end_span(start, {}, is_error=True)
                if not failure.retryable or number == self.config.model_attempts:
                    raise
                self.turn.error(failure.kind, failure.message, retry="retrying")
                self.turn.set_status(Status.RESCHEDULING)
                self.checkpoints.sleep(max(self.config.backoff(number), failure.retry_after or 0.0))
                continue
            self._end_span(start, response.usage, is_error=False)
            cost = self.session.budget.charge(model or self.session.model_id, response.usage)
            self.turn.add_usage(response.usage, list_cost_usd=cost)
            self.turn.set_status(Status.RUNNING)
            return response
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _end_span(self, start: SessionEvent, usage: dict[str, int], *, is_error: bool) -> None:
        body = {"model_request_start_id": start.id, "is_error": is_error, "model_usage": span_usage(usage)}
        self.turn.emit("span.model_request_end", body)

    @transaction.atomic
    def _record(self, response: ModelResponse) -> int:
        """The response's events in order, all or none; returns how many messages and calls it made."""
        spoken = 0
        for position, block in enumerate(response.content):
            event_id = response.event_ids.get(position)
            if block["type"] in ("thinking", "redacted_thinking"):
                self.turn.emit("agent.thinking", {log.THINKING_FIELD: kept_thinking(block)}, event_id)
            elif block["type"] == "text" and block.get("text"):
                self.turn.emit("agent.message", {"content": [{"type": "text", "text": block["text"]}]}, event_id)
                spoken += 1
            elif block["type"] == "tool_use":
                self.tools.record_call(block)
                spoken += 1
        return spoken

    def compact(self, events: list[SessionEvent], compactions: int) -> None:
        """Summarise the older part of the transcript so the next request fits the window."""
        start = latest_compaction(events)
        kept_id = events[start].body.get("first_kept_event_id") if start is not None else None
        first_kept = next((i for i, event in enumerate(events) if kept_id is not None and event.id == kept_id), -1)
        window = self.session.window
        cut = context.compaction_cut(events, max(first_kept, 0), window)
        if compactions > self.config.max_compactions or cut is None:
            message = "The transcript cannot be compacted to fit the model's context window."
            self.turn.error("compaction_limit_reached_error", message, retry="exhausted")
            raise TurnEnded({"type": "retries_exhausted"})
        request = context.summary_request(
            model=self.session.model_id,
            messages=self.messages(events[:cut]),
            window=window,
            max_tokens=context.output_budget(window, self.config.max_tokens),
        )
        summary = self.create(request).text()
        self.turn.emit(context.COMPACTED_TYPE, {"summary": summary, "first_kept_event_id": events[cut].id})


def kept_thinking(block: dict[str, Any]) -> dict[str, Any]:
    """What `agent.thinking` keeps of a thinking block for staff: its text (empty when the model returned only a
    signature), or only that the provider redacted it."""
    if block["type"] == "redacted_thinking":
        return {"type": "redacted_thinking"}
    return {"type": "thinking", "text": block.get("thinking", "")}


def with_cache_breakpoint(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The transcript with a prompt-cache breakpoint on the last block of its final message."""
    if not messages or not messages[-1]["content"]:
        return messages
    last = messages[-1]
    blocks = [*last["content"][:-1], {**last["content"][-1], "cache_control": {"type": "ephemeral"}}]
    return [*messages[:-1], {**last, "content": blocks}]

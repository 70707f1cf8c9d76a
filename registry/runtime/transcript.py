"""The transcript: a session's visible events read as vendor-B messages, and what the turn owes next.

Pure functions over the events (no queries), so a worker that picks up an orphaned turn derives the
same state from the log as the worker that died.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from registry.runtime.context import COMPACTED_TYPE, SUMMARY_PREFIX, truncate_middle
from registry.sessions.models import SessionEvent
from registry.sessions.thread_log import DELIVERED_FIELD

# Events after which earlier unanswered tool calls no longer hold the turn up.
BOUNDARY_TYPES = ("user.message", "user.define_outcome", "user.interrupt")
TOOL_USE_TYPES = ("agent.custom_tool_use", "agent.mcp_tool_use", "agent.tool_use")
# Result event type -> the field naming the call it answers.
TOOL_RESULT_FIELDS = {
    "user.custom_tool_result": "custom_tool_use_id",
    "agent.mcp_tool_result": "mcp_tool_use_id",
    "agent.tool_result": "tool_use_id",
    "user.tool_result": "tool_use_id",
}
TRUNCATED_RESULT_NOTE = "characters of this tool result truncated; the full result is in the session's event log"
INTERRUPTED_RESULT = "The tool call was abandoned: the turn was interrupted or superseded by new input."


def outcome_content(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The user-role content that asks the agent to work toward a defined outcome; a file rubric is
    attached as a document (the runtime sends the file's content in its place)."""
    lead = f"Work toward this outcome: {body['description']}\n\nYour work will be graded against this rubric"
    rubric = body["rubric"]
    if rubric["type"] == "text":
        return [{"type": "text", "text": f"{lead}:\n{rubric['content']}"}]
    document = {"type": "document", "source": {"type": "file", "file_id": rubric["file_id"]}, "title": "Rubric"}
    return [{"type": "text", "text": f"{lead} (the attached document)."}, document]


def rubric_text(rubric: dict[str, Any]) -> str:
    """A rubric the grader reads; file rubrics are turned into text before grading."""
    return str(rubric["content"])


def feedback_prompt(body: dict[str, Any]) -> str:
    """The user-role text that carries a `needs_revision` verdict back to the agent."""
    return (
        f"The outcome is not satisfied yet (evaluation {body['iteration'] + 1}). Grader feedback:\n"
        f"{body['explanation']}\n\nRevise your work to satisfy the rubric."
    )


class MessageBuilder:
    """Accumulates messages, merging consecutive content of one role and pairing tool calls with results."""

    def __init__(self, tool_result_limit: int = 0) -> None:
        self.messages: list[dict[str, Any]] = []
        self.open_tool_uses: list[str] = []
        self.tool_result_limit = tool_result_limit

    def add(self, role: str, block: dict[str, Any]) -> None:
        if self.messages and self.messages[-1]["role"] == role:
            self.messages[-1]["content"].append(block)
        else:
            self.messages.append({"role": role, "content": [block]})

    def tool_use(self, event: SessionEvent) -> None:
        self.add(
            "assistant", {"type": "tool_use", "id": event.id, "name": event.body["name"], "input": event.body["input"]}
        )
        self.open_tool_uses.append(event.id)

    def tool_result(self, tool_use_id: str, content: list[dict[str, Any]] | None, is_error: bool | None) -> None:
        """A result answers an open call; one for a call already closed (abandoned) is dropped."""
        if tool_use_id not in self.open_tool_uses:
            return
        self.open_tool_uses.remove(tool_use_id)
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id, "is_error": bool(is_error)}
        if content:
            block["content"] = [self._bounded(item) for item in content]
        self.add("user", block)

    def _bounded(self, block: dict[str, Any]) -> dict[str, Any]:
        """A long text block of a tool result, cut in the middle to the configured limit."""
        if (
            self.tool_result_limit
            and block.get("type") == "text"
            and len(block.get("text", "")) > self.tool_result_limit
        ):
            return {**block, "text": truncate_middle(block["text"], self.tool_result_limit, unit=TRUNCATED_RESULT_NOTE)}
        return block

    def user_content(self, blocks: list[dict[str, Any]]) -> None:
        """New user input closes every call still open, so the transcript stays well formed."""
        for tool_use_id in list(self.open_tool_uses):
            self.tool_result(tool_use_id, [{"type": "text", "text": INTERRUPTED_RESULT}], True)
        for block in blocks:
            self.add("user", block)


def build_messages(events: list[SessionEvent], *, tool_result_limit: int = 0) -> list[dict[str, Any]]:
    """The vendor-B `messages` for the visible events, in order, from the latest compaction on."""
    builder = MessageBuilder(tool_result_limit)
    for event in transcript_events(events, builder):
        body = event.body
        if event.type == "user.message":
            builder.user_content(body["content"])
        elif event.type == "user.define_outcome":
            builder.user_content(outcome_content(body))
        elif is_thread_input(event):
            builder.user_content(body["content"])
        elif event.type == "span.outcome_evaluation_end" and body.get("result") == "needs_revision":
            builder.user_content([{"type": "text", "text": feedback_prompt(body)}])
        elif event.type == "agent.message":
            for block in body["content"]:
                builder.add("assistant", block)
        elif event.type in TOOL_USE_TYPES:
            builder.tool_use(event)
        elif event.type in TOOL_RESULT_FIELDS:
            builder.tool_result(body.get(TOOL_RESULT_FIELDS[event.type]), body.get("content"), body.get("is_error"))
    return builder.messages


def is_thread_input(event: SessionEvent) -> bool:
    """A message another thread sent this one, to be read by its model (a reply the parent was handed by a
    tool result is only shown)."""
    return event.type == "agent.thread_message_received" and not event.body.get(DELIVERED_FIELD)


def turn_boundary(events: list[SessionEvent]) -> int:
    """The index of the input that started the current turn (-1: none)."""
    starts = (index for index, event in enumerate(events) if event.type in BOUNDARY_TYPES or is_thread_input(event))
    return max(starts, default=-1)


def latest_compaction(events: list[SessionEvent]) -> int | None:
    """The index of the last `agent.thread_context_compacted` event."""
    return next((index for index in range(len(events) - 1, -1, -1) if events[index].type == COMPACTED_TYPE), None)


def transcript_events(events: list[SessionEvent], builder: MessageBuilder) -> list[SessionEvent]:
    """The events the model sees: after a compaction, its summary stands for everything before the
    first event it kept."""
    compaction = latest_compaction(events)
    if compaction is None:
        return events
    body = events[compaction].body
    builder.user_content([{"type": "text", "text": SUMMARY_PREFIX + body["summary"]}])
    kept_from = next((i for i, event in enumerate(events) if event.id == body.get("first_kept_event_id")), compaction)
    return [event for index, event in enumerate(events) if index >= kept_from and index != compaction]


def awaits_model(messages: list[dict[str, Any]]) -> bool:
    """The model speaks next when the transcript ends with user-role content."""
    return bool(messages) and messages[-1]["role"] == "user"


@dataclass
class ToolWork:
    """Unanswered tool calls of the current turn, sorted by what answers them."""

    blocking: list[str] = field(default_factory=list)  # wait for the client: results or confirmations
    runnable: list[SessionEvent] = field(default_factory=list)  # MCP calls the runtime makes now
    denied: list[tuple[SessionEvent, SessionEvent]] = field(default_factory=list)  # (call, the confirmation)


def answered_calls(events: list[SessionEvent]) -> set[str]:
    """The ids of the tool calls a result in `events` answers."""
    return {event.body.get(TOOL_RESULT_FIELDS[event.type]) for event in events if event.type in TOOL_RESULT_FIELDS}


def tool_work(events: list[SessionEvent]) -> ToolWork:
    """Calls after the last turn boundary that no result answers yet."""
    boundary = turn_boundary(events)
    answered = answered_calls(events)
    confirmations = {event.body["tool_use_id"]: event for event in events if event.type == "user.tool_confirmation"}
    work = ToolWork()
    for call in events[boundary + 1 :]:
        if call.type not in TOOL_USE_TYPES or call.id in answered:
            continue
        confirmation = confirmations.get(call.id)
        if call.type == "agent.custom_tool_use" or (call.body["evaluated_permission"] == "ask" and not confirmation):
            work.blocking.append(call.id)
        elif confirmation is not None and confirmation.body["result"] == "deny":
            work.denied.append((call, confirmation))
        else:
            work.runnable.append(call)
    return work


def turn_graded(events: list[SessionEvent]) -> bool:
    """The turn's last word is a final evaluation: nothing happened since the outcome was graded."""
    for event in reversed(events):
        if event.type == "span.outcome_evaluation_end":
            return event.body.get("result") != "needs_revision"
        if event.type.startswith(("agent.", "user.")):
            return False
    return False


def latest_outcome(events: list[SessionEvent]) -> SessionEvent | None:
    """The outcome in force: the last `user.define_outcome`."""
    return next((event for event in reversed(events) if event.type == "user.define_outcome"), None)

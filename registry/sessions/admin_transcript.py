"""The transcript of a log on a session's admin page: each event as an entry (what the page shows of it), read
after a `seq` as the page follows the log live. The session's log is its primary thread's; a child thread's log
reads the same way (`thread_transcript`).

Nothing secret is rendered: media blocks show their kind only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from django.db.models import QuerySet

from registry.core.admin_reading import markdown_html, pretty
from registry.sessions import thread_log
from registry.sessions.events import NATIVE_BETA_FIELD, TOOL_ANSWER_FIELDS, TOOL_CALL_TYPES
from registry.sessions.log import THINKING_FIELD
from registry.sessions.models import Session, SessionEvent, SessionThread, ThreadEvent
from registry.sessions.selectors import events_after

EVENTS_PER_READ = 500
HIDDEN = ("span.model_request_start", "span.outcome_evaluation_start")  # their `_end` says it all
# Why an `agent.thinking` shows no text, by the kind of block the runtime kept (None: it kept nothing).
THINKING_NOT_SHOWN: dict[str | None, str] = {
    "redacted_thinking": "Thinking not kept by the provider: it returned this thinking encrypted (redacted).",
    "thinking": "Thinking not kept by this model or provider: it returned only a signature, no text.",
    None: "Not recorded: this event was written before the runtime kept the thinking's text.",
}


@dataclass(frozen=True)
class Entry:
    """One event as the transcript shows it; `kind` picks its style (user, agent, thinking, tool,
    result, error, status, usage, note); `event_id` lets the page replace the preview of a message. An agent's
    message also comes as `markdown` (safe HTML); `note` says why a thinking has no text."""

    seq: int
    kind: str
    label: str
    at: datetime | None
    text: str = ""
    detail: str = ""
    is_error: bool = False
    event_id: str = ""
    markdown: str = ""
    note: str = ""


def blocks_text(blocks: Iterable[dict[str, Any]] | None) -> str:
    """The text of content blocks; images and documents appear as their kind, never their data."""
    parts = []
    for block in blocks or ():
        if block.get("type") == "text":
            parts.append(block.get("text", ""))
        elif block.get("type") == "search_result":
            parts.append(f"[search result: {block.get('title') or block.get('source')}]")
        else:
            parts.append(f"[{block.get('type')}{': ' + block['title'] if block.get('title') else ''}]")
    return "\n\n".join(parts)


def usage_text(usage: dict[str, Any]) -> str:
    cache_written = usage.get("cache_creation_input_tokens")
    if cache_written is None:
        cache_written = sum((usage.get("cache_creation") or {}).values())
    return (
        f"input {usage.get('input_tokens', 0)} · output {usage.get('output_tokens', 0)} · "
        f"cache read {usage.get('cache_read_input_tokens', 0)} · cache write {cache_written}"
    )


def _message(event: SessionEvent, calls: dict[str, str]) -> Entry:
    text = blocks_text(event.body.get("content"))
    if event.type.startswith("user."):
        return Entry(event.seq or 0, "user", "User", event.processed_at, text)
    return Entry(event.seq or 0, "agent", "Agent", event.processed_at, text, markdown=markdown_html(text))


def _thinking(event: SessionEvent, calls: dict[str, str]) -> Entry:
    kept = event.body.get(THINKING_FIELD) or {}
    text = kept.get("text") or ""
    note = "" if text else THINKING_NOT_SHOWN.get(kept.get("type"), THINKING_NOT_SHOWN[None])
    return Entry(event.seq or 0, "thinking", "Thinking", event.processed_at, text, note=note)


def _tool_call(event: SessionEvent, calls: dict[str, str]) -> Entry:
    body = event.body
    server = f" on {body['mcp_server_name']}" if body.get("mcp_server_name") else ""
    permission = f"permission: {body['evaluated_permission']}" if body.get("evaluated_permission") else ""
    label = f"Tool call: {body.get('name')}{server}"
    return Entry(event.seq or 0, "tool", label, event.processed_at, permission, pretty(body.get("input") or {}))


def _tool_answer(event: SessionEvent, calls: dict[str, str]) -> Entry:
    body = event.body
    name = calls.get(body.get(TOOL_ANSWER_FIELDS[event.type], ""), "?")
    if event.type == "user.tool_confirmation":
        label = f"Tool confirmation: {body.get('result')} {name}"
        return Entry(event.seq or 0, "user", label, event.processed_at, body.get("deny_message") or "")
    error = bool(body.get("is_error"))
    label = f"Tool result: {name}{' (error)' if error else ''}"
    return Entry(event.seq or 0, "result", label, event.processed_at, blocks_text(body.get("content")), is_error=error)


def _error(event: SessionEvent, calls: dict[str, str]) -> Entry:
    error = event.body.get("error") or {}
    retry = (error.get("retry_status") or {}).get("type")
    text = error.get("message", "") + (f"\n(retry: {retry})" if retry else "")
    return Entry(event.seq or 0, "error", f"Error: {error.get('type')}", event.processed_at, text, is_error=True)


def _stop_reason(event: SessionEvent) -> str:
    stop_reason = event.body.get("stop_reason") or {}
    return f"stop reason: {stop_reason['type']}" if stop_reason.get("type") else ""


def _status(event: SessionEvent, calls: dict[str, str]) -> Entry:
    label = f"Status: {event.type.removeprefix('session.status_')}"
    return Entry(event.seq or 0, "status", label, event.processed_at, _stop_reason(event))


# -- a session's threads: a child's creation and status, and the messages agents send each other --------------
def _agent(name: Any) -> str:
    return str(name) if name else "the primary agent"


def _thread_status(event: SessionEvent, calls: dict[str, str]) -> Entry:
    status = event.type.removeprefix("session.thread_status_")
    label = f"Thread {event.body.get('agent_name')}: {status}"
    return Entry(event.seq or 0, "status", label, event.processed_at, _stop_reason(event))


def _thread_created(event: SessionEvent, calls: dict[str, str]) -> Entry:
    label = f"Thread created: {event.body.get('agent_name')}"
    return Entry(event.seq or 0, "status", label, event.processed_at, str(event.body.get("session_thread_id", "")))


def _thread_message(event: SessionEvent, calls: dict[str, str]) -> Entry:
    body, text = event.body, blocks_text(event.body.get("content"))
    if event.type == "agent.thread_message_sent":
        label = f"Message to {_agent(body.get('to_agent_name'))}"
    else:
        label = f"Message from {_agent(body.get('from_agent_name'))}"
        label += " (delivered as a tool result)" if body.get(thread_log.DELIVERED_FIELD) else ""
    return Entry(event.seq or 0, "message", label, event.processed_at, text, markdown=markdown_html(text))


def _model_request(event: SessionEvent, calls: dict[str, str]) -> Entry:
    failed = bool(event.body.get("is_error"))
    label = "Model request failed" if failed else "Model request"
    usage = usage_text(event.body.get("model_usage") or {})
    return Entry(event.seq or 0, "usage", label, event.processed_at, usage, is_error=failed)


def _user_note(event: SessionEvent, calls: dict[str, str]) -> Entry:
    label = "Interrupt" if event.type == "user.interrupt" else "Outcome defined"
    return Entry(event.seq or 0, "user", label, event.processed_at, event.body.get("description") or "")


def _session_note(event: SessionEvent, calls: dict[str, str]) -> Entry:
    if event.type == "agent.thread_context_compacted":
        return Entry(event.seq or 0, "status", "Context compacted", event.processed_at)
    body = {key: value for key, value in event.body.items() if key != NATIVE_BETA_FIELD}
    if event.type == "span.outcome_evaluation_end":
        label = f"Outcome evaluation: {body.get('result')}"
        return Entry(event.seq or 0, "status", label, event.processed_at, body.get("explanation") or "")
    return Entry(event.seq or 0, "note", event.type, event.processed_at, detail=pretty(body))


DESCRIBE: dict[str, Callable[[SessionEvent, dict[str, str]], Entry]] = {
    "user.message": _message,
    "agent.message": _message,
    "agent.thinking": _thinking,
    **dict.fromkeys(TOOL_CALL_TYPES, _tool_call),
    **dict.fromkeys(TOOL_ANSWER_FIELDS, _tool_answer),
    "session.error": _error,
    **{f"session.status_{status}": _status for status in ("idle", "running", "rescheduled", "terminated")},
    **dict.fromkeys(thread_log.THREAD_STATUS_EVENTS.values(), _thread_status),
    "session.thread_created": _thread_created,
    "agent.thread_message_sent": _thread_message,
    "agent.thread_message_received": _thread_message,
    "span.model_request_end": _model_request,
    "user.interrupt": _user_note,
    "user.define_outcome": _user_note,
}


def describe(event: SessionEvent, calls: dict[str, str]) -> Entry:
    return replace(DESCRIBE.get(event.type, _session_note)(event, calls), event_id=event.id)


def tool_names(log: QuerySet[Any], events: list[SessionEvent]) -> dict[str, str]:
    """The names of the tool calls in `log` (a log's rows) the answers among `events` refer to (the calls may be in
    an earlier read)."""
    ids = {event.body.get(TOOL_ANSWER_FIELDS[event.type]) for event in events if event.type in TOOL_ANSWER_FIELDS}
    calls = log.filter(pk__in=ids - {None}, type__in=TOOL_CALL_TYPES)
    return {call_id: name for call_id, name in calls.values_list("id", "body__name")}


def _read(log: QuerySet[Any], events: list[SessionEvent], after_seq: int) -> dict[str, Any]:
    """Entries of `events` (read from `log` after `after_seq`), the seq to read after next, and whether more are
    waiting already."""
    calls = tool_names(log, events)
    entries = [describe(event, calls) for event in events if event.type not in HIDDEN]
    return {
        "entries": entries,
        "event_ids": [entry.event_id for entry in entries],
        "last_seq": events[-1].seq if events else after_seq,
        "more": len(events) == EVENTS_PER_READ,
    }


def transcript(session: Session, after_seq: int) -> dict[str, Any]:
    """The session's (its primary thread's) entries after `after_seq`."""
    events = events_after(session_id=session.pk, after_seq=after_seq, limit=EVENTS_PER_READ)
    return _read(SessionEvent.objects.filter(session_id=session.pk), events, after_seq)


def thread_transcript(thread: SessionThread, after_seq: int) -> dict[str, Any]:
    """A child thread's entries after `after_seq`."""
    events = thread_log.events_after(thread, after_seq, EVENTS_PER_READ)
    return _read(ThreadEvent.objects.filter(thread=thread), events, after_seq)

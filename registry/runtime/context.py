"""The model's context window: how big it is, how big a request is, and where to compact.

Token counts are estimated from the request's JSON size (about 3.5 characters a token, on the
generous side), which errs toward compacting early rather than sending a request that overflows.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from registry.sessions.models import SessionEvent

CHARACTERS_PER_TOKEN = 3.5
DEFAULT_CONTEXT_TOKENS = 200_000
# Longest prefix first: the first entry the model id starts with decides.
CONTEXT_WINDOWS: tuple[tuple[str, int], ...] = (
    ("claude-", 200_000),
    ("gpt-4.1", 1_047_576),
    ("gpt-4o", 128_000),
    ("gpt-5", 400_000),
    ("o3", 200_000),
    ("o4", 200_000),
    ("gemini-", 1_048_576),
)
# What a compacted transcript keeps verbatim, as a share of the window.
TAIL_SHARE = 0.5
SUMMARY_SYSTEM = (
    "You compact the transcript of an AI agent's session. Summarise it for the agent itself, who will "
    "continue the work from your summary alone: the user's goals and constraints, decisions made, what "
    "was done and found (files, commands, results, errors), open tasks and next steps. Be specific and "
    "complete; omit pleasantries."
)
SUMMARY_PREFIX = "Summary of the earlier part of this session (compacted):\n\n"
COMPACTED_TYPE = "agent.thread_context_compacted"


def context_window(model: str, override: int = 0) -> int:
    """The model's context window in tokens; `override` (REGISTRY_MODEL_CONTEXT_TOKENS) wins when set."""
    if override > 0:
        return override
    return next((size for prefix, size in CONTEXT_WINDOWS if model.startswith(prefix)), DEFAULT_CONTEXT_TOKENS)


def estimate_tokens(value: Any) -> int:
    return int(len(json.dumps(value, ensure_ascii=False, default=str)) / CHARACTERS_PER_TOKEN) + 1


def output_budget(window: int, configured: int) -> int:
    """The `max_tokens` a request reserves for the answer: the configured value, at most a quarter window."""
    return max(64, min(configured, window // 4))


def overflows(request: dict[str, Any], window: int) -> bool:
    """Would the request and its reserved answer exceed the window?"""
    return (
        estimate_tokens({key: value for key, value in request.items() if key != "max_tokens"})
        + int(request.get("max_tokens", 0))
        > window
    )


def compaction_cut(events: Sequence[SessionEvent], start: int, window: int) -> int | None:
    """The index from which events stay verbatim: the earliest message boundary after `start` whose tail
    fits `TAIL_SHARE` of the window. None when no boundary after `start` leaves a tail that small.
    """
    budget = window * TAIL_SHARE
    sizes = [estimate_tokens(event.body) for event in events]
    tail = 0
    best: int | None = None
    for index in range(len(events) - 1, start, -1):
        tail += sizes[index]
        if tail > budget:
            break
        if events[index].type.startswith(("user.", "agent.")):
            best = index
    return best


def summary_request(*, model: str, messages: list[dict[str, Any]], window: int, max_tokens: int) -> dict[str, Any]:
    """A request that asks the model to summarise `messages`; the transcript is cut in the middle to fit."""
    transcript = json.dumps(messages, ensure_ascii=False, indent=1)
    room = int((window - max_tokens) * CHARACTERS_PER_TOKEN * 0.8) - len(SUMMARY_SYSTEM)
    transcript = truncate_middle(transcript, max(1000, room), unit="characters of the transcript")
    prompt = f"Transcript to summarise (messages, oldest first):\n{transcript}"
    return {
        "model": model,
        "max_tokens": max_tokens,
        "system": SUMMARY_SYSTEM,
        "messages": [{"role": "user", "content": [{"type": "text", "text": prompt}]}],
    }


def truncate_middle(text: str, limit: int, *, unit: str = "characters") -> str:
    """`text` cut in the middle to at most about `limit` characters, with a note of what was left out."""
    if len(text) <= limit:
        return text
    keep = max(0, limit - 120) // 2
    left_out = len(text) - 2 * keep
    return f"{text[:keep]}\n\n[... {left_out} {unit} truncated ...]\n\n{text[len(text) - keep :]}"

"""The fixed catalogs: guardrail types (with their config fields) and the runtime's harnesses."""

from __future__ import annotations

from typing import Any

PHASES = ("llm_request", "llm_response", "tool_call", "tool_result")

GUARDRAIL_TYPES: dict[str, dict[str, Any]] = {
    "pii_regex": {
        "description": "Block or redact text matching regular expressions.",
        "config": {"patterns": "list of regular expressions", "redact": "boolean"},
        "phases": ["llm_request", "llm_response", "tool_call", "tool_result"],
    },
    "blocked_terms": {
        "description": "Deny payloads containing any of the terms (case-insensitive).",
        "config": {"terms": "list of strings"},
        "phases": list(PHASES),
    },
    "model_allowlist": {
        "description": "Deny model requests whose model matches none of the globs.",
        "config": {"models": "list of globs"},
        "phases": ["llm_request"],
    },
    "tool_denylist": {
        "description": "Deny calls of the named tools.",
        "config": {"tools": "list of tool names"},
        "phases": ["tool_call"],
    },
    "user_daily_cost_budget": {
        "description": "Deny model requests once a subject spent its daily USD budget.",
        "config": {"usd": "number greater than zero"},
        "phases": ["llm_request"],
    },
}

HARNESSES: list[dict[str, Any]] = [
    {
        "name": "default",
        "description": "The registry's own turn loop: messages, custom and MCP tools, outcomes.",
        "modes": [],
        "interrupt": "unwinds the turn",
    },
    {
        "name": "code_harness",
        "description": "A coding harness whose turns run to completion.",
        "modes": [],
        "interrupt": "answered with session.error",
    },
    {
        "name": "agent_sdk_harness",
        "description": "The agent SDK harness; in separate mode the client runs "
        "built-in tools and sends user.tool_result (self-hosted environments).",
        "modes": ["separate", "integrated"],
        "interrupt": "unwinds the turn",
    },
]

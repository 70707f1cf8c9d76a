"""Request bodies the gateway tests send through the official clients: a vendor-A tool-call turn (the assistant's
call and the tool's result)."""

from __future__ import annotations

from typing import Any


def chat_tool_turn(call_id: str, name: str, arguments: str, result: str) -> list[Any]:
    """A vendor-A assistant message calling tool `name` with `arguments` (JSON text), then the tool's `result`."""
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": result},
    ]

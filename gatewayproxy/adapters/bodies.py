"""Reading the pieces of bodies that several shapes' translations share: a JSON document that may not be one, the
text of a content, the arguments of a tool call."""

from __future__ import annotations

import json
from typing import Any

import orjson


def json_or_none(data: str | bytes) -> Any:
    """The JSON document in `data`, or None when it is not JSON."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


def text_of(content: Any) -> str:
    """Plain text of a string or a list of text parts/blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def arguments_of(text: Any) -> dict:
    """A tool call's arguments as an object: as given when already one, parsed from JSON text, else empty."""
    if isinstance(text, dict):
        return text
    try:
        parsed = json.loads(text or "{}")
    except (TypeError, ValueError):
        return {}
    return parsed if isinstance(parsed, dict) else {}
